//! Waiting: fi_trywait over an EQ and a CQ together, poll and epoll on their
//! fds, the Waiter loop moving 10 000 events with none lost or duplicated,
//! wait sets and FI_WAIT_POLLFD.
// Wait sets, poll sets and FI_WAIT_MUTEX_COND are deprecated by libfabric
// 2.x; their rules are still tested.
#![cfg_attr(libfabric_2, allow(deprecated))]
#[macro_use]
mod common;

use common::*;
use libfabric::cq::{CqAttr, Msg, MsgEntry};
use libfabric::eq::{EqAttr, EqRead, Event, EventBuf};
use libfabric::wait::{
    trywait, PollFdSet, TryWait, TryWaitSet, WaitObj, WaitSet, Waitable, Waiter, Wake,
};
use libfabric::{CompletionQueue, Error, EventQueue};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use std::time::{Duration, Instant};

#[test]
fn trywait_over_an_eq_and_a_cq_together() {
    let (fabric, domain, _) = fabric_domain();
    let eq = fd_eq(&fabric);
    let Some(cq) = pollable_cq::<Msg>(&domain) else {
        return;
    };
    assert_eq!(trywait(&fabric, &[&eq, &cq]).unwrap(), TryWait::MayBlock);
    eq.write_notify(eq.fid(), 0, 0).unwrap();
    let pending = trywait(&fabric, &[&eq, &cq]).unwrap();
    if provider() == "sockets" {
        // sockets' trywait looks at the wait objects, not the queues: it
        // may say "may block" with an event queued, whose fd is readable.
        let fd = borrowed(eq.wait_fd().unwrap());
        let mut fds = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
        let readable = nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).unwrap() == 1;
        assert!(readable || pending == TryWait::EventsPending);
    } else {
        assert_eq!(pending, TryWait::EventsPending);
    }
    let mut buf = EventBuf::new();
    assert!(matches!(eq.read(&mut buf).unwrap(), EqRead::Event(_)));
    assert_eq!(trywait(&fabric, &[&eq, &cq]).unwrap(), TryWait::MayBlock);
}

#[test]
fn trywait_refuses_queues_of_another_fabric() {
    let (fabric_a, _) = fabric();
    let (fabric_b, _) = fabric();
    let eq = fd_eq(&fabric_b);
    assert!(matches!(
        trywait(&fabric_a, &[&eq]),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn a_prepared_trywait_set_refuses_what_trywait_refuses_and_answers_as_it_does() {
    let (fabric, domain, _) = fabric_domain();
    let (other_fabric, _) = common::fabric();
    let eq = fd_eq(&fabric);
    let foreign = fd_eq(&other_fabric);
    assert!(matches!(
        TryWaitSet::new(&fabric, &[&eq, &foreign]),
        Err(Error::InvalidArgument(_))
    ));
    let none = EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::None)).unwrap();
    assert!(matches!(
        TryWaitSet::new(&fabric, &[&none]),
        Err(Error::WrongWaitMode { .. })
    ));
    let Some(cq) = pollable_cq::<Msg>(&domain) else {
        return;
    };
    let Some(cq2) = pollable_cq::<Msg>(&domain) else {
        return;
    };
    // Every shape: no lock (event queues only), one, several, and one
    // queue given twice.
    let shapes: [&[&dyn Waitable]; 5] = [
        &[&eq],
        &[&eq, &cq],
        &[&cq],
        &[&eq, &cq, &cq2],
        &[&cq, &eq, &cq],
    ];
    let mut buf = EventBuf::new();
    for (at, queues) in shapes.into_iter().enumerate() {
        let mut set = TryWaitSet::new(&fabric, queues).unwrap();
        for round in 0..3 {
            assert_eq!(set.trywait().unwrap(), TryWait::MayBlock, "shape {at}");
            assert_eq!(trywait(&fabric, queues).unwrap(), TryWait::MayBlock);
            if queues.iter().any(|q| q.wait_fid() == eq.wait_fid()) {
                eq.write_notify(eq.fid(), at, round).unwrap();
                let (prepared, each) = (set.trywait().unwrap(), trywait(&fabric, queues).unwrap());
                assert_eq!(prepared, each, "shape {at}");
                // sockets answers "may block" to every trywait
                // (`sock_trywait`, `prov/sockets/src/sock_fabric.c` 196-200
                // in 1.22), and keeps the fds readable while the queues
                // hold entries.
                if provider() != "sockets" {
                    assert_eq!(prepared, TryWait::EventsPending, "shape {at}");
                }
                assert!(matches!(
                    eq.read(&mut buf).unwrap(),
                    EqRead::Event(Event::Notify(e)) if e.data == round
                ));
            }
        }
    }
    // A set of no queue keeps its fabric open, and may always block.
    let mut empty = TryWaitSet::new(&fabric, &[]).unwrap();
    drop(fabric);
    assert_eq!(empty.trywait().unwrap(), TryWait::MayBlock);
}

#[test]
fn epoll_on_the_wait_fds_of_an_eq_and_a_cq() {
    let (fabric, domain, _) = fabric_domain();
    let eq = fd_eq(&fabric);
    let Some(cq) = pollable_cq::<Msg>(&domain) else {
        return;
    };
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).unwrap();
    epoll
        .add(
            borrowed(eq.wait_fd().unwrap()),
            EpollEvent::new(EpollFlags::EPOLLIN, 1),
        )
        .unwrap();
    epoll
        .add(
            borrowed(cq.wait_fd().unwrap()),
            EpollEvent::new(EpollFlags::EPOLLIN, 2),
        )
        .unwrap();
    assert_eq!(trywait(&fabric, &[&eq, &cq]).unwrap(), TryWait::MayBlock);
    let mut events = [EpollEvent::empty(); 4];
    assert_eq!(epoll.wait(&mut events, EpollTimeout::ZERO).unwrap(), 0);
    eq.write_notify(eq.fid(), 0, 0).unwrap();
    let n = epoll
        .wait(&mut events, EpollTimeout::from(1000u16))
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(events[0].data(), 1, "the EQ's fd fired");
    let mut buf = EventBuf::new();
    let _ = eq.read(&mut buf).unwrap();
    if !is_tcp() {
        // Only the tcp provider's fi_cq_signal goes through the FI_GETWAIT
        // fd; verbs signals a private pipe that only sread watches.
        return;
    }
    // Drained: trywait resets the fds before blocking again.
    assert_eq!(trywait(&fabric, &[&eq, &cq]).unwrap(), TryWait::MayBlock);
    let t = std::thread::spawn({
        let cq = cq.clone();
        move || {
            std::thread::sleep(Duration::from_millis(20));
            cq.signal().unwrap();
        }
    });
    let n = epoll
        .wait(&mut events, EpollTimeout::from(2000u16))
        .unwrap();
    t.join().unwrap();
    assert!(
        n >= 1 && events[..n].iter().any(|e| e.data() == 2),
        "the CQ's fd fired on signal"
    );
}

#[test]
fn ten_thousand_events_through_the_waiter_none_lost_none_twice() {
    const N: u64 = 10_000;
    let (fabric, _) = fabric();
    let eq = EventQueue::open(
        &fabric,
        &EqAttr::new().size(1024).wait(WaitObj::Fd).write(true),
    )
    .unwrap();
    let writer = {
        let eq = eq.clone();
        std::thread::spawn(move || {
            let mut i = 0;
            while i < N {
                match eq.write_notify(eq.fid(), 0, i) {
                    Ok(()) => i += 1,
                    Err(_) => std::thread::yield_now(), // queue full: retry
                }
            }
        })
    };
    let mut seen = vec![false; N as usize];
    let mut count = 0u64;
    let mut buf = EventBuf::new();
    let mut waiter = Waiter::new(&[&eq]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while count < N {
        assert_eq!(
            waiter.wait(Some(Duration::from_secs(10))).unwrap(),
            Wake::Ready,
            "stalled at {count}"
        );
        loop {
            match eq.read(&mut buf).unwrap() {
                EqRead::Event(Event::Notify(e)) => {
                    let i = e.data as usize;
                    assert!(!seen[i], "event {i} reported twice");
                    seen[i] = true;
                    count += 1;
                }
                EqRead::Empty => break,
                other => panic!("{other:?}"),
            }
        }
        assert!(Instant::now() < deadline);
    }
    writer.join().unwrap();
    assert!(seen.iter().all(|s| *s));
    assert!(matches!(eq.read(&mut buf).unwrap(), EqRead::Empty));
}

#[test]
fn waiter_times_out_when_idle() {
    let (fabric, domain, _) = fabric_domain();
    let eq = fd_eq(&fabric);
    let Some(cq) = pollable_cq::<Msg>(&domain) else {
        return;
    };
    let mut waiter = Waiter::new(&[&eq, &cq]).unwrap();
    let start = Instant::now();
    assert_eq!(
        waiter.wait(Some(Duration::from_millis(100))).unwrap(),
        Wake::TimedOut
    );
    assert!(start.elapsed() >= Duration::from_millis(90));
    let none = EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::None)).unwrap();
    assert!(matches!(
        Waiter::new(&[&none]),
        Err(Error::WrongWaitMode { .. })
    ));
}

#[test]
fn wait_set_signaled_by_its_queues() {
    let (fabric, domain, _) = fabric_domain();
    let set = match WaitSet::open(&fabric, WaitObj::Fd) {
        Ok(set) => set,
        // verbs has no wait sets: a typed refusal; tcp must have them.
        Err(e @ Error::UnsupportedWait { .. }) => {
            assert!(!is_tcp(), "{e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    match EventQueue::open(&fabric, &EqAttr::new().write(true).wait_set(&set)) {
        Ok(eq) => {
            assert_eq!(eq.wait_obj(), WaitObj::Set);
            let mut buf = EventBuf::new();
            // sread is refused on FI_WAIT_SET queues: wait on the set instead.
            assert!(matches!(
                eq.sread(&mut buf, None),
                Err(Error::WrongWaitMode { .. })
            ));
            assert!(!set.wait(Some(Duration::from_millis(20))).unwrap());
            eq.write_notify(eq.fid(), 0, 1).unwrap();
            assert!(set.wait(Some(Duration::from_secs(1))).unwrap());
            assert!(matches!(eq.read(&mut buf).unwrap(), EqRead::Event(_)));
            assert!(
                matches!(set.clone().close(), Err((_, Error::InUse { .. }))),
                "the EQ uses it"
            );
        }
        // tcp handles the connection requests of every event queue on a
        // set in a read of any (freed memory once one closed); sockets
        // blocks its writers once the set's socket pair is full.
        Err(Error::UnsupportedWait { reason, .. }) => {
            assert!(
                matches!(provider().as_str(), "tcp" | "net" | "sockets"),
                "{reason}"
            );
            println!(
                "provider {}: no event queue on a wait set: {reason}",
                provider()
            );
        }
        Err(e) => panic!("{e}"),
    }
    match CompletionQueue::<Msg>::open(&domain, &CqAttr::new().wait_set(&set)) {
        // Signalled by its completions (a counter's adds signal a set in
        // cntr.rs `a_counter_on_a_wait_set_signals_it`).
        Ok(cq) => {
            assert_eq!(cq.wait_obj(), WaitObj::Set);
            assert!(!set.wait(Some(Duration::from_millis(20))).unwrap(), "idle");
            assert!(
                matches!(set.clone().close(), Err((_, Error::InUse { .. }))),
                "the CQ uses it"
            );
        }
        // sockets as above; rxm, rxd and shm leave a closed endpoint's
        // callbacks in the set.
        Err(Error::UnsupportedWait { reason, .. }) => {
            assert!(provider() != "tcp", "{reason}");
            println!(
                "provider {}: no completion queue on a wait set: {reason}",
                provider()
            );
        }
        Err(e) => panic!("{e}"),
    }
}

/// A completion queue of `FI_WAIT_POLLFD`: `None` with a typed skip on a
/// provider without one (never tcp), or without wait fds for its queues
/// (rxd: `FI_GETWAIT` answers -FI_ENOSYS).
fn pollfd_cq(domain: &libfabric::Domain) -> Option<CompletionQueue<Msg>> {
    if provider() == "udp;ofi_rxd" {
        println!(
            "SKIP {}: provider udp;ofi_rxd: no wait fds for its completion queues (FI_GETWAIT: -FI_ENOSYS)",
            test_name()
        );
        return None;
    }
    match CompletionQueue::<Msg>::open(domain, &CqAttr::new().wait(WaitObj::PollFd)) {
        Ok(cq) => Some(cq),
        Err(e @ Error::UnsupportedWait { .. }) => {
            assert!(!is_tcp(), "{e}");
            println!("SKIP {}: provider {}: {e}", test_name(), provider());
            None
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn pollfd_sets_follow_the_change_index_protocol() {
    let (fabric, domain, _) = fabric_domain();
    let Some(cq) = pollfd_cq(&domain) else {
        return;
    };
    assert_eq!(cq.wait_obj(), WaitObj::PollFd);
    let mut set = PollFdSet::new();
    assert!(
        set.refresh(&cq).unwrap(),
        "the first refresh reports a change"
    );
    assert!(!set.fds().is_empty(), "at least the queue's own signal fd");
    assert!(!set.refresh(&cq).unwrap(), "nothing changed");
    if !is_tcp() {
        return; // see epoll_on_the_wait_fds_of_an_eq_and_a_cq
    }
    cq.signal().unwrap();
    let n = set.poll(Some(Duration::from_secs(1))).unwrap();
    assert!(n >= 1, "a signal makes one of the fds readable");
    let eq = fd_eq(&fabric);
    assert!(matches!(
        PollFdSet::new().refresh(&eq),
        Err(Error::WrongWaitMode { .. })
    ));
    let _ = MsgEntry::default();
}

#[test]
fn poll_set_names_the_queue_with_completions() {
    skip_unless_msg!();
    use libfabric::eq::Fid;
    use libfabric::poll::PollSet;
    let pair = connect_pair::<Msg>(CqAttr::new());
    let set = match PollSet::open(&pair.server_domain) {
        Ok(set) => set,
        Err(e) => {
            // The verbs provider has no poll sets: a typed refusal.
            assert!(!is_tcp(), "{e}");
            assert_eq!(e.errno(), Some(libfabric::Errno::NOSYS), "{e}");
            return;
        }
    };
    set.add(&pair.server_cq).unwrap();
    let mut ready = [Fid::default(); 4];
    assert_eq!(set.poll(&mut ready).unwrap(), 0);
    pair.server.recv(pair.server_pool.take().unwrap()).unwrap();
    pair.client
        .send(pair.client_pool.take().unwrap(), 16)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let _ = pair.client_cq.read(&mut [MsgEntry::default()]);
        let n = set.poll(&mut ready).unwrap();
        if n > 0 {
            assert_eq!(&ready[..n], &[pair.server_cq.fid()]);
            break;
        }
        assert!(Instant::now() < deadline, "fi_poll never reported the CQ");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut e = [MsgEntry::default()];
    assert!(matches!(
        pair.server_cq.read(&mut e).unwrap(),
        libfabric::cq::CqRead::Completions(_)
    ));
    // A queue of another domain is refused; removing works once.
    assert!(matches!(
        set.add(&pair.client_cq),
        Err(Error::InvalidArgument(_))
    ));
    set.remove(&pair.server_cq).unwrap();
    assert!(matches!(
        set.remove(&pair.server_cq),
        Err(Error::InvalidArgument(_))
    ));
}

/// Runs `f` on a thread of its own and fails when it has not returned
/// within `limit` (the thread is left behind: a wait that ignores its
/// timeout never returns).
fn within<R: Send + 'static>(limit: Duration, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("the wait did not return within {limit:?}"))
}

#[test]
fn unspec_event_queues_and_wait_sets_end_their_timed_waits_or_are_refused() {
    // shm's fabric opens FI_WAIT_UNSPEC wait objects as FI_WAIT_YIELD
    // (`smr_wait_open`, `prov/shm/src/smr_fabric.c` 38-51), whose waits
    // ignore their timeout, and the event queue's FI_GETWAITOBJ still
    // answers FI_WAIT_UNSPEC: a timed sread or fi_wait never returned.
    const T: Duration = Duration::from_millis(200);
    let (fabric, _) = fabric();
    match EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::Unspec)) {
        Ok(eq) => {
            let start = Instant::now();
            let read = within(Duration::from_secs(10), move || {
                let mut buf = EventBuf::new();
                eq.sread(&mut buf, Some(T))
                    .map(|r| matches!(r, EqRead::TimedOut))
            });
            assert_eq!(read.as_ref().ok().copied(), Some(true), "{read:?}");
            assert!(start.elapsed() >= T);
        }
        Err(Error::UnsupportedWait { .. }) if provider() == "shm" => {}
        Err(e) => panic!("an FI_WAIT_UNSPEC event queue on {}: {e}", provider()),
    }
    match WaitSet::open(&fabric, WaitObj::Unspec) {
        Ok(set) => {
            let start = Instant::now();
            let r = within(Duration::from_secs(10), move || set.wait(Some(T)));
            assert_eq!(r.as_ref().ok().copied(), Some(false), "{r:?}");
            assert!(start.elapsed() >= T);
        }
        // shm: refused as a yield wait; verbs has no wait sets at all.
        Err(Error::UnsupportedWait { .. })
            if provider() == "shm" || provider().starts_with("verbs") => {}
        Err(e) => panic!("an FI_WAIT_UNSPEC wait set on {}: {e}", provider()),
    }
    // The default event queue still blocks on shm (FI_WAIT_FD).
    let eq = EventQueue::open(&fabric, &EqAttr::new()).unwrap();
    assert_ne!(eq.wait_obj(), WaitObj::None, "{}", provider());
}

#[test]
fn mutex_cond_wait_sets_wait_their_timeout_or_are_refused() {
    // sockets waits on the set's condition without its mutex (undefined
    // behaviour; 1.17 also returned at once with a positive ETIMEDOUT,
    // which read as a wake-up): refused there. The util providers refuse
    // the wait object themselves.
    const T: Duration = Duration::from_millis(200);
    let (fabric, domain, _) = fabric_domain();
    match WaitSet::open(&fabric, WaitObj::MutexCond) {
        Ok(set) => {
            let cq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new().wait_set(&set)).unwrap();
            let start = Instant::now();
            let r = within(Duration::from_secs(10), move || set.wait(Some(T)));
            assert_eq!(r.as_ref().ok().copied(), Some(false), "{r:?}");
            assert!(start.elapsed() >= T, "{:?}", start.elapsed());
            drop(cq);
        }
        Err(Error::UnsupportedWait { reason, .. }) => {
            if provider() == "sockets" {
                assert!(reason.contains("without its mutex"), "{reason}");
            }
        }
        Err(e) => panic!("an FI_WAIT_MUTEX_COND wait set on {}: {e}", provider()),
    }
}

#[test]
fn a_pollfd_set_refreshed_from_another_queue_has_changed() {
    let (_fabric, domain, _) = fabric_domain();
    let (Some(a), Some(b)) = (pollfd_cq(&domain), pollfd_cq(&domain)) else {
        return;
    };
    let mut set = PollFdSet::new();
    assert!(
        set.refresh(&a).unwrap(),
        "the first refresh reports a change"
    );
    assert!(!set.refresh(&a).unwrap(), "nothing changed");
    assert!(
        set.refresh(&b).unwrap(),
        "another queue's fds are a change, whatever its change index"
    );
    assert!(!set.refresh(&b).unwrap(), "nothing changed");
}
