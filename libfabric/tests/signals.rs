//! Blocking calls on a thread that receives signals: a handled signal
//! interrupts the system call a provider blocks in (`epoll_wait`, `poll`,
//! `pthread_cond_timedwait` do not restart), and libfabric hands the
//! `-FI_EINTR` up (`util_wait_fd_run`, `prov/util/src/util_wait.c`;
//! sockets' `fi_poll_fd`, `src/common.c`). A signal is not a failure of
//! the wait: every blocking call here waits on until its event or its
//! timeout, however many signals arrive, and a timed one still ends.
mod common;

use common::*;
use libfabric::cntr::CntrAttr;
use libfabric::cq::{CqAttr, CqRead, Msg};
use libfabric::eq::{EqAttr, EqRead, EventBuf};
use libfabric::wait::{PollFdSet, WaitObj, WaitSet, Waitable, Waiter, Wake};
use libfabric::{CompletionQueue, Counter, Error, EventQueue};
use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

extern "C" fn on_signal(_: libc::c_int) {}

/// A handler for `SIGUSR1`, installed without `SA_RESTART`, as programs
/// that handle signals commonly do (and as `SA_RESTART` would not help:
/// `epoll_wait` and `poll` are never restarted).
fn install_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: sigaction(2) with a zeroed struct, an empty mask and a
        // handler that does nothing (async-signal-safe).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut action.sa_mask);
            action.sa_flags = 0;
            assert_eq!(
                libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()),
                0
            );
        }
    });
}

/// Runs `f` on a thread that gets `SIGUSR1` every 20 ms until it returns;
/// fails when it has not returned after `limit` (a wait the signals keep
/// restarting never would).
fn under_signals<R: Send + 'static>(limit: Duration, f: impl FnOnce() -> R + Send + 'static) -> R {
    install_handler();
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    let thread = std::thread::spawn(move || {
        let r = f();
        flag.store(true, Ordering::Release);
        r
    });
    let tid = thread.as_pthread_t();
    let start = Instant::now();
    let mut sent = 0u32;
    while !done.load(Ordering::Acquire) {
        assert!(
            start.elapsed() < limit,
            "the call did not return within {limit:?} under {sent} signals"
        );
        // SAFETY: the thread has not been joined, so its pthread_t is valid.
        unsafe { libc::pthread_kill(tid, libc::SIGUSR1) };
        sent += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = thread.join().expect("the waiting thread panicked");
    assert!(sent > 1, "the signals reached the call ({sent} sent)");
    r
}

const T: Duration = Duration::from_millis(400);
const LIMIT: Duration = Duration::from_secs(5);

#[test]
fn an_event_queue_sread_waits_through_signals() {
    let (fabric, _) = fabric();
    for wait in [WaitObj::Fd, WaitObj::Unspec] {
        let eq = match EventQueue::open(&fabric, &EqAttr::new().wait(wait).write(true)) {
            Ok(eq) => eq,
            // shm opens it as FI_WAIT_YIELD (wait.rs tests that).
            Err(Error::UnsupportedWait { .. }) if provider() == "shm" => continue,
            Err(e) => panic!("{wait:?}: {e}"),
        };
        let q = eq.clone();
        let start = Instant::now();
        let read = under_signals(LIMIT, move || {
            let mut buf = EventBuf::new();
            q.sread(&mut buf, Some(T))
                .map(|r| matches!(r, EqRead::TimedOut))
        });
        assert_eq!(
            read.as_ref().ok().copied(),
            Some(true),
            "{wait:?}: a timeout, no error: {read:?}"
        );
        assert!(start.elapsed() >= T, "{wait:?}: not before its timeout");
        // Without a timeout: the event written meanwhile ends it.
        let q = eq.clone();
        let writer = std::thread::spawn({
            let eq = eq.clone();
            move || {
                std::thread::sleep(T);
                eq.write_notify(eq.fid(), 1, 2).unwrap();
            }
        });
        let read = under_signals(LIMIT, move || {
            let mut buf = EventBuf::new();
            q.sread(&mut buf, None)
                .map(|r| matches!(r, EqRead::Event(_)))
        });
        writer.join().unwrap();
        assert_eq!(
            read.as_ref().ok().copied(),
            Some(true),
            "{wait:?}: the event: {read:?}"
        );
    }
}

#[test]
fn a_listener_waits_through_signals() {
    let listener = libfabric::Listener::bind(
        &libfabric::Hints::new()
            .provider(provider())
            .node(node())
            .service(0),
    );
    let listener = match listener {
        Ok(l) => l,
        Err(e) if !msg_capable() => {
            println!("SKIP {}: provider {}: {e}", test_name(), provider());
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let start = Instant::now();
    let r = under_signals(LIMIT, move || {
        listener.incoming_timeout(Some(T)).map(|_| ())
    });
    assert!(
        matches!(r, Err(Error::TimedOut { .. })),
        "a timeout, not an interruption: {r:?}"
    );
    assert!(start.elapsed() >= T);
}

#[test]
fn a_completion_queue_sread_waits_through_signals() {
    let (_fabric, domain, _) = fabric_domain();
    let Some(cq) = fd_cq::<Msg>(&domain) else {
        return;
    };
    let start = Instant::now();
    let read = under_signals(LIMIT, move || {
        let mut buf = [Default::default()];
        cq.sread(&mut buf, Some(T))
            .map(|r| matches!(r, CqRead::TimedOut))
    });
    assert_eq!(
        read.as_ref().ok().copied(),
        Some(true),
        "a timeout, no error: {read:?}"
    );
    assert!(start.elapsed() >= T);
    let Ok(cq) = CompletionQueue::<Msg>::open(&domain, &CqAttr::new().wait(WaitObj::Unspec)) else {
        return;
    };
    let read = under_signals(LIMIT, move || {
        let mut buf = [Default::default()];
        cq.sread(&mut buf, Some(T))
            .map(|r| matches!(r, CqRead::TimedOut))
    });
    assert_eq!(
        read.as_ref().ok().copied(),
        Some(true),
        "Unspec: a timeout, no error: {read:?}"
    );
}

#[test]
fn a_counter_wait_waits_through_signals() {
    let (_fabric, domain, _) = fabric_domain();
    let counter = match Counter::open(&domain, &CntrAttr::new()) {
        Ok(c) => c,
        Err(e) => {
            println!("SKIP {}: provider {}: {e}", test_name(), provider());
            return;
        }
    };
    if counter.wait(0, Some(Duration::ZERO)).is_err() {
        println!(
            "SKIP {}: provider {}: its counters cannot block ({:?})",
            test_name(),
            provider(),
            counter.wait_obj()
        );
        return;
    }
    let start = Instant::now();
    let c = counter.clone();
    let r = under_signals(LIMIT, move || c.wait(1, Some(T)));
    assert!(
        matches!(r, Err(Error::TimedOut { .. })),
        "a timeout, not an interruption: {r:?}"
    );
    assert!(start.elapsed() >= T);
    let adder = std::thread::spawn({
        let c = counter.clone();
        move || {
            std::thread::sleep(T);
            c.add(1).unwrap();
        }
    });
    let c = counter.clone();
    let r = under_signals(LIMIT, move || c.wait(1, None));
    adder.join().unwrap();
    assert!(r.is_ok(), "the count reached: {r:?}");
}

#[test]
fn a_wait_set_waits_through_signals() {
    let (fabric, _) = fabric();
    let set = match WaitSet::open(&fabric, WaitObj::Fd) {
        Ok(s) => s,
        Err(e) => {
            println!("SKIP {}: provider {}: {e}", test_name(), provider());
            return;
        }
    };
    let start = Instant::now();
    let r = under_signals(LIMIT, move || set.wait(Some(T)));
    assert_eq!(
        r.as_ref().ok().copied(),
        Some(false),
        "a timeout, no error: {r:?}"
    );
    assert!(start.elapsed() >= T);
}

#[test]
fn a_waiter_waits_through_signals() {
    let (fabric, _) = fabric();
    let eq = fd_eq(&fabric);
    let start = Instant::now();
    let r = under_signals(LIMIT, move || {
        let mut waiter = Waiter::new(&[&eq]).unwrap();
        waiter.wait(Some(T))
    });
    assert_eq!(r.as_ref().ok().copied(), Some(Wake::TimedOut), "{r:?}");
    assert!(start.elapsed() >= T);
}

#[test]
fn a_pollfd_set_poll_ends_at_its_timeout_under_signals() {
    let (fabric, _) = fabric();
    let eq = match EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::PollFd)) {
        Ok(eq) => eq,
        Err(e) => {
            println!("SKIP {}: provider {}: {e}", test_name(), provider());
            return;
        }
    };
    let start = Instant::now();
    let r = under_signals(LIMIT, move || {
        let mut set = PollFdSet::new();
        set.refresh(&eq).unwrap();
        // Only the timeout is looked at: tcp keeps a fd of these sets
        // readable (see PollFdSet), so the fds are left out.
        set.fds().iter_mut().for_each(|p| p.fd = -1);
        set.poll(Some(T))
    });
    assert_eq!(r.as_ref().ok().copied(), Some(0), "{r:?}");
    assert!(start.elapsed() >= T);
}
