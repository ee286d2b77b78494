//! Reads of a queue and a counter on other threads while an endpoint bound
//! to them fails to enable and is closed: on the providers that keep such
//! an endpoint in the queue's progress (rxm, rxd, shm), every read that
//! begins after the failed enable returned and ends before the close began
//! is refused, and every read that begins after the close returned runs. A
//! binary of its own: it runs the process out of file descriptors.
#![cfg_attr(libfabric_2, allow(deprecated))]
#[macro_use]
mod common;

use common::*;
use libfabric::cq::{CqAttr, CqRead, Msg, MsgEntry};
use libfabric::wait::{TryWaitSet, WaitObj, Waitable};
use libfabric::{CntrAttr, CntrBind, CompletionQueue, Counter, Error, Result};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Phases of a round, in `phase % 4`.
const ENABLING: u64 = 0;
const FAILED: u64 = 1;
const CLOSING: u64 = 2;
const CLOSED: u64 = 3;
const ROUNDS: u64 = 4;
/// Reads each phase waits for, on each reader.
const ENOUGH: usize = 50;

/// Checks one read against the phases it began and ended in; counts the
/// refused reads of FAILED and the reads of CLOSED.
fn judge<T: std::fmt::Debug>(
    walks: bool,
    began: u64,
    ended: u64,
    r: Result<T>,
    refused: &AtomicUsize,
    ran: &AtomicUsize,
) {
    match (began % 4, r) {
        (CLOSED, r) => {
            r.expect("a read after the close returned");
            if began == ended {
                ran.fetch_add(1, Ordering::Relaxed);
            }
        }
        (FAILED, r) if began == ended && walks => {
            assert!(
                matches!(r, Err(Error::State { .. })),
                "a read that runs a failed endpoint: {r:?}"
            );
            refused.fetch_add(1, Ordering::Relaxed);
        }
        (FAILED, r) if !walks => {
            r.expect("reads work: the provider does not run the endpoint");
            if began == ended {
                refused.fetch_add(1, Ordering::Relaxed);
            }
        }
        // Across a change of phase: either, never a crash.
        (_, Ok(_) | Err(Error::State { .. })) => {}
        (_, Err(e)) => panic!("a read beside a failed enable: {e}"),
    }
}

#[test]
fn reads_on_other_threads_are_refused_from_a_failed_enable_until_the_close() {
    let (fabric, domain, info) = fabric_domain();
    let p = provider();
    let walks = p.contains("ofi_rxm") || p.contains("ofi_rxd") || p == "shm";
    let cq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new()).unwrap();
    let cntr = Counter::open(&domain, &CntrAttr::new()).ok();
    let phase = AtomicU64::new(ENABLING);
    let stop = AtomicBool::new(false);
    let refused = AtomicUsize::new(0);
    let ran = AtomicUsize::new(0);
    let mut skipped = None;
    // Trywait sets made before the failed enables: refused from each on
    // where the provider keeps the endpoint in the queue's wait object, for
    // good (after the close too).
    let mut sets: Vec<TryWaitSet<'_>> = Vec::new();
    let cq_waits = cq.wait_obj() != WaitObj::None;
    if cq_waits {
        sets.push(TryWaitSet::new(&fabric, &[&cq]).unwrap());
    }
    if let Some(c) = cntr.as_ref().filter(|c| c.wait_obj() != WaitObj::None) {
        sets.push(TryWaitSet::new(&fabric, &[c]).unwrap());
        if cq_waits {
            sets.push(TryWaitSet::new(&fabric, &[&cq, c, &cq]).unwrap());
        }
    }
    let mut check_sets = |when: &str| {
        for set in &mut sets {
            let tried = set.trywait();
            if walks {
                assert!(
                    matches!(tried, Err(Error::State { .. })),
                    "a trywait set made before, {when}: {tried:?}"
                );
            } else {
                let _ = tried.unwrap_or_else(|e| panic!("a trywait set, {when}: {e}"));
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut entries: [MsgEntry; 4] = Default::default();
                while !stop.load(Ordering::Relaxed) {
                    let began = phase.load(Ordering::SeqCst);
                    let r = cq.read(&mut entries).map(|r| matches!(r, CqRead::Empty));
                    let ended = phase.load(Ordering::SeqCst);
                    judge(walks, began, ended, r, &refused, &ran);
                }
            });
        }
        if let Some(c) = &cntr {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let began = phase.load(Ordering::SeqCst);
                    let r = c.read();
                    let ended = phase.load(Ordering::SeqCst);
                    judge(walks, began, ended, r, &refused, &ran);
                }
            });
        }
        let readers = 2 + usize::from(cntr.is_some());
        let wait_for = |count: &AtomicUsize, what: &str| {
            let deadline = Instant::now() + Duration::from_secs(20);
            while count.load(Ordering::Relaxed) < ENOUGH * readers {
                assert!(Instant::now() < deadline, "{what}: too few reads");
                std::thread::yield_now();
            }
            count.store(0, Ordering::Relaxed);
        };
        for round in 0..ROUNDS {
            phase.store(round * 4 + ENABLING, Ordering::SeqCst);
            let ep = endpoint_on(&fabric, &domain, &info, &cq);
            if let Some(c) = &cntr {
                ep.bind_cntr(c, CntrBind::SEND | CntrBind::RECV).unwrap();
            }
            let mut files = Vec::new();
            while let Ok(f) = std::fs::File::open("/dev/null") {
                files.push(f);
            }
            let enabled = ep.enable();
            drop(files);
            if enabled.is_ok() {
                skipped = Some("fi_enable opened no descriptor, and succeeded");
                break;
            }
            phase.store(round * 4 + FAILED, Ordering::SeqCst);
            refused.store(0, Ordering::Relaxed);
            wait_for(&refused, "after the failed enable");
            check_sets("after the failed enable");
            phase.store(round * 4 + CLOSING, Ordering::SeqCst);
            if round % 2 == 0 {
                drop(ep);
            } else {
                ep.close().unwrap();
            }
            phase.store(round * 4 + CLOSED, Ordering::SeqCst);
            ran.store(0, Ordering::Relaxed);
            wait_for(&ran, "after the close");
            check_sets("after the close");
        }
        stop.store(true, Ordering::Relaxed);
    });
    if let Some(why) = skipped {
        println!("SKIP {}: provider {p}: {why}", test_name());
        return;
    }
    println!(
        "provider {p}: {ROUNDS} failed enables, reads on {} threads and {} trywait sets checked",
        2 + usize::from(cntr.is_some()),
        sets.len()
    );
}
