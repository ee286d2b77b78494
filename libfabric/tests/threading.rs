//! Threading models (`FI_THREAD_SAFE`, `FI_THREAD_DOMAIN`,
//! `FI_THREAD_COMPLETION`) as the type parameter of domains and their
//! objects: opening each model, transfers on a serialized domain driven
//! from its one thread, and the paths where work of such a domain could
//! reach another thread.
// Wait sets are deprecated by libfabric 2.x; their rules are still tested.
#![cfg_attr(libfabric_2, allow(deprecated))]

mod common;

use common::{msg_capable, node, provider, shut_down, test_name};
use libfabric::av::AvType;
use libfabric::cq::{Addr, CompletionFlags, CqAttr, CqRead, Data, DataEntry};
use libfabric::ep::CqBind;
use libfabric::eq::{EqAttr, EqRead, Event, EventBuf};
use libfabric::info::{Caps, EpType, Threading};
use libfabric::mr::{MemoryRegion, MrAccess};
use libfabric::wait::{WaitObj, WaitSet, Waitable, Waiter};
use libfabric::{
    getinfo, AddressVector, Buffer, BufferPool, CntrAttr, CntrBind, CompletionQueue, Counter,
    Domain, Endpoint, Error, EventQueue, Fabric, Hints, Info, PassiveEndpoint, ThreadCompletion,
    ThreadDomain, ThreadModel, ThreadSafe,
};
use std::time::{Duration, Instant};

/// The suite's hints for transfers and RMA, asking for `model`.
fn hints(model: Threading) -> Hints {
    let p = provider();
    let h = Hints::new()
        .provider(p.clone())
        .caps(Caps::MSG | Caps::RMA)
        .ep_type(if msg_capable() {
            EpType::Msg
        } else {
            EpType::Rdm
        })
        .threading(model);
    if p == "shm" {
        // As rma.rs: shm checks RMA keys only with an RMA ordering.
        h.msg_order(libfabric::sys::FI_ORDER_RAW | libfabric::sys::FI_ORDER_WAW)
    } else {
        h.node(node())
    }
}

fn skip(why: impl std::fmt::Display) {
    println!("SKIP {}: provider {}: {why}", test_name(), provider());
}

/// The first `fi_info` for `model`, or `None` with a typed skip printed.
fn info_for(model: Threading) -> Option<Info> {
    let h = if msg_capable() {
        hints(model).service(0).source(true)
    } else {
        hints(model)
    };
    match getinfo(&h) {
        Ok(list) => list.into_iter().next(),
        Err(e) => {
            skip(format!("no fi_info for {model:?} ({e})"));
            None
        }
    }
}

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn thread_safe_objects_are_send_and_sync() {
    // The default model keeps every handle Send + Sync (compile time);
    // the serialized ones are proven not to be by tests/ui.
    assert_send_sync::<Domain>();
    assert_send_sync::<Domain<ThreadSafe>>();
    assert_send_sync::<Endpoint>();
    assert_send_sync::<CompletionQueue<Data>>();
    assert_send_sync::<Counter>();
    assert_send_sync::<AddressVector>();
    assert_send_sync::<MemoryRegion<Vec<u8>>>();
    assert_send_sync::<BufferPool>();
    assert_send_sync::<Buffer>();
    assert_send_sync::<libfabric::EventQueue>();
    fn assert_unwind_safe<T: std::panic::UnwindSafe + std::panic::RefUnwindSafe>() {}
    assert_unwind_safe::<libfabric::EventQueue>();
    assert_eq!(ThreadSafe::THREADING, Threading::Safe);
    assert_eq!(ThreadDomain::THREADING, Threading::Domain);
    assert_eq!(ThreadCompletion::THREADING, Threading::Completion);
}

/// Opens a domain of model `T` from an `fi_info` asked for with `model`;
/// `None` with a skip when the provider gives no such `fi_info`.
fn open_as<T: ThreadModel>(model: Threading) -> Option<(Fabric, Domain<T>, Info)> {
    let info = info_for(model)?;
    let fabric = Fabric::open(&info).unwrap();
    match Domain::<T>::open_model(&fabric, &info) {
        Ok(domain) => Some((fabric, domain, info)),
        Err(e @ Error::Unsupported { .. }) if shm_refuses::<T>() => {
            skip(format!("serialized models are refused on shm ({e})"));
            None
        }
        Err(e) => panic!(
            "{}: provider {}: {model:?} granted as {:?}, refused: {e}",
            test_name(),
            provider(),
            info.threading()
        ),
    }
}

/// Whether `open_model` refuses `T` here: shm endpoints of one process
/// close together across domains and threads, which a serialized domain
/// cannot allow.
fn shm_refuses<T: ThreadModel>() -> bool {
    provider() == "shm" && T::THREADING != Threading::Safe
}

#[test]
fn a_domain_opens_with_each_model_and_refuses_a_weaker_fi_info() {
    for model in [Threading::Safe, Threading::Domain, Threading::Completion] {
        let Some(info) = info_for(model) else {
            continue;
        };
        let granted = info.threading();
        println!(
            "provider {}: asked {model:?}, granted {granted:?}",
            provider()
        );
        let fabric = Fabric::open(&info).unwrap();
        let safe = Domain::<ThreadSafe>::open_model(&fabric, &info);
        let domain = Domain::<ThreadDomain>::open_model(&fabric, &info);
        let completion = Domain::<ThreadCompletion>::open_model(&fabric, &info);
        // ThreadSafe needs FI_THREAD_SAFE; ThreadDomain takes any model
        // asked for here; ThreadCompletion refuses FI_THREAD_DOMAIN.
        assert_eq!(
            safe.is_ok(),
            granted == Threading::Safe,
            "{model:?}: {safe:?}"
        );
        if let Err(e) = &safe {
            assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        }
        if shm_refuses::<ThreadDomain>() {
            assert!(
                matches!(domain, Err(Error::Unsupported { .. })),
                "{domain:?}"
            );
            assert!(completion.is_err(), "{completion:?}");
            assert!(Domain::open(&fabric, &info).is_ok() == (granted == Threading::Safe));
            continue;
        }
        assert!(domain.is_ok(), "{model:?} as ThreadDomain: {domain:?}");
        assert_eq!(
            completion.is_ok(),
            granted != Threading::Domain,
            "{model:?}: {completion:?}"
        );
        if let Err(e) = &completion {
            assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        }
        // Domain::open is the FI_THREAD_SAFE constructor.
        assert_eq!(
            Domain::open(&fabric, &info).is_ok(),
            granted == Threading::Safe
        );
        assert_eq!(domain.unwrap().deferred_closes(), 0);
    }
}

/// Two sides of a serialized model, each with its own domain, all on the
/// calling thread.
struct Side<T: ThreadModel> {
    ep: Endpoint<T>,
    cq: CompletionQueue<Data, T>,
    /// `None` where the provider has no counters (verbs).
    cntr: Option<Counter<T>>,
    pool: BufferPool,
    domain: Domain<T>,
    peer: Addr,
    eq: Option<EventQueue>,
    _av: Option<AddressVector<T>>,
}

fn open_side<T: ThreadModel>(
    fabric: &Fabric,
    info: &libfabric::info::InfoEntry,
) -> (Domain<T>, CompletionQueue<Data, T>, Option<Counter<T>>) {
    let domain = Domain::<T>::open_model(fabric, info).unwrap();
    let cq = CompletionQueue::<Data, T>::open(&domain, &CqAttr::new().wait(WaitObj::None)).unwrap();
    let cntr = match Counter::open(&domain, &CntrAttr::new().wait(WaitObj::None)) {
        Ok(c) => Some(c),
        Err(e @ Error::Unsupported { .. }) => {
            println!(
                "{}: provider {}: no counters ({e}): the counter part is left out",
                test_name(),
                provider()
            );
            None
        }
        Err(e) => panic!("fi_cntr_open: {e}"),
    };
    (domain, cq, cntr)
}

/// A pair of sides of model `T` (asked for as `model`), connected (MSG)
/// or mutually addressed (RDM), built on this thread; `None` with a skip
/// printed when the provider gives no such `fi_info`.
fn serialized_pair<T: ThreadModel>(model: Threading) -> Option<(Side<T>, Side<T>, Fabric)> {
    let info = info_for(model)?;
    if shm_refuses::<T>() {
        let fabric = Fabric::open(&info).unwrap();
        let e = Domain::<T>::open_model(&fabric, &info).unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
        skip(format!("serialized models are refused on shm ({e})"));
        return None;
    }
    let fabric = Fabric::open(&info).unwrap();
    if !msg_capable() {
        let mut sides = Vec::new();
        for _ in 0..2 {
            let (domain, cq, cntr) = open_side::<T>(&fabric, &info);
            let av = AddressVector::open(&domain, AvType::Table, 4).unwrap();
            let ep = Endpoint::open(&domain, &info).unwrap();
            ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
            if let Some(cntr) = &cntr {
                ep.bind_cntr(cntr, CntrBind::SEND | CntrBind::RECV).unwrap();
            }
            ep.bind_av(&av).unwrap();
            ep.enable().unwrap();
            let pool = BufferPool::new(&domain, 8, 4096).unwrap();
            sides.push(Side {
                ep,
                cq,
                cntr,
                pool,
                domain,
                peer: Addr::UNSPEC,
                eq: None,
                _av: Some(av),
            });
        }
        let b = sides.pop().unwrap();
        let mut a = sides.pop().unwrap();
        let mut b = b;
        a.peer = a
            ._av
            .as_ref()
            .unwrap()
            .insert(&b.ep.name().unwrap())
            .unwrap();
        b.peer = b
            ._av
            .as_ref()
            .unwrap()
            .insert(&a.ep.name().unwrap())
            .unwrap();
        return Some((a, b, fabric));
    }
    // Connected endpoints: the passive endpoint and the event queues are
    // fabric-level (thread safe); everything is driven from here.
    let pep = PassiveEndpoint::open(&fabric, &info).unwrap();
    let listen_eq = EventQueue::open(&fabric, &EqAttr::new()).unwrap();
    pep.bind_eq(&listen_eq).unwrap();
    pep.listen().unwrap();
    let addr = pep.local_addr().unwrap();
    let cinfo = getinfo(
        &hints(model)
            .node(addr.ip().to_string())
            .service(addr.port().to_string()),
    )
    .unwrap()
    .into_iter()
    .next()
    .unwrap();
    let (cdomain, ccq, ccntr) = open_side::<T>(&fabric, &cinfo);
    let ceq = EventQueue::open(&fabric, &EqAttr::new()).unwrap();
    let client = Endpoint::open(&cdomain, &cinfo).unwrap();
    client.bind_eq(&ceq).unwrap();
    client
        .bind_cq(&ccq, CqBind::TRANSMIT | CqBind::RECV)
        .unwrap();
    if let Some(cntr) = &ccntr {
        client
            .bind_cntr(cntr, CntrBind::SEND | CntrBind::RECV)
            .unwrap();
    }
    client.enable().unwrap();
    client.connect(b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = EventBuf::new();
    let request = loop {
        if let EqRead::Event(Event::ConnReq(c)) = listen_eq.read(&mut buf).unwrap() {
            break c.request;
        }
        let _ = ceq.peek(&mut EventBuf::new());
        assert!(Instant::now() < deadline, "no connection request");
        std::thread::sleep(Duration::from_millis(1));
    };
    let (sdomain, scq, scntr) = open_side::<T>(&fabric, request.info());
    let seq = EventQueue::open(&fabric, &EqAttr::new()).unwrap();
    let server = Endpoint::from_request(&sdomain, request)
        .map_err(|(_, e)| e)
        .unwrap();
    server.bind_eq(&seq).unwrap();
    server
        .bind_cq(&scq, CqBind::TRANSMIT | CqBind::RECV)
        .unwrap();
    if let Some(cntr) = &scntr {
        server
            .bind_cntr(cntr, CntrBind::SEND | CntrBind::RECV)
            .unwrap();
    }
    server.enable().unwrap();
    server.accept(b"").unwrap();
    let (mut client_up, mut server_up) = (false, false);
    while !(client_up && server_up) {
        for (eq, up, ep_fid) in [
            (&ceq, &mut client_up, client.fid()),
            (&seq, &mut server_up, server.fid()),
        ] {
            if let EqRead::Event(Event::Connected(c)) = eq.read(&mut buf).unwrap() {
                assert_eq!(c.fid, ep_fid);
                // An endpoint of a serialized domain is not handed out by
                // the queue (which any thread may read).
                assert_eq!(eq.resolve(c.fid).is_none(), !T::LOCKED);
                *up = true;
            }
        }
        assert!(Instant::now() < deadline, "never connected");
        std::thread::sleep(Duration::from_millis(1));
    }
    let a = Side {
        pool: BufferPool::new(&cdomain, 8, 4096).unwrap(),
        ep: client,
        cq: ccq,
        cntr: ccntr,
        domain: cdomain,
        peer: Addr::UNSPEC,
        eq: Some(ceq),
        _av: None,
    };
    let b = Side {
        pool: BufferPool::new(&sdomain, 8, 4096).unwrap(),
        ep: server,
        cq: scq,
        cntr: scntr,
        domain: sdomain,
        peer: Addr::UNSPEC,
        eq: Some(seq),
        _av: None,
    };
    // The listener's objects go with the fabric handle the caller keeps.
    drop((pep, listen_eq));
    Some((a, b, fabric))
}

type Done = Vec<(CompletionFlags, usize, Option<Buffer>)>;

/// Reads both sides' queues until `want[i]` completions arrived on side
/// `i`; returns them with their buffers.
fn completions<T: ThreadModel>(sides: [&Side<T>; 2], want: [usize; 2]) -> [Done; 2] {
    let mut got: [Done; 2] = [Vec::new(), Vec::new()];
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut entries: [DataEntry; 8] = Default::default();
    while got[0].len() < want[0] || got[1].len() < want[1] {
        for (i, s) in sides.iter().enumerate() {
            match s.cq.read(&mut entries).unwrap() {
                CqRead::Completions(done) => {
                    for c in &done {
                        got[i].push((c.flags(), c.len(), s.pool.reclaim(c)));
                    }
                }
                CqRead::Error(e) => panic!("{}: error completion {e:?}", provider()),
                _ => {}
            }
            if let Some(eq) = &s.eq {
                let _ = eq.peek(&mut EventBuf::new());
            }
        }
        assert!(
            Instant::now() < deadline,
            "{}: completions timed out",
            provider()
        );
    }
    assert_eq!([got[0].len(), got[1].len()], want, "unexpected completions");
    got
}

/// Posts `buffer` with `post`, reading both queues and posting again
/// while the provider answers `-FI_EAGAIN` (rxm and shm set their
/// connection up first).
fn post<T: ThreadModel>(
    sides: [&Side<T>; 2],
    mut buffer: Buffer,
    mut post: impl FnMut(Buffer) -> libfabric::Handback<Buffer>,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match post(buffer) {
            Ok(()) => return,
            Err((back, e)) if e.is_again() => {
                buffer = back;
                for s in sides {
                    // Progress only: nothing is completed before the post.
                    assert!(matches!(
                        s.cq.read(&mut <[DataEntry; 1]>::default()).unwrap(),
                        CqRead::Empty
                    ));
                }
                assert!(
                    Instant::now() < deadline,
                    "{}: the post stayed refused",
                    provider()
                );
            }
            Err((_, e)) => panic!("{}: {e}", provider()),
        }
    }
}

fn send_recv_and_rma<T: ThreadModel>(model: Threading) {
    let Some((a, b, _fabric)) = serialized_pair::<T>(model) else {
        return;
    };
    // Send and receive, data checked, several times.
    for round in 0..5u8 {
        b.ep.recv(b.pool.take().unwrap())
            .map_err(|(_, e)| e)
            .unwrap();
        let mut msg = a.pool.take().unwrap();
        let payload = [round; 100];
        msg[..100].copy_from_slice(&payload);
        post([&a, &b], msg, |m| a.ep.send_to(m, 100, a.peer));
        let [sent, got] = completions([&a, &b], [1, 1]);
        assert!(sent[0].0.contains(CompletionFlags::SEND));
        assert!(got[0].0.contains(CompletionFlags::RECV));
        assert_eq!(got[0].1, 100);
        assert_eq!(
            &got[0].2.as_ref().expect("the receive's buffer")[..100],
            &payload
        );
    }
    // The counters bound to both sides counted the sends and receives.
    if let (Some(ac), Some(bc)) = (&a.cntr, &b.cntr) {
        assert_eq!(ac.read().unwrap(), 5, "sender's counter");
        assert_eq!(bc.read().unwrap(), 5, "receiver's counter");
        assert_eq!(ac.read_err().unwrap(), 0);
    }
    // RMA: a writes into b's region, then reads it back.
    let region = MemoryRegion::<Vec<u8>, T>::register(
        &b.domain,
        vec![0u8; 4096],
        MrAccess::REMOTE_WRITE | MrAccess::REMOTE_READ,
    )
    .unwrap();
    let remote = region.remote();
    let mut out = a.pool.take().unwrap();
    for (i, byte) in out[..256].iter_mut().enumerate() {
        *byte = i as u8 ^ 0x5a;
    }
    let expected = out[..256].to_vec();
    post([&a, &b], out, |m| a.ep.write(m, 256, &remote, 512, a.peer));
    let [done, _] = completions([&a, &b], [1, 0]);
    assert!(
        done[0].0.contains(CompletionFlags::WRITE),
        "{:?}",
        done[0].0
    );
    // Visible at the target once the write completed at the initiator
    // (delivery complete is not asked for: read until it shows).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = vec![0u8; 256];
    loop {
        region.read_at(512, &mut seen).unwrap();
        if seen == expected {
            break;
        }
        let _ = b.cq.read(&mut <[DataEntry; 1]>::default());
        assert!(Instant::now() < deadline, "the write never landed");
    }
    let back = a.pool.take().unwrap();
    post([&a, &b], back, |m| a.ep.read(m, 256, &remote, 512, a.peer));
    let [done, _] = completions([&a, &b], [1, 0]);
    assert!(done[0].0.contains(CompletionFlags::READ), "{:?}", done[0].0);
    assert_eq!(&done[0].2.as_ref().unwrap()[..256], &expected[..]);
    drop(region);
    // Nothing was parked: every handle stayed on this thread.
    assert_eq!(a.domain.deferred_closes() + b.domain.deferred_closes(), 0);
}

#[test]
fn send_recv_rma_and_counters_on_a_thread_domain_domain() {
    send_recv_and_rma::<ThreadDomain>(Threading::Domain);
}

#[test]
fn send_recv_rma_and_counters_on_a_thread_completion_domain() {
    send_recv_and_rma::<ThreadCompletion>(Threading::Completion);
}

#[test]
fn send_recv_rma_and_counters_on_a_thread_safe_domain_opened_with_open_model() {
    send_recv_and_rma::<ThreadSafe>(Threading::Safe);
}

#[test]
fn a_buffer_dropped_on_another_thread_parks_its_pools_close_for_the_domains_thread() {
    let Some((fabric, domain, _)) = open_as::<ThreadDomain>(Threading::Domain) else {
        return;
    };
    let cq = CompletionQueue::<Data, _>::open(&domain, &CqAttr::new().wait(WaitObj::None)).unwrap();
    let pool = BufferPool::new(&domain, 2, 64).unwrap();
    let buffer = pool.take().unwrap();
    drop(pool); // the buffer holds the pool's last handle
    let stop = std::sync::atomic::AtomicBool::new(false);
    let mut entries: [DataEntry; 8] = Default::default();
    let mut reads = 0u64;
    std::thread::scope(|s| {
        let dropper = s.spawn(|| {
            // The last handle of the pool goes here: its fi_close(mr) must
            // not run on this thread while the owner reads its queue.
            drop(buffer);
            stop.store(true, std::sync::atomic::Ordering::Release);
        });
        // The owner drives the domain meanwhile.
        while !stop.load(std::sync::atomic::Ordering::Acquire) || reads < 1000 {
            assert!(matches!(cq.read(&mut entries).unwrap(), CqRead::Empty));
            reads += 1;
        }
        dropper.join().unwrap();
    });
    assert_eq!(
        domain.deferred_closes(),
        1,
        "the close was parked, not made"
    );
    // Done at the domain's next opening of an object, or by hand.
    let again = BufferPool::new(&domain, 1, 64).unwrap();
    assert_eq!(domain.deferred_closes(), 0);
    drop(again);
    // A buffer outliving every handle of the domain closes all on the
    // thread that drops it last (nothing else can run then).
    let pool = BufferPool::new(&domain, 1, 64).unwrap();
    let last = pool.take().unwrap();
    drop((pool, cq, domain, fabric));
    std::thread::spawn(move || drop(last)).join().unwrap();
}

#[test]
fn serialized_objects_are_refused_where_any_thread_could_use_them() {
    let Some((fabric, domain, _)) = open_as::<ThreadDomain>(Threading::Domain) else {
        return;
    };
    let cq = CompletionQueue::<Data, _>::open(&domain, &CqAttr::new()).unwrap();
    // A Waiter is Send: it could trywait on another thread.
    let queues: [&dyn Waitable; 1] = [&cq];
    match Waiter::new(&queues) {
        Err(Error::InvalidArgument(why)) => assert!(why.contains("FI_THREAD_DOMAIN"), "{why}"),
        other => panic!("a Waiter over a serialized queue: {other:?}"),
    }
    // A wait set runs its members' progress on any thread.
    match WaitSet::open(&fabric, WaitObj::Fd) {
        Ok(set) => {
            let e = CompletionQueue::<Data, _>::open(&domain, &CqAttr::new().wait_set(&set))
                .unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
            let e = Counter::open(&domain, &CntrAttr::new().wait_set(&set)).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        }
        Err(e) => skip(format!("no FI_WAIT_FD wait set ({e}); the Waiter part ran")),
    }
    // trywait on the owner's thread works as for any queue.
    if cq.wait_obj() == WaitObj::Fd {
        let _ = libfabric::wait::trywait(&fabric, &[&cq]).unwrap();
    }
}

#[test]
fn connection_events_reach_a_serialized_endpoint_on_its_own_thread() {
    // The event queue records a serialized endpoint's FI_CONNECTED and
    // FI_SHUTDOWN in a cell of its own (it holds no endpoint, which it
    // could otherwise drop, and close, on another thread); the endpoint
    // takes them in when a post finds it not ready.
    if !msg_capable() {
        skip("no FI_EP_MSG endpoints (connection events)");
        return;
    }
    let Some((a, b, _fabric)) = serialized_pair::<ThreadDomain>(Threading::Domain) else {
        return;
    };
    // Connected (taken in at the first post).
    b.ep.recv(b.pool.take().unwrap())
        .map_err(|(_, e)| e)
        .unwrap();
    post([&a, &b], a.pool.take().unwrap(), |m| {
        a.ep.send_to(m, 8, a.peer)
    });
    let [sent, got] = completions([&a, &b], [1, 1]);
    assert!(sent[0].0.contains(CompletionFlags::SEND));
    assert!(got[0].0.contains(CompletionFlags::RECV));
    // The peer shuts the connection down: once its FI_SHUTDOWN is read
    // from a's queue, a's sends are refused.
    if !shut_down(&b.ep) {
        return;
    }
    let eq = a.eq.as_ref().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = EventBuf::new();
    loop {
        match eq.read(&mut buf).unwrap() {
            EqRead::Event(Event::Shutdown(s)) => {
                assert_eq!(s.fid, a.ep.fid());
                break;
            }
            EqRead::Empty | EqRead::TimedOut => {}
            other => println!("{}: also read {other:?}", provider()),
        }
        let _ = b.eq.as_ref().unwrap().peek(&mut EventBuf::new());
        let _ = a.cq.read(&mut <[DataEntry; 1]>::default());
        assert!(Instant::now() < deadline, "no FI_SHUTDOWN");
        std::thread::sleep(Duration::from_millis(1));
    }
    let (back, e) = a.ep.send_to(a.pool.take().unwrap(), 8, a.peer).unwrap_err();
    assert!(matches!(e, Error::State { .. }), "{e:?}");
    drop(back);
}

/// Under a serialized model a read takes no lock: what it looks at before
/// its call (here the closes waiting on an empty read) comes through the
/// queue's gate. Two closes with a receive in flight leave the pool's one
/// slot resting on both its contexts; an empty read of the queue after
/// them settles both, and the slot is handed out again; the reads after
/// that (the gate open again) see the queue as it is.
#[test]
fn a_serialized_queue_read_empty_settles_the_closes_waiting_on_it() {
    if msg_capable() {
        return skip("MSG endpoints post receives only once connected");
    }
    let Some((_fabric, domain, info)) = open_as::<ThreadDomain>(Threading::Domain) else {
        return;
    };
    let cq = CompletionQueue::<Data, _>::open(&domain, &CqAttr::new().wait(WaitObj::None)).unwrap();
    let av = AddressVector::open(&domain, AvType::Table, 4).unwrap();
    let pool = BufferPool::new(&domain, 1, 64).unwrap();
    let mut entries: [DataEntry; 8] = Default::default();
    let mut drain = |cq: &CompletionQueue<Data, ThreadDomain>| loop {
        match cq.read(&mut entries).unwrap() {
            CqRead::Empty => break,
            CqRead::Completions(done) => {
                for e in done.iter() {
                    drop(pool.reclaim(e));
                }
            }
            CqRead::Error(mut e) => drop(pool.reclaim_err(&mut e)),
            other => panic!("{}: a read gave {other:?}", test_name()),
        }
    };
    for round in 0..2 {
        let ep = Endpoint::open(&domain, &info).unwrap();
        ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
        ep.bind_av(&av).unwrap();
        ep.enable().unwrap();
        let buf = pool
            .take()
            .unwrap_or_else(|| panic!("round {round}: the slot's other context is free"));
        ep.recv(buf).map_err(|(_, e)| e).unwrap();
        drop(ep);
    }
    assert!(
        pool.take().is_none(),
        "both contexts of the slot wait on an empty read of the queue"
    );
    drain(&cq);
    let buf = pool
        .take()
        .expect("read empty after both closes: the slot is back");
    drop(buf);
    // Nothing waits any more: the reads after see an empty queue.
    for _ in 0..3 {
        assert!(matches!(cq.read(&mut entries).unwrap(), CqRead::Empty));
    }
}
