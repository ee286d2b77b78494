//! The C baselines of `bench/baselines.c` and the Rust safe API, run on the
//! same queues, behave the same: `-FI_EAGAIN` on empty queues, the same
//! `fi_trywait` answers before and after a write, the same event contents
//! whichever side wrote or read, and every benchmark case, C and Rust, does
//! its work and leaves the queues as it found them.
#![deny(clippy::undocumented_unsafe_blocks)]

#[path = "../src/bin/bench/baselines.rs"]
#[allow(dead_code)]
mod baselines;
#[path = "../src/bin/bench/micro.rs"]
#[allow(dead_code)]
mod micro;

use libfabric::cq::{CqRead, MsgEntry};
use libfabric::eq::{EqRead, Event, EventBuf};
use libfabric::wait::{trywait, TryWait};
use libfabric_sys::fabric as sys;
use micro::{Kind, Queues, CASES};
use std::mem::size_of;

const EAGAIN: isize = -(sys::errno::FI_EAGAIN as isize);

fn queues() -> Queues {
    Queues::open("tcp", "127.0.0.1").expect("the tcp provider on 127.0.0.1 (libfabric1 installed?)")
}

fn assert_empty(q: &Queues) {
    let mut buf = EventBuf::new();
    assert!(
        matches!(q.eq.read(&mut buf), Ok(EqRead::Empty)),
        "Rust: the EQ is empty"
    );
    assert_eq!(baselines::eq_read(&q.eq).ret, EAGAIN, "C: the EQ is empty");
    let mut entries: [MsgEntry; micro::CQ_BATCH] = Default::default();
    assert!(
        matches!(q.cq.read(&mut entries), Ok(CqRead::Empty)),
        "Rust: the CQ is empty"
    );
    assert_eq!(baselines::cq_read(&q.cq), EAGAIN, "C: the CQ is empty");
}

#[test]
fn both_sides_use_the_same_buffer_sizes() {
    assert_eq!(baselines::cq_batch(), micro::CQ_BATCH);
    assert_eq!(baselines::cq_max_batch(), micro::MAX_BATCH);
    let cm = size_of::<sys::fi_eq_cm_entry>() + libfabric::eq::DEFAULT_CM_DATA_CAPACITY;
    assert_eq!(baselines::event_buf_len(), cm.div_ceil(8) * 8);
}

#[test]
fn empty_queues_answer_eagain_on_both_sides() {
    let q = queues();
    assert_empty(&q);
}

#[test]
fn trywait_answers_the_same_before_and_after_a_write() {
    let q = queues();
    // SAFETY: Queues::open opens the EQ and CQ on q.fabric.
    let c_trywait = || unsafe { baselines::trywait(&q.fabric, &q.eq, &q.cq) };
    let rust_trywait = || trywait(&q.fabric, &[&q.eq, &q.cq]).unwrap();

    assert_eq!(c_trywait(), 0);
    assert_eq!(rust_trywait(), TryWait::MayBlock);

    // A write by Rust: both see an event pending, until it is read by C.
    q.eq.write_notify(q.eq.fid(), 1, 2).unwrap();
    assert_eq!(c_trywait(), -sys::errno::FI_EAGAIN);
    assert_eq!(rust_trywait(), TryWait::EventsPending);
    assert_eq!(baselines::eq_read(&q.eq).data, 2);
    assert_eq!(c_trywait(), 0);
    assert_eq!(rust_trywait(), TryWait::MayBlock);

    // A write by C: the same, until it is read by Rust.
    assert_eq!(
        baselines::eq_write(&q.eq, 3, 4),
        size_of::<sys::fi_eq_entry>() as isize
    );
    assert_eq!(rust_trywait(), TryWait::EventsPending);
    assert_eq!(c_trywait(), -sys::errno::FI_EAGAIN);
    let mut buf = EventBuf::new();
    assert!(matches!(q.eq.read(&mut buf), Ok(EqRead::Event(Event::Notify(e))) if e.data == 4));
    assert_eq!(rust_trywait(), TryWait::MayBlock);
    assert_eq!(c_trywait(), 0);
}

#[test]
fn an_event_reads_the_same_whichever_side_wrote_it() {
    let q = queues();
    let mut buf = EventBuf::new();

    // C writes, Rust reads.
    let written = baselines::eq_write(&q.eq, 0x1234, 42);
    assert_eq!(
        written,
        size_of::<sys::fi_eq_entry>() as isize,
        "fi_eq_write returns the bytes written"
    );
    match q.eq.read(&mut buf) {
        Ok(EqRead::Event(Event::Notify(e))) => {
            assert_eq!(e.fid, q.eq.fid());
            assert_eq!((e.context, e.data), (0x1234, 42));
        }
        other => panic!("Rust read {other:?}"),
    }

    // Rust writes, C reads.
    q.eq.write_notify(q.eq.fid(), 0x5678, 43).unwrap();
    let got = baselines::eq_read(&q.eq);
    assert_eq!(
        got,
        baselines::CRead {
            ret: size_of::<sys::fi_eq_entry>() as isize,
            event: sys::FI_NOTIFY,
            fid: q.eq.fid().addr(),
            context: 0x5678,
            data: 43,
        }
    );
    assert_empty(&q);
}

#[test]
fn every_benchmark_case_does_its_work_in_c_and_in_rust() {
    let q = queues();
    // The RMA cases run on RDM endpoints: rma_cases_do_their_work_on_rdm_providers.
    for case in CASES.iter().filter(|c| !c.rma) {
        let iters = match case.kind {
            Kind::PerCall => 2 * micro::QUEUED_BATCH + 7,
            Kind::WakeUp => 20,
        };
        let batches: &[usize] = if case.batched {
            &micro::BATCHES
        } else {
            &[micro::CQ_BATCH]
        };
        for (side, run, &batch) in [("C", case.c), ("Rust", case.rust)]
            .into_iter()
            .flat_map(|(side, run)| batches.iter().map(move |b| (side, run, b)))
        {
            let samples = run(&q, iters, batch)
                .unwrap_or_else(|e| panic!("{}, {side}, batch {batch}: {e}", case.name));
            let expected = match case.kind {
                Kind::PerCall => 1,
                Kind::WakeUp => iters as usize,
            };
            assert_eq!(samples.len(), expected, "{}, {side}", case.name);
            assert!(
                samples
                    .iter()
                    .all(|&ns| ns.is_finite() && ns > 0.0 && ns < 5e9),
                "{}, {side}: samples {samples:?} ns",
                case.name
            );
            assert_empty(&q);
        }
    }
}

/// The RMA cases, C and Rust, on the RDM providers the benchmark runs them
/// on: each RMA completes (and, for writedata, its remote CQ data arrives
/// with the iteration's number), and the tcp queues give a clear error.
#[test]
fn rma_cases_do_their_work_on_rdm_providers() {
    for provider in ["tcp;ofi_rxm", "udp;ofi_rxd"] {
        let q = Queues::open(provider, "127.0.0.1").expect("the provider on 127.0.0.1");
        if let Err(e) = &q.rma {
            panic!("{provider}: no RMA pair: {e}");
        }
        for case in CASES.iter().filter(|c| c.rma) {
            for (side, run) in [("C", case.c), ("Rust", case.rust)] {
                let samples = run(&q, 300, micro::CQ_BATCH)
                    .unwrap_or_else(|e| panic!("{provider}: {}, {side}: {e}", case.name));
                assert_eq!(samples.len(), 1, "{}, {side}", case.name);
                assert!(
                    samples[0].is_finite() && samples[0] > 0.0 && samples[0] < 5e9,
                    "{provider}: {}, {side}: {samples:?} ns",
                    case.name
                );
            }
        }
    }
    let q = queues();
    let rma = CASES.iter().find(|c| c.rma).expect("an RMA case");
    let e = (rma.rust)(&q, 1, 1).expect_err("no RMA pair on tcp's MSG queues");
    assert!(e.contains("RDM"), "{e}");
}
