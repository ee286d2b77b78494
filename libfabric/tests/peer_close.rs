//! An endpoint closed while another endpoint of the same process still
//! addresses it: the survivor's sends, RMA, queue reads and address
//! vector calls toward it, on the suite's provider as `FI_EP_RDM`.
//!
//! shm gave the survivor the closed endpoint's own mapping of its memory,
//! which the close unmapped. Without the crate putting the close off, these
//! crashed on 1.17, 1.22 and 2.1: `sends_to_a_closed_peer_of_this_process`,
//! `rma_toward_a_closed_peer_of_this_process`,
//! `a_large_send_from_a_peer_that_closed`,
//! `the_address_of_a_closed_endpoint_of_this_process`,
//! `a_vector_that_maps_a_closed_endpoint_takes_no_new_endpoint`,
//! `a_closed_endpoint_addressed_by_an_open_one_closes_with_it`; on 2.1 also
//! `a_large_send_in_flight_toward_a_peer_that_closes`. Every provider runs
//! them: the survivor gets a typed error or its message is never received,
//! and every buffer comes back.

mod common;

use common::{node, provider, test_name};
use libfabric::av::AvType;
use libfabric::cq::{Addr, CqAttr, Data};
use libfabric::ep::CqBind;
use libfabric::info::{Caps, EpType};
use libfabric::mr::{MemoryRegion, MrAccess, RemoteRegion};
use libfabric::wait::WaitObj;
use libfabric::{
    getinfo, AddressVector, BufferPool, CompletionQueue, Domain, Endpoint, Error, Fabric, Info,
};
use std::time::{Duration, Instant};

/// Larger than shm's inject size and the slot of its other inline
/// protocols: sent by CMA, SAR or mmap.
const LARGE: usize = 1 << 20;
const SLOTS: usize = 8;

/// The suite's provider as `FI_EP_RDM` (tcp and verbs under ofi_rxm), with
/// `caps`, or `None` with a typed skip printed.
fn rdm_info(caps: Caps) -> Option<Info> {
    let p = provider();
    if p.starts_with("verbs") {
        // rxm over verbs of libfabric 1.17 crashed closing an endpoint
        // while a connection to or from it was being set up, which these
        // tests do right after posting (see the precondition table's
        // `fi_close` rows); shm is what they are about.
        println!(
            "SKIP {}: provider {p}: rxm over verbs crashes closing an endpoint while one of \
             its connections is being set up (these tests close right after posting)",
            test_name()
        );
        return None;
    }
    let prov = match p.as_str() {
        "tcp" | "verbs" => format!("{p};ofi_rxm"),
        _ => p.clone(),
    };
    let mut hints = libfabric::Hints::new()
        .provider(prov.clone())
        .ep_type(EpType::Rdm)
        .caps(caps);
    hints = if prov == "shm" {
        // An RMA ordering, so that shm checks RMA at the target (the crate
        // refuses its direct path).
        hints.msg_order(libfabric::sys::FI_ORDER_RAW | libfabric::sys::FI_ORDER_WAW)
    } else {
        hints.node(node())
    };
    match getinfo(&hints) {
        Ok(list) => list.into_iter().next(),
        Err(e) => {
            println!(
                "SKIP {}: provider {p}: no FI_EP_RDM endpoint with {caps:?} ({e})",
                test_name()
            );
            None
        }
    }
}

/// One endpoint with its own domain, queue, vector and pool.
struct Side {
    ep: Endpoint,
    cq: CompletionQueue<Data>,
    av: AddressVector,
    pool: BufferPool,
    domain: Domain,
}

fn side(fabric: &Fabric, info: &Info) -> Side {
    let domain = Domain::open(fabric, info).unwrap();
    // Polled: a wait on a queue whose endpoint closed is refused on rxm,
    // rxd and shm.
    let cq = CompletionQueue::<Data>::open(&domain, &CqAttr::new().size(64).wait(WaitObj::None))
        .unwrap();
    let av = AddressVector::open(&domain, AvType::Table, 4).unwrap();
    let ep = Endpoint::open(&domain, info).unwrap();
    ep.bind_av(&av).unwrap();
    ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
    ep.enable().unwrap();
    let pool = BufferPool::new(&domain, SLOTS, LARGE).unwrap();
    Side {
        ep,
        cq,
        av,
        pool,
        domain,
    }
}

/// Reads `sides`' queues for `time` (or until `done`), returning how many
/// completions and error completions came.
fn pump(sides: &[&Side], time: Duration, mut done: impl FnMut(usize) -> bool) -> (usize, usize) {
    let (mut ok, mut failed) = (0, 0);
    let start = Instant::now();
    while start.elapsed() < time && !done(ok) {
        for s in sides {
            match s.cq.wait_one(&s.pool, Some(Duration::from_millis(1))) {
                Ok(_) => ok += 1,
                Err(Error::TimedOut { .. }) => {}
                Err(Error::Completion { .. }) => failed += 1,
                Err(e) => panic!("{}: provider {}: {e}", test_name(), provider()),
            }
        }
    }
    (ok, failed)
}

/// A pair that has exchanged a message each way (each has mapped or
/// connected to the other), and the addresses each has of the other.
fn pair(caps: Caps) -> Option<(Side, Side, Addr, Addr)> {
    let info = rdm_info(caps)?;
    let fabric = Fabric::open(&info).unwrap();
    let s = side(&fabric, &info);
    let c = side(&fabric, &info);
    let to_c = s.av.insert(&c.ep.name().unwrap()).unwrap();
    let to_s = c.av.insert(&s.ep.name().unwrap()).unwrap();
    c.ep.recv(c.pool.take().unwrap()).unwrap();
    s.ep.recv(s.pool.take().unwrap()).unwrap();
    send_retrying(&s, &c, 8, to_c);
    send_retrying(&c, &s, 8, to_s);
    let (ok, _) = pump(&[&s, &c], Duration::from_secs(10), |ok| ok == 4);
    assert_eq!(
        ok,
        4,
        "{}: provider {}: the exchange",
        test_name(),
        provider()
    );
    Some((s, c, to_c, to_s))
}

/// Sends `len` bytes, retrying while the provider asks to (rxm connects,
/// shm maps its peer, in the queues' progress).
fn send_retrying(from: &Side, other: &Side, len: usize, to: Addr) {
    let mut buf = from.pool.take().expect("a free buffer");
    let start = Instant::now();
    loop {
        match from.ep.send_to(buf, len, to) {
            Ok(()) => return,
            Err((back, e)) if e.is_again() && start.elapsed() < Duration::from_secs(10) => {
                buf = back;
                pump(&[from, other], Duration::from_millis(1), |_| false);
            }
            Err((_, e)) => panic!("{}: provider {}: {e}", test_name(), provider()),
        }
    }
}

/// Closes `s`, handing back its pool.
fn close(s: Side) -> BufferPool {
    let Side {
        ep,
        cq,
        av,
        pool,
        domain,
    } = s;
    ep.close().expect("the endpoint closes");
    drop((cq, av, domain));
    pool
}

/// Checks that every buffer of the pools came back (all their endpoints
/// closed).
fn all_back(pools: &[BufferPool]) {
    for pool in pools {
        let back: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
        assert_eq!(
            back.len(),
            SLOTS,
            "{}: provider {}: every buffer is back once the endpoints closed",
            test_name(),
            provider()
        );
    }
}

/// A post toward the closed peer: posted (its message is never received,
/// or it completes in error), or refused with a typed error and its buffer
/// handed back.
fn posted(what: &str, r: libfabric::Handback<libfabric::Buffer>) {
    match r {
        Ok(()) => println!("{}: provider {}: {what}: posted", test_name(), provider()),
        Err((buf, e)) => {
            assert!(!buf.is_empty());
            println!(
                "{}: provider {}: {what}: refused: {e}",
                test_name(),
                provider()
            );
        }
    }
}

#[test]
fn sends_to_a_closed_peer_of_this_process() {
    let Some((s, c, to_c, _)) = pair(Caps::MSG) else {
        return;
    };
    let c_pool = close(c);
    for i in 0..4 {
        posted(
            &format!("small send {i}"),
            s.ep.send_to(s.pool.take().unwrap(), 8, to_c),
        );
        pump(&[&s], Duration::from_millis(20), |_| false);
    }
    posted(
        "large send",
        s.ep.send_to(s.pool.take().unwrap(), LARGE, to_c),
    );
    let (ok, failed) = pump(&[&s], Duration::from_millis(300), |_| false);
    println!("{ok} completions, {failed} in error");
    let s_pool = close(s);
    all_back(&[s_pool, c_pool]);
}

#[test]
fn a_large_send_in_flight_toward_a_peer_that_closes() {
    let Some((s, c, to_c, _)) = pair(Caps::MSG) else {
        return;
    };
    // One waiting for a receive, one for the peer's progress.
    posted(
        "large send",
        s.ep.send_to(s.pool.take().unwrap(), LARGE, to_c),
    );
    c.ep.recv(c.pool.take().unwrap()).unwrap();
    posted(
        "large send",
        s.ep.send_to(s.pool.take().unwrap(), LARGE, to_c),
    );
    pump(&[&s], Duration::from_millis(20), |_| false);
    let c_pool = close(c);
    let (ok, failed) = pump(&[&s], Duration::from_millis(500), |_| false);
    println!("{ok} completions, {failed} in error");
    let s_pool = close(s);
    all_back(&[s_pool, c_pool]);
}

#[test]
fn a_large_send_from_a_peer_that_closed() {
    let Some((s, c, _, to_s)) = pair(Caps::MSG) else {
        return;
    };
    // Left in the survivor's queue (or the connection) unread, the
    // sender's buffer with the provider.
    posted(
        "large send",
        c.ep.send_to(c.pool.take().unwrap(), LARGE, to_s),
    );
    let c_pool = close(c);
    s.ep.recv(s.pool.take().unwrap()).unwrap();
    let (ok, failed) = pump(&[&s], Duration::from_millis(500), |_| false);
    println!("{ok} completions, {failed} in error");
    let s_pool = close(s);
    all_back(&[s_pool, c_pool]);
}

#[test]
fn rma_toward_a_closed_peer_of_this_process() {
    let Some((s, c, to_c, _)) = pair(Caps::MSG | Caps::RMA) else {
        return;
    };
    let target = MemoryRegion::register(
        &c.domain,
        vec![0u8; 4096],
        MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
    )
    .unwrap();
    let remote = RemoteRegion::from_bytes(&target.remote().to_bytes()).unwrap();
    drop(target);
    let c_pool = close(c);
    posted(
        "write",
        s.ep.write(s.pool.take().unwrap(), 64, &remote, 0, to_c),
    );
    pump(&[&s], Duration::from_millis(100), |_| false);
    posted(
        "read",
        s.ep.read(s.pool.take().unwrap(), 64, &remote, 0, to_c),
    );
    let (ok, failed) = pump(&[&s], Duration::from_millis(300), |_| false);
    println!("{ok} completions, {failed} in error");
    let s_pool = close(s);
    all_back(&[s_pool, c_pool]);
}

#[test]
fn removing_a_closed_peer_of_this_process() {
    let Some((s, c, to_c, _)) = pair(Caps::MSG) else {
        return;
    };
    let c_pool = close(c);
    s.av.remove(to_c).expect("the address is removed");
    let (back, e) =
        s.ep.send_to(s.pool.take().unwrap(), 8, to_c)
            .expect_err("a send to a removed address");
    drop(back);
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let s_pool = close(s);
    all_back(&[s_pool, c_pool]);
}

#[test]
fn the_address_of_a_closed_endpoint_of_this_process() {
    let Some((s, c, _, _)) = pair(Caps::MSG) else {
        return;
    };
    let name = c.ep.name().unwrap();
    // While an open endpoint addresses it, shm keeps it open underneath:
    // its address may be inserted (sends to it are never received).
    let c_pool = close(c);
    let again = s.av.insert(&name).expect("inserted while addressed");
    posted("send", s.ep.send_to(s.pool.take().unwrap(), 8, again));
    pump(&[&s], Duration::from_millis(50), |_| false);
    let s_pool = close(s);
    // Both closed: a new endpoint of this process inserts it.
    let info = rdm_info(Caps::MSG).unwrap();
    let t = side(&Fabric::open(&info).unwrap(), &info);
    match t.av.insert(&name) {
        Ok(to_c) => {
            assert_ne!(provider(), "shm", "shm would use the unmapped region");
            posted("send", t.ep.send_to(t.pool.take().unwrap(), 8, to_c));
            pump(&[&t], Duration::from_millis(100), |_| false);
        }
        Err(Error::State { call, .. }) if provider() == "shm" => {
            assert_eq!(call, "fi_av_insert");
        }
        Err(e) => panic!("{}: provider {}: {e}", test_name(), provider()),
    }
    let t_pool = close(t);
    all_back(&[s_pool, c_pool, t_pool]);
}

#[test]
fn a_vector_that_maps_a_closed_endpoint_takes_no_new_endpoint() {
    let Some(info) = rdm_info(Caps::MSG) else {
        return;
    };
    let fabric = Fabric::open(&info).unwrap();
    let a = side(&fabric, &info);
    // The endpoint addresses itself: its vector maps it.
    let me = a.av.insert(&a.ep.name().unwrap()).unwrap();
    a.ep.recv(a.pool.take().unwrap()).unwrap();
    send_retrying(&a, &a, 8, me);
    let (ok, _) = pump(&[&a], Duration::from_secs(10), |ok| ok == 2);
    assert_eq!(ok, 2);
    let Side {
        ep,
        cq,
        av,
        pool,
        domain,
    } = a;
    // Closed at once: no other endpoint addresses it.
    ep.close().unwrap();
    all_back(&[pool]);
    let ep = Endpoint::open(&domain, &info).unwrap();
    ep.bind_av(&av).unwrap();
    ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
    match ep.enable() {
        Ok(()) => assert_ne!(
            provider(),
            "shm",
            "shm's enable would read the closed endpoint's unmapped region"
        ),
        Err(Error::State { call, .. }) if provider() == "shm" => {
            assert_eq!(call, "fi_enable");
            // Another vector works.
            let ep = Endpoint::open(&domain, &info).unwrap();
            let av = AddressVector::open(&domain, AvType::Table, 4).unwrap();
            ep.bind_av(&av).unwrap();
            ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
            ep.enable().expect("an endpoint on a fresh vector");
        }
        Err(e) => panic!("{}: provider {}: {e}", test_name(), provider()),
    }
}

#[test]
fn a_closed_endpoint_addressed_by_an_open_one_closes_with_it() {
    let Some((s, c, to_c, _)) = pair(Caps::MSG) else {
        return;
    };
    c.ep.recv(c.pool.take().unwrap()).unwrap();
    let Side {
        ep,
        cq,
        av,
        pool,
        domain,
    } = c;
    ep.close().expect("closed for the application");
    posted("send", s.ep.send_to(s.pool.take().unwrap(), 8, to_c));
    pump(&[&s], Duration::from_millis(50), |_| false);
    let cq = if provider() == "shm" {
        // Kept open underneath, with its queue, while s addresses it.
        let (cq, e) = cq.close().expect_err("its queue stays in use");
        assert!(matches!(e, Error::InUse { .. }), "{e}");
        cq
    } else {
        cq
    };
    // Its receive was cancelled: its buffer comes back on its queue (or at
    // the close).
    pump(
        &[&Side {
            ep: s.ep.clone(),
            cq: cq.clone(),
            av: av.clone(),
            pool: pool.clone(),
            domain: domain.clone(),
        }],
        Duration::from_millis(50),
        |_| false,
    );
    let s_pool = close(s);
    // s closed: nothing addresses it any more, and it is gone too.
    cq.close().expect("its queue closes");
    av.close().expect("its vector closes");
    all_back(&[s_pool, pool]);
    domain.close().expect("its domain closes");
}

#[test]
fn a_closed_endpoints_queue_read_on_another_thread_while_it_closes_with_its_peer() {
    // The endpoints that may address each other close together with all
    // their queues' progress held off: one still open in the provider must
    // not progress once the other's region is gone.
    for _ in 0..4 {
        let Some((s, c, to_c, to_s)) = pair(Caps::MSG) else {
            return;
        };
        // Commands left each way, unread (small: see
        // `peers_holding_each_others_large_messages_close_together`).
        posted("send", s.ep.send_to(s.pool.take().unwrap(), 8, to_c));
        posted("send", c.ep.send_to(c.pool.take().unwrap(), 8, to_s));
        let Side {
            ep,
            cq,
            av,
            pool,
            domain,
        } = c;
        ep.close().expect("closed for the application");
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let (stop, reads) = (AtomicBool::new(false), AtomicU64::new(0));
        // Until the reader has read `n` times more than `from`.
        let reads_past = |from: u64| {
            let start = Instant::now();
            while reads.load(Ordering::Acquire) <= from {
                assert!(start.elapsed() < Duration::from_secs(10), "the reader runs");
                std::thread::yield_now();
            }
        };
        std::thread::scope(|scope| {
            scope.spawn(|| {
                while !stop.load(Ordering::Acquire) {
                    let _ = cq.read(&mut [Default::default()]);
                    reads.fetch_add(1, Ordering::AcqRel);
                }
            });
            reads_past(0);
            let s_pool = close(s);
            reads_past(reads.load(Ordering::Acquire));
            stop.store(true, Ordering::Release);
            all_back(&[s_pool]);
        });
        drop((cq, av, domain));
        all_back(&[pool]);
    }
}

#[test]
fn a_new_endpoint_under_the_name_of_a_closed_one() {
    // shm names an endpoint after the source address given, as given when
    // it has no "fi_shm://" prefix (`smr_endpoint_name`): a second endpoint
    // of the name would be looked up as the first, closed one.
    if provider() != "shm" {
        println!(
            "SKIP {}: provider {}: only shm takes an endpoint's name from the node",
            test_name(),
            provider()
        );
        return;
    }
    let name = format!("peer_close_{}", std::process::id());
    let hints = libfabric::Hints::new()
        .provider("shm")
        .ep_type(EpType::Rdm)
        .caps(Caps::MSG)
        .node(name.clone())
        .source(true);
    let info = getinfo(&hints).unwrap().into_iter().next().unwrap();
    let fabric = Fabric::open(&info).unwrap();
    let first = side(&fabric, &info);
    let first_name = first.ep.name().unwrap();
    println!("name {:?}", String::from_utf8_lossy(&first_name));
    let pool = close(first);
    all_back(&[pool]);
    let domain = Domain::open(&fabric, &info).unwrap();
    let cq = CompletionQueue::<Data>::open(&domain, &CqAttr::new().wait(WaitObj::None)).unwrap();
    let av = AddressVector::open(&domain, AvType::Table, 4).unwrap();
    let ep = Endpoint::open(&domain, &info).unwrap();
    ep.bind_av(&av).unwrap();
    ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
    let second_name = ep.name().unwrap();
    match ep.enable() {
        Ok(()) => assert_ne!(first_name, second_name, "the same name enabled twice"),
        Err(Error::State { call, .. }) => {
            assert_eq!(call, "fi_enable");
            assert_eq!(first_name, second_name);
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn peers_holding_each_others_large_messages_close_together() {
    // From libfabric 1.21 shm's close of an endpoint answers each large
    // message left unexpected at it by writing into its sender's region
    // (`smr_discard`, `prov/shm/src/smr_ep.c` 1266-1280 in 1.22). Two
    // endpoints of this process holding each other's can then not both
    // close: whichever closes second writes into the first one's unmapped
    // region. Not fixed here.
    let v = libfabric::sys::runtime_version();
    if provider() == "shm" && libfabric::sys::FI_VERSION_GE(v, libfabric::sys::FI_VERSION(1, 21)) {
        println!(
            "SKIP {}: provider shm: libfabric {}.{}: closing two endpoints of one process that hold each other's large unexpected messages crashes in the provider (smr_discard), not fixed",
            test_name(),
            libfabric::sys::FI_MAJOR(v),
            libfabric::sys::FI_MINOR(v)
        );
        return;
    }
    let Some((s, c, to_c, to_s)) = pair(Caps::MSG) else {
        return;
    };
    posted(
        "large send",
        s.ep.send_to(s.pool.take().unwrap(), LARGE, to_c),
    );
    posted(
        "large send",
        c.ep.send_to(c.pool.take().unwrap(), LARGE, to_s),
    );
    pump(&[&s, &c], Duration::from_millis(50), |_| false);
    let c_pool = close(c);
    let s_pool = close(s);
    all_back(&[s_pool, c_pool]);
}

#[test]
fn addresses_the_provider_would_read_as_another_name_are_refused() {
    // shm keeps the first 255 bytes of an address and compares names of
    // this process exactly, while shm_open ignores leading slashes: a long
    // address or a slashed one reached an endpoint under a name the
    // crate's record of who may map whom did not know, and a close then
    // left the mapping dangling (crashes in fi_av_insert, a send, and
    // another endpoint's enable).
    let Some((a, b, _, _)) = pair(Caps::MSG) else {
        return;
    };
    if provider() != "shm" {
        println!(
            "SKIP {}: provider {}: shm's address strings",
            test_name(),
            provider()
        );
        return;
    }
    let name = b.ep.name().unwrap();
    let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
    let bare = match name.windows(3).position(|w| w == b"://") {
        Some(at) => &name[at + 3..],
        None => name,
    };
    // 255 bytes naming b, then more.
    let mut long = vec![b'x'; 255 - 3 - bare.len()];
    long.extend_from_slice(b"://");
    long.extend_from_slice(bare);
    long.extend_from_slice(b"TAIL\0");
    let e = a.av.insert(&long).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    // b's file under another name.
    let mut slashed = b"/".to_vec();
    slashed.extend_from_slice(bare);
    slashed.push(0);
    let e = a.av.insert(&slashed).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    // b's own name is taken.
    a.av.insert(&b.ep.name().unwrap()).unwrap();
}

#[test]
fn endpoints_that_never_posted_close_beside_one_that_stays_open() {
    // An endpoint stays open on a vector that holds its own address;
    // endpoints opened on the same vector, never used, then close. shm
    // maps an endpoint into a peer's vector only when it posts to that
    // peer (its name goes with the first post): these map nowhere, so each
    // closes at once instead of being kept (5 MB and a /dev/shm file each)
    // until the open one closes.
    let Some(info) = rdm_info(Caps::MSG) else {
        return;
    };
    let fabric = Fabric::open(&info).unwrap();
    let long_lived = side(&fabric, &info);
    long_lived
        .av
        .insert(&long_lived.ep.name().unwrap())
        .unwrap();
    // The closing endpoints' own queue: kept by any endpoint kept open.
    let cq = CompletionQueue::<Data>::open(
        &long_lived.domain,
        &CqAttr::new().size(64).wait(WaitObj::None),
    )
    .unwrap();
    for _ in 0..50 {
        let ep = Endpoint::open(&long_lived.domain, &info).unwrap();
        ep.bind_av(&long_lived.av).unwrap();
        ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
        ep.enable().unwrap();
        drop(ep);
    }
    cq.close()
        .map_err(|(_, e)| e)
        .expect("no endpoint kept open holds the queue");
}
