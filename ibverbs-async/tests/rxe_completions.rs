//! Data path and completion-channel events on real soft-RoCE devices
//! (feature `__rxe-tests`; run through `tests/rxe/vm.sh`, see
//! `tests/common/mod.rs`).
#![cfg(feature = "__rxe-tests")]

#[macro_use]
mod common;

use std::time::{Duration, Instant};

use common::{connect, end, open, opts, poll_n, watchdog, End, ACCESS, WAIT};
use ibverbs_async::{
    tokio::CqEvents, AccessFlags, CompChannel, Context, Cq, Error, GidType, LinkLayer, Mr, Mtu,
    ObjectKind, PortState, Qp, QpCap, QpInit, QpState, RecvRequest, SendRequest, Stopper, Wait,
    WcOpcode, WcStatus, CQ_EVENT_ACK_BATCH,
};

fn send_recv_and_rdma(a: &mut End, b: &mut End) {
    // Send with immediate data.
    a.mr.write(0, b"hello over RoCE").unwrap();
    b.qp.post_recv(&RecvRequest::new(&b.mr, 1024..1024 + 64).wr_id(7))
        .unwrap();
    a.qp.post_send(&SendRequest::send_with_imm(&a.mr, 0..15, 0xdead_beef).wr_id(1))
        .unwrap();
    let sent = poll_n(&a.cq, 1);
    assert_eq!(sent[0].status(), WcStatus::Success, "{sent:?}");
    assert_eq!(sent[0].opcode(), WcOpcode::Send);
    assert_eq!(sent[0].wr_id(), 1);
    let got = poll_n(&b.cq, 1);
    assert!(got[0].is_success(), "{}", got[0].status_str());
    assert_eq!(got[0].opcode(), WcOpcode::Recv);
    assert_eq!(got[0].wr_id(), 7);
    assert_eq!(got[0].byte_len(), 15);
    assert_eq!(got[0].imm_data(), Some(0xdead_beef));
    assert_eq!(got[0].qp_num(), b.qp.qp_num());
    assert_eq!(b.mr.to_vec(1024..1039).unwrap(), b"hello over RoCE");

    // RDMA write into b's region.
    a.mr.write(100, b"written").unwrap();
    let remote = b.mr.remote(2000).unwrap();
    a.qp.post_send(&SendRequest::rdma_write(&a.mr, 100..107, remote).wr_id(2))
        .unwrap();
    let wc = poll_n(&a.cq, 1);
    assert_eq!(wc[0].opcode(), WcOpcode::RdmaWrite);
    assert!(wc[0].is_success());
    assert_eq!(b.mr.to_vec(2000..2007).unwrap(), b"written");

    // RDMA read back from b's region.
    b.mr.write(3000, b"read me").unwrap();
    let remote = b.mr.remote(3000).unwrap();
    a.qp.post_send(&SendRequest::rdma_read(&a.mr, 500..507, remote).wr_id(3))
        .unwrap();
    let wc = poll_n(&a.cq, 1);
    assert_eq!(wc[0].opcode(), WcOpcode::RdmaRead);
    assert!(wc[0].is_success());
    assert_eq!(a.mr.to_vec(500..507).unwrap(), b"read me");
}

#[test]
fn rc_send_recv_rxe0_to_rxe1() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let (c0, c1) = (open("rxe0"), open("rxe1"));
    let (mut a, mut b) = (end(&c0), end(&c1));
    connect(&a.qp, &c0, &b.qp, &c1);
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
    send_recv_and_rdma(&mut a, &mut b);
    send_recv_and_rdma(&mut b, &mut a);
}

#[test]
fn rc_send_recv_rxe0_to_itself() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    let (mut a, mut b) = (end(&ctx), end(&ctx));
    connect(&a.qp, &ctx, &b.qp, &ctx);
    send_recv_and_rdma(&mut a, &mut b);
}

#[test]
fn device_port_and_gid_queries() {
    skip_on_iwarp!("no RoCE v2 GIDs: the IPv4-mapped GID these queries check exists on RoCE only");
    let ctx = open("rxe0");
    assert_eq!(ctx.name(), "rxe0");
    assert_eq!(ctx.port_count(), 1);
    let dev = ctx.query_device().unwrap();
    assert_eq!(dev.phys_port_cnt(), 1);
    assert!(
        dev.max_qp() > 0 && dev.max_cqe() > 0 && dev.max_srq() > 0,
        "{dev:?}"
    );
    let port = ctx.query_port(1).unwrap();
    assert_eq!(port.state(), PortState::Active, "{port:?}");
    assert_eq!(port.link_layer(), LinkLayer::Ethernet);
    assert!(port.active_mtu().unwrap() >= Mtu::Mtu1024);
    assert!(matches!(
        ctx.query_port(0),
        Err(Error::PortOutOfRange { port: 0, ports: 1 })
    ));

    let gid = ctx.ipv4_gid(1).unwrap().expect("an IPv4-mapped GID");
    assert_eq!(gid.gid_type, GidType::RoceV2);
    assert_eq!(gid.port, 1);
    assert_eq!(
        gid.gid.to_ipv4_mapped(),
        Some("198.18.0.1".parse().unwrap())
    );
    assert_eq!(ctx.query_gid(1, gid.index).unwrap(), gid.gid);
    // The test bed reports the index it found in sysfs.
    if let Ok(index) = std::env::var("RXE_GID_INDEX") {
        assert_eq!(index.parse::<u32>().unwrap(), gid.index);
    }
    assert_eq!(opts(&ctx).gid_index, gid.index);
}

#[test]
fn input_errors_are_typed() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    let End {
        pd, cq, qp, mut mr, ..
    } = end(&ctx);
    assert!(matches!(
        mr.write(4090, b"too long"),
        Err(Error::OutOfBounds {
            offset: 4090,
            len: 8,
            size: 4096,
            ..
        })
    ));
    assert!(matches!(
        qp.post_recv(&RecvRequest::new(&mr, 4000..5000).wr_id(0)),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        pd.reg_mr(0, ACCESS),
        Err(Error::InvalidArgument(_))
    ));
    // A region of another protection domain.
    let other = ctx.alloc_pd().unwrap().reg_mr(64, ACCESS).unwrap();
    assert!(matches!(
        qp.post_recv(&RecvRequest::new(&other, 0..8).wr_id(0)),
        Err(Error::InvalidArgument(_))
    ));
    // A CQ without a channel cannot be armed.
    assert!(matches!(
        cq.req_notify(false),
        Err(Error::InvalidArgument(_))
    ));
    // Remote write without local write (ibv_reg_mr(3)).
    assert!(matches!(
        pd.reg_mr(64, AccessFlags::REMOTE_WRITE),
        Err(Error::InvalidArgument(_))
    ));
    // Posting before the QP is ready is refused before libibverbs is
    // called: a receive in RESET, a send before RTS.
    assert!(matches!(
        qp.post_recv(&RecvRequest::new(&mr, 0..8).wr_id(0)),
        Err(Error::State {
            call: "ibv_post_recv",
            ..
        })
    ));
    assert!(matches!(
        qp.post_send(&SendRequest::send(&mr, 0..8)),
        Err(Error::State {
            call: "ibv_post_send",
            ..
        })
    ));
    // Connection options outside their widths.
    let mut bad = opts(&ctx);
    bad.timeout = 200;
    assert!(matches!(
        qp.modify_to_rts(&bad),
        Err(Error::InvalidArgument(_))
    ));
}

/// rxe and siw queue a send posted before RTS, then report the doorbell's
/// failure: the send went out with the next post after the connection. The
/// crate refuses it before libibverbs sees it, so only the later send
/// arrives.
#[test]
fn a_send_refused_before_the_connection_never_goes_out() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    let (mut a, mut b) = (end(&ctx), end(&ctx));
    a.mr.write(0, b"early").unwrap();
    a.mr.write(64, b"later").unwrap();
    for (qp, mr) in [(&a.qp, &a.mr), (&b.qp, &b.mr)] {
        let err = qp
            .post_send(&SendRequest::send(mr, 0..5).wr_id(1))
            .unwrap_err();
        assert!(matches!(err, Error::State { .. }), "{err}");
    }
    a.qp.modify_to_init(1, ACCESS).unwrap();
    let err =
        a.qp.post_send(&SendRequest::send(&a.mr, 0..5).wr_id(1))
            .unwrap_err();
    assert!(matches!(err, Error::State { .. }), "{err}");
    a.qp.modify_to_reset().unwrap();

    connect(&a.qp, &ctx, &b.qp, &ctx);
    b.mr.fill(0);
    b.qp.post_recv(&RecvRequest::new(&b.mr, 0..64).wr_id(10))
        .unwrap();
    b.qp.post_recv(&RecvRequest::new(&b.mr, 64..128).wr_id(11))
        .unwrap();
    a.qp.post_send(&SendRequest::send(&a.mr, 64..69).wr_id(2))
        .unwrap();
    let sent = poll_n(&a.cq, 1);
    assert_eq!(sent[0].wr_id(), 2);
    let got = poll_n(&b.cq, 1);
    assert!(got[0].is_success(), "{}", got[0].status_str());
    assert_eq!(got[0].wr_id(), 10);
    assert_eq!(b.mr.to_vec(0..5).unwrap(), b"later");
    // Nothing else arrives.
    std::thread::sleep(Duration::from_millis(200));
    let mut wc = [ibverbs_async::WorkCompletion::default(); 4];
    assert!(a.cq.poll(&mut wc).unwrap().is_empty());
    assert!(b.cq.poll(&mut wc).unwrap().is_empty());
    assert_eq!(b.mr.to_vec(64..69).unwrap(), [0; 5]);
    drop((a, b));
}

#[test]
fn objects_in_use_cannot_be_destroyed_explicitly() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    let (a, b) = (end(&ctx), end(&ctx));
    connect(&a.qp, &ctx, &b.qp, &ctx);
    b.qp.post_recv(&RecvRequest::new(&b.mr, 0..64).wr_id(1))
        .unwrap();

    // The CQ is used by a QP.
    let (cq, err) = b.cq.destroy().unwrap_err();
    assert!(
        matches!(
            err,
            Error::InUse {
                object: ObjectKind::CompletionQueue,
                ..
            }
        ),
        "{err}"
    );
    // The region has a receive posted on it: the QP keeps it registered.
    let (mr, err) = b.mr.dereg().unwrap_err();
    assert!(
        matches!(
            err,
            Error::InUse {
                object: ObjectKind::MemoryRegion,
                ..
            }
        ),
        "{err}"
    );
    // The PD has children.
    let (pd, err) = b.pd.dealloc().unwrap_err();
    assert!(matches!(err, Error::InUse { .. }), "{err}");

    // Children first, then each parent, each with its error reported.
    let _w = watchdog("explicit destroys", WAIT);
    b.qp.destroy().unwrap();
    mr.dereg().unwrap();
    cq.destroy().unwrap();
    pd.dealloc().unwrap();
    drop(a);
}

#[test]
fn completion_channel_events_with_batched_acks() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    let channel = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq_with_channel(64, &channel, 0).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let recv_side = pd.create_qp(&QpInit::rc(&cq, &cq)).unwrap();
    let b = end(&ctx);
    connect(&b.qp, &ctx, &recv_side, &ctx);
    let mut mr = pd.reg_mr(4096, ACCESS).unwrap();
    mr.fill(0);

    // Nothing yet.
    assert!(channel.try_get_cq_event().unwrap().is_none());
    assert!(channel
        .get_cq_event_timeout(Duration::from_millis(200))
        .unwrap()
        .is_none());

    // One completion event per round: arm, receive one message, read the
    // event, drain the CQ.
    let mut round = 0u64;
    let mut one_round = || {
        cq.req_notify(false).unwrap();
        recv_side
            .post_recv(&RecvRequest::new(&mr, 0..64).wr_id(round))
            .unwrap();
        b.qp.post_send(&SendRequest::send(&b.mr, 0..64).signaled(false))
            .unwrap();
        let ev_cq = channel
            .get_cq_event_timeout(WAIT)
            .unwrap()
            .expect("a completion event");
        assert!(ev_cq.same_as(&cq));
        let wc = poll_n(&ev_cq, 1);
        assert_eq!(wc[0].wr_id(), round);
        round += 1;
    };

    for n in 1..=3 {
        one_round();
        assert_eq!(cq.unacked_cq_events(), n);
    }
    cq.ack_cq_events();
    assert_eq!(cq.unacked_cq_events(), 0);

    // A full batch is acknowledged by the read that fills it.
    for n in 1..=CQ_EVENT_ACK_BATCH {
        one_round();
        assert_eq!(cq.unacked_cq_events(), n % CQ_EVENT_ACK_BATCH);
    }

    // Two more, left unacknowledged: destroying the CQ acknowledges them
    // first instead of waiting forever in ibv_destroy_cq.
    one_round();
    one_round();
    assert_eq!(cq.unacked_cq_events(), 2);
    let _w = watchdog(
        "destroying a CQ with unacknowledged completion events",
        WAIT,
    );
    recv_side.destroy().unwrap();
    cq.destroy().unwrap();
    channel.destroy().unwrap();
}

#[test]
fn completion_channel_event_for_a_cq_whose_handles_are_gone() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    let channel = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq_with_channel(16, &channel, 0).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let qp = pd.create_qp(&QpInit::rc(&cq, &cq)).unwrap();
    let b = end(&ctx);
    connect(&b.qp, &ctx, &qp, &ctx);
    let mr = pd.reg_mr(64, ACCESS).unwrap();
    cq.req_notify(false).unwrap();
    qp.post_recv(&RecvRequest::new(&mr, 0..64).wr_id(1))
        .unwrap();
    b.qp.post_send(&SendRequest::send(&b.mr, 0..8)).unwrap();
    // Wait for the event to be queued, without reading it.
    assert!(channel.fd().wait_readable(Some(WAIT)).unwrap());
    // Destroying the CQ with its event still queued does not hang, and the
    // event goes with it.
    {
        let _w = watchdog("destroying a CQ with a queued completion event", WAIT);
        drop(qp);
        drop(cq);
    }
    assert!(channel.try_get_cq_event().unwrap().is_none());
}

#[test]
fn two_threads_on_one_completion_channel() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    let channel = ctx.create_comp_channel().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.reg_mr(4096, ACCESS).unwrap();
    let cqs: Vec<_> = (0..4)
        .map(|_| ctx.create_cq_with_channel(16, &channel, 0).unwrap())
        .collect();
    let mut links = Vec::new();
    for cq in &cqs {
        let qp = pd.create_qp(&QpInit::rc(cq, cq)).unwrap();
        let b = end(&ctx);
        connect(&b.qp, &ctx, &qp, &ctx);
        cq.req_notify(false).unwrap();
        qp.post_recv(&RecvRequest::new(&mr, 0..64).wr_id(0))
            .unwrap();
        links.push((qp, b));
    }
    let collect = || {
        let mut got = Vec::new();
        while let Some(cq) = channel
            .get_cq_event_timeout(Duration::from_secs(2))
            .unwrap()
        {
            got.push(cq.id());
        }
        got
    };
    let (one, two) = std::thread::scope(|s| {
        let t1 = s.spawn(collect);
        let t2 = s.spawn(collect);
        std::thread::sleep(Duration::from_millis(100));
        for (_, b) in &links {
            b.qp.post_send(&SendRequest::send(&b.mr, 0..8)).unwrap();
        }
        (t1.join().unwrap(), t2.join().unwrap())
    });
    let mut all: Vec<_> = one.iter().chain(&two).copied().collect();
    all.sort();
    let mut expected: Vec<_> = cqs.iter().map(|c| c.id()).collect();
    expected.sort();
    assert_eq!(
        all, expected,
        "each CQ's event reached exactly one thread: {one:?} {two:?}"
    );
}

/// A QP whose one CQ reports to a completion channel, connected to an
/// [`End`] on the same device, with a 4 KiB region of the QP's PD.
struct ChannelLink {
    channel: CompChannel,
    cq: Cq,
    qp: Qp,
    mr: Mr,
    b: End,
}

fn channel_link(ctx: &Context) -> ChannelLink {
    let channel = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq_with_channel(64, &channel, 0).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let qp = pd
        .create_qp(&QpInit::rc(&cq, &cq).cap(QpCap::new(16, 32)))
        .unwrap();
    let b = end(ctx);
    connect(&b.qp, ctx, &qp, ctx);
    let mr = pd.reg_mr(4096, ACCESS).unwrap();
    ChannelLink {
        channel,
        cq,
        qp,
        mr,
        b,
    }
}

#[test]
fn tokio_completion_events() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    use futures_core::Stream;

    let ctx = open("rxe0");
    let ChannelLink {
        channel,
        cq,
        qp,
        mr,
        b,
    } = channel_link(&ctx);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut events = CqEvents::new(&channel).unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(200), events.next())
                .await
                .is_err()
        );
        let mut received = 0;
        for round in 0..3u64 {
            cq.req_notify(false).unwrap();
            qp.post_recv(&RecvRequest::new(&mr, 0..64).wr_id(round))
                .unwrap();
            b.qp.post_send(&SendRequest::send(&b.mr, 0..8).signaled(false))
                .unwrap();
            let ev_cq = if round % 2 == 0 {
                tokio::time::timeout(WAIT, events.next()).await
            } else {
                tokio::time::timeout(
                    WAIT,
                    std::future::poll_fn(|cx| std::pin::Pin::new(&mut events).poll_next(cx)),
                )
                .await
                .map(|item| item.expect("the stream never ends"))
            }
            .expect("a completion event within the timeout")
            .unwrap();
            assert!(ev_cq.same_as(&cq));
            // Drain until empty, then wait again.
            let deadline = Instant::now() + WAIT;
            while received < round + 1 {
                let mut wc = [ibverbs_async::WorkCompletion::default(); 8];
                let n = ev_cq.poll(&mut wc).unwrap().len() as u64;
                received += n;
                assert!(Instant::now() < deadline);
                if n == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }
        assert_eq!(cq.unacked_cq_events(), 3);
    });
    let _w = watchdog("destroying after tokio completion events", WAIT);
    drop(qp);
    drop(cq);
}

#[test]
fn regions_stay_registered_while_a_queue_holds_them() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx: Context = open("rxe0");
    let (a, b) = (end(&ctx), end(&ctx));
    connect(&a.qp, &ctx, &b.qp, &ctx);
    let End { qp, mr, cq, .. } = b;
    qp.post_recv(&RecvRequest::new(&mr, 0..64).wr_id(9))
        .unwrap();
    // The receive buffer's handle goes away; the QP still holds the region,
    // so the incoming data lands in registered memory.
    drop(mr);
    a.qp.post_send(&SendRequest::send(&a.mr, 0..64)).unwrap();
    assert!(poll_n(&cq, 1)[0].is_success());
    assert!(poll_n(&a.cq, 1)[0].is_success());
    let _w = watchdog("teardown", WAIT);
    qp.destroy().unwrap();
}

#[test]
fn poll_returns_the_filled_part_of_the_buffer() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    let (a, b) = (end(&ctx), end(&ctx));
    connect(&a.qp, &ctx, &b.qp, &ctx);
    for i in 0..3u64 {
        b.qp.post_recv(
            &RecvRequest::new(&b.mr, 64 * i as usize..64 * (i as usize + 1)).wr_id(10 + i),
        )
        .unwrap();
    }
    for i in 0..3u64 {
        a.qp.post_send(&SendRequest::send(&a.mr, 0..8).wr_id(i))
            .unwrap();
    }
    assert_eq!(poll_n(&a.cq, 3).len(), 3);
    // The receives completed before the sends were acknowledged; give a
    // slow guest some room all the same.
    std::thread::sleep(Duration::from_millis(200));
    let mut buf = [ibverbs_async::WorkCompletion::default(); 2];
    let first = b.cq.poll(&mut buf).unwrap();
    assert_eq!(first.len(), 2, "{first:?}");
    assert_eq!(
        first.iter().map(|wc| wc.wr_id()).collect::<Vec<_>>(),
        [10, 11]
    );
    let second = b.cq.poll(&mut buf).unwrap();
    assert_eq!(second.len(), 1, "{second:?}");
    assert_eq!(second[0].wr_id(), 12);
    assert!(second[0].is_success());
    assert!(b.cq.poll(&mut buf).unwrap().is_empty());
    // An empty buffer reads nothing.
    assert!(b.cq.poll(&mut []).unwrap().is_empty());
}

#[test]
fn poll_cq_arms_polls_and_waits_without_losing_a_completion() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    let ChannelLink {
        channel,
        cq,
        qp,
        mr,
        b,
    } = channel_link(&ctx);
    let b = std::sync::Arc::new(b);
    let plain = ctx.create_cq(4).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    const ROUNDS: u64 = 80;
    rt.block_on(async {
        let events = CqEvents::new(&channel).unwrap();
        let mut wc = [ibverbs_async::WorkCompletion::default(); 8];
        // Misuse is refused before anything is armed or read.
        let err = events.poll_cq(&plain, &mut wc).await.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
        let err = events.poll_cq(&cq, &mut []).await.unwrap_err();
        assert!(matches!(err, Error::BufferTooSmall { .. }), "{err}");

        let mut received = Vec::new();
        for round in 0..ROUNDS {
            qp.post_recv(&RecvRequest::new(&mr, 0..64).wr_id(round))
                .unwrap();
            let mut late_sender = None;
            match round % 3 {
                // The completion is already there: the first poll finds it.
                0 => {
                    b.qp.post_send(&SendRequest::send(&b.mr, 0..8).signaled(false))
                        .unwrap();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                // It arrives while the call waits for the channel's event.
                1 => {
                    let b = std::sync::Arc::clone(&b);
                    late_sender = Some(std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(30));
                        b.qp.post_send(&SendRequest::send(&b.mr, 0..8).signaled(false))
                            .unwrap();
                    }));
                }
                // Around the arming: whichever side of it, one call gets it.
                _ => {
                    b.qp.post_send(&SendRequest::send(&b.mr, 0..8).signaled(false))
                        .unwrap();
                }
            }
            let got = tokio::time::timeout(WAIT, events.poll_cq(&cq, &mut wc))
                .await
                .unwrap_or_else(|_| panic!("round {round}: no completion within {WAIT:?}"))
                .unwrap();
            assert!(!got.is_empty());
            if let Some(sender) = late_sender {
                sender.join().unwrap();
            }
            received.extend(got.iter().map(|wc| {
                assert!(wc.is_success(), "{}", wc.status_str());
                wc.wr_id()
            }));
        }
        assert_eq!(received, (0..ROUNDS).collect::<Vec<_>>());
        // Events are acknowledged in batches: fewer than one batch is
        // still counted.
        assert!(cq.unacked_cq_events() < CQ_EVENT_ACK_BATCH);
    });
    let _w = watchdog("destroying after poll_cq", WAIT);
    drop(qp);
    drop(cq);
}

#[test]
fn a_stopper_ends_a_blocked_cq_event_wait_without_losing_the_event() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    let ChannelLink {
        channel,
        cq,
        qp,
        mr,
        b,
    } = channel_link(&ctx);
    let stopper = Stopper::new().unwrap();
    let start = Instant::now();
    let stopped = std::thread::scope(|s| {
        let waiter = s.spawn(|| channel.wait_cq_event(&stopper, None).unwrap().is_stopped());
        std::thread::sleep(Duration::from_millis(200));
        stopper.stop().unwrap();
        waiter.join().unwrap()
    });
    assert!(stopped);
    assert!(start.elapsed() < WAIT);

    // An event that arrives while stopped stays in the channel for the
    // next wait.
    qp.post_recv(&RecvRequest::new(&mr, 0..64).wr_id(5))
        .unwrap();
    cq.req_notify(false).unwrap();
    b.qp.post_send(&SendRequest::send(&b.mr, 0..8).signaled(false))
        .unwrap();
    assert!(channel.fd().wait_readable(Some(WAIT)).unwrap());
    assert!(channel.wait_cq_event(&stopper, None).unwrap().is_stopped());
    stopper.reset().unwrap();
    let Wait::Ready(ev_cq) = channel.wait_cq_event(&stopper, Some(WAIT)).unwrap() else {
        panic!("the event was lost");
    };
    assert!(ev_cq.same_as(&cq));
    assert_eq!(poll_n(&cq, 1)[0].wr_id(), 5);
    let _w = watchdog("destroying after a stopped wait", WAIT);
    drop((qp, ev_cq, cq));
}

/// A peer's QP number has 24 bits (the packet header's destination QP):
/// rxe masks a wider one and connects to another QP than the one given.
/// The crate refuses it before the QP leaves INIT.
#[test]
fn a_remote_qp_number_wider_than_24_bits_is_refused() {
    skip_on_iwarp!("RC queue pairs are connected by hand here (modify_qp with the peer's GID); iWARP connects them only through rdma_cm");
    let ctx = open("rxe0");
    let (a, b) = (end(&ctx), end(&ctx));
    let oa = opts(&ctx).psn(0x1234);
    let ob = opts(&ctx).psn(0x4321);
    let eb = b.qp.endpoint(&ob).unwrap();
    assert!(eb.qp_num <= 0x00ff_ffff);
    let wide = ibverbs_async::Endpoint::new(eb.qp_num | 0x0100_0000, eb.psn, eb.lid, eb.gid);
    a.qp.modify_to_init(oa.port, oa.access).unwrap();
    let r = a.qp.modify_to_rtr(&oa, &wide);
    eprintln!(
        "modify_to_rtr towards QP {:#x} (QP {:#x} exists): {r:?}; state {:?}",
        wide.qp_num,
        eb.qp_num,
        a.qp.state().unwrap()
    );
    assert!(
        matches!(r, Err(Error::InvalidArgument(_))),
        "a QP number over 24 bits was accepted: {r:?}"
    );
    assert_eq!(a.qp.state().unwrap(), QpState::Init);
    // `connect` finds it before the first transition.
    let c = end(&ctx);
    assert!(matches!(
        c.qp.connect(&oa, &wide),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(c.qp.state().unwrap(), QpState::Reset);
    // The QP number as given works.
    a.qp.modify_to_rtr(&oa, &eb).unwrap();
}
