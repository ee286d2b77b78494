//! Bad input gets a typed error and nothing panics or leaks.
#[macro_use]
mod common;

use common::*;
use libfabric::info::{Caps, EpType};
use libfabric::{getinfo, Domain, Errno, Error, Hints};

#[test]
fn an_unknown_provider_is_no_provider() {
    let hints = Hints::new().provider("no-such-provider");
    match getinfo(&hints) {
        Err(Error::NoProvider { request }) => {
            assert!(request.contains("no-such-provider"), "{request}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn impossible_hints_are_no_provider() {
    // Tagged messages over connectionless datagrams on tcp: nobody has it.
    let hints = Hints::new()
        .provider("tcp")
        .ep_type(EpType::Dgram)
        .caps(Caps::TAGGED | Caps::RMA | Caps::ATOMIC);
    let err = getinfo(&hints).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::NODATA), "{err}");
    let io: std::io::Error = err.into();
    assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn strings_with_nul_bytes_are_refused() {
    // The setters cannot fail: the strings are checked once, by getinfo.
    for hints in [
        Hints::new().provider("tc\0p"),
        Hints::new().node("a\0b"),
        Hints::new().service("1\0x"),
        Hints::new().fabric_name("f\0"),
        Hints::new().domain_name("\0"),
    ] {
        let err = libfabric::getinfo(&hints).expect_err("a NUL byte is refused");
        assert!(matches!(err, Error::InvalidArgument(_)), "{hints:?}: {err}");
    }
}

#[test]
fn errors_name_the_call_and_libfabrics_text() {
    let e = Error::Call {
        call: "fi_eq_read",
        errno: Errno::AVAIL,
    };
    let text = e.to_string();
    assert!(text.starts_with("fi_eq_read: "), "{text}");
    assert!(text.contains("259"), "{text}");
    assert_eq!(
        Errno::from_raw_os_error(Errno::OVERRUN.raw_os_error()),
        Errno::OVERRUN
    );
    assert_eq!(Errno::from_raw_os_error(4242).raw_os_error(), 4242);
    assert_eq!(format!("{:?}", Errno::AGAIN), "Errno::AGAIN");
    assert_eq!(
        format!("{:?}", Errno::from_raw_os_error(4242)),
        "Errno(4242)"
    );
}

#[test]
fn a_pool_of_nothing_and_oversized_sends_are_refused() {
    skip_unless_msg!();
    let (_f, domain, _) = fabric_domain();
    assert!(matches!(
        libfabric::BufferPool::new(&domain, 0, 64),
        Err(Error::InvalidArgument(_))
    ));
    let pair = connect_pair::<libfabric::cq::Msg>(libfabric::cq::CqAttr::new());
    let pool = libfabric::BufferPool::new(&pair.client_domain, 1, 64).unwrap();
    let buf = pool.take().unwrap();
    let err = pair.client.send(buf, 65).unwrap_err();
    assert!(
        matches!(
            err.1,
            Error::BufferTooSmall {
                needed: 65,
                given: 64,
                ..
            }
        ),
        "{}",
        err.1
    );
    assert_eq!(err.0.len(), 64, "the buffer is handed back");
    assert!(
        pool.take().is_none(),
        "the one slot is still owned by the returned buffer"
    );
    drop(err);
    assert!(pool.take().is_some(), "dropping it returns the slot");
    let _ = Domain::open;
}

#[test]
fn closing_in_the_wrong_order_is_impossible_and_reported() {
    skip_unless_msg!();
    let pair = connect_pair::<libfabric::cq::Msg>(libfabric::cq::CqAttr::new());
    // The endpoint holds the CQ: closing it explicitly reports the user.
    match pair.client_cq.clone().close() {
        Err((_, Error::InUse { users, .. })) => assert!(users >= 1),
        r => panic!("{r:?}"),
    }
    let domain = pair.client_domain.clone();
    drop(pair);
    domain
        .close()
        .expect("everything else is gone: the domain closes");
}
