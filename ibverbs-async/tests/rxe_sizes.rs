//! Property tests over every size, length, offset and count the crate
//! passes on to libibverbs or to an allocation, on real soft-RoCE and
//! soft-iWARP devices (feature `__rxe-tests`; run through `tests/rxe/vm.sh`,
//! see `tests/rxe/README.md`). Whatever the value, the call returns `Ok`
//! with what was asked for, or a typed error: never a panic, an abort or a
//! memory error (the guest also runs this binary under valgrind, with few
//! cases). `PROPTEST_CASES` sets the number of cases (default 64).
#![cfg(feature = "__rxe-tests")]

mod common;

use common::*;
use ibverbs_async::{AccessFlags, Error, QpCap, QpInit, RecvRequest, SendRequest};
use proptest::prelude::*;
use std::sync::OnceLock;

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// Sizes that matter: small ones a device takes, the edges of the C types
/// the crate converts to, and values no allocation can hold.
fn any_len() -> impl Strategy<Value = usize> {
    prop_oneof![
        0usize..=4096,
        Just(u32::MAX as usize),
        Just(u32::MAX as usize + 1),
        Just(i32::MAX as usize + 1),
        Just(1usize << 40),
        Just(1usize << 50),
        Just(usize::MAX - 4095),
        Just(usize::MAX),
    ]
}

fn any_u32() -> impl Strategy<Value = u32> {
    prop_oneof![
        0u32..=64,
        Just(i32::MAX as u32),
        Just(i32::MAX as u32 + 1),
        Just(u32::MAX),
        any::<u32>(),
    ]
}

struct Env {
    ctx: ibverbs_async::Context,
    pd: ibverbs_async::Pd,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let ctx = open("rxe0");
        let pd = ctx.alloc_pd().unwrap();
        Env { ctx, pd }
    })
}

/// Memory regions of any length: registered with exactly that length, or
/// refused with a typed error (no byte, or more than can be allocated or
/// registered); reads, writes and copies of any range stay inside.
#[test]
fn memory_regions_of_any_length_and_ranges_within_them() {
    let env = env();
    let config = ProptestConfig::with_cases(cases());
    proptest!(config, |(len in any_len(), offset in any_len(), n in 0usize..=8192)| {
        match env.pd.reg_mr(len, AccessFlags::LOCAL_WRITE) {
            Ok(mut mr) => {
                prop_assert!(len > 0 && len <= 1 << 40, "registered {len} bytes");
                prop_assert_eq!(mr.len(), len);
                let fits = offset.checked_add(n).is_some_and(|end| end <= len);
                let data = vec![0xa5u8; n];
                prop_assert_eq!(mr.write(offset, &data).is_ok(), fits);
                let mut out = vec![0u8; n];
                prop_assert_eq!(mr.read(offset, &mut out).is_ok(), fits);
                if fits {
                    prop_assert_eq!(&out, &data);
                }
                let range = offset..offset.saturating_add(n);
                match mr.to_vec(range.clone()) {
                    Ok(v) => {
                        prop_assert!(fits);
                        prop_assert_eq!(v.len(), n);
                    }
                    Err(e) => {
                        prop_assert!(!fits, "{range:?} of {len}: {e}");
                        prop_assert!(matches!(e, Error::OutOfBounds { .. }), "{e}");
                    }
                }
                prop_assert_eq!(mr.remote(offset).is_ok(), offset < len);
            }
            Err(e) => {
                prop_assert!(
                    len == 0 || len > 4096,
                    "a {len}-byte region was refused: {e}"
                );
                prop_assert!(
                    matches!(e, Error::InvalidArgument(_) | Error::TooLarge { .. } | Error::OutOfMemory { .. } | Error::Call { .. }),
                    "{len}: {e}"
                );
            }
        }
    });
}

/// Completion queues and shared receive queues of any size: created with
/// at least that room, or refused by the device with a typed error.
#[test]
fn queues_of_any_size() {
    let env = env();
    let config = ProptestConfig::with_cases(cases());
    proptest!(config, |(cqe in any_u32(), max_wr in any_u32(), max_sge in any_u32())| {
        match env.ctx.create_cq(cqe) {
            Ok(cq) => prop_assert!(cq.capacity() >= cqe, "{} < {cqe}", cq.capacity()),
            Err(e) => prop_assert!(
                matches!(e, Error::TooLarge { .. } | Error::Call { .. }),
                "cqe {cqe}: {e}"
            ),
        }
        match env.pd.create_srq(max_wr, max_sge) {
            Ok(_) => {}
            Err(e) => prop_assert!(
                matches!(e, Error::TooLarge { .. } | Error::Call { .. }),
                "srq {max_wr} x {max_sge}: {e}"
            ),
        }
    });
}

/// Queue pairs of any capacities, and work requests of any range on a
/// small region: posted, or refused before the call.
#[test]
fn queue_pairs_of_any_capacity_and_posts_of_any_range() {
    let env = env();
    let cq = env.ctx.create_cq(16).unwrap();
    let mr = env.pd.reg_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let config = ProptestConfig::with_cases(cases());
    proptest!(config, |(send in any_u32(), recv in any_u32(), inline in any_u32(),
                        start in any_len(), end in any_len())| {
        let mut cap = QpCap::new(send, recv);
        cap.max_inline_data = inline;
        match env.pd.create_qp(&QpInit::rc(&cq, &cq).cap(cap)) {
            Ok(qp) => {
                let got = qp.cap();
                prop_assert!(got.max_send_wr >= send && got.max_recv_wr >= recv, "{got:?} < {cap:?}");
                let fits = start <= end && end <= 4096;
                // A QP in RESET takes no work: the crate refuses it
                // (Error::State), but only after it found the range fits.
                match qp.post_recv(&RecvRequest::new(&mr, start..end).wr_id(1)) {
                    Err(Error::OutOfBounds { .. }) => prop_assert!(!fits),
                    Err(Error::State { .. }) => prop_assert!(fits),
                    Err(e) => prop_assert!(false, "post_recv {start}..{end}: {e}"),
                    Ok(()) => prop_assert!(false, "post_recv {start}..{end} on a QP in RESET"),
                }
                match qp.post_send(&SendRequest::send(&mr, start..end)) {
                    Err(Error::OutOfBounds { .. }) => prop_assert!(!fits),
                    Err(Error::State { .. }) => prop_assert!(fits),
                    Err(e) => prop_assert!(false, "post_send {start}..{end}: {e}"),
                    Ok(()) => prop_assert!(false, "post_send {start}..{end} on a QP in RESET"),
                }
            }
            Err(e) => prop_assert!(
                matches!(e, Error::TooLarge { .. } | Error::Call { .. }),
                "{cap:?}: {e}"
            ),
        }
    });
}
