//! Counting RMA at its target (`FI_RMA_EVENT`): counters bound to memory
//! regions (`fi_mr_bind`) and to endpoints for `FI_REMOTE_WRITE` /
//! `FI_REMOTE_READ` (`fi_ep_bind`), between two endpoints of the suite's
//! provider: connected (tcp, sockets) or reliable unconnected (rxd, shm;
//! rxm and verbs have no `FI_RMA_EVENT`: SKIP).

mod common;

use common::{msg_capable, node, provider, test_name};
use libfabric::cntr::{CntrAttr, CntrBind, Counter};
use libfabric::conn::ConnConfig;
use libfabric::cq::{Addr, Data};
use libfabric::info::{Caps, EpType};
use libfabric::mr::{MemoryRegion, MrAccess, MrCntrBind, RemoteRegion};
use libfabric::wait::{WaitObj, Waitable};
use libfabric::{
    getinfo, Buffer, BufferPool, CompletionQueue, Connection, Domain, Endpoint, Error, Fabric,
    Hints,
};
use std::any::Any;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const TEN_S: Duration = Duration::from_secs(10);
const CAPS: Caps = Caps::MSG.union(Caps::RMA).union(Caps::RMA_EVENT);

fn skip(why: &str) {
    println!("SKIP {}: provider {}: {why}", test_name(), provider());
}

/// One side: its endpoint, queue, domain and pool, the peer's address,
/// its endpoint's counter (if configured), and the completions read.
struct Side {
    ep: Endpoint,
    cq: CompletionQueue<Data>,
    domain: Domain,
    pool: BufferPool,
    peer: Addr,
    counter: Option<Counter>,
    got: Mutex<Vec<libfabric::Result<libfabric::cq::Completion>>>,
    _keep: Box<dyn Any + Send + Sync>,
}

fn hints(caps: Caps) -> Hints {
    let p = provider();
    let h = Hints::new()
        .provider(p.clone())
        .caps(caps)
        .ep_type(if msg_capable() {
            EpType::Msg
        } else {
            EpType::Rdm
        });
    if p == "shm" {
        // As in rma.rs: shm checks an RMA at the target only with an
        // RMA ordering asked for.
        h.msg_order(libfabric::sys::FI_ORDER_RAW | libfabric::sys::FI_ORDER_WAW)
    } else {
        h.node(node())
    }
}

/// Whether the provider offers endpoints with `FI_RMA_EVENT`; prints the
/// typed skip line when not (tcp;ofi_rxm, verbs, verbs;ofi_rxm).
fn rma_event_offered() -> bool {
    let h = if msg_capable() {
        hints(CAPS).service(0).source(true)
    } else {
        hints(CAPS)
    };
    match getinfo(&h) {
        Ok(_) => true,
        Err(e) => {
            skip(&format!("no endpoint with FI_RMA_EVENT ({e})"));
            false
        }
    }
}

fn side(
    ep: Endpoint,
    cq: CompletionQueue<Data>,
    domain: Domain,
    peer: Addr,
    counter: Option<Counter>,
    keep: Box<dyn Any + Send + Sync>,
) -> Side {
    let pool = BufferPool::new(&domain, 16, 4096).unwrap();
    Side {
        ep,
        cq,
        domain,
        pool,
        peer,
        counter,
        got: Mutex::new(Vec::new()),
        _keep: keep,
    }
}

/// The initiator `a` and the target `b`, each with the counter its
/// configuration binds (kinds `a_kinds`, `b_kinds`; empty: none).
fn pair(a_kinds: CntrBind, b_kinds: CntrBind) -> (Side, Side) {
    let conf = |kinds: CntrBind| {
        let c = ConnConfig::new().timeout(Some(TEN_S));
        if kinds.is_empty() {
            c
        } else {
            c.counter(CntrAttr::new(), kinds)
        }
    };
    let (a_conf, b_conf) = (conf(a_kinds), conf(b_kinds));
    if msg_capable() {
        let info = getinfo(&hints(CAPS).service(0).source(true))
            .expect("listen info")
            .into_iter()
            .next()
            .unwrap();
        let fabric = Fabric::open(&info).unwrap();
        let listener = libfabric::Listener::on(&fabric, &info).expect("listen");
        let addr = listener.local_addr().unwrap();
        let cinfo = getinfo(
            &hints(CAPS)
                .node(addr.ip().to_string())
                .service(addr.port().to_string()),
        )
        .expect("client info")
        .into_iter()
        .next()
        .unwrap();
        let (server, client) = std::thread::scope(|s| {
            let server = s.spawn(|| {
                listener
                    .incoming_timeout(Some(TEN_S))
                    .expect("a connection request")
                    .prepare::<Data>(&b_conf)
                    .and_then(|p| p.establish(b""))
                    .expect("accept")
            });
            let client = Connection::<Data>::prepare(&fabric, &cinfo, &a_conf)
                .and_then(|p| p.establish(b""))
                .expect("connect");
            (server.join().expect("the accepting thread"), client)
        });
        let (s, c) = (server.into_parts(), client.into_parts());
        let a = side(
            c.endpoint,
            c.cq,
            c.domain,
            Addr::UNSPEC,
            c.counter,
            Box::new((c.eq, fabric.clone())),
        );
        let b = side(
            s.endpoint,
            s.cq,
            s.domain,
            Addr::UNSPEC,
            s.counter,
            Box::new((s.eq, listener)),
        );
        (a, b)
    } else {
        let info = getinfo(&hints(CAPS))
            .expect("rdm info")
            .into_iter()
            .next()
            .unwrap();
        let fabric = Fabric::open(&info).unwrap();
        let ra = libfabric::Rdm::<Data>::open_on(&fabric, &info, 1, &a_conf).unwrap();
        let rb = libfabric::Rdm::<Data>::open_on(&fabric, &info, 1, &b_conf).unwrap();
        let to_b = ra.insert(&rb.name().unwrap()).unwrap();
        let to_a = rb.insert(&ra.name().unwrap()).unwrap();
        let (ca, cb) = (ra.counter().cloned(), rb.counter().cloned());
        let a = side(
            ra.endpoint().clone(),
            ra.cq().clone(),
            ra.domain().clone(),
            to_b,
            ca,
            Box::new(ra),
        );
        let b = side(
            rb.endpoint().clone(),
            rb.cq().clone(),
            rb.domain().clone(),
            to_a,
            cb,
            Box::new(rb),
        );
        (a, b)
    }
}

/// Reads both sides' queues until `done` holds, or fails after 10 s.
fn pump(sides: [&Side; 2], mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    loop {
        for s in sides {
            match s.cq.wait_one(&s.pool, Some(Duration::from_millis(1))) {
                Err(Error::TimedOut { .. }) => {}
                other => s.got.lock().unwrap().push(other),
            }
        }
        if done() {
            return;
        }
        assert!(
            start.elapsed() < TEN_S,
            "{}: provider {}: timed out",
            test_name(),
            provider()
        );
    }
}

/// Posts with `op`, retrying while the provider is not ready (`FI_EAGAIN`),
/// reading both queues meanwhile.
fn post(a: &Side, b: &Side, buf: Buffer, op: impl Fn(Buffer) -> libfabric::Handback<Buffer>) {
    let mut buf = buf;
    let start = Instant::now();
    loop {
        match op(buf) {
            Ok(()) => return,
            Err((back, e)) if e.is_again() && start.elapsed() < TEN_S => {
                buf = back;
                pump([a, b], || true);
            }
            Err((_, e)) => panic!("{}: provider {}: {e}", test_name(), provider()),
        }
    }
}

/// Waits until `a` has `n` completions, all successful, and drops them
/// (their buffers are back in the pool).
fn completions(a: &Side, b: &Side, n: usize) {
    pump([a, b], || a.got.lock().unwrap().len() >= n);
    for done in a.got.lock().unwrap().drain(..n) {
        done.unwrap_or_else(|e| panic!("{}: an RMA failed: {e}", test_name()));
    }
}

fn buffer_with(s: &Side, bytes: &[u8]) -> Buffer {
    let mut buf = s.pool.take().expect("a free buffer");
    buf[..bytes.len()].copy_from_slice(bytes);
    buf
}

fn read_region(r: &MemoryRegion<Vec<u8>>, offset: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    r.read_at(offset, &mut out).unwrap();
    out
}

/// Polls until the counter is at `n` (reads run the provider's progress
/// where it has none of its own), reading both queues meanwhile.
fn reach(c: &Counter, a: &Side, b: &Side, n: u64) {
    pump([a, b], || c.read().expect("fi_cntr_read") >= n);
    assert_eq!(
        c.read().unwrap(),
        n,
        "{}: counted more than {n}",
        test_name()
    );
    assert_eq!(c.read_err().unwrap(), 0);
}

/// `n` writes of distinct bytes from `a` into `remote` at `i * 8`.
fn writes(a: &Side, b: &Side, remote: &RemoteRegion, n: usize) {
    for i in 0..n {
        let bytes = [b'a' + i as u8; 8];
        post(a, b, buffer_with(a, &bytes), |buf| {
            a.ep.write(buf, 8, remote, (i * 8) as u64, a.peer)
        });
    }
}

/// `n` reads by `a` of `remote` at `i * 8`, checked to be what
/// [`writes`] wrote.
fn reads(a: &Side, b: &Side, remote: &RemoteRegion, n: usize) {
    for i in 0..n {
        post(a, b, a.pool.take().unwrap(), |buf| {
            a.ep.read(buf, 8, remote, (i * 8) as u64, a.peer)
        });
        pump([a, b], || !a.got.lock().unwrap().is_empty());
        let done = a.got.lock().unwrap().remove(0).expect("the read");
        let buf = done.buffer.expect("the read's buffer");
        assert_eq!(&buf[..8], &[b'a' + i as u8; 8], "read {i}");
    }
}

fn check_written(region: &MemoryRegion<Vec<u8>>, n: usize) {
    for i in 0..n {
        assert_eq!(
            read_region(region, i * 8, 8),
            [b'a' + i as u8; 8],
            "write {i}"
        );
    }
}

const N: usize = 5;

/// A counter bound to a region with [`MemoryRegion::register_counted`],
/// or `None` with the skip line printed where the provider binds none.
fn counted_region(b: &Side, counter: &Counter) -> Option<MemoryRegion<Vec<u8>>> {
    match MemoryRegion::register_counted(
        &b.domain,
        vec![0u8; 4096],
        MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        counter,
        MrCntrBind::REMOTE_WRITE,
    ) {
        Ok(r) => {
            assert_eq!(provider(), "sockets", "only sockets binds region counters");
            Some(r)
        }
        Err(Error::Unsupported { call, .. }) if provider() != "sockets" => {
            assert_eq!(call, "fi_mr_bind");
            skip("fi_mr_bind of a counter is -FI_ENOSYS (Error::Unsupported): libfabric's util regions bind nothing");
            None
        }
        Err(e) => panic!("register_counted: {e}"),
    }
}

#[test]
fn a_region_counter_counts_remote_writes_and_not_reads() {
    if !rma_event_offered() {
        return;
    }
    let (a, b) = pair(CntrBind::empty(), CntrBind::empty());
    let counter = Counter::open(&b.domain, &CntrAttr::new()).expect("fi_cntr_open");
    let Some(region) = counted_region(&b, &counter) else {
        return;
    };
    assert!(region.counter().is_some());
    let remote = region.remote();
    writes(&a, &b, &remote, N);
    completions(&a, &b, N);
    reach(&counter, &a, &b, N as u64);
    check_written(&region, N);
    // Reads of the region are not counted at it (fi_mr(3) names only
    // FI_REMOTE_WRITE for a region's counter).
    reads(&a, &b, &remote, N);
    pump([&a, &b], || true);
    assert_eq!(counter.read().unwrap(), N as u64);
}

#[test]
fn a_region_counter_wait_wakes_when_writes_land_and_times_out_otherwise() {
    if !rma_event_offered() {
        return;
    }
    let (a, b) = pair(CntrBind::empty(), CntrBind::empty());
    let counter = Counter::open(&b.domain, &CntrAttr::new()).expect("fi_cntr_open");
    let Some(region) = counted_region(&b, &counter) else {
        return;
    };
    let remote = region.remote();
    let start = Instant::now();
    assert!(matches!(
        counter.wait(1, Some(Duration::from_millis(200))),
        Err(Error::TimedOut { .. })
    ));
    assert!(start.elapsed() >= Duration::from_millis(150));
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            writes(&a, &b, &remote, N);
        });
        counter
            .wait(N as u64, Some(TEN_S))
            .expect("the target's counter reaches N");
    });
    check_written(&region, N);
}

/// Whether the provider's endpoints count remote RMA: on tcp (which counts
/// only writes with CQ data) a bind is a typed `Error::Unsupported`, and
/// the skip line is printed.
fn endpoints_count_remote_rma() -> bool {
    if !rma_event_offered() {
        return false;
    }
    let info = getinfo(&hints(CAPS)).unwrap().into_iter().next().unwrap();
    let fabric = Fabric::open(&info).unwrap();
    let domain = Domain::open(&fabric, &info).unwrap();
    let counter = Counter::open(&domain, &CntrAttr::new()).expect("fi_cntr_open");
    let ep = Endpoint::open(&domain, &info).unwrap();
    for kinds in [CntrBind::REMOTE_WRITE, CntrBind::REMOTE_READ] {
        match ep.bind_cntr(&counter, kinds) {
            Ok(()) => {}
            Err(Error::Unsupported {
                call: "fi_ep_bind", ..
            }) if common::is_tcp() => {
                skip("counts only remote writes with CQ data at an endpoint: the bind is Error::Unsupported");
                return false;
            }
            Err(e) => panic!("bind_cntr({kinds:?}): {e}"),
        }
    }
    true
}

/// The target endpoint's counter, for `kinds`, or `None` with a skip line
/// (no FI_RMA_EVENT: rxm, verbs; no counting: tcp).
fn endpoint_pair(kinds: CntrBind) -> Option<(Side, Side)> {
    if !endpoints_count_remote_rma() {
        return None;
    }
    Some(pair(CntrBind::empty(), kinds))
}

#[test]
fn an_endpoint_counter_counts_remote_writes_and_reads() {
    let Some((a, b)) = endpoint_pair(CntrBind::REMOTE_WRITE | CntrBind::REMOTE_READ) else {
        return;
    };
    let counter = b.counter.clone().expect("the target's counter");
    let region = MemoryRegion::register(
        &b.domain,
        vec![0u8; 4096],
        MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
    )
    .unwrap();
    let remote = region.remote();
    writes(&a, &b, &remote, N);
    completions(&a, &b, N);
    reach(&counter, &a, &b, N as u64);
    check_written(&region, N);
    reads(&a, &b, &remote, N);
    reach(&counter, &a, &b, 2 * N as u64);
}

#[test]
fn an_endpoint_counter_wait_wakes_when_writes_land_and_times_out_otherwise() {
    let Some((a, b)) = endpoint_pair(CntrBind::REMOTE_WRITE) else {
        return;
    };
    let counter = b.counter.clone().expect("the target's counter");
    if counter.wait_obj() == WaitObj::None {
        skip("its counters have no wait object (Counter::wait is WrongWaitMode)");
        return;
    }
    let region =
        MemoryRegion::register(&b.domain, vec![0u8; 4096], MrAccess::REMOTE_WRITE).unwrap();
    let remote = region.remote();
    assert!(matches!(
        counter.wait(1, Some(Duration::from_millis(200))),
        Err(Error::TimedOut { .. })
    ));
    std::thread::scope(|s| {
        s.spawn(|| {
            writes(&a, &b, &remote, N);
            // The initiator's completions come from its own queue.
            pump([&a, &a], || a.got.lock().unwrap().len() >= N);
        });
        // The target's wait runs its own progress (the util counters run
        // their endpoints', sockets has a thread).
        counter
            .wait(N as u64, Some(TEN_S))
            .expect("the target's counter reaches N");
    });
    check_written(&region, N);
}

#[test]
fn counters_count_sends_receives_and_rma_events_on_both_sides() {
    let initiator = CntrBind::SEND | CntrBind::WRITE | CntrBind::READ;
    let target = CntrBind::RECV | CntrBind::REMOTE_WRITE | CntrBind::REMOTE_READ;
    if !endpoints_count_remote_rma() {
        return;
    }
    let (a, b) = pair(initiator, target);
    let (ca, cb) = (a.counter.clone().unwrap(), b.counter.clone().unwrap());
    let region = MemoryRegion::register(
        &b.domain,
        vec![0u8; 4096],
        MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
    )
    .unwrap();
    let remote = region.remote();
    // N messages.
    for _ in 0..N {
        b.ep.recv(b.pool.take().unwrap())
            .map_err(|(_, e)| e)
            .unwrap();
    }
    for i in 0..N {
        post(&a, &b, buffer_with(&a, &[i as u8; 4]), |buf| {
            a.ep.send_to(buf, 4, a.peer)
        });
    }
    pump([&a, &b], || {
        a.got.lock().unwrap().len() >= N && b.got.lock().unwrap().len() >= N
    });
    for (i, rx) in b.got.lock().unwrap().drain(..).enumerate() {
        let rx = rx.expect("a receive");
        let buf = rx.buffer.expect("its buffer");
        assert_eq!(&buf[..4], &[i as u8; 4]);
    }
    a.got.lock().unwrap().clear();
    writes(&a, &b, &remote, N);
    completions(&a, &b, N);
    reads(&a, &b, &remote, N);
    reach(&ca, &a, &b, 3 * N as u64);
    reach(&cb, &a, &b, 3 * N as u64);
    check_written(&region, N);
}

// ---- misuse ----

/// A domain and counter of the suite's provider with FI_RMA_EVENT, or
/// `None` with a skip line.
fn domain_with_counter() -> Option<(Fabric, Domain, Counter)> {
    if !rma_event_offered() {
        return None;
    }
    let info = getinfo(&hints(CAPS)).unwrap().into_iter().next().unwrap();
    let fabric = Fabric::open(&info).unwrap();
    let domain = Domain::open(&fabric, &info).unwrap();
    let counter = Counter::open(&domain, &CntrAttr::new()).expect("fi_cntr_open");
    Some((fabric, domain, counter))
}

#[test]
fn a_region_counter_of_another_domain_unknown_flags_and_no_remote_write_are_refused() {
    // Checked before the capability: on every provider with counters.
    let info = getinfo(&hints(Caps::MSG | Caps::RMA))
        .unwrap()
        .into_iter()
        .next()
        .unwrap();
    let fabric = Fabric::open(&info).unwrap();
    let domain = Domain::open(&fabric, &info).unwrap();
    let counter = match Counter::open(&domain, &CntrAttr::new()) {
        Ok(c) => c,
        Err(Error::Unsupported { .. }) if provider() == "verbs" => {
            skip("verbs has no counters (Error::Unsupported)");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let other = Domain::open(&fabric, &info).unwrap();
    let foreign = Counter::open(&other, &CntrAttr::new()).unwrap();
    let reg = |c: &Counter, access: MrAccess, events: MrCntrBind| {
        MemoryRegion::register_counted(&domain, vec![0u8; 64], access, c, events)
    };
    let rw = MrAccess::REMOTE_WRITE;
    assert!(matches!(
        reg(&foreign, rw, MrCntrBind::REMOTE_WRITE),
        Err(Error::ForeignObject {
            call: "fi_mr_bind",
            ..
        })
    ));
    for bad in [
        MrCntrBind::empty(),
        MrCntrBind::from_bits_retain(libfabric::sys::FI_REMOTE_READ),
        MrCntrBind::from_bits_retain(1 << 3),
        MrCntrBind::REMOTE_WRITE | MrCntrBind::from_bits_retain(1 << 40),
    ] {
        assert!(
            matches!(reg(&counter, rw, bad), Err(Error::InvalidArgument(_))),
            "{bad:?}"
        );
    }
    assert!(matches!(
        reg(&counter, MrAccess::REMOTE_READ, MrCntrBind::REMOTE_WRITE),
        Err(Error::InvalidArgument(_))
    ));
    // Nothing of these is held.
    foreign.close().map_err(|(_, e)| e).unwrap();
    counter.close().map_err(|(_, e)| e).unwrap();
}

#[test]
fn a_domain_without_rma_event_binds_no_remote_counter() {
    let info = match getinfo(&hints(Caps::MSG | Caps::RMA)) {
        Ok(list) => list.into_iter().next().unwrap(),
        Err(e) => panic!("{e}"),
    };
    if info.caps().contains(Caps::RMA_EVENT) {
        skip("grants FI_RMA_EVENT unasked");
        return;
    }
    let fabric = Fabric::open(&info).unwrap();
    let domain = Domain::open(&fabric, &info).unwrap();
    let counter = match Counter::open(&domain, &CntrAttr::new()) {
        Ok(c) => c,
        Err(Error::Unsupported { .. }) if provider() == "verbs" => {
            skip("verbs has no counters (Error::Unsupported)");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let e = MemoryRegion::register_counted(
        &domain,
        vec![0u8; 64],
        MrAccess::REMOTE_WRITE,
        &counter,
        MrCntrBind::REMOTE_WRITE,
    )
    .unwrap_err();
    assert!(
        matches!(e, Error::MissingCapability { call: "fi_mr_bind", needed } if needed == Caps::RMA_EVENT),
        "{e}"
    );
    let ep = Endpoint::open(&domain, &info).unwrap();
    for kinds in [
        CntrBind::REMOTE_WRITE,
        CntrBind::REMOTE_READ,
        CntrBind::RECV | CntrBind::REMOTE_WRITE,
    ] {
        let e = ep.bind_cntr(&counter, kinds).unwrap_err();
        assert!(
            matches!(
                e,
                Error::MissingCapability {
                    call: "fi_ep_bind",
                    ..
                }
            ),
            "{e}"
        );
    }
    ep.bind_cntr(&counter, CntrBind::RECV)
        .expect("a local kind binds");
}

#[test]
fn a_counter_bound_to_a_region_is_in_use_until_the_region_is_gone() {
    let Some((_fabric, domain, counter)) = domain_with_counter() else {
        return;
    };
    let region = match MemoryRegion::register_counted(
        &domain,
        vec![0u8; 64],
        MrAccess::REMOTE_WRITE,
        &counter,
        MrCntrBind::REMOTE_WRITE,
    ) {
        Ok(r) => r,
        Err(Error::Unsupported {
            call: "fi_mr_bind", ..
        }) if provider() != "sockets" => {
            skip("fi_mr_bind of a counter is -FI_ENOSYS (Error::Unsupported)");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let (counter, e) = counter.close().unwrap_err();
    assert!(matches!(e, Error::InUse { users: 1, .. }), "{e}");
    // No endpoint open: into_inner gives the memory back and the counter
    // is free.
    let memory = region.into_inner().map_err(|(_, e)| e).unwrap();
    assert_eq!(memory.len(), 64);
    counter.close().map_err(|(_, e)| e).unwrap();
}

#[test]
fn a_counted_region_dropped_under_writes_keeps_its_counter_until_the_endpoints_close() {
    if !rma_event_offered() {
        return;
    }
    let (a, b) = pair(CntrBind::empty(), CntrBind::empty());
    let counter = Counter::open(&b.domain, &CntrAttr::new()).expect("fi_cntr_open");
    let Some(region) = counted_region(&b, &counter) else {
        return;
    };
    let remote = region.remote();
    // Writes in flight while the region is dropped: each lands or fails at
    // the initiator; nothing is counted on a closed counter.
    for i in 0..N {
        post(&a, &b, buffer_with(&a, &[1; 8]), |buf| {
            a.ep.write(buf, 8, &remote, (i * 8) as u64, a.peer)
        });
    }
    drop(region);
    assert_eq!(b.domain.retained_regions(), 1);
    pump([&a, &b], || a.got.lock().unwrap().len() >= N);
    let counted = counter.read().unwrap();
    assert!(counted <= N as u64);
    // The memory and the counter wait for the endpoints open at the close.
    let (counter, e) = counter.close().unwrap_err();
    assert!(matches!(e, Error::InUse { .. }), "{e}");
    let Side {
        ep,
        cq,
        domain,
        pool,
        _keep,
        ..
    } = b;
    drop((ep, cq, pool, _keep));
    drop(a);
    assert_eq!(domain.retained_regions(), 0);
    counter.close().map_err(|(_, e)| e).unwrap();
}

#[test]
fn regions_dropped_under_a_write_storm_are_closed_only_once_the_domain_is_idle() {
    // sockets reads a region's provider record after the key lookup that
    // found it, on its progress thread: a region closed meanwhile had its
    // freed record read. There a dropped region stays registered, with its
    // memory, until no endpoint of the domain is open; elsewhere its memory
    // waits for the endpoints open at the drop, as always.
    if !rma_event_offered() {
        return;
    }
    // rxd never completes a write to a closed region's key (the target
    // drops it without an answer, `prov/rxd/src/rxd_cq.c` 551-567 in 1.22):
    // its buffers stay with the provider until the endpoint closes, so
    // fewer rounds there (the pool has 16 buffers).
    let rounds = if provider().contains("ofi_rxd") {
        3
    } else {
        20
    };
    let (a, b) = pair(CntrBind::empty(), CntrBind::empty());
    for _ in 0..rounds {
        let region =
            MemoryRegion::register(&b.domain, vec![0u8; 64], MrAccess::REMOTE_WRITE).unwrap();
        let remote = region.remote();
        for i in 0..4 {
            post(&a, &b, buffer_with(&a, &[7; 8]), |buf| {
                a.ep.write(buf, 8, &remote, (i * 8) as u64, a.peer)
            });
        }
        // Dropped with the writes in flight.
        drop(region);
        // Each write ends at the initiator, landed or refused; rxd drops a
        // write to an unknown key without an answer, so there only what
        // came within a moment. Their buffers go back to the pool.
        let deadline = Instant::now() + Duration::from_millis(200);
        pump([&a, &b], || {
            a.got.lock().unwrap().len() >= 4 || Instant::now() > deadline
        });
        a.got.lock().unwrap().clear();
    }
    assert_eq!(b.domain.retained_regions(), rounds);
    let Side {
        ep,
        cq,
        domain,
        pool,
        _keep,
        ..
    } = b;
    drop((ep, cq, pool, _keep));
    drop(a);
    // No endpoint of the domain is open: each region is closed and freed.
    assert_eq!(domain.retained_regions(), 0);
    let fabric = domain.fabric();
    drop(domain);
    fabric
        .close()
        .map_err(|(_, e)| e)
        .expect("nothing keeps the fabric open");
}
