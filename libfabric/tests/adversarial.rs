//! Adversarial use of the public API, as a hostile or careless caller would
//! write it: objects of two providers and two fabrics mixed, calls before
//! the binds they need, oversize and impossible sizes, drop orders across
//! threads, and the provider crashes the crate must stand between. Every
//! test here once crashed, corrupted memory, hung or leaked; each now ends
//! in a typed error or in a clean, leak-free run (CI runs this binary under
//! valgrind).
//!
//! Runs on the host providers: tcp (MSG), tcp;ofi_rxm (RDM) and sockets as
//! the "other provider".
#![cfg_attr(libfabric_2, allow(deprecated))]
#[macro_use]
mod common;

use common::*;
use libfabric::av::AvType;
use libfabric::cq::{Addr, Completions, CqAttr, CqRead, Msg, MsgEntry, Tagged, TaggedEntry};
use libfabric::ep::CqBind;
use libfabric::eq::{EqAttr, EqRead, ErrDataBuf, Event, EventBuf};
use libfabric::info::{Caps, EpType};
use libfabric::poll::PollSet;
use libfabric::wait::{TryWait, TryWaitSet, WaitObj, WaitSet, Waitable, Waiter, Wake};
use libfabric::{
    getinfo, AddressVector, BufferPool, CompletionQueue, Domain, Endpoint, Errno, Error,
    EventQueue, Fabric, Hints, Info, PassiveEndpoint,
};
use std::time::{Duration, Instant};

fn first(hints: Hints) -> Info {
    getinfo(&hints)
        .unwrap_or_else(|e| panic!("{hints:?} is not usable here: {e}"))
        .into_iter()
        .next()
        .expect("an fi_info")
}

/// A fabric and domain of another MSG provider than the suite's: sockets,
/// or tcp when the suite runs on sockets.
fn other_provider() -> (Fabric, Domain, Info) {
    let other = if provider() == "sockets" {
        "tcp"
    } else {
        "sockets"
    };
    msg_fabric(other)
}

/// A fabric and domain of the `sockets` provider.
fn sockets() -> (Fabric, Domain, Info) {
    msg_fabric("sockets")
}

fn msg_fabric(name: &str) -> (Fabric, Domain, Info) {
    let info = first(
        Hints::new()
            .provider(name)
            .ep_type(EpType::Msg)
            .caps(Caps::MSG)
            .node("127.0.0.1"),
    );
    let fabric = Fabric::open(&info).expect("fabric");
    let domain = Domain::open(&fabric, &info).expect("domain");
    (fabric, domain, info)
}

/// An RDM endpoint of tcp;ofi_rxm with a tagged CQ and an AV, enabled.
struct Rdm {
    _fabric: Fabric,
    domain: Domain,
    av: AddressVector,
    ep: Endpoint,
    cq: CompletionQueue<Tagged>,
    pool: BufferPool,
}

fn rdm(caps: Caps) -> Rdm {
    let info = first(
        Hints::new()
            .provider("tcp;ofi_rxm")
            .ep_type(EpType::Rdm)
            .caps(caps)
            .node("127.0.0.1"),
    );
    let fabric = Fabric::open(&info).unwrap();
    let domain = Domain::open(&fabric, &info).unwrap();
    let av = AddressVector::open(&domain, AvType::Table, 8).unwrap();
    let cq = CompletionQueue::<Tagged>::open(&domain, &CqAttr::new()).unwrap();
    let ep = Endpoint::open(&domain, &info).unwrap();
    ep.bind_av(&av).unwrap();
    ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
    ep.enable().unwrap();
    let pool = BufferPool::new(&domain, 4, 4096).unwrap();
    Rdm {
        _fabric: fabric,
        domain,
        av,
        ep,
        cq,
        pool,
    }
}

// --- Undefined behaviour in the crate itself -------------------------------

#[test]
fn error_text_of_codes_glibc_does_not_know_is_owned() {
    // fi_strerror returns strerror's per-thread buffer for such codes, which
    // the next call frees: the text must be a copy.
    let a = Errno::from_raw_os_error(200).text();
    let b = Errno::from_raw_os_error(201).text();
    assert_eq!(a, "Unknown error 200");
    assert_eq!(b, "Unknown error 201");
    let threads: Vec<_> = (0..4)
        .map(|i| std::thread::spawn(move || Errno::from_raw_os_error(300 + i).to_string()))
        .collect();
    for t in threads {
        assert!(!t.join().unwrap().is_empty());
    }
    assert_eq!(Errno::AGAIN.text(), "Resource temporarily unavailable");
    assert!(Errno::AVAIL.text().contains("Error available"));
}

#[test]
fn a_waiter_keeps_its_fabric_open() {
    let (fabric, _) = fabric();
    let eq = fd_eq(&fabric);
    let mut waiter = Waiter::new(&[&eq]).unwrap();
    // The waiter is another user of the fabric: close hands it back.
    let fabric = match fabric.close() {
        Err((f, Error::InUse { .. })) => f,
        other => panic!("closing a fabric a waiter uses: {other:?}"),
    };
    drop(fabric);
    assert_eq!(
        waiter.wait(Some(Duration::from_millis(5))).unwrap(),
        Wake::TimedOut
    );
}

#[test]
fn an_address_shorter_than_the_domain_format_is_refused() {
    let r = rdm(Caps::MSG | Caps::TAGGED);
    for short in [&[][..], &[2, 0][..], &[2, 0, 0, 0, 127, 0, 0, 1][..]] {
        match r.av.insert(short) {
            Err(Error::BufferTooSmall { .. }) | Err(Error::InvalidArgument(_)) => {}
            other => panic!("{} bytes: {other:?}", short.len()),
        }
    }
    // An AF_INET6 family in 16 bytes: libfabric would read 28.
    let mut v6 = vec![0u8; 16];
    v6[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
    assert!(matches!(
        r.av.insert(&v6),
        Err(Error::BufferTooSmall { needed: 28, .. })
    ));
    // An unknown family.
    assert!(matches!(
        r.av.insert(&[0xff; 64]),
        Err(Error::InvalidArgument(_))
    ));
    let me = r.av.insert(&r.ep.name().unwrap()).unwrap();
    assert!(r.av.contains(me));
}

#[test]
fn inject_over_inject_size_is_refused() {
    skip_unless_msg!();
    let pair = connect_pair::<Msg>(CqAttr::new());
    let limit = pair.client.info().inject_size();
    for len in [limit + 1, limit + 128, 1 << 20] {
        match pair.client.inject(&vec![7u8; len], Addr::UNSPEC) {
            Err(Error::TooLarge {
                limit: l, given, ..
            }) => {
                assert_eq!((l, given), (limit, len));
            }
            other => panic!("inject of {len} bytes over {limit}: {other:?}"),
        }
    }
    if limit > 0 {
        pair.client
            .inject(&vec![7u8; limit], Addr::UNSPEC)
            .expect("inject_size itself");
    }
}

#[test]
fn objects_of_another_provider_are_refused() {
    let (fabric, domain, info) = fabric_domain();
    let (sfabric, sdomain, sinfo) = other_provider();
    let seq = EventQueue::open(&sfabric, &EqAttr::new().wait(WaitObj::Fd)).unwrap();
    let scq = CompletionQueue::<Msg>::open(&sdomain, &CqAttr::new()).unwrap();
    let ep = Endpoint::open(&domain, &info).unwrap();
    assert!(matches!(
        ep.bind_eq(&seq),
        Err(Error::ForeignObject {
            what: "event queue",
            ..
        })
    ));
    assert!(matches!(
        ep.bind_cq(&scq, CqBind::TRANSMIT),
        Err(Error::ForeignObject {
            what: "completion queue",
            ..
        })
    ));
    assert!(matches!(
        Domain::open(&fabric, &sinfo),
        Err(Error::ForeignObject { .. })
    ));
    assert!(matches!(
        Endpoint::open(&domain, &sinfo),
        Err(Error::ForeignObject { .. })
    ));
    assert!(matches!(
        PassiveEndpoint::open(&fabric, &sinfo),
        Err(Error::ForeignObject { .. })
    ));
    let sset = WaitSet::open(&sfabric, WaitObj::Fd).unwrap();
    assert!(matches!(
        EventQueue::open(&fabric, &EqAttr::new().wait_set(&sset)),
        Err(Error::ForeignObject { .. })
    ));
    assert!(matches!(
        CompletionQueue::<Msg>::open(&domain, &CqAttr::new().wait_set(&sset)),
        Err(Error::ForeignObject { .. })
    ));
    let spool = PollSet::open(&sdomain).unwrap();
    let cq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new()).unwrap();
    assert!(spool.add(&cq).is_err());
}

#[test]
fn objects_of_another_fabric_of_the_same_provider_are_refused() {
    let (_fa, da, ia) = fabric_domain();
    let (fb, db, _) = fabric_domain();
    let eq_b = fd_eq(&fb);
    let cq_b = CompletionQueue::<Msg>::open(&db, &CqAttr::new()).unwrap();
    let ep = Endpoint::open(&da, &ia).unwrap();
    assert!(matches!(
        ep.bind_eq(&eq_b),
        Err(Error::ForeignObject { .. })
    ));
    assert!(matches!(
        ep.bind_cq(&cq_b, CqBind::RECV),
        Err(Error::ForeignObject { .. })
    ));
}

#[test]
fn a_connection_request_cannot_open_an_endpoint_of_another_provider() {
    skip_unless_msg!();
    let (fabric, domain, _) = fabric_domain();
    let (pep, server_eq, _) = listener(&fabric);
    let client_eq = fd_eq(&fabric);
    let _client = connecting(&domain, &client_eq, &pep, b"hi");
    let Ev::ConnReq { request, .. } =
        next_event(&server_eq, &[&client_eq], Duration::from_secs(10))
    else {
        panic!("expected a CONNREQ")
    };
    let (_sf, sdomain, _) = other_provider();
    let refused = Endpoint::from_request(&sdomain, request).unwrap_err();
    assert!(
        matches!(refused.1, Error::ForeignObject { .. }),
        "{}",
        refused.1
    );
    // Handed back unanswered: it can still be rejected, exactly once.
    refused.0.reject(b"no").unwrap();
    match next_event(&client_eq, &[&server_eq], Duration::from_secs(10)) {
        Ev::Error { err, .. } => assert_eq!(err, Errno::CONNREFUSED),
        other => panic!("{other:?}"),
    }
}

// --- Sizes ------------------------------------------------------------------

#[test]
fn impossible_sizes_are_typed_errors_not_aborts() {
    assert!(matches!(
        EventBuf::with_cm_data_capacity(usize::MAX),
        Err(Error::TooLarge { .. })
    ));
    assert!(matches!(
        ErrDataBuf::with_capacity(usize::MAX),
        Err(Error::OutOfMemory { .. })
    ));
    let (fabric, domain, _) = fabric_domain();
    for (count, size) in [
        (2, usize::MAX),
        (usize::MAX, 64),
        (1 << 20, 1 << 50),
        (3, usize::MAX - 63),
    ] {
        match BufferPool::new(&domain, count, size) {
            Err(Error::TooLarge { .. })
            | Err(Error::OutOfMemory { .. })
            | Err(Error::InvalidArgument(_)) => {}
            other => panic!("pool of {count} x {size}: {other:?}"),
        }
    }
    for size in [(1usize << 63) + 1, usize::MAX, 1 << 40] {
        assert!(matches!(
            CompletionQueue::<Msg>::open(&domain, &CqAttr::new().size(size)),
            Err(Error::TooLarge { .. })
        ));
        assert!(matches!(
            EventQueue::open(&fabric, &EqAttr::new().size(size)),
            Err(Error::TooLarge { .. })
        ));
        assert!(matches!(
            AddressVector::open(&domain, AvType::Table, size),
            Err(Error::TooLarge { .. })
        ));
    }
}

#[test]
fn an_event_buffer_too_small_for_connection_data_never_cuts_an_event() {
    skip_unless_msg!();
    let (fabric, domain, _) = fabric_domain();
    let (pep, server_eq, _) = listener(&fabric);
    let max = pep.cm_data_size().unwrap();
    let client_eq = fd_eq(&fabric);
    let _client = connecting(&domain, &client_eq, &pep, &vec![9u8; max]);
    let mut small = EventBuf::with_cm_data_capacity(8).unwrap();
    assert!(matches!(
        server_eq.read(&mut small),
        Err(Error::BufferTooSmall { .. })
    ));
    match next_event(&server_eq, &[&client_eq], Duration::from_secs(10)) {
        Ev::ConnReq { data, .. } => assert_eq!(data.len(), max),
        other => panic!("{other:?}"),
    }
}

// --- Calls before what they need -------------------------------------------

#[test]
fn listen_without_an_event_queue_is_refused() {
    skip_unless_msg!();
    let (fabric, _) = fabric();
    let info = first(msg_hints().node(node()).service("0").source(true));
    let pep = PassiveEndpoint::open(&fabric, &info).unwrap();
    assert!(matches!(pep.listen(), Err(Error::State { .. })));
    let eq = fd_eq(&fabric);
    pep.bind_eq(&eq).unwrap();
    // A second queue would keep the first busy for ever.
    let other = fd_eq(&fabric);
    assert!(matches!(pep.bind_eq(&other), Err(Error::State { .. })));
    pep.listen().unwrap();
    assert!(matches!(pep.listen(), Err(Error::State { .. })));
    drop(pep);
    eq.close()
        .expect("the queue closes with its passive endpoint");
    other.close().expect("never bound");
}

#[test]
fn connect_accept_and_transfers_before_their_binds_are_refused() {
    skip_unless_msg!();
    let (fabric, domain, _) = fabric_domain();
    let (pep, server_eq, _) = listener(&fabric);
    let pool = BufferPool::new(&domain, 2, 64).unwrap();
    let ep = Endpoint::open(&domain, &client_info(&pep)).unwrap();
    // Nothing bound, not enabled.
    assert!(matches!(ep.connect(b""), Err(Error::State { .. })));
    assert!(matches!(ep.enable(), Err(Error::State { .. })));
    let e = ep.recv(pool.take().unwrap()).unwrap_err();
    assert!(matches!(e.1, Error::State { .. }), "{}", e.1);
    let e = ep.send(e.0, 8).unwrap_err();
    assert!(matches!(e.1, Error::State { .. }), "{}", e.1);
    assert!(matches!(
        ep.inject(b"x", Addr::UNSPEC),
        Err(Error::State { .. })
    ));
    drop(e);
    // An EQ but only a receive CQ: enabling is refused (the caps send),
    // and sends stay refused.
    let eq = fd_eq(&fabric);
    ep.bind_eq(&eq).unwrap();
    assert!(matches!(ep.bind_eq(&eq), Err(Error::State { .. })));
    let rx = CompletionQueue::<Msg>::open(&domain, &CqAttr::new()).unwrap();
    ep.bind_cq(&rx, CqBind::RECV).unwrap();
    assert!(matches!(
        ep.bind_cq(&rx, CqBind::RECV),
        Err(Error::State { .. })
    ));
    assert!(matches!(
        ep.bind_cq(
            &rx,
            CqBind::from_bits_retain(libfabric_sys::fabric::FI_SELECTIVE_COMPLETION)
        ),
        Err(Error::InvalidArgument(_))
    ));
    let e = ep.send(pool.take().unwrap(), 8).unwrap_err();
    assert!(matches!(e.1, Error::State { .. }), "{}", e.1);
    drop(e);
    // tcp refuses to enable without a transmit CQ (-FI_ENOCQ); sockets
    // enables, and the crate still refuses sends.
    let tx = CompletionQueue::<Msg>::open(&domain, &CqAttr::new()).unwrap();
    if ep.enable().is_err() {
        ep.bind_cq(&tx, CqBind::TRANSMIT).unwrap();
        ep.enable().unwrap();
    } else {
        let e = ep.send(pool.take().unwrap(), 8).unwrap_err();
        assert!(matches!(e.1, Error::State { .. }), "{}", e.1);
    }
    assert!(matches!(ep.enable(), Err(Error::State { .. })));
    assert!(matches!(
        ep.bind_cq(&tx, CqBind::TRANSMIT),
        Err(Error::State { .. })
    ));
    let e = ep.send(pool.take().unwrap(), 65).unwrap_err();
    assert!(
        matches!(e.1, Error::BufferTooSmall { .. } | Error::State { .. }),
        "{}",
        e.1
    );
    // A tagged send on an endpoint without FI_TAGGED.
    assert!(!ep.info().caps().contains(Caps::TAGGED));
    let e = ep.tsend(e.0, 8, 1, Addr::UNSPEC).unwrap_err();
    assert!(
        matches!(e.1, Error::MissingCapability { .. } | Error::State { .. }),
        "{}",
        e.1
    );
    let e = ep.trecv(e.0, 1, 0, Addr::UNSPEC).unwrap_err();
    assert!(matches!(e.1, Error::MissingCapability { .. }), "{}", e.1);
    // Accept on an endpoint not opened from a request; shutdown before
    // connecting.
    assert!(matches!(ep.accept(b""), Err(Error::State { .. })));
    assert!(matches!(ep.shutdown(), Err(Error::State { .. })));
    ep.connect(b"x").unwrap();
    assert!(matches!(ep.connect(b"x"), Err(Error::State { .. })));
    let Ev::ConnReq { request, .. } = next_event(&server_eq, &[&eq], Duration::from_secs(10))
    else {
        panic!("expected a CONNREQ")
    };
    drop(request);
    drop(pep);
}

#[test]
fn transfers_to_addresses_not_in_the_address_vector_are_refused() {
    let r = rdm(Caps::MSG | Caps::TAGGED);
    // (Addr::NOTAVAIL is FI_ADDR_UNSPEC's value: "any source" for a
    // receive, refused as a destination.)
    for bogus in [Addr(0), Addr(7), Addr(1 << 40), Addr::NOTAVAIL] {
        let e = r.ep.send_to(r.pool.take().unwrap(), 8, bogus).unwrap_err();
        assert!(matches!(e.1, Error::InvalidArgument(_)), "{}", e.1);
        let e = r.ep.tsend(e.0, 8, 1, bogus).unwrap_err();
        assert!(matches!(e.1, Error::InvalidArgument(_)), "{}", e.1);
        if bogus != Addr::UNSPEC {
            let e = r.ep.recv_from(e.0, bogus).unwrap_err();
            assert!(matches!(e.1, Error::InvalidArgument(_)), "{}", e.1);
        }
        assert!(matches!(
            r.ep.inject(b"x", bogus),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(matches!(
        r.av.remove(Addr(3)),
        Err(Error::InvalidArgument(_))
    ));
    // A live address works; once removed it is refused again.
    let me = r.av.insert(&r.ep.name().unwrap()).unwrap();
    r.ep.recv(r.pool.take().unwrap()).unwrap();
    let mut tx = r.pool.take().unwrap();
    tx[..4].copy_from_slice(b"self");
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut entries: [libfabric::cq::TaggedEntry; 4] = Default::default();
    // rxm answers -FI_EAGAIN while it connects to the peer (itself).
    while let Err(e) = r.ep.send_to(tx, 4, me) {
        assert!(e.1.is_again() && Instant::now() < deadline, "{}", e.1);
        tx = e.0;
        if let CqRead::Completions(done) = r.cq.read(&mut entries).unwrap() {
            for e in done.iter() {
                drop(r.pool.reclaim(e).expect("a pool buffer"));
                got += 1;
            }
        }
    }
    while got < 2 {
        assert!(Instant::now() < deadline, "no loopback completions");
        if let CqRead::Completions(done) = r.cq.read(&mut entries).unwrap() {
            for e in done.iter() {
                drop(r.pool.reclaim(e).expect("a pool buffer"));
                got += 1;
            }
        }
    }
    r.av.remove(me).unwrap();
    let e = r.ep.send_to(r.pool.take().unwrap(), 4, me).unwrap_err();
    assert!(matches!(e.1, Error::InvalidArgument(_)), "{}", e.1);
    let _ = &r.domain;
}

/// A post looks its address up in the provider's table without the
/// vector's lock (rxm `rxm_get_conn`, shm `smr_verify_peer`; sockets keeps
/// a pointer into its table), and an insert past the table's first block
/// grows it, moving what a post on another thread reads. The provider is
/// asked for room for the whole capacity, and an insert that could make
/// one entry more than that is refused before the provider is called:
/// entries of removals put off while an endpoint is bound, and entries an
/// address inserted twice still holds after one removal, count.
#[test]
fn inserts_never_grow_the_providers_table_under_the_posts() {
    let r = rdm(Caps::MSG | Caps::TAGGED);
    let name = r.ep.name().unwrap();
    assert!(name.len() >= 4, "a sockaddr");
    // Addresses of the domain's format that differ in their port.
    let at = |port: u16| {
        let mut a = name.clone();
        a[2..4].copy_from_slice(&port.to_be_bytes());
        a
    };
    let capacity = 64;
    let mut inserted = Vec::new();
    for port in 0..capacity {
        let addr = r.av.insert(&at(40_000 + port)).unwrap();
        assert!(addr.0 < u64::from(capacity), "{addr:?}");
        inserted.push(addr);
    }
    let full = |what: &str, result: libfabric::Result<Addr>| match result {
        Err(Error::TooLarge { limit, .. }) => assert_eq!(limit, capacity as usize, "{what}"),
        other => panic!("{what}: {other:?}"),
    };
    full("a new address", r.av.insert(&at(50_000)));
    full("an address already there", r.av.insert(&at(40_000)));
    // Removed while the endpoint is bound: the provider's entry stays
    // until it closes, and still counts.
    r.av.remove(inserted[0]).unwrap();
    full("after a removal put off", r.av.insert(&at(50_001)));

    // An address inserted twice: rxm holds one entry with two uses, and
    // one removal (done at once: no endpoint is bound to this vector)
    // leaves it there.
    let av = AddressVector::open(&r.domain, AvType::Table, 1).unwrap();
    let twice = av.insert(&at(40_000)).unwrap();
    assert_eq!(
        av.insert(&at(40_000)).unwrap(),
        twice,
        "one entry, two uses"
    );
    av.remove(twice).unwrap();
    assert!(!av.contains(twice));
    for port in 1..capacity {
        av.insert(&at(40_000 + port)).unwrap();
    }
    full(
        "with the entry the second use holds",
        av.insert(&at(50_000)),
    );
}

#[test]
fn remote_cq_data_needs_a_domain_that_carries_it() {
    skip_unless_msg!();
    let pair = connect_pair::<libfabric::cq::Data>(CqAttr::new());
    let size = pair.client.info().cq_data_size();
    let buf = pair.client_pool.take().unwrap();
    if size == 0 {
        let e = pair.client.send_data(buf, 4, 1, Addr::UNSPEC).unwrap_err();
        assert!(matches!(e.1, Error::State { .. }), "{}", e.1);
    } else if size < 8 {
        let e = pair
            .client
            .send_data(buf, 4, u64::MAX, Addr::UNSPEC)
            .unwrap_err();
        assert!(
            matches!(e.1, Error::TooLarge { .. } | Error::State { .. }),
            "{}",
            e.1
        );
    }
}

// --- Close order and leaks --------------------------------------------------

#[test]
fn a_passive_endpoint_dropped_with_a_connection_in_flight_is_safe() {
    skip_unless_msg!();
    // tcp keeps a raw pointer to the passive endpoint in each connection it
    // accepted until the connection's request arrives: the passive endpoint
    // must outlive them, which its queue sees to.
    let (fabric, domain, _) = fabric_domain();
    let (pep, server_eq, _) = listener(&fabric);
    let client_eq = fd_eq(&fabric);
    let clients: Vec<_> = (0..3)
        .map(|i| connecting(&domain, &client_eq, &pep, &[i]))
        .collect();
    pep.close().expect("given up: closed with its queue");
    let mut refused = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = EventBuf::new();
    while refused < clients.len() {
        assert!(Instant::now() < deadline, "requests were lost");
        let _ = server_eq.read(&mut buf).unwrap();
        if let EqRead::Error(e) = client_eq.read(&mut buf).unwrap() {
            assert_eq!(e.err, Errno::CONNREFUSED);
            refused += 1;
        }
    }
    drop(clients);
    client_eq.close().unwrap();
    server_eq.close().unwrap();
}

#[test]
fn queues_closed_with_connection_requests_queued_free_them() {
    skip_unless_msg!();
    let (fabric, domain, _) = fabric_domain();
    let (pep, server_eq, _) = listener(&fabric);
    let client_eq = fd_eq(&fabric);
    let client = connecting(&domain, &client_eq, &pep, b"left queued");
    // Let the request reach the server's queue, then close everything with
    // it still there (valgrind: nothing lost).
    let mut buf = EventBuf::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "no CONNREQ");
        let _ = client_eq.peek(&mut buf);
        if let EqRead::Event(Event::UnownedConnReq(_)) = server_eq.peek(&mut buf).unwrap() {
            break;
        }
    }
    drop(pep);
    server_eq
        .close()
        .expect("closes, rejecting the queued request");
    drop(client);
}

#[test]
fn an_endpoint_opened_from_a_request_and_dropped_unaccepted_frees_it() {
    skip_unless_msg!();
    let (fabric, domain, _) = fabric_domain();
    let (_pep, server_eq, _) = listener(&fabric);
    let client_eq = fd_eq(&fabric);
    for _ in 0..3 {
        let _client = connecting(&domain, &client_eq, &_pep, b"x");
        let Ev::ConnReq { request, .. } =
            next_event(&server_eq, &[&client_eq], Duration::from_secs(10))
        else {
            panic!("expected a CONNREQ")
        };
        let sdomain = Domain::open(&fabric, request.info()).unwrap();
        let ep = Endpoint::from_request(&sdomain, request).unwrap();
        drop(ep); // never accepted (valgrind: the request's handle is freed)
    }
}

#[test]
fn a_poll_set_closed_with_members_leaks_nothing() {
    let (_f, domain, _) = fabric_domain();
    let set = PollSet::open(&domain).unwrap();
    let cqs: Vec<_> = (0..3)
        .map(|_| CompletionQueue::<Msg>::open(&domain, &CqAttr::new()).unwrap())
        .collect();
    for cq in &cqs {
        set.add(cq).unwrap();
    }
    set.close().expect("members are taken out first");
    for cq in cqs {
        cq.close().unwrap();
    }
}

#[test]
fn objects_dropped_in_any_order_on_many_threads() {
    skip_unless_msg!();
    for round in 0..4 {
        let pair = connect_pair::<Msg>(CqAttr::new().wait(WaitObj::Fd));
        let objects: Vec<Box<dyn std::any::Any + Send>> = vec![
            Box::new(pair.fabric),
            Box::new(pair.client_domain),
            Box::new(pair.server_domain),
            Box::new(pair.client_pool),
            Box::new(pair.server_pool),
            Box::new(pair.pep),
            Box::new(pair.server_eq),
            Box::new(pair.client_eq),
            Box::new(pair.server),
            Box::new(pair.client),
            Box::new(pair.server_cq),
            Box::new(pair.client_cq),
        ];
        let threads: Vec<_> = objects
            .into_iter()
            .enumerate()
            .map(|(i, o)| {
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_micros(((i * 7 + round) % 5) as u64 * 100));
                    drop(o);
                })
            })
            .collect();
        for t in threads {
            t.join().expect("drop never panics");
        }
    }
}

// --- Waiting ----------------------------------------------------------------

#[test]
fn a_signal_reported_once_does_not_cut_the_next_wait_short() {
    let (_f, domain, _) = fabric_domain();
    let Some(cq) = fd_cq::<Msg>(&domain) else {
        return;
    };
    let mut entries: [MsgEntry; 1] = Default::default();
    cq.signal().unwrap();
    assert!(matches!(
        cq.sread(&mut entries, Some(Duration::ZERO)).unwrap(),
        CqRead::Signaled
    ));
    let start = Instant::now();
    assert!(matches!(
        cq.sread(&mut entries, Some(Duration::from_millis(40)))
            .unwrap(),
        CqRead::TimedOut
    ));
    assert!(
        start.elapsed() >= Duration::from_millis(35),
        "returned after {:?}",
        start.elapsed()
    );
    assert!(matches!(
        cq.sread(&mut [], Some(Duration::ZERO)),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn waiting_for_ever_as_a_duration_does_not_panic() {
    let (fabric, _) = fabric();
    let eq = fd_eq(&fabric);
    eq.write_notify(eq.fid(), 1, 1).unwrap();
    let mut waiter = Waiter::new(&[&eq]).unwrap();
    assert_eq!(waiter.wait(Some(Duration::MAX)).unwrap(), Wake::Ready);
}

#[test]
fn an_affinity_the_provider_refuses_is_not_a_wait_object_error() {
    let (fabric, _) = fabric();
    match EventQueue::open(
        &fabric,
        &EqAttr::new().wait(WaitObj::Fd).signaling_vector(0),
    ) {
        Ok(_) => {}
        Err(Error::UnsupportedWait { .. }) => panic!("FI_AFFINITY reported as a wait error"),
        Err(_) => {}
    }
}

#[cfg(feature = "tokio")]
#[test]
fn an_async_read_into_nothing_is_refused() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (_f, domain, _) = fabric_domain();
        let Some(cq) = pollable_cq::<Msg>(&domain) else {
            return;
        };
        let acq = libfabric::tokio::AsyncCompletionQueue::new(cq).unwrap();
        let r = tokio::time::timeout(Duration::from_secs(5), acq.read(&mut [])).await;
        assert!(matches!(r, Ok(Err(Error::InvalidArgument(_)))), "{r:?}");
    });
}

#[test]
fn a_passive_endpoint_outlives_the_info_it_was_opened_from() {
    // sockets keeps a shallow copy of the fi_info given to fi_passive_ep and
    // reads its domain_attr at each connection request: the caller's info
    // is dropped here before any request arrives.
    let (fabric, domain, _) = sockets();
    let pep = {
        let info = first(
            Hints::new()
                .provider("sockets")
                .ep_type(EpType::Msg)
                .caps(Caps::MSG)
                .node("127.0.0.1")
                .service("0")
                .source(true),
        );
        PassiveEndpoint::open(&fabric, &info).unwrap()
    };
    let eq = EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::Fd)).unwrap();
    pep.bind_eq(&eq).unwrap();
    pep.listen().unwrap();
    let addr = pep.local_addr().unwrap();
    let cinfo = first(
        Hints::new()
            .provider("sockets")
            .ep_type(EpType::Msg)
            .caps(Caps::MSG)
            .node(addr.ip().to_string())
            .service(addr.port().to_string()),
    );
    let ceq = EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::Fd)).unwrap();
    let ccq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new()).unwrap();
    let client = Endpoint::open(&domain, &cinfo).unwrap();
    client.bind_eq(&ceq).unwrap();
    client
        .bind_cq(&ccq, CqBind::TRANSMIT | CqBind::RECV)
        .unwrap();
    client.enable().unwrap();
    client.connect(b"x").unwrap();
    match next_event(&eq, &[&ceq], Duration::from_secs(10)) {
        Ev::ConnReq { request, .. } => {
            // The request's fi_info names its provider and fabric, so a
            // domain opened from it passes the same-fabric checks.
            assert_eq!(request.info().provider(), "sockets");
            let sdomain = Domain::open(&fabric, request.info()).unwrap();
            drop(Endpoint::from_request(&sdomain, request).unwrap());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_event_queue_never_resolves_a_reused_address_to_the_wrong_endpoint() {
    // sockets keeps a closed endpoint's events queued; tcp removes them.
    for (fabric, domain, info) in [sockets(), {
        let (f, d, i) = fabric_domain();
        (f, d, i)
    }] {
        let eq = EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::Fd).write(true)).unwrap();
        let first = Endpoint::open(&domain, &info).unwrap();
        first.bind_eq(&eq).unwrap();
        let old = first.fid();
        assert!(matches!(
            eq.resolve(old),
            Some(libfabric::eq::EventSource::Endpoint(_))
        ));
        drop(first);
        assert!(
            eq.resolve(old).is_none(),
            "a closed endpoint resolves to nothing"
        );
        // Open endpoints until one lands at the old address (malloc reuses
        // it at once in practice), keeping the others open.
        let mut kept = Vec::new();
        for _ in 0..32 {
            let ep = Endpoint::open(&domain, &info).unwrap();
            ep.bind_eq(&eq).unwrap();
            let reused = ep.fid() == old;
            kept.push(ep);
            if reused {
                break;
            }
        }
        let at_old = kept.last().unwrap();
        if at_old.fid() == old {
            let resolved = eq.resolve(old);
            if fabric.provider() == "tcp" {
                assert!(
                    matches!(resolved, Some(libfabric::eq::EventSource::Endpoint(ref e)) if e.fid() == old)
                );
            } else {
                assert!(resolved.is_none(), "{}: {resolved:?}", fabric.provider());
            }
        } else {
            eprintln!(
                "{}: no endpoint reused the address in 32 tries; the reuse rule went unexercised",
                fabric.provider()
            );
        }
    }
}

#[test]
fn a_buffer_registered_with_another_domain_is_refused() {
    skip_unless_msg!();
    let pair = connect_pair::<Msg>(CqAttr::new());
    // The server's pool is registered with the server's domain.
    let e = pair
        .client
        .send(pair.server_pool.take().unwrap(), 4)
        .unwrap_err();
    assert!(matches!(e.1, Error::ForeignObject { .. }), "{}", e.1);
    let e = pair.client.recv(e.0).unwrap_err();
    assert!(matches!(e.1, Error::ForeignObject { .. }), "{}", e.1);
    // Handed back whole: the server may use it.
    pair.server.recv(e.0).unwrap();
}

#[test]
fn error_entries_cannot_be_forged_for_strerror() {
    skip_unless_msg!();
    // The err_data strerror hands the provider is the one it gave: the
    // field is private (compile error: ui/err_data_cannot_be_forged.rs).
    // The provider's error number is public, and any value of it is
    // answered (i32::MIN, which providers negate, is passed as -i32::MAX).
    let (fabric, domain, _) = fabric_domain();
    let (pep, server_eq, _) = listener(&fabric);
    let client_eq = fd_eq(&fabric);
    let _c = connecting(&domain, &client_eq, &pep, b"x");
    let Ev::ConnReq { request, .. } =
        next_event(&server_eq, &[&client_eq], Duration::from_secs(10))
    else {
        panic!("expected a CONNREQ")
    };
    request.reject(b"nope").unwrap();
    let mut buf = EventBuf::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "no error entry");
        let _ = server_eq.peek(&mut buf);
        if let EqRead::ErrorPending = client_eq.peek(&mut buf).unwrap() {
            break;
        }
    }
    let mut errbuf = ErrDataBuf::new();
    let mut err = client_eq.read_err(&mut errbuf).unwrap().unwrap();
    assert_eq!(err.err_data(), b"nope", "the rejecting side's data");
    err.prov_errno = i32::MIN;
    let text = client_eq.strerror(&err);
    assert!(!text.is_empty(), "a text for any provider error number");
}

#[test]
fn no_wait_loop_of_the_crate_takes_a_pollfd_queue() {
    // tcp keeps a fd of its FI_WAIT_POLLFD sets readable (1.17: the util
    // set's internal signal; 1.22: the progress fd): a loop over them could
    // only spin. The crate's waits take FI_WAIT_FD queues only.
    let (_fabric, domain, _) = fabric_domain();
    let cq = match CompletionQueue::<Msg>::open(&domain, &CqAttr::new().wait(WaitObj::PollFd)) {
        Ok(cq) => cq,
        Err(e) => {
            assert!(!is_tcp(), "{e}");
            println!(
                "SKIP no_wait_loop_of_the_crate_takes_a_pollfd_queue: provider {}: no FI_WAIT_POLLFD ({e})",
                provider()
            );
            return;
        }
    };
    assert!(matches!(
        Waiter::new(&[&cq]),
        Err(Error::WrongWaitMode { .. })
    ));
    #[cfg(feature = "tokio")]
    {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            assert!(matches!(
                libfabric::tokio::AsyncCompletionQueue::new(cq.clone()),
                Err(Error::WrongWaitMode { .. })
            ));
        });
    }
    // Unspec on tcp's CQs resolves to FI_WAIT_POLLFD: refused alike.
    let unspec =
        CompletionQueue::<Msg>::open(&domain, &CqAttr::new().wait(WaitObj::Unspec)).unwrap();
    if unspec.wait_obj() == WaitObj::PollFd {
        assert!(matches!(
            Waiter::new(&[&unspec]),
            Err(Error::WrongWaitMode { .. })
        ));
    }
}

#[test]
fn a_connectionless_endpoint_closed_without_an_address_vector() {
    // rxm's close walks the AV's peers: with none bound it dereferenced
    // NULL. Dropped or closed, with or without other binds, it now closes.
    let info = first(
        Hints::new()
            .provider("tcp;ofi_rxm")
            .ep_type(EpType::Rdm)
            .caps(Caps::MSG | Caps::TAGGED)
            .node("127.0.0.1"),
    );
    let fabric = Fabric::open(&info).unwrap();
    let domain = Domain::open(&fabric, &info).unwrap();
    drop(Endpoint::open(&domain, &info).unwrap());
    Endpoint::open(&domain, &info).unwrap().close().unwrap();
    // Connection management is refused before any option is asked (shm
    // 1.22 crashed answering FI_OPT_CM_DATA_SIZE before enable).
    let ep = Endpoint::open(&domain, &info).unwrap();
    assert_eq!(ep.cm_data_size(), None);
    assert!(matches!(ep.connect(b"data"), Err(Error::State { .. })));
    assert!(matches!(ep.accept(b"data"), Err(Error::State { .. })));
    drop(ep);
    let cq = CompletionQueue::<Tagged>::open(&domain, &CqAttr::new()).unwrap();
    let ep = Endpoint::open(&domain, &info).unwrap();
    ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
    assert!(matches!(ep.enable(), Err(Error::State { .. })));
    ep.close().unwrap();
    cq.close().unwrap();
    domain.close().unwrap();
}

#[test]
fn yield_waits_are_refused() {
    // shm accepts FI_WAIT_YIELD, and libfabric's util yield wait ignores
    // the timeout: an sread of 10 ms never returned.
    let (fabric, domain, _) = fabric_domain();
    assert!(matches!(
        EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::Yield)),
        Err(Error::UnsupportedWait { .. })
    ));
    assert!(matches!(
        CompletionQueue::<Msg>::open(&domain, &CqAttr::new().wait(WaitObj::Yield)),
        Err(Error::UnsupportedWait { .. })
    ));
    assert!(matches!(
        WaitSet::open(&fabric, WaitObj::Yield),
        Err(Error::UnsupportedWait { .. })
    ));
}

#[test]
fn wait_objects_given_as_raw_values_get_the_checks_of_their_names() {
    use libfabric::wait::trywait;
    let (fabric, domain, _) = fabric_domain();
    let ms = Some(Duration::from_millis(1));
    // Other(0) is FI_WAIT_NONE: it passed the checks of WaitObj::None, and
    // fi_trywait and sread on it crashed rxm, rxd and shm.
    let cq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new().wait(WaitObj::Other(0))).unwrap();
    assert_eq!(cq.wait_obj(), WaitObj::None);
    assert!(matches!(
        trywait(&fabric, &[&cq]),
        Err(Error::WrongWaitMode { .. })
    ));
    let mut entries: [MsgEntry; 1] = Default::default();
    assert!(matches!(
        cq.sread(&mut entries, ms),
        Err(Error::WrongWaitMode { .. })
    ));
    let eq = EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::Other(0))).unwrap();
    assert_eq!(eq.wait_obj(), WaitObj::None);
    assert!(matches!(
        trywait(&fabric, &[&eq]),
        Err(Error::WrongWaitMode { .. })
    ));
    assert!(matches!(
        eq.sread(&mut EventBuf::new(), ms),
        Err(Error::WrongWaitMode { .. })
    ));
    // Other(2) is FI_WAIT_SET with no set (sockets' CQ open crashed),
    // Other(5) FI_WAIT_YIELD (an sread hung on shm), 1234 no wait object
    // at all: each refused before the provider sees it, as a wait set too.
    for raw in [2, 5, 1234] {
        let other = WaitObj::Other(raw);
        let e = CompletionQueue::<Msg>::open(&domain, &CqAttr::new().wait(other)).unwrap_err();
        assert!(matches!(e, Error::UnsupportedWait { .. }), "{raw}: {e}");
        let e = EventQueue::open(&fabric, &EqAttr::new().wait(other)).unwrap_err();
        assert!(matches!(e, Error::UnsupportedWait { .. }), "{raw}: {e}");
    }
    for raw in [0, 2, 5, 1234] {
        let e = WaitSet::open(&fabric, WaitObj::Other(raw)).unwrap_err();
        assert!(matches!(e, Error::UnsupportedWait { .. }), "{raw}: {e}");
    }
    // A wait object libfabric names may still be spelled as its number.
    let fd = libfabric_sys::fabric::FI_WAIT_FD;
    let eq = EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::Other(fd))).unwrap();
    assert_eq!(eq.wait_obj(), WaitObj::Fd);
    assert!(matches!(
        eq.sread(&mut EventBuf::new(), ms),
        Ok(EqRead::TimedOut)
    ));
}

/// Every send a connected endpoint has, each expected to be refused with
/// [`Error::State`] and to hand its buffer back.
fn sends_are_refused(ep: &Endpoint, pool: &BufferPool, when: &str) {
    let e = ep.send(pool.take().unwrap(), 8).unwrap_err();
    assert!(matches!(e.1, Error::State { .. }), "{when}: {}", e.1);
    if ep.info().caps().contains(Caps::TAGGED) {
        let e = ep.tsend(e.0, 8, 1, Addr::UNSPEC).unwrap_err();
        assert!(matches!(e.1, Error::State { .. }), "{when}: {}", e.1);
    }
    if ep.info().cq_data_size() > 0 {
        let e = ep
            .send_data(pool.take().unwrap(), 8, 1, Addr::UNSPEC)
            .unwrap_err();
        assert!(matches!(e.1, Error::State { .. }), "{when}: {}", e.1);
    }
    assert!(
        matches!(ep.inject(b"abc", Addr::UNSPEC), Err(Error::State { .. })),
        "{when}: inject"
    );
}

#[test]
fn sends_before_the_connection_is_established_are_refused() {
    // tcp's transmit path calls a header hook set only when the connection
    // response arrives: a send or inject on an endpoint never connected, or
    // right after fi_connect, crashed.
    skip_unless_msg!();
    let (fabric, domain, _) = fabric_domain();
    let (pep, server_eq, _) = listener(&fabric);
    let pool = BufferPool::new(&domain, 4, 64).unwrap();
    let client_eq = fd_eq(&fabric);
    let client = enabled_client(&domain, &client_eq, &pep);
    sends_are_refused(&client, &pool, "enabled, never connected");
    client.connect(b"").unwrap();
    sends_are_refused(&client, &pool, "connecting");
    let Ev::ConnReq { request, .. } =
        next_event(&server_eq, &[&client_eq], Duration::from_secs(10))
    else {
        panic!("expected a CONNREQ")
    };
    // The accepting side: opened from the request, then accepted, and not
    // connected before its FI_CONNECTED is read.
    let sdomain = Domain::open(&fabric, request.info()).unwrap();
    let scq = CompletionQueue::<Msg>::open(&sdomain, &CqAttr::new()).unwrap();
    let server = Endpoint::from_request(&sdomain, request).unwrap();
    server.bind_eq(&server_eq).unwrap();
    server
        .bind_cq(&scq, CqBind::TRANSMIT | CqBind::RECV)
        .unwrap();
    server.enable().unwrap();
    let spool = BufferPool::new(&sdomain, 4, 64).unwrap();
    sends_are_refused(&server, &spool, "opened from a request, not accepted");
    // Receives may be posted before the connection is up.
    server.recv(spool.take().unwrap()).unwrap();
    server.accept(b"").unwrap();
    sends_are_refused(&server, &spool, "accepted, FI_CONNECTED not read");
    let ev = next_event(&client_eq, &[&server_eq], Duration::from_secs(10));
    assert!(matches!(ev, Ev::Connected { .. }), "client: {ev:?}");
    let ev = next_event(&server_eq, &[&client_eq], Duration::from_secs(10));
    assert!(matches!(ev, Ev::Connected { .. }), "server: {ev:?}");
    // Connected: an inject goes through, into the receive posted before.
    client.inject(b"abc", Addr::UNSPEC).unwrap();
    let mut entries: [MsgEntry; 1] = Default::default();
    let deadline = Instant::now() + Duration::from_secs(10);
    let rx = loop {
        if let CqRead::Completions(done) = scq.read(&mut entries).unwrap() {
            assert_eq!(done[0].len(), 3);
            break spool.reclaim(&done[0]).expect("the receive's buffer");
        }
        let _ = client_eq.peek(&mut EventBuf::new());
        assert!(Instant::now() < deadline, "the inject never arrived");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(&rx[..3], b"abc");
    if shut_down(&client) {
        sends_are_refused(&client, &pool, "shut down");
    }
}

#[test]
fn sends_after_a_refused_connection_are_refused() {
    // tcp: fi_connect to a port nobody listens on succeeds and the refusal
    // arrives as an error entry; a shutdown and a send then crashed.
    // sockets refuses at once.
    skip_unless_msg!();
    let (fabric, domain, _) = fabric_domain();
    let (_refusing, port) = refusing_port();
    let info = first(msg_hints().node("127.0.0.1").service(port.to_string()));
    let eq = fd_eq(&fabric);
    let cq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new()).unwrap();
    let ep = Endpoint::open(&domain, &info).unwrap();
    ep.bind_eq(&eq).unwrap();
    ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
    ep.enable().unwrap();
    let pool = BufferPool::new(&domain, 4, 64).unwrap();
    match ep.connect(b"") {
        Ok(()) => {
            let ev = next_event(&eq, &[], Duration::from_secs(10));
            assert!(
                matches!(
                    ev,
                    Ev::Error {
                        err: Errno::CONNREFUSED,
                        ..
                    }
                ),
                "{ev:?}"
            );
            sends_are_refused(&ep, &pool, "refused");
            ep.shutdown().unwrap();
            ep.shutdown().unwrap();
        }
        Err(e) => {
            // Refused at once: the endpoint is idle again, so there is
            // nothing to shut down, and it may connect again.
            assert_eq!(e.errno(), Some(Errno::CONNREFUSED), "{e}");
            assert!(matches!(ep.shutdown(), Err(Error::State { .. })));
            let again = ep.connect(b"").unwrap_err();
            assert_eq!(again.errno(), Some(Errno::CONNREFUSED), "{again}");
        }
    }
    sends_are_refused(&ep, &pool, "refused, then shut down");
}

/// An enabled endpoint of the suite's provider bound to `cq`, with an EQ
/// (MSG) or an AV (RDM) and nothing else; receives may be posted on it.
fn receiving_endpoint(
    fabric: &Fabric,
    domain: &Domain,
    info: &Info,
    cq: &CompletionQueue<Tagged>,
) -> Endpoint {
    let ep = endpoint_on(fabric, domain, info, cq);
    ep.enable().unwrap();
    ep
}

/// What reading a queue until it was empty found.
struct Drained {
    completions: usize,
    errors: usize,
    canceled: usize,
    /// Buffers of `pool` the entries handed back.
    handed_out: usize,
}

/// Reads `cq` until it is empty, reclaiming every buffer of `pool` that
/// its entries name.
fn drain(cq: &CompletionQueue<Tagged>, pool: &BufferPool) -> Drained {
    let mut entries: [libfabric::cq::TaggedEntry; 4] = Default::default();
    let mut d = Drained {
        completions: 0,
        errors: 0,
        canceled: 0,
        handed_out: 0,
    };
    loop {
        match cq.read(&mut entries).unwrap() {
            CqRead::Error(mut err) => {
                d.errors += 1;
                d.canceled += usize::from(err.err == Errno::CANCELED);
                d.handed_out += usize::from(pool.reclaim_err(&mut err).is_some());
            }
            CqRead::Completions(done) => {
                for entry in done.iter() {
                    d.completions += 1;
                    d.handed_out += usize::from(pool.reclaim(entry).is_some());
                }
            }
            _ => return d,
        }
    }
}

/// Reads `cq` until it is empty; returns how many error entries (flushed
/// operations) it held, each checked to be `FI_ECANCELED` and to hand out
/// no buffer of `pool`.
fn flushed_entries_hand_out_nothing(cq: &CompletionQueue<Tagged>, pool: &BufferPool) -> usize {
    let d = drain(cq, pool);
    assert_eq!(d.completions, 0, "unexpected completions");
    assert_eq!(
        d.canceled, d.errors,
        "flushed operations fail with FI_ECANCELED"
    );
    assert_eq!(
        d.handed_out, 0,
        "a flushed operation of a closed endpoint hands out no buffer"
    );
    d.errors
}

#[test]
fn buffers_in_flight_on_a_closed_endpoint_come_back() {
    // sockets, tcp;ofi_rxm and udp;ofi_rxd drop the receives posted on an
    // endpoint that closes, without a completion: their buffers never came
    // back, and kept the pool, its MR, the domain and the fabric open.
    let (fabric, domain, info) = fabric_domain();
    let cq = CompletionQueue::<Tagged>::open(&domain, &CqAttr::new()).unwrap();
    let pool = BufferPool::new(&domain, 4, 64).unwrap();
    let first = receiving_endpoint(&fabric, &domain, &info, &cq);
    first.recv(pool.take().unwrap()).unwrap();
    first.recv(pool.take().unwrap()).unwrap();
    drop(first);
    // Back at the close, whether or not the provider flushed them.
    let all: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
    assert_eq!(
        all.len(),
        4,
        "every slot is back once the endpoint is closed"
    );
    // Posted again, on a second endpoint of the same queue: completions the
    // close flushed (tcp and shm report them as FI_ECANCELED) name the
    // first posts and must not hand out the buffers now in flight.
    let second = receiving_endpoint(&fabric, &domain, &info, &cq);
    for buf in all {
        second.recv(buf).unwrap();
    }
    let flushed = flushed_entries_hand_out_nothing(&cq, &pool);
    println!("provider {}: {flushed} flushed receive(s) read", provider());
    assert!(
        pool.take().is_none(),
        "all four are in flight on the second"
    );
    second.close().unwrap();
    flushed_entries_hand_out_nothing(&cq, &pool);
    let back: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
    assert_eq!(
        back.len(),
        4,
        "every buffer of the second endpoint came back"
    );
    drop(back);
    // Nothing keeps the objects open: they close, in order, leaking nothing.
    let closing = receiving_endpoint(&fabric, &domain, &info, &cq);
    closing.recv(pool.take().unwrap()).unwrap();
    drop(pool);
    drop(closing);
    cq.close().expect("the completion queue closes");
    domain.close().expect("no buffer keeps the domain open");
    fabric.close().expect("no buffer keeps the fabric open");
}

#[test]
fn a_waiter_over_no_queue_is_refused() {
    // With nothing to wait on, wait(None) blocked for ever.
    let (_fabric, _) = fabric();
    assert!(matches!(Waiter::new(&[]), Err(Error::InvalidArgument(_))));
}

#[test]
fn a_slot_comes_back_after_every_close_of_its_endpoint() {
    // sockets, tcp;ofi_rxm and udp;ofi_rxd drop a closing endpoint's
    // receives without a completion; a slot taken back at two closes was
    // parked for good (the pool's only buffer never came back). Receives
    // are now cancelled before the close, so their completions come.
    let (fabric, domain, info) = fabric_domain();
    let cq = CompletionQueue::<Tagged>::open(&domain, &CqAttr::new()).unwrap();
    let pool = BufferPool::new(&domain, 1, 64).unwrap();
    for round in 0..8 {
        let ep = receiving_endpoint(&fabric, &domain, &info, &cq);
        let buf = pool.take().unwrap_or_else(|| {
            panic!(
                "provider {}: round {round}: the only slot never came back",
                provider()
            )
        });
        ep.recv(buf).unwrap();
        if round % 2 == 0 {
            drop(ep);
        } else {
            ep.close().unwrap();
        }
        assert_eq!(
            drain(&cq, &pool).handed_out,
            0,
            "a closed endpoint's receive hands out nothing from the queue"
        );
    }
}

/// Sends 8 bytes of `buf`, reading `cq` and the peer's queue `peer_cq`
/// while the provider asks to retry (rxm connects and shm maps its peer in
/// the queues' progress).
fn send_retrying(
    ep: &Endpoint,
    mut buf: libfabric::Buffer,
    dest: Addr,
    (cq, pool): (&CompletionQueue<Tagged>, &BufferPool),
    peer_cq: &CompletionQueue<Tagged>,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match ep.send_to(buf, 8, dest) {
            Ok(()) => return,
            Err(e) if e.1.is_again() && Instant::now() < deadline => {
                buf = e.0;
                assert_eq!(drain(cq, pool).handed_out, 0, "nothing was in flight");
                let mut entries: [libfabric::cq::TaggedEntry; 4] = Default::default();
                let _ = peer_cq.read(&mut entries).unwrap();
                std::thread::sleep(Duration::from_micros(200));
            }
            Err(e) => panic!("provider {}: the send is posted: {e:?}", provider()),
        }
    }
}

#[test]
fn a_slot_comes_back_after_every_close_with_a_send_in_flight() {
    // udp;ofi_rxd (and rxm, sockets) drop a closing endpoint's sends
    // without a completion, and fi_cancel matches receives only: a slot
    // whose send was in flight at two closes was parked for good. Its
    // stale contexts are now posted with again once the queue was read
    // empty after the close and the completions read before were released.
    let (fabric, domain, info) = fabric_domain();
    // A MSG endpoint sends only once connected (refused before); the
    // connected case is `buffers_in_flight_on_a_closed_endpoint_come_back`
    // and the flush tests. Run on the RDM providers of the matrix.
    skip_if_msg!(info, "MSG endpoints send only once connected");
    let cq = CompletionQueue::<Tagged>::open(&domain, &CqAttr::new()).unwrap();
    // A peer whose progress never runs (its queue is never read): rxd and
    // rxm wait for its answer, so the send stays in flight.
    let peer_cq = CompletionQueue::<Tagged>::open(&domain, &CqAttr::new()).unwrap();
    let peer = receiving_endpoint(&fabric, &domain, &info, &peer_cq);
    let peer_name = peer.name().unwrap();
    let pool = BufferPool::new(&domain, 1, 64).unwrap();
    let (mut dropped, mut completed) = (0, 0);
    for round in 0..8 {
        let av = AddressVector::open(&domain, AvType::Table, 4).unwrap();
        let ep = Endpoint::open(&domain, &info).unwrap();
        ep.bind_av(&av).unwrap();
        ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
        ep.enable().unwrap();
        let dest = av.insert(&peer_name).unwrap();
        let buf = pool.take().unwrap_or_else(|| {
            panic!(
                "provider {}: round {round}: the only slot never came back",
                provider()
            )
        });
        send_retrying(&ep, buf, dest, (&cq, &pool), &peer_cq);
        if round % 2 == 0 {
            drop(ep);
        } else {
            ep.close().unwrap();
        }
        let d = drain(&cq, &pool);
        if d.completions + d.errors == 0 {
            dropped += 1;
        } else {
            completed += 1;
        }
        if provider() == "shm" {
            // shm keeps an endpoint that an open endpoint of this process
            // may address (the peer, which it sent to) open in the
            // provider until that one closes: its send's completion, written
            // at the post, hands its buffer out.
            assert!(d.handed_out <= 1, "{}", d.handed_out);
        } else {
            assert_eq!(
                d.handed_out, 0,
                "a closed endpoint's send hands out nothing from the queue"
            );
        }
    }
    println!(
        "provider {}: {dropped} send(s) dropped at the close, {completed} completed or flushed",
        provider()
    );
    assert!(
        pool.take().is_some(),
        "the slot is back after the last round"
    );
    drop(peer);
}

/// A receive of the one buffer of a pool, posted on an endpoint bound to
/// the caller's queue, and a sender of its own queue, pool and address
/// vector, whose send completes it (connectionless endpoints only).
struct OneReceive {
    sender: Endpoint,
    receiver: Endpoint,
    scq: CompletionQueue<Tagged>,
    spool: BufferPool,
    _sav: AddressVector,
}

impl OneReceive {
    /// The receive of `pool`'s buffer posted on an endpoint bound to `cq`,
    /// and the send that completes it.
    fn posted(
        fabric: &Fabric,
        domain: &Domain,
        info: &Info,
        cq: &CompletionQueue<Tagged>,
        pool: &BufferPool,
    ) -> OneReceive {
        let receiver = receiving_endpoint(fabric, domain, info, cq);
        let name = receiver.name().unwrap();
        receiver.recv(pool.take().unwrap()).unwrap();
        let scq = CompletionQueue::<Tagged>::open(domain, &CqAttr::new()).unwrap();
        let spool = BufferPool::new(domain, 1, 64).unwrap();
        let sav = AddressVector::open(domain, AvType::Table, 4).unwrap();
        let sender = Endpoint::open(domain, info).unwrap();
        sender.bind_av(&sav).unwrap();
        sender
            .bind_cq(&scq, CqBind::TRANSMIT | CqBind::RECV)
            .unwrap();
        sender.enable().unwrap();
        let dest = sav.insert(&name).unwrap();
        send_retrying(&sender, spool.take().unwrap(), dest, (&scq, &spool), cq);
        OneReceive {
            sender,
            receiver,
            scq,
            spool,
            _sav: sav,
        }
    }

    /// `f` of the receive's completion, read from `cq` into `entries`
    /// within 10 s (the sender's queue drained meanwhile). A function of
    /// the sender's queue and pool only, so that `f` may take the
    /// endpoints.
    fn completed<R>(
        scq: &CompletionQueue<Tagged>,
        spool: &BufferPool,
        cq: &CompletionQueue<Tagged>,
        entries: &mut [TaggedEntry],
        f: impl FnOnce(Completions<'_, TaggedEntry>) -> R,
    ) -> R {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let _ = drain(scq, spool);
            if let CqRead::Completions(c) = cq.read(entries).unwrap() {
                return f(c);
            }
            assert!(
                Instant::now() < deadline,
                "the receive completes within 10 s"
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

#[test]
fn a_completion_held_across_the_close_keeps_its_context_stale() {
    // A completion read before its endpoint closed and still held (not
    // reclaimed) names a context the close took back. Until it is
    // released, that context is not posted with again: were it, the held
    // completion would hand out the buffer of the new operation in flight.
    held_across_the_close(0);
}

#[test]
fn a_completion_held_in_an_odd_epoch_keeps_its_context_stale_until_released() {
    // As above, with the batch read in an epoch of the other parity: a
    // queue counts its batches on two counters, by their epoch's parity,
    // and the release of the last batch of either must settle the marks
    // waiting for it.
    held_across_the_close(1);
}

/// A queue's epoch advanced `advances` times (each by a close whose marks
/// an empty read settles at once), then a completion held across the close
/// of its endpoint: its context stays stale while the batch is held, and
/// its slot is back once the batch is released and the queue read empty.
fn held_across_the_close(advances: usize) {
    let (fabric, domain, info) = fabric_domain();
    skip_if_msg!(info, "MSG endpoints send only once connected");
    let cq = CompletionQueue::<Tagged>::open(&domain, &CqAttr::new()).unwrap();
    let pool = BufferPool::new(&domain, 1, 64).unwrap();
    for round in 0..advances {
        // A receive in flight at its endpoint's close: its context is
        // marked stale until the queue is read empty after the close,
        // which advances the queue's epoch (no batch is held, so the
        // marks settle there). The slot has a second context, so taking it
        // proves nothing of the settling: the rounds below do (a context
        // still stale leaves them no slot).
        let ep = receiving_endpoint(&fabric, &domain, &info, &cq);
        ep.recv(pool.take().unwrap()).unwrap();
        drop(ep);
        let _ = drain(&cq, &pool);
        assert!(
            pool.take().is_some(),
            "advance {round}: read empty after the close, nothing held: the slot is back"
        );
    }
    let one = OneReceive::posted(&fabric, &domain, &info, &cq, &pool);
    let mut entries: [TaggedEntry; 4] = Default::default();
    OneReceive::completed(&one.scq, &one.spool, &cq, &mut entries, |held| {
        // Its endpoint closes while the completion is held, unreclaimed: the
        // slot comes back (the close cannot tell it was completed), stale.
        // (The sender, which addresses it, closes first: shm keeps an endpoint
        // open in the provider while an open endpoint of this process may
        // address it.)
        drop(one.sender);
        drop(one.receiver);
        let mut rounds_with_slot = 0;
        for _ in 0..4 {
            // Read empty, but the held batch is not released: the context
            // stays stale, so a post uses the other one, and the held
            // completion hands out nothing.
            let second = receiving_endpoint(&fabric, &domain, &info, &cq);
            if let Some(buf) = pool.take() {
                rounds_with_slot += 1;
                second.recv(buf).unwrap();
            }
            assert!(
                pool.reclaim(&held[0]).is_none(),
                "a completion of a closed endpoint's operation hands out nothing"
            );
            drop(second);
            let _ = drain(&cq, &pool);
        }
        assert_eq!(
            rounds_with_slot, 1,
            "after one more close the slot rests on its two stale contexts while the batch is held"
        );
        drop(held);
    });
    let _ = drain(&cq, &pool);
    assert!(
        pool.take().is_some(),
        "released and read empty: the slot is back"
    );
}

/// Slots of the pools of the leaked-batch tests.
const LEAKED_SLOTS: usize = 5;

/// Reads a completion into `entries` and leaks its guard, so that the
/// entries keep naming its context; drives `other` meanwhile.
fn read_and_leak(
    cq: &CompletionQueue<Msg>,
    other: &CompletionQueue<Msg>,
    entries: &mut [MsgEntry],
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let _ = other.read(&mut [MsgEntry::default()]);
        match cq.read(entries).unwrap() {
            CqRead::Completions(c) => {
                assert_eq!(c.len(), 1);
                std::mem::forget(c);
                return;
            }
            CqRead::Error(e) => panic!("error completion: {e:?}"),
            _ => {}
        }
        assert!(Instant::now() < deadline, "a completion within 10 s");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// After a batch was leaked and its queue, endpoint and pool are gone, a
/// new pool with one receive posted: `pool` must hand out only the others,
/// the posted one must come back through its own completion, and none of
/// the application's buffers may be written by the provider.
fn check_new_pool_after_leaked_batch(
    pool: &BufferPool,
    stale_entries: Vec<MsgEntry>,
    send: impl FnOnce(),
    drive: impl Fn(),
    cq: &CompletionQueue<Msg>,
) {
    // The leaked entries are dropped now: their context names no pool.
    drop(stale_entries);
    let mut held: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
    for buf in &mut held {
        buf.fill(0xAA);
    }
    send();
    let deadline = Instant::now() + Duration::from_secs(10);
    let back = loop {
        drive();
        let mut e = [MsgEntry::default()];
        if let CqRead::Completions(done) = cq.read(&mut e).unwrap() {
            break pool.reclaim(&done[0]);
        }
        assert!(
            Instant::now() < deadline,
            "the receive completes within 10 s"
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    let written = held.iter().filter(|b| b[..8] == *b"overrun!").count();
    assert_eq!(
        (held.len(), written),
        (LEAKED_SLOTS - 1, 0),
        "with one receive posted, the pool hands out the other slots, and the provider writes none of them"
    );
    let back = back.expect("the receive's own completion hands its buffer back");
    assert_eq!(&back[..8], b"overrun!");
}

#[test]
fn a_batch_leaked_past_its_queues_close_hands_out_no_buffer_of_a_later_pool() {
    // A batch whose guard was leaked keeps naming its contexts after its
    // endpoint, queue and pool are gone; a completion finds its pool by
    // the address of its context. Were those addresses freed, a later
    // pool given them would hand a buffer still posted to the application
    // when the leaked entries are dropped, and the provider would write
    // into it. (MSG endpoints; the RDM test follows.)
    skip_unless_msg!();
    let a = connect_pair::<Msg>(CqAttr::new().size(64));
    let pool_a = BufferPool::new(&a.server_domain, LEAKED_SLOTS, 64).unwrap();
    a.server.recv(pool_a.take().unwrap()).unwrap();
    a.client.send(a.client_pool.take().unwrap(), 8).unwrap();
    let mut entries: Vec<MsgEntry> = (0..4).map(|_| MsgEntry::default()).collect();
    read_and_leak(&a.server_cq, &a.client_cq, &mut entries);
    let common::Pair {
        server,
        server_cq,
        server_pool,
        client,
        client_cq,
        client_pool,
        server_eq,
        client_eq,
        ..
    } = a;
    server.close().map_err(|(_, e)| e).unwrap();
    drop((pool_a, server_cq, server_pool));
    drop((client, client_cq, client_pool, server_eq, client_eq));

    let b = connect_pair::<Msg>(CqAttr::new().size(64));
    let pool_b = BufferPool::new(&b.server_domain, LEAKED_SLOTS, 64).unwrap();
    b.server.recv(pool_b.take().unwrap()).unwrap();
    check_new_pool_after_leaked_batch(
        &pool_b,
        entries,
        || {
            let mut msg = b.client_pool.take().unwrap();
            msg[..8].copy_from_slice(b"overrun!");
            b.client.send(msg, 8).unwrap();
        },
        || {
            let _ = b.client_cq.read(&mut [MsgEntry::default()]);
        },
        &b.server_cq,
    );
}

/// The RDM hints of the suite's provider: through rxm for tcp.
fn rdm_hints() -> Hints {
    let p = provider();
    let prov = if is_tcp() {
        "tcp;ofi_rxm".to_string()
    } else {
        p.clone()
    };
    let h = Hints::new().provider(prov).ep_type(EpType::Rdm);
    if p == "shm" {
        h
    } else {
        h.node(node())
    }
}

/// `from` sends 8 bytes of `text` to `to`, retrying while the provider
/// says to.
fn rdm_send(from: &libfabric::Rdm, to: &libfabric::Rdm, text: &[u8; 8]) {
    let dest = from.insert(&to.name().unwrap()).unwrap();
    let pool = from.buffer_pool(1, 64).unwrap();
    let mut buf = pool.take().unwrap();
    buf[..8].copy_from_slice(text);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match from.endpoint().send_to(buf, 8, dest) {
            Ok(()) => return,
            Err((back, e)) if e.is_again() && Instant::now() < deadline => {
                buf = back;
                let _ = from.cq().read(&mut [MsgEntry::default()]);
                let _ = to.cq().read(&mut [MsgEntry::default()]);
            }
            Err((_, e)) => panic!("send: {e}"),
        }
    }
}

#[test]
fn a_batch_leaked_past_its_queues_close_hands_out_no_buffer_of_a_later_pool_rdm() {
    // As above, on RDM endpoints (rxm, rxd, shm, sockets).
    let hints = rdm_hints();
    let (a, b) = match (
        libfabric::Rdm::open(&hints, 4),
        libfabric::Rdm::open(&hints, 4),
    ) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => {
            println!(
                "SKIP {}: provider {}: no RDM endpoints: {e}",
                test_name(),
                provider()
            );
            return;
        }
    };
    let pool_a = a.buffer_pool(LEAKED_SLOTS, 64).unwrap();
    a.endpoint().recv(pool_a.take().unwrap()).unwrap();
    rdm_send(&b, &a, b"first!!!");
    let mut entries: Vec<MsgEntry> = (0..4).map(|_| MsgEntry::default()).collect();
    read_and_leak(a.cq(), b.cq(), &mut entries);
    drop((a, b, pool_a));

    let (c, d) = (
        libfabric::Rdm::open(&hints, 4).unwrap(),
        libfabric::Rdm::open(&hints, 4).unwrap(),
    );
    let pool_c = c.buffer_pool(LEAKED_SLOTS, 64).unwrap();
    c.endpoint().recv(pool_c.take().unwrap()).unwrap();
    check_new_pool_after_leaked_batch(
        &pool_c,
        entries,
        || rdm_send(&d, &c, b"overrun!"),
        || {
            let _ = d.cq().read(&mut [MsgEntry::default()]);
        },
        c.cq(),
    );
}

#[test]
fn a_small_buffers_read_begun_before_a_bind_never_cuts_connection_data() {
    // A provider writes as much of an event as fits and drops the rest. A
    // buffer with no room for connection data passes the check while
    // nothing that carries any is bound; a passive endpoint bound to the
    // queue while an sread with that buffer is blocked must not have its
    // request's data cut short (tcp cut 200 bytes to 8, nothing said).
    skip_unless_msg!();
    let (fabric, info) = fabric();
    let eq = fd_eq(&fabric);
    let data: Vec<u8> = (0..200u8).collect();
    let reader = {
        let eq = eq.clone();
        std::thread::spawn(move || {
            let mut small = EventBuf::with_cm_data_capacity(0).unwrap();
            match eq.sread(&mut small, Some(Duration::from_secs(20))) {
                Err(e) => e,
                Ok(read) => panic!("a read with no room for the request's data gave {read:?}"),
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let pep = PassiveEndpoint::open(&fabric, &listen_info()).unwrap();
    pep.bind_eq(&eq).unwrap();
    pep.listen().unwrap();
    let domain = Domain::open(&fabric, &info).unwrap();
    let ceq = fd_eq(&fabric);
    let _client = connecting(&domain, &ceq, &pep, &data);
    let mut cbuf = EventBuf::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !reader.is_finished() {
        // tcp sends the request as the client's queue is read.
        let _ = ceq.peek(&mut cbuf);
        assert!(Instant::now() < deadline, "the blocked read returns");
        std::thread::sleep(Duration::from_millis(1));
    }
    let error = reader.join().unwrap();
    assert!(
        matches!(error, Error::BufferTooSmall { needed, given: 0, .. } if needed >= data.len()),
        "{error:?}"
    );
    // The request is still queued, whole.
    match next_event(&eq, &[&ceq], Duration::from_secs(10)) {
        Ev::ConnReq {
            data: got, request, ..
        } => {
            assert_eq!(got, data, "the request's data, whole");
            drop(request.reject(&[]));
        }
        other => panic!("expected the connection request, got {other:?}"),
    }
    // A small buffer is now refused at once, by read and sread alike.
    let mut small = EventBuf::with_cm_data_capacity(8).unwrap();
    assert!(matches!(
        eq.read(&mut small),
        Err(Error::BufferTooSmall { .. })
    ));
    assert!(matches!(
        eq.sread(&mut small, Some(Duration::from_millis(10))),
        Err(Error::BufferTooSmall { .. })
    ));
}

#[test]
fn addresses_inserted_between_binding_an_address_vector_and_enabling() {
    // shm's insert maps the address into the region of every endpoint
    // bound to the vector, which fi_enable creates: an insert after
    // bind_av and before enable crashed. The vector is given to the
    // provider in enable, with inserts held off meanwhile.
    let (_fabric, domain, info) = fabric_domain();
    skip_if_msg!(info, "MSG endpoints have no address vector");
    let cq = CompletionQueue::<Tagged>::open(&domain, &CqAttr::new()).unwrap();
    let av = AddressVector::open(&domain, AvType::Table, 8).unwrap();
    let ep = Endpoint::open(&domain, &info).unwrap();
    ep.bind_av(&av).unwrap();
    let before = av
        .insert(&ep.name().unwrap())
        .expect("an insert before enable");
    ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
    let inserting = std::thread::scope(|s| {
        let t = s.spawn(|| {
            (0..5)
                .map(|_| av.insert(&ep.name().unwrap()).is_ok())
                .filter(|ok| *ok)
                .count()
        });
        ep.enable().unwrap();
        t.join().unwrap()
    });
    let after = av
        .insert(&ep.name().unwrap())
        .expect("an insert after enable");
    println!(
        "provider {}: inserted {before:?}, {inserting} during enable, {after:?}",
        provider()
    );
    assert!(av.contains(before) && av.contains(after));
    // A never enabled endpoint with a vector bound closes cleanly too.
    let idle = Endpoint::open(&domain, &info).unwrap();
    idle.bind_av(&av).unwrap();
    let _ = av.insert(&idle.name().unwrap());
    drop(idle);
}

#[test]
fn a_receive_only_endpoints_slot_comes_back_though_its_transmit_queue_is_never_read() {
    // The stale contexts of a receive wait for the receive queue only: a
    // transmit queue bound for form's sake and never read does not hold
    // them back (they rested for good on it).
    let (fabric, domain, info) = fabric_domain();
    let tx = CompletionQueue::<Tagged>::open(&domain, &CqAttr::new()).unwrap();
    let rx = CompletionQueue::<Tagged>::open(&domain, &CqAttr::new()).unwrap();
    let pool = BufferPool::new(&domain, 1, 64).unwrap();
    for round in 0..6 {
        let ep = Endpoint::open(&domain, &info).unwrap();
        if info.ep_type() == EpType::Msg {
            ep.bind_eq(&fd_eq(&fabric)).unwrap();
        } else {
            ep.bind_av(&AddressVector::open(&domain, AvType::Table, 4).unwrap())
                .unwrap();
        }
        ep.bind_cq(&tx, CqBind::TRANSMIT).unwrap();
        ep.bind_cq(&rx, CqBind::RECV).unwrap();
        ep.enable().unwrap();
        let buf = pool.take().unwrap_or_else(|| {
            panic!(
                "provider {}: round {round}: the slot never came back",
                provider()
            )
        });
        ep.recv(buf).unwrap();
        drop(ep);
        assert_eq!(drain(&rx, &pool).handed_out, 0);
    }
}

#[test]
fn a_slot_comes_back_while_two_threads_block_in_sread_on_its_queue() {
    // The epoch of a queue advances under its progress lock held
    // exclusively; a blocking read holds it shared in slices. With two
    // threads in sread, an advance that only tried the lock never got it,
    // and a slot resting on stale contexts never came back.
    let (fabric, domain, info) = fabric_domain();
    let cq = match CompletionQueue::<Tagged>::open(&domain, &CqAttr::new().wait(WaitObj::Fd)) {
        Ok(cq) => cq,
        Err(e) => {
            println!(
                "SKIP {}: provider {}: no FI_WAIT_FD completion queues ({e})",
                test_name(),
                provider()
            );
            return;
        }
    };
    let pool = BufferPool::new(&domain, 1, 64).unwrap();
    for _ in 0..2 {
        let ep = receiving_endpoint(&fabric, &domain, &info, &cq);
        ep.recv(pool.take().expect("the slot, before any close"))
            .unwrap();
        drop(ep);
    }
    if cq
        .sread(&mut [Default::default()], Some(Duration::ZERO))
        .is_err()
    {
        // rxm, rxd and shm: waits after an endpoint of the queue closed
        // are refused (waits_on_a_queue_after_its_endpoint_closed).
        println!(
            "SKIP {}: provider {}: no waits after an endpoint of the queue closed",
            test_name(),
            provider()
        );
        return;
    }
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    let back = std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut entries: [libfabric::cq::TaggedEntry; 4] = Default::default();
                while !stop.load(Ordering::Relaxed) {
                    match cq
                        .sread(&mut entries, Some(Duration::from_millis(300)))
                        .unwrap()
                    {
                        CqRead::Error(mut err) => {
                            assert!(pool.reclaim_err(&mut err).is_none());
                        }
                        CqRead::Completions(c) => {
                            for e in &c {
                                assert!(pool.reclaim(e).is_none());
                            }
                        }
                        _ => {}
                    }
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let back = loop {
            if let Some(buf) = pool.take() {
                break Some(buf);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        stop.store(true, Ordering::Relaxed);
        back
    });
    assert!(
        back.is_some(),
        "provider {}: the slot came back while two threads were in sread",
        provider()
    );
}

#[test]
fn endpoints_enabled_and_closed_while_their_queue_is_read_on_another_thread() {
    // rxm, rxd and shm run their completion queues' progress over the
    // endpoints bound to them, reading state that exists only between
    // fi_enable and fi_close: a read on another thread while an endpoint
    // was enabled or closed crashed (and a bound, never enabled endpoint
    // crashed a read on one thread).
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    let (fabric, domain, info) = fabric_domain();
    let cq = CompletionQueue::<Tagged>::open(&domain, &CqAttr::new().size(256)).unwrap();
    let pool = BufferPool::new(&domain, 8, 64).unwrap();
    // Every buffer handed out is held by one owner at a time.
    let held = Mutex::new(HashSet::new());
    let hold = |b: &libfabric::Buffer| {
        assert!(
            held.lock().unwrap().insert(b.as_ptr() as usize),
            "a slot handed out twice"
        )
    };
    let release = |b: &libfabric::Buffer| held.lock().unwrap().remove(&(b.as_ptr() as usize));
    let stop = AtomicBool::new(false);
    let mut kept = Vec::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut entries: [libfabric::cq::TaggedEntry; 4] = Default::default();
            while !stop.load(Ordering::Relaxed) {
                match cq.read(&mut entries).unwrap() {
                    CqRead::Error(mut err) => {
                        if let Some(b) = pool.reclaim_err(&mut err) {
                            hold(&b);
                            release(&b);
                        }
                    }
                    CqRead::Completions(done) => {
                        for entry in done.iter() {
                            if let Some(b) = pool.reclaim(entry) {
                                hold(&b);
                                release(&b);
                            }
                        }
                    }
                    _ => std::thread::yield_now(),
                }
            }
        });
        for round in 0..100 {
            // Bound and never enabled: a read must not reach it.
            let idle = Endpoint::open(&domain, &info).unwrap();
            idle.bind_cq(&cq, CqBind::RECV).unwrap();
            let ep = receiving_endpoint(&fabric, &domain, &info, &cq);
            while let Some(b) = pool.take() {
                hold(&b);
                release(&b);
                if let Err(e) = ep.recv(b) {
                    drop(e.0);
                    break;
                }
            }
            match round % 3 {
                0 => drop(ep),
                1 => ep.close().unwrap(),
                _ => kept.push(ep),
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    drop(kept);
    drain(&cq, &pool);
    let all: Vec<libfabric::Buffer> = std::iter::from_fn(|| pool.take()).collect();
    let distinct: HashSet<usize> = all.iter().map(|b| b.as_ptr() as usize).collect();
    assert_eq!(
        all.len(),
        distinct.len(),
        "a slot is in the free list twice"
    );
    assert_eq!(
        all.len(),
        8,
        "provider {}: every slot came back",
        provider()
    );
}

#[test]
fn an_enable_without_the_queues_its_caps_need_is_refused_before_any_call() {
    // rxm and shm refuse fi_enable without a receive queue (-FI_ENOCQ) but
    // keep the transmit queue already given to them: the next read of
    // that queue crashed on the never enabled endpoint.
    let (fabric, domain, info) = fabric_domain();
    let cq = CompletionQueue::<Tagged>::open(&domain, &CqAttr::new()).unwrap();
    let ep = Endpoint::open(&domain, &info).unwrap();
    if info.ep_type() == EpType::Msg {
        ep.bind_eq(&fd_eq(&fabric)).unwrap();
    } else {
        ep.bind_av(&AddressVector::open(&domain, AvType::Table, 4).unwrap())
            .unwrap();
    }
    ep.bind_cq(&cq, CqBind::TRANSMIT).unwrap();
    assert!(
        matches!(ep.enable(), Err(Error::State { .. })),
        "caps that receive need a receive queue"
    );
    let mut entries: [libfabric::cq::TaggedEntry; 4] = Default::default();
    assert!(matches!(cq.read(&mut entries).unwrap(), CqRead::Empty));
    // Bound for receives too, it enables.
    ep.bind_cq(&cq, CqBind::RECV).unwrap();
    ep.enable().unwrap();
    assert!(matches!(cq.read(&mut entries).unwrap(), CqRead::Empty));
}

#[test]
#[allow(deprecated)]
fn a_wait_set_waited_on_while_endpoints_of_its_queue_come_and_go() {
    // fi_wait runs the progress of the set's completion queues (util
    // providers): it crashed while an endpoint was enabled or closed.
    use std::sync::atomic::{AtomicBool, Ordering};
    let (fabric, domain, info) = fabric_domain();
    let set = match WaitSet::open(&fabric, WaitObj::Fd) {
        Ok(set) => set,
        Err(e) => {
            println!(
                "SKIP {}: provider {}: no FD wait set ({e})",
                test_name(),
                provider()
            );
            return;
        }
    };
    let cq = match CompletionQueue::<Tagged>::open(&domain, &CqAttr::new().wait_set(&set)) {
        Ok(cq) => cq,
        Err(e) => {
            println!(
                "SKIP {}: provider {}: no completion queue on a wait set ({e})",
                test_name(),
                provider()
            );
            return;
        }
    };
    let pool = BufferPool::new(&domain, 8, 64).unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                // rxd's fi_wait may answer -FI_EINVAL: a typed error, fine.
                let _ = set.wait(Some(Duration::ZERO));
            }
        });
        for _ in 0..100 {
            let ep = receiving_endpoint(&fabric, &domain, &info, &cq);
            if let Some(b) = pool.take() {
                ep.recv(b).unwrap();
            }
            drop(ep);
            drain(&cq, &pool);
        }
        stop.store(true, Ordering::Relaxed);
    });
    let all: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
    assert_eq!(all.len(), 8, "every receive's buffer came back");
}

#[test]
fn pools_dropped_on_one_thread_while_endpoints_close_on_another() {
    // An endpoint's close looks at the pools of its domain; a pool of
    // another domain whose last handle was dropped meanwhile on another
    // thread was dropped under the pool registry's lock, which its drop
    // takes again: a deadlock.
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let (fabric, domain, info) = fabric_domain();
    let other = Domain::open(&fabric, &info).unwrap();
    let _many: Vec<_> = (0..32)
        .map(|_| BufferPool::new(&domain, 1, 64).unwrap())
        .collect();
    let stop = AtomicBool::new(false);
    let pool_progress = AtomicU64::new(0);
    // Both sides must overlap for a while. On a loaded machine (or under
    // valgrind, which runs one thread at a time) either side may not be
    // scheduled until the nominal 3 s are over, so the endpoint side goes on
    // until both sides have done a few rounds (bounded, so a deadlock still
    // fails).
    let deadline = Instant::now() + Duration::from_secs(3);
    let give_up = Instant::now() + Duration::from_secs(120);
    let (pool_rounds, endpoint_rounds) = std::thread::scope(|s| {
        let pools = s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let pools: Vec<_> = (0..16)
                    .map(|_| BufferPool::new(&other, 1, 64).unwrap())
                    .collect();
                drop(pools);
                pool_progress.fetch_add(1, Ordering::Relaxed);
            }
        });
        let mut rounds = 0u64;
        while (Instant::now() < deadline || pool_progress.load(Ordering::Relaxed) < 3 || rounds < 3)
            && Instant::now() < give_up
        {
            drop(Endpoint::open(&domain, &info).unwrap());
            rounds += 1;
        }
        stop.store(true, Ordering::Relaxed);
        pools.join().unwrap();
        (pool_progress.load(Ordering::Relaxed), rounds)
    });
    // A deadlock would have hung above; both sides ran.
    assert!(
        pool_rounds > 0 && endpoint_rounds > 0,
        "{pool_rounds} / {endpoint_rounds}"
    );
}

#[test]
fn waits_on_a_queue_after_its_endpoint_closed() {
    // rxm leaves a callback into each enabled endpoint in the wait object of
    // the queues it was bound to: a trywait, sread or Waiter on the queue
    // after the endpoint closed read freed memory. There they are refused;
    // elsewhere they work.
    let (fabric, domain, info) = fabric_domain();
    let cq = match CompletionQueue::<Tagged>::open(&domain, &CqAttr::new().wait(WaitObj::Fd)) {
        Ok(cq) => cq,
        Err(e) => {
            println!(
                "SKIP {}: provider {}: no FI_WAIT_FD completion queues ({e})",
                test_name(),
                provider()
            );
            return;
        }
    };
    // Sets prepared before the close look again on every call: one queue,
    // and two (each with its progress lock).
    let other = CompletionQueue::<Tagged>::open(&domain, &CqAttr::new().wait(WaitObj::Fd)).unwrap();
    let mut prepared = TryWaitSet::new(&fabric, &[&cq]).unwrap();
    let mut prepared_two = TryWaitSet::new(&fabric, &[&other, &cq]).unwrap();
    assert_eq!(prepared.trywait().unwrap(), TryWait::MayBlock);
    assert_eq!(prepared_two.trywait().unwrap(), TryWait::MayBlock);
    drop(receiving_endpoint(&fabric, &domain, &info, &cq));
    let mut entries: [libfabric::cq::TaggedEntry; 4] = Default::default();
    let p = provider();
    let rxm = p.contains("ofi_rxm") || p.contains("ofi_rxd") || p == "shm";
    for _ in 0..3 {
        for (set, what) in [
            (&mut prepared, "one queue"),
            (&mut prepared_two, "two queues"),
        ] {
            let tried = set.trywait();
            if rxm {
                assert!(
                    matches!(tried, Err(Error::State { .. })),
                    "{what}: {tried:?}"
                );
            } else {
                assert_eq!(tried.unwrap(), TryWait::MayBlock, "{what}");
            }
        }
        // The other queue's own waits are not refused.
        assert_eq!(
            TryWaitSet::new(&fabric, &[&other])
                .unwrap()
                .trywait()
                .unwrap(),
            TryWait::MayBlock
        );
        let two = libfabric::wait::trywait(&fabric, &[&other, &cq]);
        assert_eq!(rxm, matches!(two, Err(Error::State { .. })), "{two:?}");
        let trywait = libfabric::wait::trywait(&fabric, &[&cq]);
        let sread = cq
            .sread(&mut entries, Some(Duration::from_millis(1)))
            .map(|_| ());
        let waiter = Waiter::new(&[&cq]).and_then(|mut w| w.wait(Some(Duration::ZERO)));
        if rxm {
            assert!(matches!(trywait, Err(Error::State { .. })), "{trywait:?}");
            assert!(matches!(sread, Err(Error::State { .. })), "{sread:?}");
            // rxd has no wait fd to give a Waiter (FI_GETWAIT: -FI_ENOSYS).
            assert!(
                matches!(waiter, Err(Error::State { .. } | Error::Call { .. })),
                "{waiter:?}"
            );
        } else {
            let _ = trywait.unwrap();
            sread.unwrap();
            let _ = waiter.unwrap();
        }
        // Reading never waits: it works everywhere.
        assert!(matches!(cq.read(&mut entries).unwrap(), CqRead::Empty));
    }
}

#[test]
fn signal_on_a_queue_without_a_wait_object_is_refused() {
    // rxm, rxd and shm signal the wait object they assume a queue has
    // (ofi_cq_signal follows a NULL wait): a crash.
    let (_fabric, domain, _) = fabric_domain();
    let cq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new().wait(WaitObj::None)).unwrap();
    assert!(matches!(
        cq.signal(),
        Err(Error::WrongWaitMode {
            call: "fi_cq_signal",
            ..
        })
    ));
}

#[test]
fn an_info_list_taken_apart_hands_out_every_entry_once() {
    // Every entry of the list, owned, none dropped on the way (the nodes
    // are detached, not copied); those not taken are freed with the
    // iterator (valgrind: no leak, no double free).
    let hints = Hints::new().node(node());
    let describe = |e: &libfabric::info::InfoEntry| {
        (
            e.provider().to_owned(),
            e.fabric_name().to_owned(),
            e.domain_name().to_owned(),
            e.ep_type(),
            e.src_addr().to_vec(),
        )
    };
    let list = getinfo(&hints).unwrap();
    let listed: Vec<_> = list.iter().map(describe).collect();
    assert!(!listed.is_empty());
    let taken: Vec<Info> = list.into_iter().collect();
    assert_eq!(
        taken.iter().map(|i| describe(i)).collect::<Vec<_>>(),
        listed
    );
    // Each is a list of one, usable on its own.
    for info in &taken {
        assert_eq!(
            info.to_owned_info().map(|i| describe(&i)).unwrap(),
            describe(info)
        );
    }
    drop(taken);
    let mut some = getinfo(&hints).unwrap().into_iter();
    let first = some.next().unwrap();
    drop(some);
    assert_eq!(describe(&first), listed[0]);
    Fabric::open(&first).unwrap();
    assert_eq!(getinfo(&hints).unwrap().into_iter().count(), listed.len());
}

/// On a connectionless endpoint, a batch dropped without its
/// completion being reclaimed hands the buffer back at once, while the
/// entries it was read into are still alive (it is the guard's drop, not
/// the entries', that hands it back).
#[test]
fn a_dropped_batch_hands_its_buffer_back_while_its_entries_live() {
    let (fabric, domain, info) = fabric_domain();
    skip_if_msg!(info, "MSG endpoints send only once connected");
    let cq = CompletionQueue::<Tagged>::open(&domain, &CqAttr::new()).unwrap();
    let pool = BufferPool::new(&domain, 1, 64).unwrap();
    let one = OneReceive::posted(&fabric, &domain, &info, &cq, &pool);
    let mut entries: [TaggedEntry; 4] = Default::default();
    OneReceive::completed(&one.scq, &one.spool, &cq, &mut entries, |batch| {
        assert_eq!(batch.len(), 1);
        drop(batch); // unreclaimed, its entries still alive
        assert!(
            pool.take().is_some(),
            "the dropped batch handed its buffer back (entries still alive)"
        );
    });
}

#[test]
fn completion_error_text_needs_no_endpoint_bound() {
    // rxm's and rxd's fi_cq_strerror ask the queue's first bound endpoint
    // without looking whether there is one: asked on a queue with none,
    // they followed a NULL pointer. The error completion comes from a
    // connection (a receive its shutdown cancelled); the layered queues
    // are opened here whatever provider the suite runs on.
    skip_unless_msg!();
    if provider() == "sockets" {
        println!(
            "SKIP {}: provider sockets: posted receives are not flushed by a shutdown",
            test_name()
        );
        return;
    }
    let pair = connect_pair::<Msg>(CqAttr::new());
    let mut entries: [MsgEntry; 1] = Default::default();
    let mut err = pair.cancelled_receive(&mut entries);
    assert_eq!(err.err, Errno::CANCELED, "{err:?}");
    for layered in ["tcp;ofi_rxm", "udp;ofi_rxd"] {
        let hints = libfabric::Hints::new()
            .provider(layered)
            .node("127.0.0.1")
            .ep_type(EpType::Rdm);
        let list = libfabric::getinfo(&hints)
            .unwrap_or_else(|e| panic!("provider {layered} is not usable here: {e}"));
        let info = list.first().expect("an fi_info");
        let fabric = libfabric::Fabric::open(info).unwrap();
        let domain = libfabric::Domain::open(&fabric, info).unwrap();
        let cq = libfabric::CompletionQueue::<Msg>::open(&domain, &CqAttr::new()).unwrap();
        assert_eq!(
            cq.strerror(&err),
            Errno::from_raw_os_error(err.prov_errno).text(),
            "{layered}: the text of the error number, with no endpoint bound"
        );
    }
    assert!(
        pair.server_pool.reclaim_err(&mut err).is_some(),
        "the receive's buffer comes back"
    );
}

#[test]
fn a_tcp_endpoint_of_libfabric_1_17_needs_both_queues_whatever_its_caps() {
    // tcp of 1.17 answers a peer's reads and writes through the endpoint's
    // completion queues whatever its caps (tcpx_op_read_req followed a
    // NULL transmit queue): an endpoint that is only the target of RMA
    // was enabled with a receive queue alone. Later tcp answers from its
    // domain's progress, and such an endpoint enables.
    if provider() != "tcp" {
        println!(
            "SKIP {}: provider {}: the rule is tcp's",
            test_name(),
            provider()
        );
        return;
    }
    let hints = libfabric::Hints::new()
        .provider(provider())
        .node(node())
        .ep_type(EpType::Msg)
        .caps(Caps::RMA | Caps::REMOTE_READ | Caps::REMOTE_WRITE);
    let info = info_for(&hints);
    let fabric = libfabric::Fabric::open(&info).unwrap();
    let domain = libfabric::Domain::open(&fabric, &info).unwrap();
    let ep = Endpoint::open(&domain, &info).unwrap();
    ep.bind_eq(&fd_eq(&fabric)).unwrap();
    let rx = CompletionQueue::<Msg>::open(&domain, &CqAttr::new()).unwrap();
    ep.bind_cq(&rx, CqBind::RECV).unwrap();
    let sys = libfabric::sys::runtime_version();
    if sys < libfabric::sys::FI_VERSION(1, 18) {
        match ep.enable() {
            Err(Error::State { call, reason }) => {
                assert_eq!(call, "fi_enable");
                assert!(reason.contains("both"), "{reason}");
            }
            other => panic!("enabled without a transmit queue: {other:?}"),
        }
        ep.bind_cq(&rx, CqBind::TRANSMIT).unwrap();
    }
    ep.enable().unwrap();
}
