//! Misuse that fi_eq(3), fi_cq(3), fi_poll(3), fi_cm(3), fi_endpoint(3) and
//! fi_mr(3) warn about, and that no other test here tries: each is refused
//! with a typed error, or made harmless, on the real provider. The crate
//! documentation's "Misuse" table lists every case and the test or
//! compile-fail file that covers it.
// Wait sets, poll sets and FI_WAIT_MUTEX_COND are deprecated by libfabric
// 2.x; their rules are still tested.
#![cfg_attr(libfabric_2, allow(deprecated))]
#[macro_use]
mod common;

use common::*;
use libfabric::cq::{CqAttr, CqRead, Msg, MsgEntry};
use libfabric::ep::CqBind;
use libfabric::eq::{EqRead, ErrDataBuf, Event, EventBuf};
use libfabric::wait::{trywait, WaitObj, WaitSet, Waitable};
use libfabric::{
    BufferPool, CompletionQueue, Domain, Endpoint, Errno, Error, EventQueue, ObjectKind,
};
use std::time::{Duration, Instant};

/// Reads the next connection request on `server_eq`, driving `client_eq`.
fn request(server_eq: &EventQueue, client_eq: &EventQueue) -> libfabric::ConnRequest {
    match next_event(server_eq, &[client_eq], Duration::from_secs(10)) {
        Ev::ConnReq { request, .. } => request,
        other => panic!("expected FI_CONNREQ, got {other:?}"),
    }
}

#[test]
fn closing_an_eq_bound_to_endpoints_reports_its_users() {
    skip_unless_msg!();
    // fi_eq(3)/fi_close(3): closing an EQ that endpoints are bound to fails
    // with -FI_EBUSY. Here the endpoints hold the queue open.
    let (fabric, domain, _) = fabric_domain();
    let (pep, server_eq, _) = listener(&fabric);
    let client_eq = fd_eq(&fabric);
    let ep = connecting(&domain, &client_eq, &pep, b"x");
    match client_eq.clone().close() {
        Err((_, Error::InUse { object, users })) => {
            assert_eq!(object, ObjectKind::EventQueue);
            assert_eq!(object.to_string(), "event queue");
            assert!(users >= 2, "this handle and the endpoint: {users}");
        }
        other => panic!("closing an EQ with a bound endpoint: {other:?}"),
    }
    match server_eq.clone().close() {
        Err((_, Error::InUse { .. })) => {}
        other => panic!("closing an EQ with a bound passive endpoint: {other:?}"),
    }
    request(&server_eq, &client_eq).reject(&[]).unwrap();
    ep.close().unwrap();
    client_eq.close().expect("free once its endpoint is closed");
    // A passive endpoint bound to a queue closes with that queue (the
    // provider may still hold connections it accepted for it).
    pep.close().unwrap();
    server_eq
        .close()
        .expect("free once its passive endpoint's last handle is gone");
}

#[test]
fn closing_a_domain_with_a_registered_pool_reports_it() {
    // fi_domain(3): a domain cannot be closed while memory regions (here a
    // pool's) are open.
    let (_fabric, domain, _) = fabric_domain();
    let pool = BufferPool::new(&domain, 2, 64).unwrap();
    assert!(matches!(
        domain.clone().close(),
        Err((
            _,
            Error::InUse {
                object: ObjectKind::Domain,
                ..
            }
        ))
    ));
    drop(pool);
    domain.close().expect("free once the pool is gone");
}

#[test]
fn err_data_stays_valid_after_later_reads() {
    skip_unless_msg!();
    // fi_eq(3): the err_data of an error entry is only valid until the next
    // read of the queue. Here it is copied into the caller's buffer, so it
    // outlives any number of later reads.
    let (fabric, domain, _) = fabric_domain();
    let (pep, server_eq, _) = listener(&fabric);
    let client_eq = fd_eq(&fabric);
    let first = connecting(&domain, &client_eq, &pep, b"1");
    request(&server_eq, &client_eq).reject(b"first").unwrap();
    let mut first_buf = ErrDataBuf::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut scratch = EventBuf::new();
    let first_err = loop {
        // Peeked, then read into a buffer of its own.
        match client_eq.peek(&mut scratch).unwrap() {
            EqRead::ErrorPending => break client_eq.read_err(&mut first_buf).unwrap().unwrap(),
            EqRead::Empty => {}
            other => panic!("{other:?}"),
        }
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_micros(200));
    };
    assert_eq!(first_err.err, Errno::CONNREFUSED);

    // More reads of the queue, including another error entry.
    let second = connecting(&domain, &client_eq, &pep, b"2");
    request(&server_eq, &client_eq).reject(b"second!").unwrap();
    match next_event(&client_eq, &[&server_eq], Duration::from_secs(10)) {
        Ev::Error { err, data } => {
            assert_eq!(err, Errno::CONNREFUSED);
            assert_eq!(data, b"second!");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        client_eq.read(&mut scratch).unwrap(),
        EqRead::Empty
    ));
    assert_eq!(
        first_err.err_data(),
        b"first",
        "the first entry's err_data is intact after later reads"
    );
    drop((first, second));
}

#[test]
fn wait_fd_and_sread_need_a_wait_object_on_completion_queues() {
    // fi_cq(3)/fi_control(3): FI_GETWAIT on a FI_WAIT_NONE queue, and sread
    // on a FI_WAIT_NONE or FI_WAIT_SET queue, are refused.
    let (fabric, domain, _) = fabric_domain();
    let none = CompletionQueue::<Msg>::open(&domain, &CqAttr::new().wait(WaitObj::None)).unwrap();
    assert!(matches!(
        none.wait_fd(),
        Err(Error::WrongWaitMode {
            actual: WaitObj::None,
            ..
        })
    ));
    let set = match WaitSet::open(&fabric, WaitObj::Fd) {
        Ok(set) => set,
        Err(e) => {
            // The verbs fabric has no wait sets: a typed refusal.
            assert!(!is_tcp(), "{e}");
            assert!(matches!(e, Error::UnsupportedWait { .. }), "{e}");
            return;
        }
    };
    let on_set = match CompletionQueue::<Msg>::open(&domain, &CqAttr::new().wait_set(&set)) {
        Ok(cq) => cq,
        Err(e) => {
            // verbs CQs cannot signal a wait set, and rxm's and rxd's are
            // refused (their wait sets keep closed endpoints' callbacks): a
            // typed refusal.
            assert!(provider() != "tcp", "{e}");
            assert!(matches!(e, Error::UnsupportedWait { .. }), "{e}");
            return;
        }
    };
    let mut entries: [MsgEntry; 1] = Default::default();
    assert!(matches!(
        on_set.sread(&mut entries, Some(Duration::from_millis(1))),
        Err(Error::WrongWaitMode {
            actual: WaitObj::Set,
            ..
        })
    ));
    assert!(matches!(on_set.wait_fd(), Err(Error::WrongWaitMode { .. })));
    assert!(
        matches!(set.clone().close(), Err((_, Error::InUse { .. }))),
        "the queue on the set keeps it open"
    );
}

#[test]
fn trywait_on_a_queue_without_a_wait_object_is_refused() {
    // fi_poll(3): fi_trywait is for queues with a wait object.
    let (fabric, domain, _) = fabric_domain();
    let eq = EventQueue::open(&fabric, &libfabric::eq::EqAttr::new().wait(WaitObj::None)).unwrap();
    let cq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new().wait(WaitObj::None)).unwrap();
    let fd = fd_eq(&fabric);
    for q in [&eq as &dyn Waitable, &cq] {
        // libfabric answers "may block" for such a queue, although there is
        // nothing to block on; alone or with a queue that has one.
        for set in [&[q][..], &[&fd as &dyn Waitable, q][..]] {
            match trywait(&fabric, set) {
                Err(Error::WrongWaitMode {
                    call: "fi_trywait",
                    actual: WaitObj::None,
                    ..
                }) => {}
                other => panic!("fi_trywait with a FI_WAIT_NONE queue: {other:?}"),
            }
        }
    }
}

#[test]
fn a_peeked_connection_request_owns_no_info() {
    skip_unless_msg!();
    // fi_eq(3): the fi_info of a CONNREQ belongs to the application once
    // read; a peek leaves it with the queue. Freeing the peeked one too
    // would free it twice.
    let (fabric, domain, _) = fabric_domain();
    let (pep, server_eq, _) = listener(&fabric);
    let client_eq = fd_eq(&fabric);
    let ep = connecting(&domain, &client_eq, &pep, b"peek");
    let mut buf = EventBuf::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let _ = client_eq.peek(&mut EventBuf::new());
        match server_eq.peek(&mut buf).unwrap() {
            EqRead::Event(Event::UnownedConnReq(c)) => {
                assert_eq!(c.data(), b"peek");
                break;
            }
            EqRead::Empty => {}
            other => panic!("{other:?}"),
        }
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_micros(200));
    }
    match server_eq.read(&mut buf).unwrap() {
        EqRead::Event(Event::ConnReq(c)) => {
            c.request.reject(&[]).unwrap();
        }
        other => panic!("{other:?}"),
    }
    drop(ep);
}

#[test]
fn a_completion_dropped_without_reclaim_frees_its_buffer() {
    skip_unless_msg!();
    if provider() == "sockets" {
        println!("SKIP {}: provider sockets: closing an endpoint does not flush its posted receives into the CQ", test_name());
        return;
    }
    // fi_cq(3): a completion is reported once. One that is read and then
    // dropped without BufferPool::reclaim (say, by a panic) still hands its
    // buffer back, and so does an error completion.
    let pair = connect_pair::<Msg>(CqAttr::new().size(64));
    let pool = BufferPool::new(&pair.server_domain, 4, 64).unwrap();
    for _ in 0..2 {
        pair.server.recv(pool.take().unwrap()).unwrap();
    }
    pair.client
        .send(pair.client_pool.take().unwrap(), 8)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut entries: [MsgEntry; 4] = Default::default();
    loop {
        let _ = pair.client_cq.read(&mut [MsgEntry::default()]);
        match pair.server_cq.read(&mut entries).unwrap() {
            CqRead::Completions(c) => {
                assert_eq!(c.len(), 1);
                break;
            }
            CqRead::Error(e) => panic!("error completion: {e:?}"),
            _ => {}
        }
        assert!(Instant::now() < deadline, "no receive within 10 s");
        std::thread::sleep(Duration::from_micros(200));
    }
    drop(entries);
    // The other receive fails when the endpoint is closed; its error entry
    // is dropped without reclaim_err.
    let libfabric::cq::CqRead::Empty = pair.server_cq.read(&mut [MsgEntry::default()]).unwrap()
    else {
        panic!("one receive is still posted")
    };
    let server = pair.server.clone();
    drop(pair.server);
    server.close().unwrap();

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let CqRead::Error(err) = pair.server_cq.read(&mut [MsgEntry::default()]).unwrap() {
            assert_eq!(err.err, Errno::CANCELED);
            break;
        }
        assert!(Instant::now() < deadline, "no flushed receive within 10 s");
        std::thread::sleep(Duration::from_micros(200));
    }
    let all: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
    assert_eq!(all.len(), 4, "both buffers came back to the pool");
}

#[test]
fn posting_past_the_queue_depth_hands_the_buffer_back() {
    skip_unless_msg!();
    if provider() == "sockets" {
        println!(
            "SKIP {}: provider sockets: receives are queued past rx_size without -FI_EAGAIN",
            test_name()
        );
        return;
    }
    // fi_msg(3): a full queue answers -FI_EAGAIN; the buffer is not lost.
    let pair = connect_pair::<Msg>(CqAttr::new().size(1024));
    let depth = pair.server.info().rx_size();
    assert!(depth > 0);
    // tcp refuses the post after rx_size; a verbs device may round the
    // queue up, so post until refused, within a bound.
    let bound = depth * 4 + 64;
    let pool = BufferPool::new(&pair.server_domain, bound + 1, 64).unwrap();
    let mut posted = 0;
    let err = loop {
        match pair.server.recv(pool.take().unwrap()) {
            Ok(()) => posted += 1,
            Err(e) => break e,
        }
        assert!(
            posted <= bound,
            "{posted} receives accepted with rx_size {depth}"
        );
    };
    if is_tcp() {
        assert_eq!(posted, depth, "tcp takes exactly rx_size receives");
    }
    assert!(
        err.1.is_again() || err.1.errno() == Some(Errno::NOMEM),
        "a full queue is -FI_EAGAIN: {}",
        err.1
    );
    assert_eq!(err.0.len(), pool.slot_size(), "the buffer is handed back");
    drop(err);
    assert!(
        pool.take().is_some(),
        "and returns to the pool when dropped"
    );
}

#[test]
fn accept_and_reject_data_over_the_maximum_are_refused() {
    skip_unless_msg!();
    // fi_cm(3): connection data is limited to FI_OPT_CM_DATA_SIZE.
    let (fabric, domain, _) = fabric_domain();
    let (pep, server_eq, _) = listener(&fabric);
    let max = pep.cm_data_size().expect("FI_OPT_CM_DATA_SIZE");
    let client_eq = fd_eq(&fabric);
    let too_big = vec![7u8; max + 1];
    let first = connecting(&domain, &client_eq, &pep, b"a");
    let req = request(&server_eq, &client_eq);
    let refused = req.reject(&too_big).unwrap_err();
    assert!(matches!(refused.1, Error::TooLarge { .. }), "{}", refused.1);
    let req = refused.0.expect("refused before fi_reject: handed back");
    req.reject(&too_big[..max]).expect("the maximum itself");
    match next_event(&client_eq, &[&server_eq], Duration::from_secs(10)) {
        Ev::Error { err, data } => {
            assert_eq!(err, Errno::CONNREFUSED);
            assert_eq!(data.len(), max);
        }
        other => panic!("{other:?}"),
    }

    let second = connecting(&domain, &client_eq, &pep, b"b");
    let req = request(&server_eq, &client_eq);
    let sdomain = Domain::open(&fabric, req.info()).unwrap();
    let cq = CompletionQueue::<Msg>::open(&sdomain, &CqAttr::new()).unwrap();
    let ep = Endpoint::from_request(&sdomain, req).unwrap();
    ep.bind_eq(&server_eq).unwrap();
    ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
    ep.enable().unwrap();
    assert!(matches!(ep.accept(&too_big), Err(Error::TooLarge { .. })));
    ep.accept(&too_big[..max]).expect("the maximum itself");
    match next_event(&client_eq, &[&server_eq], Duration::from_secs(10)) {
        Ev::Connected { data } => assert_eq!(data.len(), max),
        other => panic!("{other:?}"),
    }
    drop((first, second));
}

#[test]
fn an_address_vector_stays_open_while_its_endpoint_uses_it() {
    // fi_av(3)/fi_close(3): an AV bound to an endpoint must not be closed
    // first. Dropping the application's handle closes nothing: the
    // endpoint still reaches the addresses inserted before.
    use libfabric::av::AvType;
    use libfabric::cq::{Addr, Tagged};
    use libfabric::info::{Caps, EpType};
    let hints = libfabric::Hints::new()
        .provider("tcp;ofi_rxm")
        .ep_type(EpType::Rdm)
        .caps(Caps::MSG | Caps::TAGGED)
        .node(node());
    if !is_tcp() {
        return; // the RDM provider is tcp;ofi_rxm here
    }
    let info = info_for(&hints);
    let fabric = libfabric::Fabric::open(&info).unwrap();
    let domain = Domain::open(&fabric, &info).unwrap();
    let open = |domain: &Domain| {
        let av = libfabric::AddressVector::open(domain, AvType::Table, 4).unwrap();
        let cq = CompletionQueue::<Tagged>::open(domain, &CqAttr::new().size(64)).unwrap();
        let ep = Endpoint::open(domain, domain.info()).unwrap();
        ep.bind_av(&av).unwrap();
        ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
        ep.enable().unwrap();
        (av, cq, ep)
    };
    let (a_av, a_cq, a) = open(&domain);
    let (b_av, b_cq, b) = open(&domain);
    let b_in_a = a_av.insert(&b.name().unwrap()).unwrap();
    drop(b_av);
    drop(a_av); // the endpoint keeps it open
    let pool = BufferPool::new(&domain, 4, 64).unwrap();
    b.trecv(pool.take().unwrap(), 5, 0, Addr::UNSPEC).unwrap();
    let mut tx = pool.take().unwrap();
    tx[..2].copy_from_slice(b"av");
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(e) = a.tsend(tx, 2, 5, b_in_a) {
        assert!(e.1.is_again(), "{}", e.1);
        assert!(Instant::now() < deadline);
        tx = e.0;
        let _ = a_cq.read(&mut [Default::default()]);
        let _ = b_cq.read(&mut [Default::default()]);
    }
    let mut entries: [libfabric::cq::TaggedEntry; 1] = Default::default();
    loop {
        let _ = a_cq.read(&mut [Default::default()]);
        if let CqRead::Completions(c) = b_cq.read(&mut entries).unwrap() {
            let rx = pool.reclaim(&c[0]).unwrap();
            assert_eq!(&rx[..2], b"av");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no message through the dropped AV"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[test]
fn a_connection_request_is_answered_exactly_once() {
    skip_unless_msg!();
    // fi_cm(3): a request's handle is consumed by one fi_accept (through
    // the endpoint opened from it) or one fi_reject. A request dropped
    // unanswered is rejected, so the peer hears at once; an fi_info that
    // carries a request's handle cannot open a second endpoint.
    let (fabric, domain, _) = fabric_domain();
    let (pep, server_eq, _) = listener(&fabric);
    let client_eq = fd_eq(&fabric);
    let first = connecting(&domain, &client_eq, &pep, b"dropped");
    drop(request(&server_eq, &client_eq));
    match next_event(&client_eq, &[&server_eq], Duration::from_secs(10)) {
        Ev::Error { err, data } => {
            assert_eq!(err, Errno::CONNREFUSED, "a dropped request is rejected");
            assert!(data.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let second = connecting(&domain, &client_eq, &pep, b"copied");
    let req = request(&server_eq, &client_eq);
    let copy = req.info().to_owned_info().unwrap();
    let sdomain = Domain::open(&fabric, &copy).unwrap();
    match Endpoint::open(&sdomain, &copy) {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains("from_request"), "{msg}"),
        other => panic!("an endpoint from a copied request info: {other:?}"),
    }
    drop(copy);
    req.reject(b"once").unwrap();
    match next_event(&client_eq, &[&server_eq], Duration::from_secs(10)) {
        Ev::Error { data, .. } => assert_eq!(data, b"once"),
        other => panic!("{other:?}"),
    }
    drop((first, second));
}

#[test]
fn overwritten_and_flushed_completions_hand_their_buffers_back() {
    skip_unless_msg!();
    if provider() == "sockets" {
        println!("SKIP {}: provider sockets: closing an endpoint does not flush its posted receives into the CQ", test_name());
        return;
    }
    // A completion read and neither reclaimed nor kept (its read's
    // Completions guard dropped), and receives flushed when their endpoint
    // closes but never read: both give their buffers back to the pool.
    let pair = connect_pair::<Msg>(CqAttr::new().size(64));
    let pool = BufferPool::new(&pair.server_domain, 2, 64).unwrap();
    pair.server.recv(pool.take().unwrap()).unwrap();
    pair.server.recv(pool.take().unwrap()).unwrap();
    assert!(pool.take().is_none(), "both slots are posted");
    pair.client
        .send(pair.client_pool.take().unwrap(), 8)
        .unwrap();
    let mut entries: [MsgEntry; 1] = Default::default();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let _ = pair.client_cq.read(&mut [MsgEntry::default()]);
        if let CqRead::Completions(_) = pair.server_cq.read(&mut entries).unwrap() {
            break;
        }
        assert!(Instant::now() < deadline, "no receive completion");
        std::thread::sleep(Duration::from_micros(200));
    }
    // Not reclaimed: dropping the guard released it, and the next read
    // into the same entries hands nothing back twice.
    let _ = pair.server_cq.read(&mut entries).unwrap();
    let back = pool
        .take()
        .expect("the overwritten completion's buffer is back");
    drop(back);
    // The other receive is still posted; closing the endpoint flushes it,
    // and closing its CQ, unread, hands the buffer back.
    let Pair {
        server, server_cq, ..
    } = pair;
    server.close().unwrap();
    server_cq.close().unwrap();
    let a = pool.take().expect("slot 1");
    let b = pool
        .take()
        .expect("slot 2: the flushed receive's buffer is back");
    drop((a, b));
}
