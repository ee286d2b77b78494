//! Tests that need no RDMA device: they pass on any machine, including one
//! whose kernel has no RDMA support.

use std::io;
use std::time::Duration;

use ibverbs_async::{
    AsyncEvent, AsyncEventInfo, CompChannel, Context, Cq, DeviceList, ElementId, ElementKind,
    Errno, Error, EventType, Gid, Mr, Mtu, ObjectId, ObjectKind, OwnedAsyncEvent, Pd, PortState,
    Qp, Srq, Stopper, Wait, WcStatus,
};

#[test]
fn device_listing_reports_a_typed_error_or_devices() {
    match DeviceList::new() {
        Ok(list) => {
            assert!(!list.is_empty());
            for dev in list.iter() {
                assert!(!dev.name().is_empty());
            }
            let err = list.find("no-such-device-here").unwrap_err();
            assert!(matches!(err, Error::NoSuchDevice { .. }), "{err:?}");
        }
        Err(Error::NoRdmaSupport) => {
            let msg = Error::NoRdmaSupport.to_string();
            assert!(
                msg.starts_with("no RDMA devices: the kernel has no RDMA support (ENOSYS"),
                "{msg}"
            );
        }
        Err(Error::NoDevices) => {}
        Err(other) => panic!("unexpected error listing devices: {other:?}"),
    }
}

#[test]
fn opening_a_missing_device_is_a_typed_error() {
    let err = Context::open("no-such-device-here").unwrap_err();
    assert!(
        matches!(
            err,
            Error::NoRdmaSupport | Error::NoDevices | Error::NoSuchDevice { .. }
        ),
        "{err:?}"
    );
}

#[test]
fn event_types_decode_from_raw_values() {
    let expected = [
        (0, EventType::CqErr, ElementKind::Cq),
        (1, EventType::QpFatal, ElementKind::Qp),
        (2, EventType::QpReqErr, ElementKind::Qp),
        (3, EventType::QpAccessErr, ElementKind::Qp),
        (4, EventType::CommEst, ElementKind::Qp),
        (5, EventType::SqDrained, ElementKind::Qp),
        (6, EventType::PathMig, ElementKind::Qp),
        (7, EventType::PathMigErr, ElementKind::Qp),
        (8, EventType::DeviceFatal, ElementKind::Device),
        (9, EventType::PortActive, ElementKind::Port),
        (10, EventType::PortErr, ElementKind::Port),
        (11, EventType::LidChange, ElementKind::Port),
        (12, EventType::PkeyChange, ElementKind::Port),
        (13, EventType::SmChange, ElementKind::Port),
        (14, EventType::SrqErr, ElementKind::Srq),
        (15, EventType::SrqLimitReached, ElementKind::Srq),
        (16, EventType::QpLastWqeReached, ElementKind::Qp),
        (17, EventType::ClientReregister, ElementKind::Port),
        (18, EventType::GidChange, ElementKind::Port),
        (19, EventType::WqFatal, ElementKind::Wq),
    ];
    for (raw, ty, kind) in expected {
        assert_eq!(EventType::from_raw(raw), ty, "raw {raw}");
        assert_eq!(ty.to_raw(), raw);
        assert_eq!(ty.element_kind(), kind, "{ty}");
        let name = ty.name().unwrap();
        assert!(name.starts_with("IBV_EVENT_"), "{name}");
        assert_eq!(ty.to_string(), name);
    }
    assert_eq!(EventType::PortErr.to_string(), "IBV_EVENT_PORT_ERR");
    assert_eq!(
        EventType::SrqLimitReached.name(),
        Some("IBV_EVENT_SRQ_LIMIT_REACHED")
    );
}

#[test]
fn unknown_event_types_keep_their_value() {
    for raw in [20, 21, 255, 0x8000_0000, u32::MAX] {
        let ty = EventType::from_raw(raw);
        assert_eq!(ty, EventType::Unknown(raw));
        assert_eq!(ty.to_raw(), raw);
        assert_eq!(ty.element_kind(), ElementKind::Unknown);
        assert_eq!(ty.name(), None);
        assert_eq!(ty.to_string(), format!("unknown event type {raw}"));
    }
}

#[test]
fn event_info_is_plain_data() {
    let info = AsyncEventInfo::new(EventType::PortErr, ElementId::Port { port: 1 });
    let copy = info;
    assert_eq!(info, copy);
    assert_eq!(info.to_string(), "IBV_EVENT_PORT_ERR on port 1");
    fn is_static<T: 'static + Copy + Send + Sync>(_: T) {}
    is_static(info);
}

#[test]
fn call_errors_carry_errno_and_call() {
    let err = Error::Call {
        call: "ibv_destroy_cq",
        errno: Errno::BUSY,
    };
    assert_eq!(err.errno(), Some(Errno::BUSY));
    assert_eq!(err.call(), Some("ibv_destroy_cq"));
    let msg = err.to_string();
    assert!(
        msg.starts_with("ibv_destroy_cq failed: ") && msg.ends_with(&format!("({})", libc::EBUSY)),
        "{msg}"
    );

    let io: io::Error = err.into();
    assert_eq!(io.kind(), io::Error::from_raw_os_error(libc::EBUSY).kind());
    let back = io.get_ref().unwrap().downcast_ref::<Error>().unwrap();
    assert_eq!(back.errno(), Some(Errno::BUSY));
}

#[test]
fn errno_is_a_transparent_c_int_with_named_constants() {
    assert_eq!(
        std::mem::size_of::<Errno>(),
        std::mem::size_of::<libc::c_int>()
    );
    assert_eq!(Errno::AGAIN.raw_os_error(), libc::EAGAIN);
    assert_eq!(Errno::from_raw_os_error(libc::ENOMEM), Errno::NOMEM);
    assert_eq!(format!("{:?}", Errno::TIMEDOUT), "Errno::TIMEDOUT");
    assert_eq!(
        format!("{:?}", Errno::from_raw_os_error(9999)),
        "Errno(9999)"
    );
    assert_eq!(
        Errno::NOENT.to_string(),
        format!("{} ({})", Errno::NOENT.text(), libc::ENOENT)
    );
    assert_eq!(Errno::INTR.kind(), io::ErrorKind::Interrupted);
    let io: io::Error = Errno::CONNREFUSED.into();
    assert_eq!(io.raw_os_error(), Some(libc::ECONNREFUSED));
}

#[test]
fn a_failed_destroy_converts_with_question_mark() {
    #[derive(Debug)]
    struct Handle;
    fn destroy() -> Result<(), (Handle, Error)> {
        Err((
            Handle,
            Error::InUse {
                object: ObjectKind::Context,
                users: 1,
            },
        ))
    }
    fn caller() -> ibverbs_async::Result<()> {
        destroy()?;
        Ok(())
    }
    let err = caller().unwrap_err();
    assert!(matches!(err, Error::InUse { users: 1, .. }), "{err}");
    assert_eq!(err.errno(), Some(Errno::BUSY));
    assert_eq!(
        err.to_string(),
        "the context is still in use (1 other user(s): clones, child objects or events)"
    );
}

#[test]
fn errors_convert_to_io_errors_with_kinds() {
    let cases: Vec<(Error, io::ErrorKind)> = vec![
        (Error::NoRdmaSupport, io::ErrorKind::Unsupported),
        (Error::NoDevices, io::ErrorKind::NotFound),
        (
            Error::NoSuchDevice {
                name: "mlx5_9".into(),
                available: "rxe0".into(),
            },
            io::ErrorKind::NotFound,
        ),
        (
            Error::PortOutOfRange { port: 3, ports: 1 },
            io::ErrorKind::InvalidInput,
        ),
        (
            Error::OutOfBounds {
                what: "memory region",
                offset: 4000,
                len: 200,
                size: 4096,
            },
            io::ErrorKind::InvalidInput,
        ),
        (
            Error::InvalidArgument("x".into()),
            io::ErrorKind::InvalidInput,
        ),
        (
            Error::TooLarge {
                what: "CQ entries",
                limit: 10,
                given: 11,
            },
            io::ErrorKind::InvalidInput,
        ),
        (
            Error::BufferTooSmall {
                what: "work completions",
                needed: 1,
                given: 0,
            },
            io::ErrorKind::InvalidInput,
        ),
        (
            Error::State {
                call: "AsyncEvents::new",
                reason: "no tokio runtime",
            },
            io::ErrorKind::Other,
        ),
        (
            Error::Call {
                call: "ibv_create_cq",
                errno: Errno::NOMEM,
            },
            io::ErrorKind::OutOfMemory,
        ),
        (
            Error::System {
                call: "poll",
                source: io::Error::from(Errno::INVAL),
            },
            io::ErrorKind::InvalidInput,
        ),
    ];
    for (err, kind) in cases {
        let text = err.to_string();
        let io: io::Error = err.into();
        assert_eq!(io.kind(), kind, "{text}");
        assert_eq!(io.to_string(), text);
    }
    assert_eq!(
        Error::PortOutOfRange { port: 3, ports: 1 }.to_string(),
        "port 3 out of range: the device has ports 1..=1"
    );
    assert_eq!(
        Error::OutOfBounds {
            what: "memory region",
            offset: 4000,
            len: 200,
            size: 4096
        }
        .to_string(),
        "range 4000..4200 does not fit in memory region of 4096 bytes"
    );
    let busy = Error::InUse {
        object: ObjectKind::CompletionQueue,
        users: 2,
    };
    assert_eq!(
        io::Error::from(busy).kind(),
        io::Error::from_raw_os_error(libc::EBUSY).kind()
    );
}

#[test]
fn question_mark_works_in_io_functions() {
    fn open() -> io::Result<Context> {
        Ok(Context::open("no-such-device-here")?)
    }
    assert!(open().is_err());
}

#[test]
fn small_enums_decode() {
    assert_eq!(PortState::from_raw(4), PortState::Active);
    assert_eq!(PortState::from_raw(1), PortState::Down);
    assert_eq!(PortState::from_raw(77), PortState::Unknown(77));
    assert_eq!(Mtu::from_raw(3), Some(Mtu::Mtu1024));
    assert_eq!(Mtu::Mtu1024.bytes(), 1024);
    assert_eq!(Mtu::Mtu4096.bytes(), 4096);
    assert_eq!(Mtu::from_raw(0), None);
    assert_eq!(WcStatus::from_raw(0), WcStatus::Success);
    assert_eq!(WcStatus::from_raw(5), WcStatus::WrFlushErr);
    assert_eq!(WcStatus::from_raw(99), WcStatus::Other(99));
}

#[test]
fn ipv4_mapped_gids() {
    let mut raw = [0u8; 16];
    raw[10] = 0xff;
    raw[11] = 0xff;
    raw[12..].copy_from_slice(&[198, 18, 0, 1]);
    let gid = Gid(raw);
    assert_eq!(
        gid.to_ipv4_mapped(),
        Some(std::net::Ipv4Addr::new(198, 18, 0, 1))
    );
    assert_eq!(gid.to_string(), "::ffff:198.18.0.1");
    assert!(Gid::default().is_zero());
    let mut link_local = [0u8; 16];
    link_local[0] = 0xfe;
    link_local[1] = 0x80;
    assert_eq!(Gid(link_local).to_ipv4_mapped(), None);
}

#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Context>();
    send_sync::<Pd>();
    send_sync::<Cq>();
    send_sync::<CompChannel>();
    send_sync::<Qp>();
    send_sync::<Srq>();
    send_sync::<Mr>();
    send_sync::<DeviceList>();
    send_sync::<AsyncEvent<'static>>();
    send_sync::<Error>();
    send_sync::<ObjectId>();
    send_sync::<Stopper>();
    send_sync::<Errno>();
}

#[test]
fn owned_events_can_move_into_spawned_tasks() {
    // What `tokio::spawn` and `std::thread::spawn` ask of what they own.
    fn spawnable<T: Send + 'static>() {}
    spawnable::<OwnedAsyncEvent>();
    spawnable::<ibverbs_async::Result<OwnedAsyncEvent>>();
}

#[test]
fn a_stopper_is_sticky_until_reset() {
    let stopper = Stopper::new().unwrap();
    assert!(!stopper.is_stopped().unwrap());
    let clone = stopper.clone();
    clone.stop().unwrap();
    clone.stop().unwrap();
    assert!(stopper.is_stopped().unwrap());
    stopper.reset().unwrap();
    assert!(!clone.is_stopped().unwrap());
    assert!(format!("{stopper:?}").starts_with("Stopper"));
    // Its eventfd is polled through a poll-only EventFd: readable while
    // stopped.
    use std::os::fd::AsRawFd;
    assert_eq!(stopper.fd().as_raw_fd(), clone.as_raw_fd());
    assert!(!stopper.fd().wait_readable(Some(Duration::ZERO)).unwrap());
    clone.stop().unwrap();
    assert!(stopper.fd().wait_readable(Some(Duration::ZERO)).unwrap());
    stopper.reset().unwrap();
    // A reset of a stopper that is not stopped returns at once.
    stopper.reset().unwrap();
    let w: Wait<u8> = Wait::Stopped;
    assert!(w.is_stopped());
    assert_eq!(Wait::Ready(3).ready(), Some(3));
    assert_eq!(Wait::<u8>::TimedOut.ready(), None);
}
