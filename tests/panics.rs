//! A panic in application code at the three places where it hurts most,
//! caught with `catch_unwind`, on the real tcp provider over 127.0.0.1:
//!
//! - while completions are being handled (some reclaimed, some not);
//! - while operations are in flight (their buffers owned by the provider);
//! - while the `fi_info` of a connection request is held.
//!
//! Afterwards nothing is lost and nothing is unusable: every buffer comes
//! back to its pool (so `take()` succeeds for every slot), the queues and
//! endpoints go on working, every object closes with `close()` returning
//! `Ok`, and the request's `fi_info` is freed exactly once (the valgrind
//! run, `tests/valgrind/run.sh`, checks that no block is freed twice or
//! lost).
mod common;

use common::*;
use libfabric::cq::{CqAttr, CqRead, Msg, MsgEntry};
use libfabric::ep::CqBind;
use libfabric::eq::EventBuf;
use libfabric::{BufferPool, CompletionQueue, Domain, Endpoint, PassiveEndpoint};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

const SLOTS: usize = 8;

/// Silences the default panic message of the panics these tests provoke,
/// keeping every other one.
fn quiet_expected_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let expected = message(info.payload()).starts_with("provoked:");
            if !expected {
                default(info);
            }
        }));
    });
}

/// The text of a panic payload.
fn message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("")
}

/// Sends `count` numbered messages from the client to the server (which
/// must have receives posted) and waits for the send completions.
fn send_numbered(pair: &Pair<Msg>, count: u64) {
    for i in 0..count {
        let mut buf = pair.client_pool.take().expect("send buffer");
        buf[..8].copy_from_slice(&i.to_le_bytes());
        pair.client.send(buf, 8).expect("fi_send");
    }
    let (_, completed) = reclaim_flushed(
        &pair.client_cq,
        &pair.client_pool,
        count as usize,
        Duration::from_secs(10),
    );
    assert_eq!(completed, count as usize, "every send completed");
}

/// Closes every object of the pair, in order, each close returning `Ok`;
/// both pools must be whole first.
fn close_pair(pair: Pair<Msg>) {
    assert_pool_whole(&pair.server_pool, SLOTS);
    assert_pool_whole(&pair.client_pool, SLOTS);
    pair.close(|_, _, _| {});
}

#[test]
fn a_panic_while_handling_completions_loses_no_buffer() {
    quiet_expected_panics();
    let pair = connect_pair::<Msg>(CqAttr::new().size(64), SLOTS, 64);
    for _ in 0..SLOTS {
        pair.server
            .recv(pair.server_pool.take().unwrap())
            .expect("fi_recv");
    }
    send_numbered(&pair, SLOTS as u64);

    // Application code reads the completions, hands back and handles each
    // buffer, and panics on the third: two buffers were handled, one is
    // being handled, the rest of its batch was read but not yet reclaimed.
    // All of it unwinds.
    let handled = std::cell::Cell::new(0);
    let in_batch = std::cell::Cell::new(0);
    let result = catch_unwind(AssertUnwindSafe(|| {
        let mut entries: [MsgEntry; SLOTS] = Default::default();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match pair.server_cq.read(&mut entries).expect("fi_cq_read") {
                CqRead::Completions(c) => {
                    in_batch.set(c.len());
                    for entry in &c {
                        let buf = pair.server_pool.reclaim(entry).expect("receive buffer");
                        let i = u64::from_le_bytes(buf[..8].try_into().unwrap());
                        if handled.get() == 2 {
                            panic!("provoked: application code failed on message {i}");
                        }
                        handled.set(handled.get() + 1);
                    }
                }
                CqRead::Error(e) => panic!("error completion: {e:?}"),
                _ => assert!(Instant::now() < deadline, "receives within 10 s"),
            }
        }
    }));
    let payload = result.expect_err("the application code panicked");
    assert!(
        message(&*payload).starts_with("provoked:"),
        "{}",
        message(&*payload)
    );
    println!(
        "panicked while handling the 3rd of {SLOTS} completions ({} handled, its batch of {})",
        handled.get(),
        in_batch.get()
    );
    // Those not read yet are still queued.
    let mut rest: [MsgEntry; SLOTS] = Default::default();
    let mut unread = 0;
    while let CqRead::Completions(c) = pair.server_cq.read(&mut rest).expect("fi_cq_read") {
        for entry in &c {
            drop(pair.server_pool.reclaim(entry).expect("receive buffer"));
            unread += 1;
        }
    }
    println!("{unread} completion(s) were still queued");

    // Every buffer is back: the handled ones, the one being handled, and
    // those of the completions that were never reclaimed.
    assert_pool_whole(&pair.server_pool, SLOTS);
    // The queues and endpoints still work.
    for _ in 0..SLOTS {
        pair.server
            .recv(pair.server_pool.take().unwrap())
            .expect("fi_recv after the panic");
    }
    send_numbered(&pair, SLOTS as u64);
    let (flushed, completed) = reclaim_flushed(
        &pair.server_cq,
        &pair.server_pool,
        SLOTS,
        Duration::from_secs(10),
    );
    assert_eq!((flushed, completed), (0, SLOTS), "traffic after the panic");
    println!("after the panic: every buffer was back and {SLOTS} more messages went through");
    close_pair(pair);
}

#[test]
fn a_panic_with_operations_in_flight_loses_no_buffer() {
    quiet_expected_panics();
    let pair = connect_pair::<Msg>(CqAttr::new().size(64), SLOTS, 64);

    // Application code posts every receive buffer, then panics: the
    // buffers belong to the provider, no Rust value owns them.
    let result = catch_unwind(AssertUnwindSafe(|| {
        for _ in 0..SLOTS {
            let buf = pair.server_pool.take().unwrap();
            pair.server.recv(buf).expect("fi_recv");
        }
        panic!("provoked: application code failed with {SLOTS} receives posted");
    }));
    assert!(result.is_err());
    assert!(
        pair.server_pool.take().is_none(),
        "the posted buffers still belong to the provider"
    );

    // Closing the endpoint hands the buffers back, whether or not the
    // provider flushes the receives.
    // (The server endpoint closes first.)
    pair.close(|server_cq, server_pool, client_pool| {
        assert_pool_whole(server_pool, SLOTS);
        let flushed = read_flushed_of_closed(server_cq, server_pool);
        assert!(flushed <= SLOTS, "{flushed} flushed of {SLOTS}");
        println!(
            "panicked with {SLOTS} receives in flight; closing the endpoint handed every buffer \
             back (the provider flushed {flushed} of them)"
        );
        assert_pool_whole(server_pool, SLOTS);
        assert_pool_whole(client_pool, SLOTS);
    });
}

/// A client endpoint connecting to `pep`, with its own domain, EQ and CQ.
struct Client {
    eq: libfabric::EventQueue,
    cq: CompletionQueue<Msg>,
    ep: Endpoint,
    domain: Domain,
}

fn connect_client(fabric: &libfabric::Fabric, pep: &PassiveEndpoint, data: &[u8]) -> Client {
    let info = client_info(pep.local_addr().expect("listener address"));
    let domain = Domain::open(fabric, &info).expect("fi_domain");
    let eq = fd_eq(fabric);
    let cq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new().size(64)).expect("fi_cq_open");
    let ep = Endpoint::open(&domain, &info).expect("fi_endpoint");
    ep.bind_eq(&eq).expect("bind eq");
    ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV)
        .expect("bind cq");
    ep.enable().expect("fi_enable");
    ep.connect(data).expect("fi_connect");
    Client { eq, cq, ep, domain }
}

impl Client {
    fn close(self) {
        self.ep.close().expect("close the client endpoint");
        self.cq.close().expect("close the client CQ");
        self.domain.close().expect("close the client domain");
        self.eq.close().expect("close the client EQ");
    }
}

#[test]
fn a_panic_while_a_connection_request_is_held_frees_its_info_once() {
    quiet_expected_panics();
    let (fabric, _) = fabric();
    let (pep, eq) = listener(&fabric);

    // 1. The request stays with the application while its code panics:
    //    afterwards it is intact and is accepted; the connection works.
    let first = connect_client(&fabric, &pep, b"first");
    let ev = next_event(&eq, &[&first.eq], Duration::from_secs(10));
    let Ev::ConnReq { request, data } = ev else {
        panic!("expected FI_CONNREQ, got {ev:?}")
    };
    assert_eq!(data, b"first");
    let result = catch_unwind(AssertUnwindSafe(|| {
        let info = request.info();
        assert_eq!(info.provider(), PROVIDER);
        panic!("provoked: application code failed while looking at the request");
    }));
    assert!(result.is_err());
    let sdomain = Domain::open(&fabric, request.info()).expect("fi_domain (server)");
    let scq = CompletionQueue::<Msg>::open(&sdomain, &CqAttr::new().size(64)).expect("fi_cq_open");
    let sep = Endpoint::from_request(&sdomain, request).expect("fi_endpoint from the request");
    sep.bind_eq(&eq).expect("bind eq");
    sep.bind_cq(&scq, CqBind::TRANSMIT | CqBind::RECV)
        .expect("bind cq");
    sep.enable().expect("fi_enable");
    sep.accept(b"ok").expect("fi_accept after the panic");
    let ev = next_event(&first.eq, &[&eq], Duration::from_secs(10));
    assert!(
        matches!(&ev, Ev::Connected { data, .. } if data == b"ok"),
        "client: {ev:?}"
    );
    let ev = next_event(&eq, &[&first.eq], Duration::from_secs(10));
    assert!(matches!(ev, Ev::Connected { .. }), "server: {ev:?}");
    let spool = BufferPool::new(&sdomain, SLOTS, 64).expect("pool");
    let cpool = BufferPool::new(&first.domain, SLOTS, 64).expect("pool");
    sep.recv(spool.take().unwrap()).expect("fi_recv");
    let mut tx = cpool.take().unwrap();
    tx[..5].copy_from_slice(b"hello");
    first.ep.send(tx, 5).expect("fi_send");
    let (_, sent) = reclaim_flushed(&first.cq, &cpool, 1, Duration::from_secs(10));
    let (_, got) = reclaim_flushed(&scq, &spool, 1, Duration::from_secs(10));
    assert_eq!((sent, got), (1, 1), "the accepted connection carries data");
    println!("a request held across a panic was accepted afterwards and carried data");

    // 2. The request is moved into the code that panics: unwinding drops
    //    the request, which rejects it, then frees its fi_info, once. The
    //    peer sees the rejection.
    let second = connect_client(&fabric, &pep, b"second");
    let ev = next_event(&eq, &[&second.eq, &first.eq], Duration::from_secs(10));
    let Ev::ConnReq { request, data } = ev else {
        panic!("expected FI_CONNREQ, got {ev:?}")
    };
    assert_eq!(data, b"second");
    let result = catch_unwind(AssertUnwindSafe(move || {
        let request = request;
        let _ = request.info().domain_name();
        panic!("provoked: application code failed while owning the request");
    }));
    assert!(result.is_err());
    let ev = next_event(&second.eq, &[&eq], Duration::from_secs(10));
    match ev {
        Ev::Error { err, data, .. } => {
            assert_eq!(err, libfabric::Errno::CONNREFUSED);
            assert!(
                data.is_empty(),
                "a dropped request is rejected without data"
            );
        }
        other => panic!("the second client expected a rejection, got {other:?}"),
    }
    println!("a request dropped by a panic was rejected; the peer saw ECONNREFUSED");

    // 3. A peeked request owns no fi_info: only the read one does.
    let third = connect_client(&fabric, &pep, b"third");
    let mut buf = EventBuf::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let _ = third.eq.peek(&mut EventBuf::new());
        match eq.peek(&mut buf).expect("fi_eq_read(FI_PEEK)") {
            // A peeked request stays with the queue: no request to answer.
            libfabric::eq::EqRead::Event(libfabric::eq::Event::UnownedConnReq(_)) => break,
            libfabric::eq::EqRead::Empty => {}
            other => panic!("{other:?}"),
        }
        assert!(Instant::now() < deadline, "no FI_CONNREQ within 10 s");
        std::thread::sleep(Duration::from_micros(200));
    }
    let ev = next_event(&eq, &[&third.eq], Duration::from_secs(10));
    let Ev::ConnReq { request, .. } = ev else {
        panic!("expected the peeked FI_CONNREQ again, got {ev:?}")
    };
    request.reject(&[]).expect("fi_reject");
    let ev = next_event(&third.eq, &[&eq], Duration::from_secs(10));
    assert!(
        matches!(
            ev,
            Ev::Error {
                err: libfabric::Errno::CONNREFUSED,
                ..
            }
        ),
        "{ev:?}"
    );

    // Everything closes.
    assert_pool_whole(&spool, SLOTS);
    assert_pool_whole(&cpool, SLOTS);
    sep.close().expect("close the server endpoint");
    drop((spool, cpool));
    scq.close().expect("close the server CQ");
    sdomain.close().expect("close the server domain");
    first.close();
    second.close();
    third.close();
    pep.close().expect("close the passive endpoint");
    eq.close().expect("close the EQ");
    fabric.close().expect("close the fabric");
}
