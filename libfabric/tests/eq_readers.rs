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
    const N: u64 = 200_000;
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
    while written < N {
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
    while got.load(Ordering::Acquire) < N && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Release);
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(
        (got.load(Ordering::Acquire), sum.load(Ordering::Acquire)),
        (N, expect),
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

/// The flag of libfabric's util event queues that queues an entry written
/// with `fi_eq_write` as an error entry (`UTIL_FLAG_ERROR`,
/// `include/ofi_util.h` 84 in 1.22 and 2.1): how a provider reports a
/// failed connection. Not in the public headers.
const UTIL_FLAG_ERROR: u64 = 1 << 60;

/// A blocking read for ever (`sread(None)`) whose `fi_eq_sread` returned
/// `-FI_EAVAIL` reads the error entry; when another reader took it first,
/// it waits on. It used to report `TimedOut`, which a wait with no
/// timeout never is.
#[test]
fn a_read_for_ever_waits_on_when_another_reader_takes_its_error_entry() {
    use libfabric::eq::ErrDataBuf;
    use libfabric::sys;
    let (fabric, _) = fabric();
    if provider() == "sockets" {
        // Its event queue is its own, without the util flag above.
        println!(
            "SKIP {}: provider sockets: no util event queue to write error entries into",
            test_name()
        );
        return;
    }
    let eq = libfabric::EventQueue::open(
        &fabric,
        &libfabric::eq::EqAttr::new()
            .size(1024)
            .wait(libfabric::wait::WaitObj::Fd)
            .write(true),
    )
    .unwrap();
    const ERRORS: usize = 20_000;
    let stop = AtomicBool::new(false);
    let timed_out = AtomicU64::new(0);
    let taken = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = EventBuf::new();
            while !stop.load(Ordering::Relaxed) {
                match eq.sread(&mut buf, None).unwrap() {
                    EqRead::TimedOut => _ = timed_out.fetch_add(1, Ordering::Relaxed),
                    EqRead::Error(_) => _ = taken.fetch_add(1, Ordering::Relaxed),
                    _ => {}
                }
            }
        });
        s.spawn(|| {
            let mut buf = ErrDataBuf::new();
            while !stop.load(Ordering::Relaxed) {
                if eq.read_err(&mut buf).unwrap().is_some() {
                    taken.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        let entry = sys::fi_eq_err_entry {
            err: libc::ECONNREFUSED,
            ..Default::default()
        };
        for i in 0..ERRORS as u64 {
            // SAFETY: fi_eq_write(3) copies the whole fi_eq_err_entry into
            // the util queue, which the flag makes an error entry.
            let ret = unsafe {
                sys::fi_eq_write(
                    eq.as_raw(),
                    sys::FI_NOTIFY,
                    (&entry as *const sys::fi_eq_err_entry).cast(),
                    size_of::<sys::fi_eq_err_entry>(),
                    UTIL_FLAG_ERROR,
                )
            };
            assert_eq!(ret, size_of::<sys::fi_eq_err_entry>() as isize);
            // One at a time, so that the two readers race for each.
            let start = Instant::now();
            while taken.load(Ordering::Relaxed) <= i {
                assert!(
                    start.elapsed() < Duration::from_secs(5),
                    "entry {i} not read"
                );
                std::hint::spin_loop();
            }
        }
        stop.store(true, Ordering::Relaxed);
        // Wakes the blocked reader to see the stop.
        eq.write_notify(eq.fid(), 0, 0).unwrap();
    });
    assert_eq!(taken.load(Ordering::Relaxed), ERRORS as u64);
    assert_eq!(
        timed_out.load(Ordering::Relaxed),
        0,
        "a read with no timeout reported one"
    );
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
