//! The checks of libfabric's own eq_test (fabtests), written against the
//! safe API, plus the event queue's refusals of bad input.
// Wait sets, poll sets and FI_WAIT_MUTEX_COND are deprecated by libfabric
// 2.x; their rules are still tested.
#![cfg_attr(libfabric_2, allow(deprecated))]
#[macro_use]
mod common;

use common::*;
use libfabric::eq::{Entry, EqAttr, EqRead, ErrDataBuf, Event, EventBuf};
use libfabric::wait::{trywait, TryWait, WaitObj, Waitable};
use libfabric::{Error, EventQueue};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::time::{Duration, Instant};

fn notify(read: EqRead<'_>) -> (usize, u64) {
    match read {
        EqRead::Event(Event::Notify(e)) => (e.context, e.data),
        other => panic!("expected FI_NOTIFY, got {other:?}"),
    }
}

#[test]
fn open_and_close_many_sizes() {
    let (fabric, _) = fabric();
    for size in [1usize, 2, 64, 1024, 65536] {
        let eq = EventQueue::open(&fabric, &EqAttr::new().size(size)).unwrap();
        eq.close().unwrap();
    }
}

#[test]
fn write_then_read_alternating_peek() {
    let (fabric, _) = fabric();
    let eq = EventQueue::open(&fabric, &EqAttr::new().size(32).write(true)).unwrap();
    for i in 0..5u64 {
        eq.write_notify(eq.fid(), 100 + i as usize, i).unwrap();
    }
    let mut buf = EventBuf::new();
    for i in 0..5u64 {
        if i % 2 == 0 {
            let (ctx, data) = notify(eq.peek(&mut buf).unwrap());
            assert_eq!((ctx, data), (100 + i as usize, i), "peek leaves the event");
        }
        match eq.read(&mut buf).unwrap() {
            EqRead::Event(Event::Notify(e)) => {
                assert_eq!(e.fid, eq.fid());
                assert_eq!(e.context, 100 + i as usize);
                assert_eq!(e.data, i);
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(matches!(eq.read(&mut buf).unwrap(), EqRead::Empty));
}

#[test]
fn a_queue_of_32_takes_exactly_32_writes() {
    let (fabric, _) = fabric();
    let eq = EventQueue::open(&fabric, &EqAttr::new().size(32).write(true)).unwrap();
    for i in 0..32 {
        eq.write_notify(eq.fid(), i, 0)
            .unwrap_or_else(|e| panic!("write {i}: {e}"));
    }
    let mut buf = EventBuf::new();
    for i in 0..32 {
        assert_eq!(
            notify(eq.read(&mut buf).unwrap()),
            (i, 0),
            "event {i} read back in order"
        );
    }
    assert!(
        matches!(eq.read(&mut buf).unwrap(), EqRead::Empty),
        "exactly 32 events"
    );
}

#[test]
fn fd_wait_trywait_and_poll() {
    let (fabric, _) = fabric();
    let eq = fd_eq(&fabric);
    assert_eq!(eq.wait_obj(), WaitObj::Fd);
    assert_eq!(trywait(&fabric, &[&eq]).unwrap(), TryWait::MayBlock);
    let fd = borrowed(eq.wait_fd().unwrap());
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    assert_eq!(
        poll(&mut fds, PollTimeout::ZERO).unwrap(),
        0,
        "empty queue: fd idle"
    );
    eq.write_notify(eq.fid(), 1, 2).unwrap();
    assert_eq!(
        poll(&mut fds, PollTimeout::from(1000u16)).unwrap(),
        1,
        "written: fd readable"
    );
    let pending = trywait(&fabric, &[&eq]).unwrap();
    if provider() == "sockets" {
        // sockets' trywait looks at the wait object, not the queue: it may
        // say "may block" with an event queued, whose fd is readable.
        assert!(
            poll(&mut fds, PollTimeout::ZERO).unwrap() == 1 || pending == TryWait::EventsPending
        );
    } else {
        assert_eq!(pending, TryWait::EventsPending);
    }
    let mut buf = EventBuf::new();
    let _ = notify(eq.read(&mut buf).unwrap());
    assert_eq!(trywait(&fabric, &[&eq]).unwrap(), TryWait::MayBlock);
}

#[test]
fn sread_times_out_within_bounds_and_returns_pending_at_once() {
    let (fabric, _) = fabric();
    let eq = fd_eq(&fabric);
    let mut buf = EventBuf::new();
    let start = Instant::now();
    assert!(matches!(
        eq.sread(&mut buf, Some(Duration::from_secs(2))).unwrap(),
        EqRead::TimedOut
    ));
    // Not before its timeout; and returned (the bound is wide: a loaded
    // machine or valgrind may be slow to wake it).
    let took = start.elapsed();
    assert!(
        (Duration::from_millis(1500)..Duration::from_secs(12)).contains(&took),
        "a 2 s sread on an empty queue took {took:?}"
    );
    // A pending event: returned without waiting for the (long) timeout.
    eq.write_notify(eq.fid(), 3, 4).unwrap();
    let start = Instant::now();
    let _ = notify(eq.sread(&mut buf, Some(Duration::from_secs(30))).unwrap());
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "an sread with an event pending waited {:?}",
        start.elapsed()
    );
}

#[test]
fn peek_five_then_read_five() {
    let (fabric, _) = fabric();
    let eq = fd_eq(&fabric);
    for i in 0..5 {
        eq.write_notify(eq.fid(), i, i as u64).unwrap();
    }
    let mut buf = EventBuf::new();
    for _ in 0..5 {
        assert_eq!(
            notify(eq.peek(&mut buf).unwrap()),
            (0, 0),
            "peek does not consume"
        );
    }
    for i in 0..5 {
        assert_eq!(notify(eq.read(&mut buf).unwrap()), (i, i as u64));
    }
    assert!(matches!(eq.read(&mut buf).unwrap(), EqRead::Empty));
}

#[test]
fn speek_does_not_clear_the_fd() {
    let (fabric, _) = fabric();
    let eq = fd_eq(&fabric);
    eq.write_notify(eq.fid(), 9, 9).unwrap();
    let mut buf = EventBuf::new();
    let _ = notify(eq.speek(&mut buf, Some(Duration::from_secs(1))).unwrap());
    let fd = borrowed(eq.wait_fd().unwrap());
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    assert_eq!(
        poll(&mut fds, PollTimeout::from(100u16)).unwrap(),
        1,
        "still readable after speek"
    );
    let _ = notify(eq.read(&mut buf).unwrap());
}

#[test]
fn readerr_with_no_error_is_none() {
    let (fabric, _) = fabric();
    let eq = fd_eq(&fabric);
    let mut buf = ErrDataBuf::new();
    assert!(eq.read_err(&mut buf).unwrap().is_none());
}

#[test]
fn unsupported_wait_objects_are_typed_errors() {
    let (fabric, _) = fabric();
    for obj in [WaitObj::MutexCond, WaitObj::Yield] {
        match EventQueue::open(&fabric, &EqAttr::new().wait(obj)) {
            Err(Error::UnsupportedWait { requested, .. }) => assert_eq!(requested, obj),
            Ok(eq) => {
                // A provider that gives it must also block on it.
                let mut buf = EventBuf::new();
                assert!(matches!(
                    eq.sread(&mut buf, Some(Duration::from_millis(10))).unwrap(),
                    EqRead::TimedOut
                ));
            }
            Err(other) => panic!("{obj:?}: expected UnsupportedWait, got {other}"),
        }
    }
    match EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::Set)) {
        Err(Error::UnsupportedWait { .. }) => {}
        other => panic!("FI_WAIT_SET without a set: {other:?}"),
    }
}

#[test]
fn wait_none_refuses_sread_and_wait_fd() {
    let (fabric, _) = fabric();
    let eq = EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::None)).unwrap();
    let mut buf = EventBuf::new();
    match eq.sread(&mut buf, Some(Duration::from_millis(1))) {
        Err(Error::WrongWaitMode { call, actual, .. }) => {
            assert_eq!(call, "fi_eq_sread");
            assert_eq!(actual, WaitObj::None);
        }
        other => panic!("sread on FI_WAIT_NONE: {other:?}"),
    }
    assert!(matches!(eq.wait_fd(), Err(Error::WrongWaitMode { .. })));
}

#[test]
fn write_needs_fi_write() {
    let (fabric, _) = fabric();
    let eq = EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::Fd)).unwrap();
    assert!(matches!(
        eq.write_notify(eq.fid(), 0, 0),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        eq.write_entry(&Entry::new(eq.fid(), 0, 0)),
        Err(Error::InvalidArgument(_))
    ));
    // Refused before the provider saw them (the util providers' write
    // queues an event whatever the queue's flags).
    let mut buf = EventBuf::new();
    assert!(matches!(eq.read(&mut buf).unwrap(), EqRead::Empty));
    // A handle given back by a close refused, and a clone, refuse too.
    let other = eq.clone();
    let Err((eq, Error::InUse { .. })) = eq.close() else {
        panic!("a close with another handle open")
    };
    for eq in [&eq, &other] {
        assert!(matches!(
            eq.write_entry(&Entry::new(eq.fid(), 0, 0)),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(eq.read(&mut buf).unwrap(), EqRead::Empty));
}

/// An entry written as it is comes back field for field: one kept across
/// writes whose data changes, and one a read of another queue handed out,
/// passed on. A handle given back by a refused close, and a clone, write
/// and read the same queue.
#[test]
fn an_entry_is_written_as_it_is() {
    let (fabric, _) = fabric();
    let first = EventQueue::open(&fabric, &EqAttr::new().size(8).write(true)).unwrap();
    let second = EventQueue::open(&fabric, &EqAttr::new().size(8).write(true)).unwrap();
    let mut buf = EventBuf::new();
    let mut other_buf = EventBuf::new();
    let mut entry = Entry::new(first.fid(), 0xc0de, 0);
    for i in 0..4u64 {
        entry.data = u64::MAX - i;
        first.write_entry(&entry).unwrap();
        let EqRead::Event(Event::Notify(got)) = first.read(&mut buf).unwrap() else {
            panic!("the entry written")
        };
        assert_eq!(*got, entry);
        // Passed on to another queue as the read handed it out.
        second.write_entry(got).unwrap();
        let EqRead::Event(Event::Notify(passed)) = second.read(&mut other_buf).unwrap() else {
            panic!("the entry passed on")
        };
        assert_eq!(*passed, entry);
    }
    assert!(matches!(first.read(&mut buf).unwrap(), EqRead::Empty));
    assert!(matches!(second.read(&mut buf).unwrap(), EqRead::Empty));

    let clone = first.clone();
    let Err((first, Error::InUse { users: 1, .. })) = first.close() else {
        panic!("a close with another handle open")
    };
    first.write_entry(&Entry::new(first.fid(), 1, 2)).unwrap();
    assert_eq!(notify(clone.read(&mut buf).unwrap()), (1, 2));
    clone.write_notify(clone.fid(), 3, 4).unwrap();
    assert_eq!(notify(first.read(&mut buf).unwrap()), (3, 4));
    drop(clone);
    first.close().unwrap();
    second.close().unwrap();
}

#[test]
fn a_buffer_too_small_for_connection_data_is_refused() {
    skip_unless_msg!();
    let (fabric, _) = fabric();
    let (pep, eq, _) = listener(&fabric);
    let max = pep.cm_data_size().expect("FI_OPT_CM_DATA_SIZE");
    assert!(max > 0);
    let mut small = EventBuf::with_cm_data_capacity(max - 1).unwrap();
    match eq.read(&mut small) {
        Err(Error::BufferTooSmall { needed, given, .. }) => {
            assert_eq!((needed, given), (max, max - 1));
        }
        other => panic!("expected BufferTooSmall, got {other:?}"),
    }
    let mut enough = EventBuf::with_cm_data_capacity(max).unwrap();
    assert!(matches!(eq.read(&mut enough).unwrap(), EqRead::Empty));
}

#[test]
fn close_reports_other_users() {
    let (fabric, _) = fabric();
    let eq = fd_eq(&fabric);
    let other = eq.clone();
    match eq.close() {
        Err((_, Error::InUse { users, .. })) => assert_eq!(users, 1),
        r => panic!("{r:?}"),
    }
    other.close().unwrap();
    let eq = fd_eq(&fabric);
    match fabric.clone().close() {
        Err((_, Error::InUse { .. })) => {}
        r => panic!("closing a fabric with an open EQ: {r:?}"),
    }
    drop(eq);
}

/// `fi_eq_write` of `len` bytes of `entry` as event `event`, which the
/// queue must take whole.
fn write_raw<T>(eq: &EventQueue, event: u32, entry: &T, len: usize) {
    assert!(len <= std::mem::size_of::<T>());
    // SAFETY: fi_eq_write(3) on an open queue opened with FI_WRITE copies
    // len bytes of entry, which has at least that many.
    let ret = unsafe {
        libfabric_sys::fabric::fi_eq_write(eq.as_raw(), event, (entry as *const T).cast(), len, 0)
    };
    assert_eq!(
        ret, len as isize,
        "fi_eq_write of event {event}, {len} bytes"
    );
}

/// An `fi_eq_cm_entry` with no `fi_info`, followed by connection data.
#[repr(C)]
struct CmEntryWithData {
    cm: libfabric_sys::fabric::fi_eq_cm_entry,
    data: [u8; 16],
}

/// Entries an application writes itself are decoded by their type and by
/// the length the read returned: each entry type whole, a request or a
/// connection event with no `fi_info` (read and peeked, with and without
/// connection data), an entry shorter than its type (`FI_EIO`, and the
/// queue goes on), an event type this crate does not name.
#[test]
fn raw_entries_decode_by_type_and_length() {
    use libfabric::Errno;
    use libfabric_sys::fabric as sys;
    let (fabric, _) = fabric();
    let eq = EventQueue::open(&fabric, &EqAttr::new().size(64).write(true)).unwrap();
    let fid = eq.as_raw().cast::<sys::fid>();
    let mut buf = EventBuf::new();
    let entry = sys::fi_eq_entry {
        fid,
        context: 7usize as *mut _,
        data: 9,
    };
    let whole = std::mem::size_of::<sys::fi_eq_entry>();
    let cm_len = std::mem::size_of::<sys::fi_eq_cm_entry>();
    let mut cm = CmEntryWithData {
        // SAFETY: fi_eq_cm_entry is plain data (pointers and bytes); all
        // zero is a valid value (a NULL fid and fi_info).
        cm: unsafe { std::mem::zeroed() },
        data: std::array::from_fn(|k| k as u8 + 1),
    };
    cm.cm.fid = fid;

    for event in [
        sys::FI_MR_COMPLETE,
        sys::FI_AV_COMPLETE,
        sys::FI_JOIN_COMPLETE,
        sys::FI_NOTIFY,
    ] {
        write_raw(&eq, event, &entry, whole);
        let e = match eq.read(&mut buf).unwrap() {
            EqRead::Event(Event::MrComplete(e)) if event == sys::FI_MR_COMPLETE => e,
            EqRead::Event(Event::AvComplete(e)) if event == sys::FI_AV_COMPLETE => e,
            EqRead::Event(Event::JoinComplete(e)) if event == sys::FI_JOIN_COMPLETE => e,
            EqRead::Event(Event::Notify(e)) if event == sys::FI_NOTIFY => e,
            other => panic!("event {event}: {other:?}"),
        };
        assert_eq!((e.fid, e.context, e.data), (eq.fid(), 7, 9));
    }

    for (data_len, peek_first) in [(16, false), (16, true), (0, false), (0, true)] {
        write_raw(&eq, sys::FI_CONNREQ, &cm, cm_len + data_len);
        if peek_first {
            match eq.peek(&mut buf).unwrap() {
                EqRead::Event(Event::UnownedConnReq(r)) => {
                    assert_eq!((r.fid(), r.data()), (eq.fid(), &cm.data[..data_len]));
                }
                other => panic!("peek of a request with no fi_info: {other:?}"),
            }
        }
        match eq.read(&mut buf).unwrap() {
            EqRead::Event(Event::UnownedConnReq(r)) => {
                assert_eq!((r.fid(), r.data()), (eq.fid(), &cm.data[..data_len]));
            }
            other => panic!("read of a request with no fi_info: {other:?}"),
        }
    }

    // The same through fi_eq_sread, where the queue's wait object allows it.
    write_raw(&eq, sys::FI_CONNREQ, &cm, cm_len + 16);
    match eq.sread(&mut buf, Some(Duration::from_secs(30))) {
        Ok(EqRead::Event(Event::UnownedConnReq(r))) => {
            assert_eq!((r.fid(), r.data()), (eq.fid(), &cm.data[..]));
        }
        Err(Error::WrongWaitMode { .. }) => {
            assert!(matches!(
                eq.read(&mut buf).unwrap(),
                EqRead::Event(Event::UnownedConnReq(_))
            ));
        }
        other => panic!("sread of a request with no fi_info: {other:?}"),
    }

    write_raw(&eq, sys::FI_CONNECTED, &cm, cm_len + 4);
    match eq.read(&mut buf).unwrap() {
        EqRead::Event(Event::Connected(c)) => {
            assert_eq!((c.fid, c.data), (eq.fid(), &cm.data[..4]))
        }
        other => panic!("FI_CONNECTED: {other:?}"),
    }
    write_raw(&eq, sys::FI_SHUTDOWN, &cm, cm_len);
    match eq.read(&mut buf).unwrap() {
        EqRead::Event(Event::Shutdown(c)) => assert_eq!((c.fid, c.data), (eq.fid(), &[][..])),
        other => panic!("FI_SHUTDOWN: {other:?}"),
    }

    // Shorter than its type: FI_EIO, for a read and a peek, and the entry
    // is gone after the read.
    for (event, len) in [
        (sys::FI_NOTIFY, whole - 1),
        (sys::FI_MR_COMPLETE, 8),
        (sys::FI_CONNREQ, cm_len - 1),
        (sys::FI_CONNREQ, 1),
        (sys::FI_CONNECTED, 8),
        (sys::FI_SHUTDOWN, 1),
    ] {
        write_raw(&eq, event, &cm, len);
        for peek in [true, false] {
            let read = if peek {
                eq.peek(&mut buf)
            } else {
                eq.read(&mut buf)
            };
            match read {
                Err(Error::Call { errno, .. }) => assert_eq!(errno, Errno::IO, "peek {peek}"),
                other => panic!("peek {peek}, event {event}, {len} bytes: {other:?}"),
            }
        }
    }

    // A request that fills a buffer exactly: all its data, bounded by the
    // buffer's end (the length compare is at its edge).
    let mut exact = EventBuf::with_cm_data_capacity(16).unwrap();
    write_raw(&eq, sys::FI_CONNREQ, &cm, cm_len + 16);
    match eq.read(&mut exact).unwrap() {
        EqRead::Event(Event::UnownedConnReq(r)) => {
            assert_eq!((r.fid(), r.data()), (eq.fid(), &cm.data[..]));
        }
        other => panic!("a request that fills the buffer: {other:?}"),
    }

    write_raw(&eq, 1000, &entry, 8);
    match eq.read(&mut buf).unwrap() {
        EqRead::Event(Event::Unknown { event, bytes }) => {
            assert_eq!((event, bytes.len()), (1000, 8));
            assert_eq!(bytes, &(fid as usize).to_ne_bytes()[..]);
        }
        other => panic!("an unnamed event: {other:?}"),
    }
    assert!(matches!(eq.read(&mut buf).unwrap(), EqRead::Empty));
}
