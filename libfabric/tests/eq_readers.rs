//! Event queue reads on several threads at once: each event is read
//! exactly once, and nothing crashes (sockets took the head of its list
//! after an unlocked look, and two readers freed one entry: the crate
//! serializes its reads there).
mod common;

use common::*;
use libfabric::eq::{EqRead, Event, EventBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Readers on several threads take events one writer writes; each event
/// must be read exactly once and nothing may crash (sockets takes the head
/// of its list after an unlocked emptiness check).
fn readers_race(small: bool, blocking: bool) {
    let (fabric, _) = fabric();
    let eq = fd_eq(&fabric);
    let fid = eq.fid();
    // Fewer under valgrind (tests/valgrind/run.sh sets it), whose one
    // thread at a time left the readers short of 200,000 in 20 s.
    let n = env_count("EQ_READERS_EVENTS", 200_000);
    let stop = Arc::new(AtomicBool::new(false));
    let got = Arc::new(AtomicU64::new(0));
    let sum = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (eq, stop, got, sum) = (eq.clone(), stop.clone(), got.clone(), sum.clone());
            std::thread::spawn(move || {
                let mut buf = if small {
                    EventBuf::with_cm_data_capacity(0).unwrap()
                } else {
                    EventBuf::new()
                };
                while !stop.load(Ordering::Acquire) {
                    let read = if blocking {
                        eq.sread(&mut buf, Some(Duration::from_millis(5)))
                    } else {
                        eq.read(&mut buf)
                    };
                    match read.unwrap() {
                        EqRead::Event(Event::Notify(e)) => {
                            got.fetch_add(1, Ordering::AcqRel);
                            sum.fetch_add(e.data, Ordering::AcqRel);
                        }
                        EqRead::Empty | EqRead::TimedOut => {}
                        other => panic!("unexpected {other:?}"),
                    }
                }
            })
        })
        .collect();
    let mut written = 0u64;
    let mut expect = 0u64;
    while written < n {
        match eq.write_notify(fid, 1, written) {
            Ok(()) => {
                expect += written;
                written += 1;
            }
            Err(e) if e.is_again() => std::thread::yield_now(),
            Err(e) => panic!("write: {e}"),
        }
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.load(Ordering::Acquire) < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Release);
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(
        (got.load(Ordering::Acquire), sum.load(Ordering::Acquire)),
        (n, expect),
        "each event read exactly once"
    );
}

#[test]
fn concurrent_default_reads() {
    readers_race(false, false);
}

#[test]
fn concurrent_small_reads() {
    readers_race(true, false);
}

#[test]
fn concurrent_small_sreads() {
    readers_race(true, true);
}

#[test]
fn concurrent_default_sreads() {
    readers_race(false, true);
}

/// A timed blocking read never ends before its timeout, also when events
/// that another reader takes wake it in between: libfabric times its
/// waits on a millisecond clock it truncates, and after such a wake-up
/// waits only for what that clock says is left (a wait of 2 ms ended after
/// 1.08 ms, tcp).
#[test]
fn a_timed_read_never_ends_before_its_timeout() {
    let (fabric, _) = fabric();
    let eq = fd_eq(&fabric);
    let timeout = Duration::from_micros(1500);
    let stop = AtomicBool::new(false);
    let (mut early, mut timed_out) = (Vec::new(), 0);
    std::thread::scope(|s| {
        // Takes the events that wake the timed reader.
        s.spawn(|| {
            let mut buf = EventBuf::new();
            while !stop.load(Ordering::Relaxed) {
                let _ = eq.read(&mut buf).unwrap();
            }
        });
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                eq.write_notify(eq.fid(), 0, 0).unwrap();
                std::thread::sleep(Duration::from_micros(700));
            }
        });
        let mut buf = EventBuf::new();
        let start_all = Instant::now();
        while timed_out < 300 && start_all.elapsed() < Duration::from_secs(2) {
            let start = Instant::now();
            let read = eq.sread(&mut buf, Some(timeout)).unwrap();
            let took = start.elapsed();
            if matches!(read, EqRead::TimedOut) {
                timed_out += 1;
                if took < timeout {
                    early.push(took);
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(timed_out > 0, "no read timed out");
    assert!(
        early.is_empty(),
        "{} of {timed_out} timed out before {timeout:?}: {early:?}",
        early.len()
    );
}
