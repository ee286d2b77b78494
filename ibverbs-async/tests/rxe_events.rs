//! Asynchronous events on real soft-RoCE devices (feature `__rxe-tests`; run
//! through `tests/rxe/vm.sh`, see `tests/common/mod.rs`).
#![cfg(feature = "__rxe-tests")]

#[macro_use]
mod common;

use std::net::Ipv4Addr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use common::{
    assert_in_use, connect, drain_events, end, ip, ip_quiet, open, poll_n, wait_event,
    wait_port_ready, watchdog, End, ACCESS, WAIT,
};
use ibverbs_async::{
    test_hooks, tokio::AsyncEvents, AsyncEventInfo, Context, Cq, Element, ElementId, EventType, Mr,
    ObjectKind, Pd, Qp, QpCap, QpInit, QpState, RecvRequest, SendRequest, Stopper, Wait,
};

/// A loopback connection on one context whose sender's send CQ is tiny and
/// never polled: more signaled sends than it holds overrun it.
struct Overrun {
    tiny: Cq,
    a: Qp,
    b: Qp,
    big: Cq,
    mr: Mr,
    pd: Pd,
}

fn overrun(ctx: &Context) -> Overrun {
    let pd = ctx.alloc_pd().unwrap();
    let tiny = ctx.create_cq(1).unwrap();
    let big = ctx.create_cq(64).unwrap();
    let cap = QpCap::new(32, 32);
    let a = pd
        .create_qp(&QpInit::rc(&tiny, &big).cap(cap).sq_sig_all(true))
        .unwrap();
    let b = pd.create_qp(&QpInit::rc(&big, &big).cap(cap)).unwrap();
    connect(&a, ctx, &b, ctx);
    let mr = pd.reg_mr(4096, ACCESS).unwrap();
    let n = (tiny.capacity() as usize + 4).min(32);
    for i in 0..n {
        b.post_recv(&RecvRequest::new(&mr, 2048 + 8 * i..2056 + 8 * i).wr_id(i as u64))
            .unwrap();
    }
    for i in 0..n {
        a.post_send(&SendRequest::send(&mr, 0..8).wr_id(i as u64))
            .unwrap();
    }
    Overrun {
        tiny,
        a,
        b,
        big,
        mr,
        pd,
    }
}

fn is_cq_err_of(cq: &Cq) -> impl FnMut(&ibverbs_async::AsyncEvent<'_>) -> bool + '_ {
    move |e| e.event_type() == EventType::CqErr && e.cq().is_some_and(|c| c.same_as(cq))
}

/// Puts veth0 back up with the routes the test bed's policy routing needs
/// (taking a link down removes the routes through it).
struct LinkRestore;

impl Drop for LinkRestore {
    fn drop(&mut self) {
        ip_quiet("link set veth0 up");
        ip_quiet("route replace 198.18.0.2 dev veth0 src 198.18.0.1 table 100");
        ip_quiet("route replace 198.18.0.1 dev veth1 src 198.18.0.2 table 101");
    }
}

#[test]
fn port_err_and_port_active_on_link_down_and_up() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx0 = open("rxe0");
    let ctx1 = open("rxe1");
    wait_port_ready(&ctx0);
    drain_events(&ctx0);
    drain_events(&ctx1);
    let restore = LinkRestore;

    ip("link set veth0 down");
    let down = wait_event(&ctx0, "PORT_ERR", |e| e.event_type() == EventType::PortErr);
    assert_eq!(down.port(), Some(1));
    assert!(matches!(down.element(), Element::Port(1)));
    assert_eq!(
        down.ack(),
        AsyncEventInfo::new(EventType::PortErr, ElementId::Port { port: 1 })
    );
    // The peer of veth0 lost its carrier: rxe1's port went down too.
    wait_event(&ctx1, "PORT_ERR on rxe1", |e| {
        e.event_type() == EventType::PortErr
    })
    .ack();

    ip("link set veth0 up");
    let up = wait_event(&ctx0, "PORT_ACTIVE", |e| {
        e.event_type() == EventType::PortActive
    });
    assert_eq!(up.port(), Some(1));
    up.ack();
    drop(restore);
    wait_port_ready(&ctx0);
    wait_port_ready(&ctx1);

    // And traffic rxe0 -> rxe1 works again.
    let (a, b) = (end(&ctx0), end(&ctx1));
    connect(&a.qp, &ctx0, &b.qp, &ctx1);
    b.qp.post_recv(&RecvRequest::new(&b.mr, 0..64).wr_id(1))
        .unwrap();
    a.qp.post_send(&SendRequest::send(&a.mr, 0..64)).unwrap();
    assert!(poll_n(&a.cq, 1)[0].is_success());
    assert!(poll_n(&b.cq, 1)[0].is_success());
}

/// Removes a test address on drop.
struct AddrGuard(&'static str);

impl Drop for AddrGuard {
    fn drop(&mut self) {
        ip_quiet(&format!("addr del {} dev veth0", self.0));
    }
}

#[test]
fn gid_change_on_ip_addr_add_and_del() {
    skip_on_iwarp!("no RoCE GID table: addresses do not become GIDs");
    let ctx = open("rxe0");
    wait_port_ready(&ctx);
    drain_events(&ctx);
    let addr = Ipv4Addr::new(198, 18, 1, 1);
    let _guard = AddrGuard("198.18.1.1/24");

    ip("addr add 198.18.1.1/24 dev veth0");
    let ev = wait_event(&ctx, "GID_CHANGE after add", |e| {
        e.event_type() == EventType::GidChange
    });
    assert_eq!(ev.port(), Some(1));
    ev.ack();
    // The new address is in the GID table (the table may be updated just
    // after the event: look again until it shows).
    let deadline = Instant::now() + WAIT;
    let entry = loop {
        if let Some(e) = ctx
            .find_gid(1, |e| e.gid.to_ipv4_mapped() == Some(addr))
            .unwrap()
        {
            break e;
        }
        assert!(
            Instant::now() < deadline,
            "{addr} never appeared in the GID table"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(ctx.query_gid(1, entry.index).unwrap(), entry.gid);

    ip("addr del 198.18.1.1/24 dev veth0");
    let ev = wait_event(&ctx, "GID_CHANGE after del", |e| {
        e.event_type() == EventType::GidChange
    });
    assert_eq!(ev.info().element, ElementId::Port { port: 1 });
}

#[test]
fn srq_limit_reached_when_an_armed_srq_falls_below_its_limit() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    drain_events(&ctx);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let srq = pd.create_srq(16, 1).unwrap();
    let receiver = pd.create_qp(&QpInit::rc(&cq, &cq).srq(&srq)).unwrap();
    let sender = pd.create_qp(&QpInit::rc(&cq, &cq)).unwrap();
    connect(&sender, &ctx, &receiver, &ctx);
    let mr = pd.reg_mr(4096, ACCESS).unwrap();
    for i in 0..8 {
        srq.post_recv(&RecvRequest::new(&mr, 64 * i..64 * i + 64).wr_id(i as u64))
            .unwrap();
    }
    srq.arm_limit(4).unwrap();
    assert_eq!(srq.query().unwrap().srq_limit, 4);
    // Receiving on a QP attached to an SRQ goes through the SRQ.
    assert!(receiver
        .post_recv(&RecvRequest::new(&mr, 0..8).wr_id(0))
        .is_err());

    for i in 0..5 {
        sender
            .post_send(&SendRequest::send(&mr, 1024..1032).wr_id(100 + i))
            .unwrap();
    }
    let wcs = poll_n(&cq, 10);
    assert!(wcs.iter().all(|wc| wc.is_success()), "{wcs:?}");

    let ev = wait_event(&ctx, "SRQ_LIMIT_REACHED", |e| {
        e.event_type() == EventType::SrqLimitReached
    });
    assert!(ev.srq().unwrap().same_as(&srq));
    assert_eq!(ev.info().element, ElementId::Srq { id: srq.id() });
    ev.ack();
    // The limit is disarmed once reported.
    assert_eq!(srq.query().unwrap().srq_limit, 0);
}

#[test]
fn cq_err_on_cq_overrun() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    drain_events(&ctx);
    let o = overrun(&ctx);
    let ev = wait_event(&ctx, "CQ_ERR", is_cq_err_of(&o.tiny));
    assert_eq!(ev.info().element, ElementId::Cq { id: o.tiny.id() });
    assert_eq!(ev.ack().event_type, EventType::CqErr);
    let _w = watchdog("tearing down after CQ_ERR", WAIT);
    drop(o);
}

/// Two connected ends, the first moved to SQD with notification, and the
/// `IBV_EVENT_SQ_DRAINED` event that names its QP.
fn sq_drained(ctx: &Context) -> (End, End, ibverbs_async::AsyncEvent<'_>) {
    drain_events(ctx);
    let (a, b) = (end(ctx), end(ctx));
    connect(&a.qp, ctx, &b.qp, ctx);
    a.qp.modify_to_sqd(true).unwrap();
    let ev = wait_event(ctx, "SQ_DRAINED", |e| {
        e.event_type() == EventType::SqDrained
    });
    (a, b, ev)
}

#[test]
fn sq_drained_when_a_qp_moves_to_sqd() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    let (a, _b, ev) = sq_drained(&ctx);
    assert!(ev.qp().unwrap().same_as(&a.qp));
    assert_eq!(
        ev.info().element,
        ElementId::Qp {
            id: a.qp.id(),
            qp_num: a.qp.qp_num()
        }
    );
    drop(ev);
    assert_eq!(a.qp.state().unwrap(), QpState::Sqd);
}

#[test]
fn a_held_event_defers_the_destroy_of_its_cq_without_deadlock() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    drain_events(&ctx);
    let o = overrun(&ctx);
    let ev = wait_event(&ctx, "CQ_ERR", is_cq_err_of(&o.tiny));
    let live = ctx.live_objects();
    let Overrun {
        tiny,
        a,
        b,
        big,
        mr,
        pd,
    } = o;

    // An explicit destroy while the event holds the CQ is refused (in C it
    // would wait for the acknowledgement forever).
    drop(a);
    let (tiny, err) = tiny.destroy().unwrap_err();
    assert!(
        matches!(
            err,
            ibverbs_async::Error::InUse {
                object: ObjectKind::CompletionQueue,
                ..
            }
        ),
        "{err}"
    );

    // Dropping every handle returns at once; the CQ lives on in the event.
    {
        let _w = watchdog("dropping the CQ handles while an event holds it", WAIT);
        drop(tiny);
    }
    assert_eq!(ctx.live_objects(), live - 1, "only the QP is gone");
    let cq = ev.cq().unwrap();
    let mut wc = [ibverbs_async::WorkCompletion::default(); 4];
    let _ = cq.poll(&mut wc).unwrap();

    // Dropping the event (on another thread: events are Send) acknowledges
    // it and then destroys the CQ.
    {
        let _w = watchdog("dropping the event that holds the last CQ reference", WAIT);
        std::thread::scope(|s| {
            s.spawn(move || drop(ev)).join().unwrap();
        });
    }
    assert_eq!(ctx.live_objects(), live - 2, "the CQ is gone too");
    drop((b, big, mr, pd));
}

#[test]
fn a_panic_while_holding_an_event_acknowledges_it() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    drain_events(&ctx);
    let o = overrun(&ctx);
    let before = test_hooks::events_read();
    let result = catch_unwind(AssertUnwindSafe(|| {
        let ev = wait_event(&ctx, "CQ_ERR", is_cq_err_of(&o.tiny));
        assert!(ev.cq().is_some());
        panic!("failure while handling {ev}");
    }));
    assert!(result.is_err());
    assert!(test_hooks::events_read() > before);
    // Had the event not been acknowledged during unwinding,
    // ibv_destroy_cq would wait for it forever.
    let _w = watchdog("destroying the CQ after a panic", WAIT);
    drop(o);
}

/// Resets the resolve delay hook on drop.
struct DelayGuard;

impl Drop for DelayGuard {
    fn drop(&mut self) {
        test_hooks::set_resolve_delay(Duration::ZERO);
    }
}

#[test]
fn an_event_read_while_its_cq_is_destroyed_is_acknowledged_at_once() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    drain_events(&ctx);
    let o = overrun(&ctx);
    let tiny_id = o.tiny.id();
    let _guard = DelayGuard;
    test_hooks::set_resolve_delay(Duration::from_millis(1500));
    let before = test_hooks::events_read();

    std::thread::scope(|s| {
        let reader = s.spawn(|| loop {
            let ev = ctx
                .get_async_event_timeout(WAIT)
                .unwrap()
                .expect("an event");
            if ev.event_type() == EventType::CqErr {
                return (ev.info(), matches!(ev.element(), Element::Destroyed(_)));
            }
        });
        // Wait until the reader has read the event and sleeps before
        // resolving it, then drop the last handles of the CQ: its destroy
        // starts and waits inside ibv_destroy_cq for the acknowledgement.
        let deadline = Instant::now() + WAIT;
        while test_hooks::events_read() == before {
            assert!(Instant::now() < deadline, "the reader read nothing");
            std::thread::sleep(Duration::from_millis(5));
        }
        let started = Instant::now();
        {
            let _w = watchdog("destroying a CQ whose event is being read", WAIT);
            drop(o);
        }
        let (info, destroyed) = reader.join().unwrap();
        assert_eq!(info.event_type, EventType::CqErr);
        assert!(destroyed, "the CQ was being destroyed: {info}");
        assert_eq!(info.element, ElementId::Cq { id: tiny_id });
        // The destroy did wait for the reader's acknowledgement.
        assert!(
            started.elapsed() >= Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
    });
}

#[test]
fn two_waiting_threads_each_event_reaches_one() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    drain_events(&ctx);
    let pairs: Vec<_> = (0..4)
        .map(|_| {
            let (a, b) = (end(&ctx), end(&ctx));
            connect(&a.qp, &ctx, &b.qp, &ctx);
            (a, b)
        })
        .collect();
    let barrier = Barrier::new(3);
    let collect = || {
        barrier.wait();
        let mut got = Vec::new();
        while let Some(ev) = ctx.get_async_event_timeout(Duration::from_secs(2)).unwrap() {
            got.push(ev.ack());
        }
        got
    };
    let (one, two) = std::thread::scope(|s| {
        let t1 = s.spawn(collect);
        let t2 = s.spawn(collect);
        barrier.wait();
        // Both threads are waiting (or about to): raise four distinct events.
        std::thread::sleep(Duration::from_millis(100));
        for (a, _) in &pairs {
            a.qp.modify_to_sqd(true).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        (t1.join().unwrap(), t2.join().unwrap())
    });
    eprintln!("thread 1: {one:?}\nthread 2: {two:?}");
    let mut all: Vec<AsyncEventInfo> = one.iter().chain(&two).copied().collect();
    all.retain(|i| i.event_type == EventType::SqDrained);
    let mut ids: Vec<_> = all.iter().map(|i| i.element).collect();
    ids.sort_by_key(|e| format!("{e:?}"));
    ids.dedup();
    assert_eq!(ids.len(), 4, "every QP's event arrived: {all:?}");
    assert_eq!(all.len(), 4, "and each reached exactly one thread: {all:?}");
}

#[test]
fn non_blocking_get_timeout_and_fd() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    drain_events(&ctx);
    // SAFETY: the context's fd, open while `ctx` is; only its flags are read.
    let raw = unsafe {
        std::os::fd::BorrowedFd::borrow_raw(std::os::fd::AsRawFd::as_raw_fd(&ctx.async_fd()))
    };
    let flags = nix::fcntl::fcntl(raw, nix::fcntl::FcntlArg::F_GETFL).unwrap();
    assert!(nix::fcntl::OFlag::from_bits_retain(flags).contains(nix::fcntl::OFlag::O_NONBLOCK));

    let t = Instant::now();
    assert!(ctx.try_get_async_event().unwrap().is_none());
    assert!(t.elapsed() < Duration::from_secs(1));
    let t = Instant::now();
    assert!(ctx
        .get_async_event_timeout(Duration::from_millis(300))
        .unwrap()
        .is_none());
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
        "{waited:?}"
    );

    let (a, b) = (end(&ctx), end(&ctx));
    connect(&a.qp, &ctx, &b.qp, &ctx);
    a.qp.modify_to_sqd(true).unwrap();
    // The fd becomes readable...
    // (plain poll(2) through the readiness handle)...
    assert!(ctx.async_fd().wait_readable(Some(WAIT)).unwrap());
    let mut pfd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(&ctx.async_fd()),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd whose fd is open while `ctx` is.
    assert_eq!(unsafe { libc::poll(&mut pfd, 1, 0) }, 1);
    // ...and the non-blocking get returns the event.
    let ev = ctx.try_get_async_event().unwrap().expect("a pending event");
    assert_eq!(ev.event_type(), EventType::SqDrained);
    drop(ev);
    assert!(ctx.try_get_async_event().unwrap().is_none());
}

#[test]
fn get_and_ack_copies_the_event_out() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    drain_events(&ctx);
    let (a, b) = (end(&ctx), end(&ctx));
    connect(&a.qp, &ctx, &b.qp, &ctx);
    a.qp.modify_to_sqd(true).unwrap();
    let info = ctx.get_and_ack().unwrap();
    assert_eq!(info.event_type, EventType::SqDrained);
    assert_eq!(
        info.element,
        ElementId::Qp {
            id: a.qp.id(),
            qp_num: a.qp.qp_num()
        }
    );
    // Nothing holds the QP any more: it can be destroyed explicitly.
    let _w = watchdog("destroying a QP after get_and_ack", WAIT);
    a.qp.destroy().unwrap();
    drop(b);
}

#[test]
fn closing_a_context_with_live_objects_is_refused() {
    let ctx = open("rxe0");
    let pd = ctx.alloc_pd().unwrap();
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
    let err = ctx.query_port(2).unwrap_err();
    assert!(
        matches!(
            err,
            ibverbs_async::Error::PortOutOfRange { port: 2, ports: 1 }
        ),
        "{err}"
    );
    pd.dealloc().unwrap();
    ctx.close().unwrap();
}

#[test]
fn tokio_async_events_next_and_stream() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    use futures_core::Stream;

    let ctx = open("rxe0");
    drain_events(&ctx);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut events = AsyncEvents::new(&ctx).unwrap();
        // Nothing pending: next() waits.
        assert!(
            tokio::time::timeout(Duration::from_millis(200), events.next())
                .await
                .is_err()
        );

        // Three events pending at once are all delivered: the fd is read
        // until empty before waiting again (edge-triggered reactor).
        let pairs: Vec<_> = (0..3)
            .map(|_| {
                let (a, b) = (end(&ctx), end(&ctx));
                connect(&a.qp, &ctx, &b.qp, &ctx);
                (a, b)
            })
            .collect();
        for (a, _) in &pairs {
            a.qp.modify_to_sqd(true).unwrap();
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        for _ in 0..2 {
            let ev = tokio::time::timeout(WAIT, events.next())
                .await
                .expect("an event within the timeout")
                .unwrap();
            assert_eq!(ev.event_type(), EventType::SqDrained);
            assert!(pairs.iter().any(|(a, _)| ev.qp().unwrap().same_as(&a.qp)));
            ev.ack();
        }
        // The third through the Stream implementation, as an owned event
        // that a spawned task takes over and acknowledges.
        let owned = tokio::time::timeout(
            WAIT,
            std::future::poll_fn(|cx| std::pin::Pin::new(&mut events).poll_next(cx)),
        )
        .await
        .expect("an event within the timeout")
        .expect("the stream never ends")
        .unwrap();
        let info = tokio::spawn(async move { owned.ack() }).await.unwrap();
        assert_eq!(info.event_type, EventType::SqDrained);

        // A second registration of the same context works alongside.
        let other = AsyncEvents::new(&ctx).unwrap();
        let (c, d) = (end(&ctx), end(&ctx));
        connect(&c.qp, &ctx, &d.qp, &ctx);
        c.qp.modify_to_sqd(true).unwrap();
        let info = tokio::select! {
            r = events.next_info() => r.unwrap(),
            r = other.next_info() => r.unwrap(),
            _ = tokio::time::sleep(WAIT) => panic!("no event"),
        };
        assert_eq!(
            info.element,
            ElementId::Qp {
                id: c.qp.id(),
                qp_num: c.qp.qp_num()
            }
        );
    });
}

#[test]
fn an_owned_event_moves_into_a_spawned_task_and_holds_its_objects() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    let (a, b, event) = sq_drained(&ctx);
    let event = event.into_owned();
    assert!(event.context().same_as(&ctx));
    assert!(event.qp().unwrap().same_as(&a.qp));

    // Like a borrowed event, the owned one holds its QP and its context.
    let qp = a.qp.clone();
    let (qp, err) = qp.destroy().unwrap_err();
    assert_in_use(&err, ObjectKind::QueuePair);
    let (_clone, err) = ctx.clone().close().unwrap_err();
    assert_in_use(&err, ObjectKind::Context);

    // A task on another worker thread takes the event over and
    // acknowledges it.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let info = {
        let _w = watchdog("acknowledging an owned event in a spawned task", WAIT);
        rt.block_on(async { tokio::spawn(async move { event.ack() }).await })
            .unwrap()
    };
    assert_eq!(info.event_type, EventType::SqDrained);
    assert_eq!(
        info.element,
        ElementId::Qp {
            id: qp.id(),
            qp_num: qp.qp_num()
        }
    );
    // Nothing holds the QP but its handles now: the explicit destroy works.
    let End { qp: a_qp, .. } = a;
    drop(a_qp);
    {
        let _w = watchdog("destroying the QP after its event was acknowledged", WAIT);
        qp.destroy().unwrap();
    }
    drop(b);
}

#[test]
fn a_stopper_ends_a_blocked_async_event_wait() {
    let ctx = open("rxe0");
    drain_events(&ctx);
    // A late event of an earlier test (a port coming back up) may still
    // arrive: such events are skipped, and only the outcome that is not an
    // event counts.
    let stopper = Stopper::new().unwrap();
    let wait = |timeout| loop {
        match ctx.wait_async_event(&stopper, timeout).unwrap() {
            Wait::Ready(event) => println!("skipping {event}"),
            other => return other.is_stopped(),
        }
    };
    // Nothing pending: a timed wait times out.
    assert!(!wait(Some(Duration::from_millis(50))));
    let start = Instant::now();
    let stopped = std::thread::scope(|s| {
        let waiter = s.spawn(|| wait(None));
        std::thread::sleep(Duration::from_millis(200));
        stopper.stop().unwrap();
        waiter.join().unwrap()
    });
    assert!(stopped);
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(200) && took < WAIT,
        "{took:?}"
    );
    // A stop made before the call ends the next wait at once, even with
    // an event pending; a reset one waits again.
    assert!(ctx.wait_async_event(&stopper, None).unwrap().is_stopped());
    stopper.reset().unwrap();
    assert!(!wait(Some(Duration::from_millis(20))));
}

#[test]
fn tokio_constructors_outside_a_runtime_are_errors() {
    let ctx = open("rxe0");
    let channel = ctx.create_comp_channel().unwrap();
    // No runtime at all.
    let err = AsyncEvents::new(&ctx).unwrap_err();
    assert!(
        matches!(
            err,
            ibverbs_async::Error::State {
                call: "AsyncEvents::new",
                ..
            }
        ),
        "{err}"
    );
    let err = ibverbs_async::tokio::CqEvents::new(&channel).unwrap_err();
    assert!(
        matches!(
            err,
            ibverbs_async::Error::State {
                call: "CqEvents::new",
                ..
            }
        ),
        "{err}"
    );
    // A runtime without its IO driver.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let err = AsyncEvents::new(&ctx).unwrap_err();
    assert!(err.to_string().contains("IO driver"), "{err}");
    drop(_guard);
    // With one, it works.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let _guard = rt.enter();
    AsyncEvents::new(&ctx).unwrap();
    ibverbs_async::tokio::CqEvents::new(&channel).unwrap();
}
