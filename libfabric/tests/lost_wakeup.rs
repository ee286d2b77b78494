//! The lost wake-up of libfabric's tcp provider from 1.19 on: `fi_trywait`
//! checks an event queue empty under its lock, unlocks, then resets the
//! wait fd, so an `fi_eq_write` in between is queued but its wake-up erased.
//!
//! Two loops read 10,000 events from a writer thread, `LOST_WAKEUP_REPS`
//! times each (default 5; the runs against libfabric 1.22 and 2.x, 50):
//! - a bare trywait + poll loop, as fi_poll(3) describes it and as a C
//!   program writes it: on tcp from 1.19 it stalls in some runs;
//! - [`Waiter`], which looks at the queue once more before it blocks: it
//!   never stalls, on any version.
//!
//! A stall is detected, not guessed: poll timed out while a peek shows an
//! event queued.
#[macro_use]
mod common;

use common::*;
use libfabric::eq::{EqAttr, EqRead, Event, EventBuf};
use libfabric::wait::{trywait, TryWait, WaitObj, Waitable, Waiter, Wake};
use libfabric::{EventQueue, Fabric};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Events per run (`LOST_WAKEUP_EVENTS`, default 10,000).
fn events() -> u64 {
    env_count("LOST_WAKEUP_EVENTS", 10_000)
}
/// How long a wait may see nothing before the queue is looked at.
const STALL: Duration = Duration::from_millis(20);

fn reps() -> u64 {
    env_count("LOST_WAKEUP_REPS", 5)
}

/// One run: a writer thread writes EVENTS notify events, each as soon as
/// the reader has taken the one before (so that every write can land while
/// the reader is between its last read and its wait: the race window);
/// `wait` blocks until the queue may have entries (false: it timed out).
/// Returns how many wake-ups were lost: the wait timed out with an event
/// queued and the wait fd still not readable.
fn run(mut wait: impl FnMut(&EventQueue) -> bool, eq: &EventQueue) -> usize {
    let consumed = Arc::new(AtomicU64::new(0));
    let events = events();
    let writer = {
        let eq = eq.clone();
        let consumed = consumed.clone();
        std::thread::spawn(move || {
            // A varying delay after the reader took the last event sweeps
            // each write across the reader's way from its read to its wait.
            let mut jitter: u64 = 0x9e37_79b9_7f4a_7c15;
            for i in 0..events {
                while consumed.load(Ordering::Acquire) < i {
                    std::hint::spin_loop();
                }
                jitter = jitter.wrapping_mul(6364136223846793005).wrapping_add(1);
                for _ in 0..(jitter >> 55) {
                    std::hint::spin_loop();
                }
                eq.write_notify(eq.fid(), 0, i).unwrap();
            }
        })
    };
    let mut buf = EventBuf::new();
    let mut seen = 0;
    let mut lost = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen < events {
        assert!(Instant::now() < deadline, "run did not finish");
        if !wait(eq) && matches!(eq.peek(&mut buf).unwrap(), EqRead::Event(_)) {
            // An event is queued after a timed-out wait: lost, unless the
            // fd is readable now (a wake-up that was only late).
            let fd = borrowed(eq.wait_fd().unwrap());
            let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
            if poll(&mut fds, PollTimeout::ZERO).unwrap() == 0 {
                lost += 1;
            }
        }
        loop {
            match eq.read(&mut buf).unwrap() {
                EqRead::Event(Event::Notify(_)) => {
                    seen += 1;
                    consumed.store(seen, Ordering::Release);
                }
                EqRead::Empty => break,
                other => panic!("{other:?}"),
            }
        }
    }
    writer.join().unwrap();
    lost
}

fn queue(fabric: &Fabric) -> EventQueue {
    EventQueue::open(
        fabric,
        &EqAttr::new().size(1024).wait(WaitObj::Fd).write(true),
    )
    .unwrap()
}

/// True on the providers and versions whose trywait has the race.
fn racy() -> bool {
    let v = libfabric_sys::fabric::runtime_version();
    provider() == "tcp"
        && libfabric_sys::fabric::FI_VERSION_GE(v, libfabric_sys::fabric::FI_VERSION(1, 19))
}

#[test]
fn the_waiter_loses_no_wake_up() {
    let (fabric, _) = fabric();
    let mut stalls = 0;
    for _ in 0..reps() {
        let eq = queue(&fabric);
        let mut waiter = Waiter::new(&[&eq]).unwrap();
        stalls += run(|_| waiter.wait(Some(STALL)).unwrap() == Wake::Ready, &eq);
    }
    println!(
        "Waiter: {stalls} lost wake-ups in {} runs of {} events ({}, libfabric {:#x})",
        reps(),
        events(),
        provider(),
        libfabric_sys::fabric::runtime_version()
    );
    assert_eq!(stalls, 0, "the Waiter lost wake-ups");
}

#[test]
fn a_bare_trywait_and_poll_loop_loses_wake_ups_where_the_provider_races() {
    let (fabric, _) = fabric();
    let mut stalls = 0;
    for _ in 0..reps() {
        let eq = queue(&fabric);
        stalls += run(
            |eq| {
                if trywait(&fabric, &[eq]).unwrap() == TryWait::EventsPending {
                    return true;
                }
                let fd = borrowed(eq.wait_fd().unwrap());
                let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
                let ms = u16::try_from(STALL.as_millis()).unwrap();
                poll(&mut fds, PollTimeout::from(ms)).unwrap() > 0
            },
            &eq,
        );
    }
    println!(
        "bare trywait + poll: {stalls} lost wake-ups in {} runs of {} events ({}, libfabric {:#x})",
        reps(),
        events(),
        provider(),
        libfabric_sys::fabric::runtime_version()
    );
    if !racy() {
        assert_eq!(stalls, 0, "this provider's trywait resets before it checks");
    } else if reps() >= 100 {
        assert!(stalls > 0, "the race did not show in {} runs", reps());
    }
}
