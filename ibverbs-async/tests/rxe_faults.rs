//! Faults on real soft-RoCE devices (feature `__rxe-tests`; run through
//! `tests/rxe/vm.sh`, see `tests/common/mod.rs`): the link going down under
//! RC traffic, objects destroyed while events naming them are in flight on
//! other threads, and hundreds of port events read by several readers.
//!
//! Each test prints what rxe did (`--nocapture` shows it).
#![cfg(feature = "__rxe-tests")]

#[macro_use]
mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::{
    connect, drain_events, end, open, poll_n, restore_links, wait_port_ready, watchdog, IpBatch,
    ACCESS, WAIT,
};
use ibverbs_async::{
    test_hooks, tokio::AsyncEvents, Context, Element, EventType, ObjectKind, QpCap, QpInit,
    QpState, RecvRequest, SendRequest, WcStatus, WorkCompletion,
};

/// Restores the links and routes when a test ends, also by a panic.
struct LinkGuard;

impl Drop for LinkGuard {
    fn drop(&mut self) {
        restore_links();
    }
}

/// Resets the resolve-delay hook when a test ends.
struct DelayGuard;

impl Drop for DelayGuard {
    fn drop(&mut self) {
        test_hooks::set_resolve_delay(Duration::ZERO);
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

// ---------------------------------------------------------------------------
// Link down in the middle of RC traffic.
// ---------------------------------------------------------------------------

/// What the sending thread saw.
#[derive(Debug, Default)]
struct Stream {
    posted: u64,
    ok: u64,
    /// Error completions by status, with the first time each was seen.
    errors: BTreeMap<String, (u64, Option<Instant>)>,
    first_error: Option<(WcStatus, Instant)>,
    post_error: Option<String>,
    /// Sends never completed when the thread gave up.
    lost: u64,
}

const MSG: usize = 1024;
const WINDOW: u64 = 16;

#[test]
fn link_down_under_rc_traffic_errors_the_qp_and_a_fresh_pair_works_after_link_up() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let _w = watchdog("the link-down test", Duration::from_secs(120));
    let ctx0 = open("rxe0");
    let ctx1 = open("rxe1");
    wait_port_ready(&ctx0);
    wait_port_ready(&ctx1);
    drain_events(&ctx0);
    drain_events(&ctx1);
    let _links = LinkGuard;

    let a = end(&ctx0);
    let b = end(&ctx1);
    connect(&a.qp, &ctx0, &b.qp, &ctx1);

    let stop = AtomicBool::new(false);
    let stream = Mutex::new(Stream::default());
    let mut batch = IpBatch::start();
    let mut report = Vec::new();

    std::thread::scope(|s| {
        // The receiver keeps WINDOW receives posted on b.
        let receiver = s.spawn(|| {
            let mut received = 0u64;
            for i in 0..WINDOW {
                b.qp.post_recv(&RecvRequest::new(&b.mr, 0..MSG).wr_id(i))
                    .unwrap();
            }
            let mut wc = [WorkCompletion::default(); 16];
            while !stop.load(Ordering::SeqCst) {
                let got = b.cq.poll(&mut wc).unwrap();
                let n = got.len();
                for c in got.iter() {
                    if c.is_success() {
                        received += 1;
                        // Re-posting fails once b's QP is in error: fine.
                        let _ =
                            b.qp.post_recv(&RecvRequest::new(&b.mr, 0..MSG).wr_id(c.wr_id()));
                    }
                }
                if n == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            received
        });

        // The sender keeps WINDOW signaled sends outstanding on a until it
        // sees an error completion (or is stopped), then collects the rest.
        let sender = s.spawn(|| {
            let mut outstanding = 0u64;
            let mut wc = [WorkCompletion::default(); 16];
            let mut give_up: Option<Instant> = None;
            loop {
                let failing = {
                    let st = stream.lock().unwrap();
                    st.first_error.is_some() || st.post_error.is_some()
                };
                let stopping = stop.load(Ordering::SeqCst) || failing;
                if !stopping {
                    while outstanding < WINDOW {
                        let mut st = stream.lock().unwrap();
                        let wr = SendRequest::send(&a.mr, 0..MSG).wr_id(st.posted);
                        match a.qp.post_send(&wr) {
                            Ok(()) => {
                                st.posted += 1;
                                outstanding += 1;
                            }
                            Err(e) => {
                                st.post_error = Some(e.to_string());
                                break;
                            }
                        }
                    }
                }
                let n = a.cq.poll(&mut wc).unwrap().len();
                {
                    let mut st = stream.lock().unwrap();
                    for c in &wc[..n] {
                        outstanding -= 1;
                        if c.is_success() {
                            st.ok += 1;
                        } else {
                            let now = Instant::now();
                            let entry = st
                                .errors
                                .entry(format!("{:?}", c.status()))
                                .or_insert((0, Some(now)));
                            entry.0 += 1;
                            if st.first_error.is_none() {
                                st.first_error = Some((c.status(), now));
                            }
                        }
                    }
                }
                if stopping {
                    if outstanding == 0 {
                        return;
                    }
                    let limit = *give_up.get_or_insert_with(|| Instant::now() + WAIT);
                    if Instant::now() > limit {
                        stream.lock().unwrap().lost = outstanding;
                        return;
                    }
                }
                if n == 0 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        });

        // Traffic flows...
        let deadline = Instant::now() + WAIT;
        while stream.lock().unwrap().ok < 50 {
            assert!(Instant::now() < deadline, "no RC traffic: {stream:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
        let ok_before = stream.lock().unwrap().ok;

        // ...when veth0 goes down.
        let down = Instant::now();
        batch.run("link set veth0 down");
        let mut events0 = Vec::new();
        let port_err = loop {
            let left = (down + WAIT).saturating_duration_since(Instant::now());
            let ev = ctx0
                .get_async_event_timeout(left)
                .unwrap()
                .unwrap_or_else(|| panic!("no PORT_ERR on rxe0 within {WAIT:?}"));
            let at = down.elapsed();
            events0.push(format!("{} after {}", ev.info(), ms(at)));
            if ev.event_type() == EventType::PortErr {
                assert_eq!(ev.port(), Some(1));
                break at;
            }
        };
        let peer = common::wait_event(&ctx1, "PORT_ERR on rxe1", |e| {
            e.event_type() == EventType::PortErr
        });
        let peer_err = down.elapsed();
        drop(peer);

        // rxe retries the sends it cannot deliver (timeout 14 = 67 ms,
        // retry_cnt 7), then completes them in error.
        let deadline = Instant::now() + Duration::from_secs(20);
        while stream.lock().unwrap().first_error.is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let errored_by_rxe = stream.lock().unwrap().first_error.is_some();
        let state_after_error = a.qp.state().unwrap();
        if !errored_by_rxe {
            // rxe kept retrying: move the QP to ERR, which flushes the rest.
            a.qp.modify_to_error().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        sender.join().unwrap();
        let received = receiver.join().unwrap();

        // Any QP or CQ events on either side meanwhile.
        while let Some(ev) = ctx0.try_get_async_event().unwrap() {
            events0.push(format!("{} after {}", ev.info(), ms(down.elapsed())));
        }
        let mut events1 = Vec::new();
        while let Some(ev) = ctx1.try_get_async_event().unwrap() {
            events1.push(format!("{} after {}", ev.info(), ms(down.elapsed())));
        }

        let st = stream.lock().unwrap();
        let sender_state = a.qp.state().unwrap();
        let receiver_state = b.qp.state().unwrap();
        report.push(format!(
            "link down -> PORT_ERR read on rxe0: {}, on rxe1: {}",
            ms(port_err),
            ms(peer_err)
        ));
        report.push(format!(
            "sends: {} posted, {} ok ({} before the link went down), errors {:?}, {} never completed{}",
            st.posted,
            st.ok,
            ok_before,
            st.errors
                .iter()
                .map(|(k, (n, t))| format!(
                    "{k} x{n} (first after {})",
                    t.map_or("-".into(), |t| ms(t - down))
                ))
                .collect::<Vec<_>>(),
            st.lost,
            st.post_error
                .as_ref()
                .map_or(String::new(), |e| format!(", posting failed: {e}"))
        ));
        report.push(match st.first_error {
            Some((status, at)) => format!(
                "rxe completed the first send in error with {status:?} {} after the link went down; sender QP then {state_after_error:?}",
                ms(at - down)
            ),
            None => format!(
                "rxe reported no error completion within 20 s (QP {state_after_error:?}); the test moved the QP to ERR"
            ),
        });
        report.push(format!(
            "QP states at the end: sender {sender_state:?}, receiver {receiver_state:?}; receiver got {received} messages"
        ));
        report.push(format!("async events rxe0: {events0:?}"));
        report.push(format!("async events rxe1: {events1:?}"));

        assert!(
            st.ok > ok_before || st.first_error.is_some(),
            "the stream never progressed: {st:?}"
        );
        assert_eq!(st.lost, 0, "every send completed: {st:?}");
        assert_eq!(
            st.posted,
            st.ok + st.errors.values().map(|(n, _)| n).sum::<u64>(),
            "{st:?}"
        );
        assert_eq!(sender_state, QpState::Err);
    });

    // Link up: PORT_ACTIVE, then a fresh QP pair carries traffic again.
    let up = Instant::now();
    batch.run("link set veth0 up");
    batch.run("route replace 198.18.0.2 dev veth0 src 198.18.0.1 table 100");
    batch.run("route replace 198.18.0.1 dev veth1 src 198.18.0.2 table 101");
    batch.finish();
    let active = common::wait_event(&ctx0, "PORT_ACTIVE on rxe0", |e| {
        e.event_type() == EventType::PortActive
    });
    report.push(format!(
        "link up -> PORT_ACTIVE read on rxe0: {}",
        ms(up.elapsed())
    ));
    drop(active);
    common::wait_event(&ctx1, "PORT_ACTIVE on rxe1", |e| {
        e.event_type() == EventType::PortActive
    })
    .ack();
    wait_port_ready(&ctx0);
    wait_port_ready(&ctx1);
    drain_events(&ctx0);
    drain_events(&ctx1);

    let (c, d) = (end(&ctx0), end(&ctx1));
    connect(&c.qp, &ctx0, &d.qp, &ctx1);
    for i in 0..20 {
        d.qp.post_recv(&RecvRequest::new(&d.mr, 0..MSG).wr_id(i))
            .unwrap();
        c.qp.post_send(&SendRequest::send(&c.mr, 0..MSG).wr_id(i))
            .unwrap();
    }
    let sent = poll_n(&c.cq, 20);
    let got = poll_n(&d.cq, 20);
    assert!(sent.iter().chain(&got).all(|wc| wc.is_success()));
    report.push(format!(
        "after link up a fresh pair carried 20 messages ({})",
        ms(up.elapsed())
    ));

    // The errored pair and the fresh one tear down without waiting.
    {
        let _w = watchdog("destroying the errored and the fresh QPs", WAIT);
        drop((a, b, c, d));
    }
    assert_eq!(ctx0.live_objects(), 0);
    assert_eq!(ctx1.live_objects(), 0);
    for line in report {
        eprintln!("rxe_faults: {line}");
    }
}

// ---------------------------------------------------------------------------
// Destroying objects while events naming them are in flight.
// ---------------------------------------------------------------------------

/// The objects of one round, with the events they raise: CQ_ERR on `tiny`
/// (an overrun send CQ), SRQ_LIMIT_REACHED on `srq`, SQ_DRAINED on `c`.
struct Round {
    a: ibverbs_async::Qp,
    b: ibverbs_async::Qp,
    c: ibverbs_async::Qp,
    d: ibverbs_async::Qp,
    tiny: ibverbs_async::Cq,
    big: ibverbs_async::Cq,
    srq: ibverbs_async::Srq,
    mr: ibverbs_async::Mr,
    pd: ibverbs_async::Pd,
}

fn round(ctx: &Context) -> Round {
    let pd = ctx.alloc_pd().unwrap();
    let tiny = ctx.create_cq(1).unwrap();
    let big = ctx.create_cq(64).unwrap();
    let srq = pd.create_srq(16, 1).unwrap();
    let cap = QpCap::new(16, 16);
    let a = pd
        .create_qp(&QpInit::rc(&tiny, &big).cap(cap).sq_sig_all(true))
        .unwrap();
    let b = pd
        .create_qp(&QpInit::rc(&big, &big).cap(cap).srq(&srq))
        .unwrap();
    let c = pd.create_qp(&QpInit::rc(&big, &big).cap(cap)).unwrap();
    let d = pd.create_qp(&QpInit::rc(&big, &big).cap(cap)).unwrap();
    connect(&a, ctx, &b, ctx);
    connect(&c, ctx, &d, ctx);
    let mr = pd.reg_mr(4096, ACCESS).unwrap();
    Round {
        a,
        b,
        c,
        d,
        tiny,
        big,
        srq,
        mr,
        pd,
    }
}

impl Round {
    /// Raises the three events.
    fn fire(&self) {
        // More completions than the tiny CQ holds, as many receives as the
        // SRQ needs to fall below its limit of 4 (and no RNR wait).
        let n = (self.tiny.capacity() as usize + 4).clamp(6, 14);
        for i in 0..n + 2 {
            self.srq
                .post_recv(
                    &RecvRequest::new(&self.mr, 2048 + 64 * i..2112 + 64 * i).wr_id(i as u64),
                )
                .unwrap();
        }
        self.srq.arm_limit(4).unwrap();
        for i in 0..n {
            self.a
                .post_send(&SendRequest::send(&self.mr, 0..8).wr_id(i as u64))
                .unwrap();
        }
        self.c.modify_to_sqd(true).unwrap();
    }

    /// Drops every handle, parents before children or children first: the
    /// objects hold what they depend on, so either order destroys them
    /// children first.
    fn drop_handles(self, parents_first: bool) {
        let Round {
            a,
            b,
            c,
            d,
            tiny,
            big,
            srq,
            mr,
            pd,
        } = self;
        if parents_first {
            drop((pd, mr, big, tiny, srq));
            drop((a, b, c, d));
        } else {
            drop((a, b, c, d));
            drop((srq, tiny, big, mr, pd));
        }
    }
}

/// How the events a reader took resolved.
#[derive(Debug, Default)]
struct Seen {
    by_type: BTreeMap<String, u64>,
    live: u64,
    destroyed: u64,
    untracked: u64,
    other: u64,
}

#[test]
fn destroying_objects_while_their_events_are_read_and_held_on_another_thread() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    const ROUNDS: u32 = 36;
    let ctx = open("rxe0");
    drain_events(&ctx);
    let _delay = DelayGuard;
    let hold_ms = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let seen = Mutex::new(Seen::default());
    let start = Instant::now();
    let base_read = test_hooks::events_read();

    std::thread::scope(|s| {
        // The reader: blocked in get_async_event_timeout most of the time;
        // holds each event for `hold_ms` before dropping (acknowledging) it.
        let reader = s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                let Some(ev) = ctx
                    .get_async_event_timeout(Duration::from_millis(20))
                    .unwrap()
                else {
                    continue;
                };
                {
                    let mut seen = seen.lock().unwrap();
                    *seen.by_type.entry(ev.event_type().to_string()).or_default() += 1;
                    match ev.element() {
                        Element::Cq(_) | Element::Qp(_) | Element::Srq(_) => seen.live += 1,
                        Element::Destroyed(_) => seen.destroyed += 1,
                        Element::Untracked(_) => seen.untracked += 1,
                        _ => seen.other += 1,
                    }
                }
                let hold = hold_ms.load(Ordering::SeqCst);
                if hold > 0 {
                    std::thread::sleep(Duration::from_millis(hold));
                }
                drop(ev);
            }
        });

        for i in 0..ROUNDS {
            let _w = watchdog("a destroy while events are in flight", WAIT);
            let r = round(&ctx);
            let before = test_hooks::events_read();
            match i % 3 {
                // The reader holds the events while every handle is dropped
                // here: the drops return at once, the destroys run on the
                // reader's thread when it lets go.
                0 => {
                    hold_ms.store(30, Ordering::SeqCst);
                    test_hooks::set_resolve_delay(Duration::ZERO);
                    r.fire();
                    let deadline = Instant::now() + WAIT;
                    while test_hooks::events_read() == before {
                        assert!(Instant::now() < deadline, "round {i}: no event read");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    r.drop_handles(i % 2 == 0);
                }
                // Every handle is dropped right after the events were
                // raised, while the reader waits for them: unread events go
                // with their objects or resolve as untracked.
                1 => {
                    hold_ms.store(0, Ordering::SeqCst);
                    test_hooks::set_resolve_delay(Duration::ZERO);
                    r.fire();
                    r.drop_handles(i % 2 == 0);
                }
                // The reader has read an event and sleeps before resolving
                // it when the handles go: the destroy waits in libibverbs
                // until the reader finds the object dying and acknowledges.
                _ => {
                    hold_ms.store(0, Ordering::SeqCst);
                    test_hooks::set_resolve_delay(Duration::from_millis(5));
                    r.fire();
                    let deadline = Instant::now() + WAIT;
                    while test_hooks::events_read() == before {
                        assert!(Instant::now() < deadline, "round {i}: no event read");
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    r.drop_handles(i % 2 == 0);
                }
            }
            // Every object is gone once the reader let go of its events.
            let deadline = Instant::now() + WAIT;
            while ctx.live_objects() != 0 {
                assert!(
                    Instant::now() < deadline,
                    "round {i}: {} objects still alive",
                    ctx.live_objects()
                );
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        test_hooks::set_resolve_delay(Duration::ZERO);
        // Let the reader take what is still queued, then stop it.
        std::thread::sleep(Duration::from_millis(100));
        stop.store(true, Ordering::SeqCst);
        reader.join().unwrap();
    });

    let seen = seen.into_inner().unwrap();
    let read = test_hooks::events_read() - base_read;
    eprintln!(
        "rxe_faults: {ROUNDS} rounds in {}: {read} events read; by type {:?}; \
         element alive {}, destroyed (acknowledged at once) {}, untracked {}, other {}",
        ms(start.elapsed()),
        seen.by_type,
        seen.live,
        seen.destroyed,
        seen.untracked,
        seen.other
    );
    let total = seen.live + seen.destroyed + seen.untracked + seen.other;
    assert_eq!(total, read, "every event read reached the reader");
    assert!(
        read >= u64::from(ROUNDS),
        "at least one event per round: {read}"
    );
    assert_eq!(ctx.live_objects(), 0);
    ctx.close().unwrap();
}

/// `std::mem::forget` on an event is safe Rust: the acknowledgement never
/// happens, and neither does the destroy that would wait for it: the
/// forgotten event keeps its CQ (and the CQ its context) alive for good.
#[test]
fn a_forgotten_event_leaks_its_object_instead_of_deadlocking() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    drain_events(&ctx);
    let r = round(&ctx);
    r.fire();
    let ev = common::wait_event(&ctx, "CQ_ERR", |e| e.event_type() == EventType::CqErr);
    let cq = ev.cq().unwrap().id();
    assert_eq!(cq, r.tiny.id());
    std::mem::forget(ev);
    {
        let _w = watchdog("dropping every handle after forgetting an event", WAIT);
        r.drop_handles(true);
    }
    drain_events(&ctx);
    // Only the CQ named by the forgotten event is left, never destroyed.
    assert_eq!(ctx.live_objects(), 1);
    let (ctx, err) = ctx.close().unwrap_err();
    assert!(
        matches!(
            err,
            ibverbs_async::Error::InUse {
                object: ObjectKind::Context,
                ..
            }
        ),
        "{err}"
    );
    drop(ctx);
}

// ---------------------------------------------------------------------------
// Hundreds of port events, several readers.
// ---------------------------------------------------------------------------

/// Counts of the events each reader took, by device and type.
#[derive(Default)]
struct Counts {
    port_err: [AtomicU64; 2],
    port_active: [AtomicU64; 2],
    other: [AtomicU64; 2],
}

impl Counts {
    fn add(&self, dev: usize, t: EventType) {
        match t {
            EventType::PortErr => &self.port_err[dev],
            EventType::PortActive => &self.port_active[dev],
            _ => &self.other[dev],
        }
        .fetch_add(1, Ordering::SeqCst);
    }

    fn get(c: &[AtomicU64; 2], dev: usize) -> u64 {
        c[dev].load(Ordering::SeqCst)
    }

    fn total(&self) -> u64 {
        [&self.port_err, &self.port_active, &self.other]
            .iter()
            .flat_map(|c| c.iter())
            .map(|c| c.load(Ordering::SeqCst))
            .sum()
    }
}

#[test]
fn hundreds_of_link_flap_events_read_by_two_threads_and_a_tokio_task() {
    const FLAPS: u64 = 150;
    let _w = watchdog("the link flap test", Duration::from_secs(150));
    let ctx0 = open("rxe0");
    let ctx1 = open("rxe1");
    wait_port_ready(&ctx0);
    wait_port_ready(&ctx1);
    drain_events(&ctx0);
    drain_events(&ctx1);
    let _links = LinkGuard;
    let base_read = test_hooks::events_read();
    let stop = AtomicBool::new(false);
    // [thread 1, thread 2, tokio task]
    let readers: [Counts; 3] = Default::default();
    let port_err0 = |r: &[Counts; 3]| r.iter().map(|c| Counts::get(&c.port_err, 0)).sum::<u64>();
    let port_active0 = |r: &[Counts; 3]| {
        r.iter()
            .map(|c| Counts::get(&c.port_active, 0))
            .sum::<u64>()
    };
    let start = Instant::now();

    std::thread::scope(|s| {
        // Two threads read rxe0.
        for counts in &readers[..2] {
            let (ctx0, stop) = (&ctx0, &stop);
            s.spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    if let Some(ev) = ctx0
                        .get_async_event_timeout(Duration::from_millis(50))
                        .unwrap()
                    {
                        counts.add(0, ev.ack().event_type);
                    }
                }
            });
        }
        // A tokio task reads rxe0 and rxe1.
        let tokio_counts = &readers[2];
        let (c0, c1, stop_t) = (&ctx0, &ctx1, &stop);
        s.spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let e0 = AsyncEvents::new(c0).unwrap();
                let e1 = AsyncEvents::new(c1).unwrap();
                while !stop_t.load(Ordering::SeqCst) {
                    tokio::select! {
                        r = e0.next_info() => tokio_counts.add(0, r.unwrap().event_type),
                        r = e1.next_info() => tokio_counts.add(1, r.unwrap().event_type),
                        _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                }
            });
        });

        // The flaps, paced by the events on rxe0 so that ip never runs ahead.
        let mut batch = IpBatch::start();
        let wait_for = |what: &str, f: &dyn Fn() -> bool| {
            let deadline = Instant::now() + WAIT;
            while !f() {
                assert!(Instant::now() < deadline, "flap: no {what} within {WAIT:?}");
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        for i in 0..FLAPS {
            batch.run("link set veth0 down");
            wait_for("PORT_ERR", &|| port_err0(&readers) > i);
            let active = port_active0(&readers);
            batch.run("link set veth0 up");
            wait_for("PORT_ACTIVE", &|| port_active0(&readers) > active);
        }
        batch.run("route replace 198.18.0.2 dev veth0 src 198.18.0.1 table 100");
        batch.run("route replace 198.18.0.1 dev veth1 src 198.18.0.2 table 101");
        batch.finish();
        // The events that trail the last flap.
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::SeqCst);
    });
    let elapsed = start.elapsed();

    let read = test_hooks::events_read() - base_read;
    let counted: u64 = readers.iter().map(Counts::total).sum();
    let line = |dev: usize| {
        readers
            .iter()
            .zip(["thread 1", "thread 2", "tokio"])
            .map(|(c, who)| {
                format!(
                    "{who}: {} PORT_ERR, {} PORT_ACTIVE, {} other",
                    Counts::get(&c.port_err, dev),
                    Counts::get(&c.port_active, dev),
                    Counts::get(&c.other, dev)
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    eprintln!(
        "rxe_faults: {FLAPS} flaps in {}: {read} events read and acknowledged\n  rxe0: {}\n  rxe1: {}",
        ms(elapsed),
        line(0),
        line(1)
    );
    assert_eq!(counted, read, "every event read reached a reader");
    assert_eq!(
        port_err0(&readers),
        FLAPS,
        "one PORT_ERR on rxe0 per link down"
    );
    assert!(port_active0(&readers) >= FLAPS);
    assert!(read >= 2 * FLAPS, "{read}");
    if common::is_iwarp() {
        // siw reports a port change of its own netdev only: the link
        // partner going down is no event on the other device.
        assert_eq!(
            Counts::get(&readers[2].port_err, 1),
            0,
            "siw1 reported its peer's link going down"
        );
    } else {
        assert!(
            Counts::get(&readers[2].port_err, 1) > 0,
            "the tokio task, the only reader of rxe1, took its PORT_ERR events"
        );
    }

    wait_port_ready(&ctx0);
    wait_port_ready(&ctx1);
    assert_eq!(ctx0.live_objects(), 0);
    ctx0.close().unwrap();
    ctx1.close().unwrap();
}
