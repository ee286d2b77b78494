//! `CqEvents::poll_cq` with several waiters on one completion channel, on
//! real soft-RoCE devices (feature `__rxe-tests`; run through
//! `tests/rxe/vm.sh`, see `tests/common/mod.rs`): an event read by one
//! waiter wakes the others, so none sleeps on a CQ that holds a completion.
#![cfg(feature = "__rxe-tests")]

#[macro_use]
mod common;

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use common::{connect, open, ACCESS};
use ibverbs_async::tokio::CqEvents;
use ibverbs_async::{QpCap, QpInit, RecvRequest, SendRequest, WorkCompletion};

/// Two CQs on one channel, each waited on by its own `poll_cq`: the
/// event for cq2 may be read by cq1's waiter; cq2's waiter is woken all
/// the same, polls its completion and re-arms.
#[test]
fn poll_cq_waiters_of_two_cqs_of_one_channel_both_wake() {
    skip_on_iwarp!("hand-connected RC QPs");
    let ctx = open("rxe0");
    let channel = ctx.create_comp_channel().unwrap();
    let cq1 = ctx.create_cq_with_channel(16, &channel, 0).unwrap();
    let cq2 = ctx.create_cq_with_channel(16, &channel, 0).unwrap();
    let plain = ctx.create_cq(16).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cap = QpCap::new(8, 8);
    let a = pd
        .create_qp(&QpInit::rc(&cq2, &cq2).cap(cap).sq_sig_all(true))
        .unwrap();
    let b = pd.create_qp(&QpInit::rc(&plain, &plain).cap(cap)).unwrap();
    connect(&a, &ctx, &b, &ctx);
    let mr = Arc::new(pd.reg_mr(4096, ACCESS).unwrap());
    b.post_recv(&RecvRequest::new(&mr, 0..64)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let got2 = rt.block_on(async {
        let events = CqEvents::new(&channel).unwrap();
        let mut wc1 = [WorkCompletion::default(); 4];
        let mut wc2 = [WorkCompletion::default(); 4];
        let mut f1 = pin!(events.poll_cq(&cq1, &mut wc1));
        let mut f2 = pin!(events.poll_cq(&cq2, &mut wc2));
        let sender = {
            let a = a.clone();
            let mr = Arc::clone(&mr);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                a.post_send(&SendRequest::send(&mr, 1024..1032)).unwrap();
            })
        };
        let r = tokio::time::timeout(Duration::from_secs(3), async {
            tokio::select! {
                biased;
                r = &mut f1 => panic!("cq1 has no completion: {:?}", r.map(|w| w.len())),
                r = &mut f2 => r.map(|w| w.len()),
            }
        })
        .await;
        sender.join().unwrap();
        r.ok()
    });
    let left = cq2.poll_one().unwrap();
    eprintln!(
        "poll_cq(cq2) result: {got2:?}; completion left in cq2: {}",
        left.is_some()
    );
    assert!(
        got2.is_some(),
        "HANG: poll_cq(cq2) still waiting after 3 s; cq2 holds a completion: {}",
        left.is_some()
    );
}

/// Two tasks `poll_cq` the same CQ: the first takes the event and
/// returns; the second is woken too, re-arms, and gets the next
/// completion's event.
#[test]
fn two_poll_cq_waiters_of_one_cq_both_wake() {
    skip_on_iwarp!("hand-connected RC QPs");
    let ctx = open("rxe0");
    let channel = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq_with_channel(16, &channel, 0).unwrap();
    let plain = ctx.create_cq(16).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cap = QpCap::new(8, 8);
    let a = pd
        .create_qp(&QpInit::rc(&cq, &cq).cap(cap).sq_sig_all(true))
        .unwrap();
    let b = pd.create_qp(&QpInit::rc(&plain, &plain).cap(cap)).unwrap();
    connect(&a, &ctx, &b, &ctx);
    let mr = Arc::new(pd.reg_mr(4096, ACCESS).unwrap());
    for i in 0..2 {
        b.post_recv(&RecvRequest::new(&mr, 64 * i..64 * i + 64))
            .unwrap();
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let second = rt.block_on(async {
        let events = CqEvents::new(&channel).unwrap();
        let mut wc1 = [WorkCompletion::default(); 4];
        let mut wc2 = [WorkCompletion::default(); 4];
        let mut f1 = pin!(events.poll_cq(&cq, &mut wc1));
        let mut f2 = pin!(events.poll_cq(&cq, &mut wc2));
        let sender = {
            let a = a.clone();
            let mr = Arc::clone(&mr);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                a.post_send(&SendRequest::send(&mr, 1024..1032)).unwrap();
            })
        };
        let first = tokio::time::timeout(Duration::from_secs(3), async {
            tokio::select! {
                biased;
                r = &mut f1 => ("f1", r.map(|w| w.len())),
                r = &mut f2 => ("f2", r.map(|w| w.len())),
            }
        })
        .await
        .expect("no waiter got the first completion");
        sender.join().unwrap();
        eprintln!("first completion went to {first:?}");
        // Second completion: the other waiter must get it.
        a.post_send(&SendRequest::send(&mr, 1024..1032)).unwrap();
        let other = if first.0 == "f1" { f2 } else { f1 };
        tokio::time::timeout(Duration::from_secs(3), other)
            .await
            .ok()
            .map(|r| r.map(|w| w.len()))
    });
    let left = cq.poll_one().unwrap();
    eprintln!(
        "second waiter: {second:?}; completion left in cq: {}",
        left.is_some()
    );
    assert!(
        second.is_some(),
        "HANG: second poll_cq waiter never woken; CQ holds a completion: {}",
        left.is_some()
    );
}

/// A `poll_cq` waiter whose CQ's event is read by another reader of the
/// same channel: a second `CqEvents` (its own registration of the fd), or
/// the blocking `CompChannel::get_cq_event_timeout`. The read disarms the
/// CQ, so no later completion raises an event: the waiter must be woken
/// by the read itself, poll its completion and re-arm.
#[test]
fn poll_cq_wakes_when_another_reader_of_the_channel_takes_its_event() {
    skip_on_iwarp!("hand-connected RC QPs");
    let ctx = open("rxe0");
    let channel = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq_with_channel(16, &channel, 0).unwrap();
    let plain = ctx.create_cq(16).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cap = QpCap::new(8, 8);
    let a = pd
        .create_qp(&QpInit::rc(&cq, &cq).cap(cap).sq_sig_all(true))
        .unwrap();
    let b = pd.create_qp(&QpInit::rc(&plain, &plain).cap(cap)).unwrap();
    connect(&a, &ctx, &b, &ctx);
    let mr = pd.reg_mr(4096, ACCESS).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut results = Vec::new();
    for other_reader in ["a second CqEvents", "CompChannel::get_cq_event_timeout"] {
        let got = rt.block_on(async {
            let events = CqEvents::new(&channel).unwrap();
            let others = CqEvents::new(&channel).unwrap();
            let mut wc = [WorkCompletion::default(); 4];
            let mut waiter = pin!(events.poll_cq(&cq, &mut wc));
            // Run the waiter until it sleeps: CQ empty, armed.
            assert!(
                tokio::time::timeout(Duration::from_millis(300), waiter.as_mut())
                    .await
                    .is_err(),
                "the CQ has no completion yet"
            );
            b.post_recv(&RecvRequest::new(&mr, 0..64)).unwrap();
            a.post_send(&SendRequest::send(&mr, 1024..1032)).unwrap();
            // The other reader takes the event while the waiter is not
            // polled.
            let taken = if other_reader == "a second CqEvents" {
                tokio::time::timeout(common::WAIT, others.next())
                    .await
                    .expect("the completion's event")
                    .unwrap()
            } else {
                channel
                    .get_cq_event_timeout(common::WAIT)
                    .unwrap()
                    .expect("the completion's event")
            };
            assert!(taken.same_as(&cq));
            tokio::time::timeout(Duration::from_secs(3), waiter)
                .await
                .ok()
                .map(|r| r.map(|w| w.len()).unwrap())
        });
        let left = cq.poll_one().unwrap();
        eprintln!(
            "{other_reader}: waiter got {got:?}; completion left in the CQ: {}",
            left.is_some()
        );
        results.push((other_reader, got, left.is_some()));
    }
    for (other_reader, got, left) in results {
        assert!(
            got == Some(1),
            "HANG: the event was read by {other_reader}; poll_cq still waiting after 3 s \
             with a completion in its CQ: {left}"
        );
    }
}
