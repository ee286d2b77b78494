//! Memory regions and RMA (`fi_mr(3)`, `fi_rma(3)`) between two endpoints
//! of the suite's provider: connected (tcp, sockets) or reliable
//! unconnected (rxm, rxd, shm).

mod common;

use common::{fabric_domain, is_iwarp, msg_capable, node, provider, test_name};
use libfabric::conn::ConnConfig;
use libfabric::cq::{Addr, CompletionFlags, Data};
use libfabric::info::{Caps, EpType, Mode};
use libfabric::mr::{HmemIface, MemoryRegion, MrAccess, RemoteRegion};
use libfabric::{
    getinfo, Buffer, BufferPool, CompletionQueue, Connection, Domain, Endpoint, Error, Fabric,
    Hints, Listener,
};
use std::any::Any;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One side: its endpoint, queue, domain and pool, the peer's address,
/// and the completions read so far.
struct Side {
    ep: Endpoint,
    cq: CompletionQueue<Data>,
    domain: Domain,
    pool: BufferPool,
    peer: Addr,
    got: Mutex<Vec<libfabric::Result<libfabric::cq::Completion>>>,
    _keep: Box<dyn Any>,
}

fn hints(caps: Caps) -> Hints {
    let p = provider();
    let mut h = Hints::new().provider(p.clone()).caps(caps);
    h = h.ep_type(if msg_capable() {
        EpType::Msg
    } else {
        EpType::Rdm
    });
    if p == "shm" {
        // shm checks the key, access and bounds of an RMA at the target
        // only when an RMA ordering is asked for (its direct path is off).
        h.msg_order(libfabric::sys::FI_ORDER_RAW | libfabric::sys::FI_ORDER_WAW)
    } else {
        h.node(node())
    }
}

fn side(
    ep: Endpoint,
    cq: CompletionQueue<Data>,
    domain: Domain,
    peer: Addr,
    keep: Box<dyn Any>,
) -> Side {
    let pool = BufferPool::new(&domain, 8, 4096).unwrap();
    Side {
        ep,
        cq,
        domain,
        pool,
        peer,
        got: Mutex::new(Vec::new()),
        _keep: keep,
    }
}

/// Two connected or mutually addressed sides with `caps`.
fn pair_with(caps: Caps) -> (Side, Side) {
    let config = ConnConfig::new().timeout(Some(Duration::from_secs(10)));
    if msg_capable() {
        let info = getinfo(&hints(caps).service(0).source(true))
            .expect("listen info")
            .into_iter()
            .next()
            .unwrap();
        let fabric = Fabric::open(&info).unwrap();
        let listener = Listener::on(&fabric, &info).expect("listen");
        let addr = listener.local_addr().unwrap();
        let cinfo = getinfo(
            &hints(caps)
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
                    .incoming_timeout(Some(Duration::from_secs(10)))
                    .expect("a connection request")
                    .prepare::<Data>(&config)
                    .and_then(|p| p.establish(b""))
                    .expect("accept")
            });
            let client = Connection::<Data>::prepare(&fabric, &cinfo, &config)
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
            Box::new((c.eq, fabric.clone())),
        );
        let b = side(
            s.endpoint,
            s.cq,
            s.domain,
            Addr::UNSPEC,
            Box::new((s.eq, listener)),
        );
        (a, b)
    } else {
        let info = getinfo(&hints(caps))
            .expect("rdm info")
            .into_iter()
            .next()
            .unwrap();
        let fabric = Fabric::open(&info).unwrap();
        let ra = libfabric::Rdm::<Data>::open_on(&fabric, &info, 1, &config).unwrap();
        let rb = libfabric::Rdm::<Data>::open_on(&fabric, &info, 1, &config).unwrap();
        let to_b = ra.insert(&rb.name().unwrap()).unwrap();
        let to_a = rb.insert(&ra.name().unwrap()).unwrap();
        let a = side(
            ra.endpoint().clone(),
            ra.cq().clone(),
            ra.domain().clone(),
            to_b,
            Box::new(ra),
        );
        let b = side(
            rb.endpoint().clone(),
            rb.cq().clone(),
            rb.domain().clone(),
            to_a,
            Box::new(rb),
        );
        (a, b)
    }
}

/// [`pair_with`], or `None` with a typed skip printed when the provider
/// offers no endpoint with `caps`.
fn try_pair_with(caps: Caps) -> Option<(Side, Side)> {
    if caps.contains(Caps::ATOMIC) && provider() == "verbs" {
        println!(
            "SKIP {}: provider verbs: its atomics are refused (Error::Unsupported)",
            test_name()
        );
        return None;
    }
    let h = if msg_capable() {
        hints(caps).service(0).source(true)
    } else {
        hints(caps)
    };
    if let Err(e) = getinfo(&h) {
        println!(
            "SKIP {}: provider {}: no endpoint with {caps:?} ({e})",
            test_name(),
            provider()
        );
        return None;
    }
    Some(pair_with(caps))
}

fn pair() -> (Side, Side) {
    pair_with(Caps::MSG | Caps::RMA)
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
            start.elapsed() < Duration::from_secs(10),
            "{}: provider {}: timed out",
            test_name(),
            provider()
        );
    }
}

/// The next completion of `s`, reading both sides meanwhile.
fn next(s: &Side, other: &Side) -> libfabric::Result<libfabric::cq::Completion> {
    let (a, b) = if std::ptr::eq(s, other) {
        (s, s)
    } else {
        (s, other)
    };
    pump([a, b], || !s.got.lock().unwrap().is_empty());
    s.got.lock().unwrap().remove(0)
}

/// Posts with `op`, retrying while the provider's queue or connection is
/// not ready (`FI_EAGAIN`: rxm connects, shm maps the peer, on first use),
/// reading both queues meanwhile.
fn post(a: &Side, b: &Side, buf: Buffer, op: impl Fn(Buffer) -> libfabric::Handback<Buffer>) {
    let mut buf = buf;
    let start = Instant::now();
    loop {
        match op(buf) {
            Ok(()) => return,
            Err((back, e)) if e.is_again() && start.elapsed() < Duration::from_secs(10) => {
                buf = back;
                pump([a, b], || true);
            }
            Err((_, e)) => panic!("{}: provider {}: {e}", test_name(), provider()),
        }
    }
}

fn buffer_with(s: &Side, bytes: &[u8]) -> Buffer {
    let mut buf = s.pool.take().expect("a free buffer");
    buf[..bytes.len()].copy_from_slice(bytes);
    buf
}

fn region(s: &Side, access: MrAccess) -> MemoryRegion<Vec<u8>> {
    MemoryRegion::register(&s.domain, vec![0u8; 4096], access).expect("fi_mr_reg")
}

fn read_region(r: &MemoryRegion<Vec<u8>>, offset: usize, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    r.read_at(offset, &mut out).unwrap();
    out
}

#[test]
fn write_read_write_data_and_inject_write_round_trips() {
    let (a, b) = pair();
    let mut target = region(&b, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE);
    // What b advertises, as a peer receives it.
    let remote = RemoteRegion::from_bytes(&target.remote().to_bytes()).unwrap();
    assert_eq!(remote, target.remote());
    assert_eq!(remote.len, 4096);

    // Write.
    post(&a, &b, buffer_with(&a, b"hello"), |buf| {
        a.ep.write(buf, 5, &remote, 100, a.peer)
    });
    let done = next(&a, &b).expect("the write's completion");
    assert!(
        done.flags
            .contains(CompletionFlags::RMA | CompletionFlags::WRITE),
        "{:?}",
        done.flags
    );
    assert!(done.buffer.is_some(), "the write's buffer comes back");
    pump([&a, &b], || read_region(&target, 100, 5) == b"hello");
    assert_eq!(
        read_region(&target, 95, 5),
        [0; 5],
        "nothing written before"
    );
    assert_eq!(
        read_region(&target, 105, 5),
        [0; 5],
        "nothing written after"
    );

    // Read.
    target.write_at(200, b"world").unwrap();
    post(&a, &b, a.pool.take().unwrap(), |buf| {
        a.ep.read(buf, 5, &remote, 200, a.peer)
    });
    let done = next(&a, &b).expect("the read's completion");
    assert!(
        done.flags
            .contains(CompletionFlags::RMA | CompletionFlags::READ),
        "{:?}",
        done.flags
    );
    assert_eq!(&done.buffer.expect("the read's buffer")[..5], b"world");

    if a.ep.info().cq_data_size() == 0 {
        // iWARP carries no immediate data: refused before the call, the
        // buffer handed back.
        let (back, e) =
            a.ep.write_data(buffer_with(&a, b"data!"), 5, 0xabcd, &remote, 300, a.peer)
                .unwrap_err();
        assert!(e.to_string().contains("cq_data_size"), "{e}");
        drop(back);
        println!(
            "{}: provider {}: no remote CQ data (cq_data_size 0): write_data refused",
            test_name(),
            provider()
        );
    } else {
        // Write with remote CQ data: the target sees the data on its queue.
        let consumes_receive = b.ep.info().mode().contains(Mode::RX_CQ_DATA);
        println!("RX_CQ_DATA {consumes_receive}");
        post(&b, &a, b.pool.take().unwrap(), |buf| b.ep.recv(buf));
        post(&a, &b, buffer_with(&a, b"data!"), |buf| {
            a.ep.write_data(buf, 5, 0xabcd, &remote, 300, a.peer)
        });
        let done = next(&a, &b).expect("the write_data's completion");
        assert!(done.buffer.is_some());
        let at_target = next(&b, &a).expect("the remote CQ data completion");
        assert!(
            at_target.flags.contains(CompletionFlags::REMOTE_CQ_DATA),
            "{:?}",
            at_target.flags
        );
        assert_eq!(at_target.data, 0xabcd);
        assert_eq!(
            at_target.buffer.is_some(),
            consumes_receive,
            "a posted receive is consumed exactly when the endpoint has FI_RX_CQ_DATA"
        );
        assert_eq!(read_region(&target, 300, 5), b"data!");
    }

    // Inject write: no completion; seen at the target. (As much of it as
    // the provider injects: soft-iWARP 2 bytes.)
    let inj = &b"inj"[..3.min(a.ep.info().inject_size())];
    let start = Instant::now();
    loop {
        match a.ep.inject_write(inj, &remote, 400, a.peer) {
            Err(e) if e.is_again() && start.elapsed() < Duration::from_secs(10) => {
                pump([&a, &b], || true)
            }
            other => break other.unwrap(),
        }
    }
    pump([&a, &b], || read_region(&target, 400, inj.len()) == inj);

    // A sub-range: offsets are relative to it.
    let sub = target.remote_range(1000..1010).unwrap();
    post(&a, &b, buffer_with(&a, b"sub"), |buf| {
        a.ep.write(buf, 3, &sub, 7, a.peer)
    });
    next(&a, &b).expect("the sub-range write's completion");
    pump([&a, &b], || read_region(&target, 1007, 3) == b"sub");

    let memory = into_inner_after_closing(target, a, b);
    assert_eq!(&memory[100..105], b"hello");
    assert_eq!(&memory[1007..1010], b"sub");
    println!("{}: provider {}: checked", test_name(), provider());
}

#[test]
fn out_of_bounds_and_malformed_rma_is_refused_before_the_call() {
    let (a, b) = pair();
    let target = region(&b, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE);
    let remote = target.remote_range(0..64).unwrap();
    let cases: [(u64, usize); 4] = [(60, 5), (64, 1), (u64::MAX, 1), (u64::MAX - 2, 5)];
    for (offset, len) in cases {
        let (buf, e) =
            a.ep.write(a.pool.take().unwrap(), len, &remote, offset, a.peer)
                .expect_err("out of bounds");
        assert!(matches!(e, Error::TooLarge { .. }), "{offset}+{len}: {e}");
        let (buf, e) =
            a.ep.read(buf, len, &remote, offset, a.peer)
                .expect_err("out of bounds");
        assert!(matches!(e, Error::TooLarge { .. }), "{offset}+{len}: {e}");
        let e =
            a.ep.inject_write(&[1; 5][..len.min(5)], &remote, offset, a.peer)
                .expect_err("oob");
        assert!(matches!(e, Error::TooLarge { .. }), "{offset}+{len}: {e}");
        drop(buf);
    }
    // Zero bytes, and a length over the buffer.
    let (buf, e) =
        a.ep.write(a.pool.take().unwrap(), 0, &remote, 0, a.peer)
            .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let (_buf, e) =
        a.ep.write(buf, 5000, &target.remote(), 0, a.peer)
            .unwrap_err();
    assert!(matches!(e, Error::BufferTooSmall { .. }), "{e}");
    // A region whose end overflows, or of the wrong size, is not decoded.
    let mut bytes = RemoteRegion {
        addr: u64::MAX - 1,
        len: 1,
        key: 0,
    }
    .to_bytes();
    assert!(RemoteRegion::from_bytes(&bytes).is_ok());
    bytes[8] = 2;
    assert!(matches!(
        RemoteRegion::from_bytes(&bytes),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        RemoteRegion::from_bytes(&bytes[..23]),
        Err(Error::InvalidArgument(_))
    ));
    // A sub-range past the region.
    assert!(target.remote_range(4000..4097).is_err());
    // Local copies are bounds-checked too.
    assert!(matches!(
        target.read_at(4095, &mut [0; 2]),
        Err(Error::TooLarge { .. })
    ));
    // Nothing reached the target.
    pump([&a, &b], || true);
    assert!(read_region(&target, 0, 4096).iter().all(|&x| x == 0));
}

/// Each RMA post with a buffer, refused before the call, hands back the
/// buffer it was given and names its own call: the checks that refuse are
/// run again out of line to tell why, for `fi_write`, `fi_read` and
/// `fi_writedata` alike.
#[test]
fn every_refused_rma_post_hands_its_buffer_back_and_names_its_call() {
    let (a, b) = pair();
    let target = region(&b, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE);
    let remote = target.remote_range(0..64).unwrap();
    type Post<'s> = Box<dyn Fn(Buffer, usize, u64, Addr) -> libfabric::Handback<Buffer> + 's>;
    let posts: [(&str, Post<'_>); 3] = [
        (
            "fi_write",
            Box::new(|buf, len, offset, dest| a.ep.write(buf, len, &remote, offset, dest)),
        ),
        (
            "fi_read",
            Box::new(|buf, len, offset, dest| a.ep.read(buf, len, &remote, offset, dest)),
        ),
        (
            "fi_writedata",
            Box::new(|buf, len, offset, dest| a.ep.write_data(buf, len, 7, &remote, offset, dest)),
        ),
    ];
    // A fault, the arguments that make it, and whether the error names the
    // call (the size errors say what was too large instead).
    struct Fault {
        what: &'static str,
        len: usize,
        offset: u64,
        dest: Addr,
        is: fn(&Error) -> bool,
        named: bool,
    }
    let fault = |what, len, offset, dest, is, named| Fault {
        what,
        len,
        offset,
        dest,
        is,
        named,
    };
    let mut faults = vec![
        fault(
            "zero length",
            0,
            0,
            a.peer,
            |e| matches!(e, Error::InvalidArgument(_)),
            true,
        ),
        fault(
            "over the buffer",
            5000,
            0,
            a.peer,
            |e| matches!(e, Error::BufferTooSmall { .. }),
            false,
        ),
        fault(
            "past the region",
            8,
            60,
            a.peer,
            |e| matches!(e, Error::TooLarge { .. }),
            false,
        ),
    ];
    if !msg_capable() {
        // Connected endpoints ignore the address.
        let bad_peer = Addr(1 << 40);
        faults.push(fault(
            "not a peer",
            8,
            0,
            bad_peer,
            |e| matches!(e, Error::InvalidArgument(_)),
            true,
        ));
    }
    for (call, post) in &posts {
        for f in &faults {
            let buf = a.pool.take().unwrap();
            let given = buf.as_ptr();
            let (back, e) = post(buf, f.len, f.offset, f.dest).expect_err(f.what);
            let what = f.what;
            assert_eq!(
                back.as_ptr(),
                given,
                "{call}, {what}: another buffer came back"
            );
            assert!((f.is)(&e), "{call}, {what}: {e}");
            if f.named {
                assert!(
                    e.to_string().contains(&format!("{call}: ")),
                    "{call}, {what}: {e}"
                );
            }
        }
        // A buffer of the other side's domain.
        let buf = b.pool.take().unwrap();
        let given = buf.as_ptr();
        let (back, e) = post(buf, 8, 0, a.peer).expect_err("a foreign buffer");
        assert_eq!(back.as_ptr(), given, "{call}: another buffer came back");
        assert!(
            matches!(e, Error::ForeignObject { call: c, .. } if c == *call),
            "{call}: {e}"
        );
    }
    // Every buffer is back in its pool, and nothing reached the target.
    for pool in [&a.pool, &b.pool] {
        let all: Vec<Buffer> = (0..8).filter_map(|_| pool.take()).collect();
        assert_eq!(all.len(), 8, "a refused post kept a buffer");
    }
    pump([&a, &b], || true);
    assert!(read_region(&target, 0, 4096).iter().all(|&x| x == 0));
}

#[test]
fn rma_needs_the_rma_capability() {
    let (a, b) = pair_with(Caps::MSG);
    if a.ep.info().caps().contains(Caps::RMA) {
        println!(
            "SKIP {}: provider {}: grants FI_RMA unasked",
            test_name(),
            provider()
        );
        return;
    }
    let target = region(&b, MrAccess::REMOTE_WRITE);
    let (_buf, e) =
        a.ep.write(a.pool.take().unwrap(), 1, &target.remote(), 0, a.peer)
            .unwrap_err();
    assert!(matches!(e, Error::MissingCapability { .. }), "{e}");
    let e =
        a.ep.inject_write(b"x", &target.remote(), 0, a.peer)
            .unwrap_err();
    assert!(matches!(e, Error::MissingCapability { .. }), "{e}");
}

/// The initiator's view of an RMA the target must refuse: an error
/// completion, or (where the provider completes a write once sent, as tcp)
/// a success; either way the target's memory is untouched, checked by the
/// caller.
fn refused(a: &Side, b: &Side, what: &str) {
    let start = Instant::now();
    pump([a, b], || {
        !a.got.lock().unwrap().is_empty() || start.elapsed() > Duration::from_secs(2)
    });
    if a.got.lock().unwrap().is_empty() {
        // rxd drops an RMA its target refuses, without a completion; the
        // buffer comes back when the endpoint closes.
        println!(
            "{}: provider {}: {what}: no completion (dropped by the target)",
            test_name(),
            provider()
        );
        return;
    }
    match next(a, b) {
        Err(Error::Completion { errno, .. }) => {
            println!(
                "{}: provider {}: {what}: error completion {errno}",
                test_name(),
                provider()
            )
        }
        Ok(c) => {
            assert!(
                !c.flags.contains(CompletionFlags::READ),
                "{what}: a refused read completed successfully"
            );
            assert!(c.buffer.is_some());
            println!(
                "{}: provider {}: {what}: completed at the initiator (sent), refused at the target",
                test_name(),
                provider()
            );
        }
        Err(e) => panic!("{what}: {e}"),
    }
    // Let the target process (and refuse) it.
    let start = Instant::now();
    pump([a, b], || start.elapsed() > Duration::from_millis(200));
}

#[test]
fn a_region_peers_may_not_write_is_not_written() {
    let (a, b) = pair();
    let target = region(&b, MrAccess::REMOTE_READ);
    post(&a, &b, buffer_with(&a, b"evil"), |buf| {
        a.ep.write(buf, 4, &target.remote(), 0, a.peer)
    });
    refused(&a, &b, "a write without REMOTE_WRITE access");
    assert!(target.as_slice().unwrap().iter().all(|&x| x == 0));
}

#[test]
fn a_region_peers_may_read_is_read() {
    let (a, b) = pair();
    let mut target = region(&b, MrAccess::REMOTE_READ);
    target.write_at(0, b"open").unwrap();
    post(&a, &b, a.pool.take().unwrap(), |buf| {
        a.ep.read(buf, 4, &target.remote(), 0, a.peer)
    });
    let done = next(&a, &b).expect("the read completes");
    assert_eq!(&done.buffer.unwrap()[..4], b"open");
}

/// `into_inner` of `target` once the endpoints of both sides have closed
/// (while one is open it is refused with `Error::State`, the region
/// handed back registered).
fn into_inner_after_closing<M: libfabric::mr::RegionMemory>(
    target: MemoryRegion<M>,
    a: Side,
    b: Side,
) -> M {
    let (target, e) = match target.into_inner() {
        Err(back) => back,
        Ok(_) => panic!("into_inner while endpoints of the domain are open"),
    };
    assert!(
        matches!(
            e,
            Error::State {
                call: "MemoryRegion::into_inner",
                ..
            }
        ),
        "{e}"
    );
    assert!(target.len() > 0, "the region comes back");
    drop((a, b));
    target
        .into_inner()
        .map_err(|(_, e)| e)
        .expect("into_inner once no endpoint of the domain is open")
}

/// Addresses of the memory [`leak`] gave out: kept, so that it stays
/// reachable to the end (valgrind reports memory no pointer reaches).
static LEAKED: std::sync::Mutex<Vec<usize>> = std::sync::Mutex::new(Vec::new());

/// `len` zeroed bytes that live for the rest of the process, for
/// `&'static mut [u8]` regions.
fn leak(len: usize) -> &'static mut [u8] {
    let memory = Box::leak(vec![0u8; len].into_boxed_slice());
    LEAKED.lock().unwrap().push(memory.as_ptr() as usize);
    memory
}

#[test]
fn a_write_to_a_deregistered_region_reaches_nothing() {
    let (a, b) = pair();
    // Memory that outlives the region (leaked), to look at after the
    // region is dropped.
    let memory = leak(4096);
    let at = memory.as_ptr();
    let target = MemoryRegion::register(
        &b.domain,
        memory,
        MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
    )
    .unwrap();
    let remote = target.remote();
    drop(target);
    // A new region in the same domain gets another key.
    let other = region(&b, MrAccess::REMOTE_WRITE);
    assert_ne!(other.key(), remote.key);
    post(&a, &b, buffer_with(&a, b"late"), |buf| {
        a.ep.write(buf, 4, &remote, 0, a.peer)
    });
    if kept_registered_until_idle(&a, &b, "a write to a closed region") {
        return;
    }
    refused(&a, &b, "a write to a closed region");
    // SAFETY: the leaked bytes, never freed; volatile reads, nothing else
    // writes them (the write above was refused, or the test fails).
    let seen: Vec<u8> = (0..4096)
        .map(|i| unsafe { std::ptr::read_volatile(at.add(i)) })
        .collect();
    assert!(seen.iter().all(|&x| x == 0));
    assert!(read_region(&other, 0, 4096).iter().all(|&x| x == 0));
}

#[test]
fn a_read_of_a_dropped_region_is_refused() {
    let (a, b) = pair();
    let dropped = region(&b, MrAccess::REMOTE_READ);
    let remote = dropped.remote();
    drop(dropped);
    post(&a, &b, a.pool.take().unwrap(), |buf| {
        a.ep.read(buf, 4, &remote, 0, a.peer)
    });
    if kept_registered_until_idle(&a, &b, "a read of a dropped region") {
        return;
    }
    refused(&a, &b, "a read of a dropped region");
}

/// sockets keeps a region dropped while endpoints of its domain are open
/// registered, with its memory, until none is open (its progress thread
/// reads a region's record after looking it up): an RMA on it then
/// completes, into or out of the kept memory. Checks that and says so.
fn kept_registered_until_idle(a: &Side, b: &Side, what: &str) -> bool {
    if provider() != "sockets" {
        return false;
    }
    assert!(b.domain.retained_regions() >= 1);
    match next(a, b) {
        Ok(c) => assert!(c.buffer.is_some()),
        Err(e) => panic!("{what}: {e}"),
    }
    println!(
        "{}: provider sockets: {what}: completed (the region stays registered until the domain is idle)",
        test_name()
    );
    true
}

#[test]
fn the_pool_asks_for_local_access_only() {
    let (a, b) = pair();
    // A pool's memory is not remotely writable: a write with its key
    // reaches nothing. Offset 0 is its first slot where the domain
    // addresses regions by offset (all but shm, whose direct path this
    // suite turns off and whose target then checks the key and access).
    let remote = RemoteRegion {
        addr: 0,
        len: 4096,
        key: b.pool.key(),
    };
    post(&a, &b, buffer_with(&a, b"x"), |buf| {
        a.ep.write(buf, 1, &remote, 0, a.peer)
    });
    refused(&a, &b, "a write into a pool");
    let slots: Vec<Buffer> = std::iter::from_fn(|| b.pool.take()).collect();
    assert_eq!(slots.len(), 8);
    assert!(slots.iter().all(|s| s[0] == 0));
    let send_only = BufferPool::with_access(&b.domain, 1, 64, MrAccess::SEND).unwrap();
    if provider() != "verbs" {
        // verbs gives regions without remote access no remote key.
        assert_ne!(send_only.key(), b.pool.key());
    }
}

#[test]
fn shm_rma_that_the_target_would_not_check_is_refused() {
    if provider() != "shm" {
        println!(
            "SKIP {}: provider {}: only shm writes a peer's memory unchecked",
            test_name(),
            provider()
        );
        return;
    }
    let info = getinfo(
        &Hints::new()
            .provider("shm")
            .ep_type(EpType::Rdm)
            .caps(Caps::MSG | Caps::RMA | Caps::ATOMIC),
    )
    .unwrap()
    .into_iter()
    .next()
    .unwrap();
    let fabric = Fabric::open(&info).unwrap();
    let config = ConnConfig::new();
    let a = libfabric::Rdm::<Data>::open_on(&fabric, &info, 1, &config).unwrap();
    let b = libfabric::Rdm::<Data>::open_on(&fabric, &info, 1, &config).unwrap();
    let to_b = a.insert(&b.name().unwrap()).unwrap();
    let target = MemoryRegion::register(b.domain(), vec![0u8; 64], MrAccess::REMOTE_READ).unwrap();
    let pool = a.buffer_pool(1, 64).unwrap();
    let (buf, e) = a
        .endpoint()
        .write(pool.take().unwrap(), 4, &target.remote(), 0, to_b)
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let e = a
        .endpoint()
        .inject_write(b"x", &target.remote(), 0, to_b)
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    // shm's atomics always go through the target, which checks the key
    // and access (`smr_progress.c` 1148): allowed, and refused there.
    let mut buf = buf;
    buf[..8].copy_from_slice(&5u64.to_ne_bytes());
    let op = libfabric::ep::atomic::AtomicOp::Sum;
    let start = Instant::now();
    while let Err((back, e)) = a
        .endpoint()
        .atomic::<u64>(buf, 1, op, &target.remote(), 0, to_b)
    {
        assert!(
            e.is_again() && start.elapsed() < Duration::from_secs(10),
            "{e}"
        );
        buf = back;
        let _ = a.cq().read(&mut [Default::default()]);
        let _ = b.cq().read(&mut [Default::default()]);
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(300) {
        let _ = a.cq().read(&mut [Default::default()]);
        let _ = b.cq().read(&mut [Default::default()]);
    }
    assert!(target.as_slice().unwrap().iter().all(|&x| x == 0));
}

#[test]
fn several_iovecs_are_one_region() {
    let (a, b) = pair();
    let limit = b.domain.info().mr_iov_limit();
    let memory = vec![vec![0u8; 100], vec![0u8; 50]];
    if limit < 2 {
        let e = MemoryRegion::register(&b.domain, memory, MrAccess::REMOTE_WRITE).unwrap_err();
        assert!(matches!(e, Error::TooLarge { .. }), "{e}");
        println!(
            "SKIP {}: provider {}: mr_iov_limit is {limit} (two iovecs refused with TooLarge)",
            test_name(),
            provider()
        );
        return;
    }
    let empty = vec![vec![0u8; 10], Vec::new()];
    let e = MemoryRegion::register(&b.domain, empty, MrAccess::REMOTE_WRITE).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let mut target = MemoryRegion::register(&b.domain, memory, MrAccess::REMOTE_WRITE).unwrap();
    assert_eq!(target.iov_count(), 2);
    assert_eq!(target.len(), 150);
    // Peers address the first iovec only.
    assert_eq!(target.remote().len, 100);
    assert!(target.remote_range(90..101).is_err());
    assert!(matches!(target.as_slice(), Err(Error::State { .. })));
    // Local copies run across the iovecs.
    target.write_at(95, b"0123456789").unwrap();
    assert_eq!(read_region_any(&target, 95, 10), b"0123456789");
    assert!(matches!(
        target.write_at(145, &[1; 6]),
        Err(Error::TooLarge { .. })
    ));
    post(&a, &b, buffer_with(&a, b"peer"), |buf| {
        a.ep.write(buf, 4, &target.remote(), 10, a.peer)
    });
    next(&a, &b).expect("the write's completion");
    pump([&a, &b], || read_region_any(&target, 10, 4) == b"peer");
    let back = into_inner_after_closing(target, a, b);
    assert_eq!(&back[0][10..14], b"peer");
    assert_eq!(&back[0][95..], b"01234");
    assert_eq!(&back[1][..5], b"56789");
}

fn read_region_any<M: libfabric::mr::RegionMemory>(
    r: &MemoryRegion<M>,
    offset: usize,
    len: usize,
) -> Vec<u8> {
    let mut out = vec![0u8; len];
    r.read_at(offset, &mut out).unwrap();
    out
}

#[test]
fn registration_attributes_take_host_memory_only() {
    let (a, b) = pair();
    let e = MemoryRegion::register_attr(
        &b.domain,
        vec![0u8; 64],
        MrAccess::REMOTE_WRITE,
        HmemIface::Cuda { device: 0 },
    )
    .unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let target = MemoryRegion::register_attr(
        &b.domain,
        vec![0u8; 64].into_boxed_slice(),
        MrAccess::REMOTE_WRITE,
        HmemIface::System,
    )
    .expect("fi_mr_regattr");
    post(&a, &b, buffer_with(&a, b"attr"), |buf| {
        a.ep.write(buf, 4, &target.remote(), 0, a.peer)
    });
    next(&a, &b).expect("the write's completion");
    pump([&a, &b], || read_region_any(&target, 0, 4) == b"attr");
}

fn ne<T: Copy>(bytes: &[u8]) -> T {
    assert!(bytes.len() >= std::mem::size_of::<T>());
    // SAFETY: at least size_of::<T>() bytes; T is a plain integer.
    unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) }
}

fn u64_at(r: &MemoryRegion<Vec<u8>>, offset: usize) -> u64 {
    ne(&read_region(r, offset, 8))
}

/// Posts an atomic call and waits for its completion, returning the
/// buffer; `None` (with a line saying so) when the provider does not offer
/// the operation.
fn atomic_done(
    a: &Side,
    b: &Side,
    what: &str,
    op: impl Fn(Buffer) -> libfabric::Handback<Buffer>,
    fill: &[u8],
) -> Option<Buffer> {
    let mut buf = buffer_with(a, fill);
    let start = Instant::now();
    loop {
        match op(buf) {
            Ok(()) => break,
            Err((back, e)) if e.is_again() && start.elapsed() < Duration::from_secs(10) => {
                buf = back;
                pump([a, b], || true);
            }
            Err((_, Error::Unsupported { .. })) => {
                println!(
                    "{}: provider {}: {what}: not offered",
                    test_name(),
                    provider()
                );
                return None;
            }
            Err((_, e)) => panic!("{what}: {e}"),
        }
    }
    let done = next(a, b).unwrap_or_else(|e| panic!("{what}: {e}"));
    Some(done.buffer.expect("the atomic's buffer"))
}

#[test]
fn atomics_add_fetch_and_compare_swap() {
    use libfabric::ep::atomic::{AtomicOp, CompareOp};
    let Some((a, b)) = try_pair_with(Caps::MSG | Caps::RMA | Caps::ATOMIC) else {
        return;
    };
    let mut target = region(&b, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE);
    target.write_at(0, &40u64.to_ne_bytes()).unwrap();
    target.write_at(8, &(-5i32).to_ne_bytes()).unwrap();
    let remote = target.remote();
    let mut ran = 0;

    if atomic_done(
        &a,
        &b,
        "atomic u64 sum",
        |buf| {
            a.ep.atomic::<u64>(buf, 1, AtomicOp::Sum, &remote, 0, a.peer)
        },
        &2u64.to_ne_bytes(),
    )
    .is_some()
    {
        pump([&a, &b], || u64_at(&target, 0) == 42);
        ran += 1;
    }
    let before = u64_at(&target, 0);
    if let Some(buf) = atomic_done(
        &a,
        &b,
        "fetch_atomic u64 sum",
        |buf| {
            a.ep.fetch_atomic::<u64>(buf, 1, AtomicOp::Sum, &remote, 0, a.peer)
        },
        &8u64.to_ne_bytes(),
    ) {
        assert_eq!(ne::<u64>(&buf[8..16]), before, "the value before the sum");
        pump([&a, &b], || u64_at(&target, 0) == before + 8);
        ran += 1;
    }
    let before = u64_at(&target, 0);
    let mut fill = 7u64.to_ne_bytes().to_vec();
    fill.extend_from_slice(&before.to_ne_bytes());
    if let Some(buf) = atomic_done(
        &a,
        &b,
        "compare_atomic u64 cswap",
        |buf| {
            a.ep.compare_atomic::<u64>(buf, 1, CompareOp::Cswap, &remote, 0, a.peer)
        },
        &fill,
    ) {
        assert_eq!(ne::<u64>(&buf[16..24]), before);
        pump([&a, &b], || u64_at(&target, 0) == 7);
        // A compare value that does not match changes nothing.
        let mut fill = 99u64.to_ne_bytes().to_vec();
        fill.extend_from_slice(&1234u64.to_ne_bytes());
        let buf = atomic_done(
            &a,
            &b,
            "compare_atomic u64 cswap (no match)",
            |buf| {
                a.ep.compare_atomic::<u64>(buf, 1, CompareOp::Cswap, &remote, 0, a.peer)
            },
            &fill,
        )
        .expect("offered above");
        assert_eq!(ne::<u64>(&buf[16..24]), 7);
        ran += 1;
    }
    if atomic_done(
        &a,
        &b,
        "atomic i32 min",
        |buf| {
            a.ep.atomic::<i32>(buf, 1, AtomicOp::Min, &remote, 8, a.peer)
        },
        &(-10i32).to_ne_bytes(),
    )
    .is_some()
    {
        pump([&a, &b], || ne::<i32>(&read_region(&target, 8, 4)) == -10);
        ran += 1;
    }
    let now = u64_at(&target, 0);
    if let Some(buf) = atomic_done(
        &a,
        &b,
        "fetch_atomic u64 read",
        |buf| {
            a.ep.fetch_atomic::<u64>(buf, 1, AtomicOp::Read, &remote, 0, a.peer)
        },
        &[],
    ) {
        assert_eq!(ne::<u64>(&buf[8..16]), now);
        ran += 1;
    }
    assert_eq!(u64_at(&target, 0), now, "nothing else changed the target");
    assert!(
        ran > 0,
        "the provider grants FI_ATOMIC but offers none of these"
    );
    println!(
        "{}: provider {}: {ran} of 5 atomic kinds ran",
        test_name(),
        provider()
    );
}

#[test]
fn atomic_misuse_is_refused_before_the_call() {
    use libfabric::ep::atomic::AtomicOp;
    let Some((a, b)) = try_pair_with(Caps::MSG | Caps::RMA | Caps::ATOMIC) else {
        return;
    };
    let target = region(&b, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE);
    let remote = target.remote_range(0..64).unwrap();
    let refused = |count: usize, offset: u64| {
        a.ep.atomic::<u64>(
            a.pool.take().unwrap(),
            count,
            AtomicOp::Sum,
            &remote,
            offset,
            a.peer,
        )
        .unwrap_err()
        .1
    };
    assert!(
        matches!(refused(1, 4), Error::InvalidArgument(_)),
        "misaligned"
    );
    assert!(
        matches!(refused(0, 0), Error::InvalidArgument(_)),
        "no values"
    );
    assert!(
        matches!(refused(1, 64), Error::TooLarge { .. }),
        "past the region"
    );
    assert!(
        matches!(refused(9, 0), Error::TooLarge { .. }),
        "past the region"
    );
    assert!(
        matches!(refused(usize::MAX / 4, 0), Error::TooLarge { .. }),
        "overflow"
    );
    let e =
        a.ep.compare_atomic::<u64>(
            a.pool.take().unwrap(),
            200,
            libfabric::ep::atomic::CompareOp::Cswap,
            &target.remote(),
            0,
            a.peer,
        )
        .unwrap_err()
        .1;
    assert!(matches!(e, Error::BufferTooSmall { .. }), "{e}");
    // FI_ATOMIC_READ is a fetching operation only.
    let e =
        a.ep.atomic::<u64>(
            a.pool.take().unwrap(),
            1,
            AtomicOp::Read,
            &remote,
            0,
            a.peer,
        )
        .unwrap_err()
        .1;
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    pump([&a, &b], || true);
    assert!(read_region(&target, 0, 64).iter().all(|&x| x == 0));
}

#[test]
fn atomics_need_the_atomic_capability() {
    use libfabric::ep::atomic::AtomicOp;
    let (a, b) = pair();
    if a.ep.info().caps().contains(Caps::ATOMIC) {
        println!(
            "SKIP {}: provider {}: grants FI_ATOMIC unasked",
            test_name(),
            provider()
        );
        return;
    }
    let target = region(&b, MrAccess::REMOTE_WRITE);
    let e =
        a.ep.atomic::<u64>(
            a.pool.take().unwrap(),
            1,
            AtomicOp::Sum,
            &target.remote(),
            0,
            a.peer,
        )
        .unwrap_err()
        .1;
    assert!(matches!(e, Error::MissingCapability { .. }), "{e}");
}

#[test]
fn an_atomic_on_a_region_peers_may_not_write_changes_nothing() {
    use libfabric::ep::atomic::AtomicOp;
    let Some((a, b)) = try_pair_with(Caps::MSG | Caps::RMA | Caps::ATOMIC) else {
        return;
    };
    let target = region(&b, MrAccess::REMOTE_READ);
    post(&a, &b, buffer_with(&a, &5u64.to_ne_bytes()), |buf| {
        a.ep.atomic::<u64>(buf, 1, AtomicOp::Sum, &target.remote(), 0, a.peer)
    });
    refused(&a, &b, "an atomic without REMOTE_WRITE access");
    assert!(target.as_slice().unwrap().iter().all(|&x| x == 0));
}

#[test]
fn rma_buffers_in_flight_on_a_closed_endpoint_come_back() {
    let (a, b) = pair();
    let target = region(&b, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE);
    let remote = target.remote();
    let pool = a.pool.clone();
    post(&a, &b, a.pool.take().unwrap(), |buf| {
        a.ep.read(buf, 4096, &remote, 0, a.peer)
    });
    post(&a, &b, buffer_with(&a, b"gone"), |buf| {
        a.ep.write(buf, 4, &remote, 0, a.peer)
    });
    // The initiator goes away with both in flight (or just completed and
    // never read): its endpoint closes, and the buffers come back. (shm
    // keeps an endpoint open in the provider while an open endpoint of
    // this process may address it, as b does: there the buffers come back
    // once b is closed too.)
    drop(a);
    let peer = if provider() == "shm" {
        drop(target);
        drop(b);
        None
    } else {
        Some((target, b))
    };
    let back: Vec<Buffer> = std::iter::from_fn(|| pool.take()).collect();
    assert_eq!(back.len(), 8, "every buffer of the pool is free again");
    drop(peer);
}

#[test]
fn a_counter_counts_rma_completions() {
    use libfabric::cntr::CntrAttr;
    use libfabric::ep::CntrBind;
    if msg_capable() {
        println!(
            "SKIP {}: provider {}: counts through Rdm's counter (connected endpoints' counters: cntr.rs)",
            test_name(),
            provider()
        );
        return;
    }
    let info = getinfo(&hints(Caps::MSG | Caps::RMA))
        .expect("rdm info")
        .into_iter()
        .next()
        .unwrap();
    let fabric = Fabric::open(&info).unwrap();
    let counted = ConnConfig::new().counter(CntrAttr::new(), CntrBind::READ | CntrBind::WRITE);
    let ra = libfabric::Rdm::<Data>::open_on(&fabric, &info, 1, &counted).unwrap();
    let rb = libfabric::Rdm::<Data>::open_on(&fabric, &info, 1, &ConnConfig::new()).unwrap();
    let to_b = ra.insert(&rb.name().unwrap()).unwrap();
    rb.insert(&ra.name().unwrap()).unwrap();
    let counter = ra.counter().expect("the counter").clone();
    let a = side(
        ra.endpoint().clone(),
        ra.cq().clone(),
        ra.domain().clone(),
        to_b,
        Box::new(ra),
    );
    let b = side(
        rb.endpoint().clone(),
        rb.cq().clone(),
        rb.domain().clone(),
        Addr::UNSPEC,
        Box::new(rb),
    );
    let target = region(&b, MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE);
    let remote = target.remote();
    post(&a, &b, buffer_with(&a, b"count"), |buf| {
        a.ep.write(buf, 5, &remote, 0, a.peer)
    });
    next(&a, &b).expect("the write's completion");
    post(&a, &b, a.pool.take().unwrap(), |buf| {
        a.ep.read(buf, 5, &remote, 0, a.peer)
    });
    next(&a, &b).expect("the read's completion");
    pump([&a, &b], || counter.read().unwrap() == 2);
    assert_eq!(counter.read_err().unwrap(), 0);
}

/// Where the provider caches registrations with every access and keeps
/// them after `fi_close` (verbs, unless `FI_MR_CACHE_MAX_COUNT=0`), the
/// application's memory is not registered: `Error::Unsupported`. Elsewhere
/// it is.
#[test]
fn user_memory_is_refused_where_registrations_are_cached() {
    let (_f, domain, _) = fabric_domain();
    let cached = provider().starts_with("verbs")
        && std::env::var("FI_MR_CACHE_MAX_COUNT").as_deref() != Ok("0")
        && std::env::var("FI_MR_CACHE_MONITOR").as_deref() != Ok("disabled");
    let region = MemoryRegion::register(&domain, vec![0u8; 64], MrAccess::REMOTE_READ).map(drop);
    // A pool is registered for local access only, which the cache widens
    // as well.
    let pool = BufferPool::new(&domain, 1, 64).map(drop);
    for got in [region, pool] {
        if cached {
            let e = got.expect_err("a caching domain");
            assert!(matches!(e, Error::Unsupported { .. }), "{e}");
            assert!(e.to_string().contains("FI_MR_CACHE_MAX_COUNT=0"), "{e}");
        } else {
            got.unwrap_or_else(|e| panic!("provider {}: {e}", provider()));
        }
    }
}

/// Whether the domain addresses regions by virtual address (else by
/// offset from the region's first byte).
fn virt_addr(s: &Side) -> bool {
    let probe = MemoryRegion::register(&s.domain, vec![0u8; 64], MrAccess::REMOTE_READ).unwrap();
    probe.remote().addr != 0
}

/// Reads both sides' queues in the background until `stop`.
fn pump_until(
    sides: [(&CompletionQueue<Data>, &BufferPool); 2],
    stop: &std::sync::atomic::AtomicBool,
) -> Vec<libfabric::Result<libfabric::cq::Completion>> {
    let mut got = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        for (cq, pool) in sides {
            match cq.wait_one(pool, Some(Duration::from_millis(1))) {
                Err(Error::TimedOut { .. }) => {}
                other => got.push(other),
            }
        }
    }
    got
}

/// A pool's buffers are lent as slices: remote access to a pool would
/// race with them, so it is refused (the memory peers reach is a
/// `MemoryRegion`).
#[test]
fn a_pool_with_remote_access_is_refused() {
    let (_fabric, domain, _) = fabric_domain();
    for access in [
        MrAccess::LOCAL | MrAccess::REMOTE_WRITE,
        MrAccess::LOCAL | MrAccess::REMOTE_READ,
        MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
    ] {
        let e = BufferPool::with_access(&domain, 1, 4096, access).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{access:?}: {e}");
    }
    BufferPool::with_access(&domain, 1, 4096, MrAccess::LOCAL).unwrap();
}

/// The length of the large RMA of the tests below: 64 MiB, or what the
/// endpoint carries in one message; 4 MiB on verbs, 1 MiB over iWARP
/// (soft-iWARP pins the pages of a registration, and the guest's
/// locked-memory limit is 8 MiB: `fi_mr_reg` failed with `-FI_ENOMEM`).
fn big_len(a: &Side) -> usize {
    let cap = if is_iwarp() {
        1 << 20
    } else if provider() == "verbs" {
        4 << 20
    } else {
        64 << 20
    };
    cap.min(a.ep.info().max_msg_size())
}

/// Large RMA under way in both directions while the target's region is
/// closed: `into_inner` is refused while an endpoint of the domain is
/// open (an RMA that passed the key check may still copy), and once they
/// have closed the memory it gives back changes no more.
#[test]
fn memory_from_into_inner_is_not_written_afterwards() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (a, b) = pair();
    #[allow(non_snake_case)]
    let LEN = big_len(&a);
    let big = BufferPool::new(&a.domain, 1, LEN).unwrap();
    let mut src = big.take().unwrap();
    src[..LEN].fill(0xAA);
    let target = MemoryRegion::register(&b.domain, vec![0u8; LEN], MrAccess::REMOTE_WRITE).unwrap();
    let remote = target.remote();
    let stop = AtomicBool::new(false);
    let (target, refused_while_open) = std::thread::scope(|s| {
        post(&a, &b, src, |x| a.ep.write(x, LEN, &remote, 0, a.peer));
        let sides = [(&a.cq, &a.pool), (&b.cq, &b.pool)];
        let stop = &stop;
        let pumper = s.spawn(move || pump_until(sides, stop));
        // Until the write has begun landing.
        let start = Instant::now();
        let mut one = [0u8; 1];
        while start.elapsed() < Duration::from_secs(10) {
            target.read_at(0, &mut one).unwrap();
            if one[0] == 0xAA {
                break;
            }
        }
        let back = target.into_inner();
        stop.store(true, Ordering::Relaxed);
        pumper.join().unwrap();
        match back {
            Err((target, e)) => (target, e),
            Ok(_) => panic!("into_inner with the domain's endpoints open"),
        }
    });
    assert!(
        matches!(refused_while_open, Error::State { .. }),
        "{refused_while_open}"
    );
    // The endpoints close (the write stops, wherever it was).
    drop(big);
    drop((a, b));
    let memory = target.into_inner().map_err(|(_, e)| e).unwrap();
    let before = memory.iter().filter(|&&x| x == 0xAA).count();
    std::thread::sleep(Duration::from_millis(500));
    let after = std::hint::black_box(&memory)
        .iter()
        .filter(|&&x| x == 0xAA)
        .count();
    println!(
        "{}: provider {}: {before} of {LEN} bytes written when the endpoints closed",
        test_name(),
        provider()
    );
    assert_eq!(after, before, "written after into_inner returned");
}

/// A peer's large read of a region under way: `into_inner` is refused
/// (the region comes back, still registered), so the peer reads only what
/// the region held.
#[test]
fn memory_from_into_inner_is_not_read_afterwards() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (a, b) = pair();
    #[allow(non_snake_case)]
    let LEN = big_len(&a);
    let big = BufferPool::new(&a.domain, 1, LEN).unwrap();
    let target =
        MemoryRegion::register(&b.domain, vec![0xAAu8; LEN], MrAccess::REMOTE_READ).unwrap();
    let remote = target.remote();
    let stop = AtomicBool::new(false);
    let (got, target) = std::thread::scope(|s| {
        post(&a, &b, big.take().unwrap(), |x| {
            a.ep.read(x, LEN, &remote, 0, a.peer)
        });
        let (acq, bcq, bpool, bigp, stop) = (&a.cq, &b.cq, &b.pool, &big, &stop);
        let pumper = s.spawn(move || {
            let start = Instant::now();
            while !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(60) {
                let _ = bcq.wait_one(bpool, Some(Duration::from_millis(1)));
                match acq.wait_one(bigp, Some(Duration::from_millis(1))) {
                    Err(Error::TimedOut { .. }) => {}
                    other => return vec![other],
                }
            }
            Vec::new()
        });
        std::thread::sleep(Duration::from_millis(30));
        let (target, e) = match target.into_inner() {
            Err(back) => back,
            Ok(_) => panic!("into_inner with the domain's endpoints open"),
        };
        assert!(matches!(e, Error::State { .. }), "{e}");
        let got = pumper.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        (got, target)
    });
    let buf = got
        .into_iter()
        .find_map(|c| c.ok().and_then(|c| c.buffer))
        .expect("the read's completion with its buffer");
    assert!(buf[..LEN].iter().all(|&x| x == 0xAA), "{}", provider());
    drop(buf);
    drop(big);
    let memory = into_inner_after_closing(target, a, b);
    assert!(memory.iter().all(|&x| x == 0xAA));
}

/// Dropping a region while a large write into it is under way: its memory
/// (large enough to be unmapped when freed) is kept until the domain's
/// endpoints open at the drop have closed, so the write lands in live
/// memory and the process survives.
#[test]
fn dropped_region_is_not_written_afterwards() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let (a, b) = pair();
    #[allow(non_snake_case)]
    let LEN = big_len(&a);
    let big = BufferPool::new(&a.domain, 1, LEN).unwrap();
    let mut src = big.take().unwrap();
    src[..LEN].fill(0xAA);
    let target = MemoryRegion::register(&b.domain, vec![0u8; LEN], MrAccess::REMOTE_WRITE).unwrap();
    let remote = target.remote();
    let stop = AtomicBool::new(false);
    let got = std::thread::scope(|s| {
        post(&a, &b, src, |x| a.ep.write(x, LEN, &remote, 0, a.peer));
        let sides = [(&a.cq, &a.pool), (&b.cq, &b.pool)];
        let stop = &stop;
        let pumper = s.spawn(move || pump_until(sides, stop));
        let start = Instant::now();
        let mut one = [0u8; 1];
        while start.elapsed() < Duration::from_secs(10) {
            target.read_at(0, &mut one).unwrap();
            if one[0] == 0xAA {
                break;
            }
        }
        drop(target);
        std::thread::sleep(Duration::from_millis(1000));
        stop.store(true, Ordering::Relaxed);
        pumper.join().unwrap()
    });
    println!(
        "{}: provider {}: completions after the drop: {:?}",
        test_name(),
        provider(),
        got.iter()
            .map(|c| c.as_ref().map(|c| c.flags))
            .collect::<Vec<_>>()
    );
    // The endpoints close; the parked memory is freed with them.
    drop((a, b));
    drop(big);
}

/// A remote region whose address wraps past 2^64 at the target (as given,
/// with virtual addresses; once the target adds its region's address, in
/// offset mode): the providers' bounds check wraps too, so the initiator
/// refuses it before the call. (A peer that does not use this crate can
/// still send one; the target's provider is then left to cope.)
#[test]
fn forged_wrapping_remote_regions_are_refused_before_the_call() {
    let (a, b) = pair();
    let memory = vec![0u8; 4096];
    let base = memory.as_ptr() as u64;
    let target = MemoryRegion::register(
        &b.domain,
        memory,
        MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
    )
    .unwrap();
    let top = u64::MAX - 7;
    let addr = if virt_addr(&b) {
        top
    } else {
        top.wrapping_sub(base)
    };
    let forged = RemoteRegion {
        addr,
        len: 64,
        key: target.key(),
    };
    let wraps = RemoteRegion {
        addr: top,
        len: 8,
        key: 1,
    };
    assert!(matches!(
        wraps.address_of(0, 16),
        Err(Error::TooLarge { .. })
    ));
    assert!(matches!(
        RemoteRegion { len: 64, ..wraps }.address_of(0, 16),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        RemoteRegion::from_bytes(&RemoteRegion { len: 64, ..wraps }.to_bytes()),
        Err(Error::InvalidArgument(_))
    ));
    let is_refused = |r: libfabric::Handback<Buffer>, what: &str| match r {
        Err((_, Error::InvalidArgument(_))) => {}
        Err((_, e)) => panic!("{what}: {e}"),
        Ok(()) => panic!("{what}: posted"),
    };
    is_refused(
        a.ep.write(buffer_with(&a, &[0xAA; 32]), 32, &forged, 0, a.peer),
        "write",
    );
    is_refused(
        a.ep.read(a.pool.take().unwrap(), 32, &forged, 0, a.peer),
        "read",
    );
    match a.ep.inject_write(&[0xAA; 8], &forged, 0, a.peer) {
        Err(Error::InvalidArgument(_)) => {}
        // Under 8 bytes of inject (soft-iWARP: 2): refused for its length.
        Err(Error::TooLarge { .. }) if a.ep.info().inject_size() < 8 => {}
        other => panic!("inject_write: {other:?}"),
    }
    // Atomics where the provider has them (the rest above ran anyway).
    let atomic_caps = Caps::MSG | Caps::RMA | Caps::ATOMIC;
    let atomic_hints = if msg_capable() {
        hints(atomic_caps).service(0).source(true)
    } else {
        hints(atomic_caps)
    };
    if getinfo(&atomic_hints).is_err() {
        println!(
            "{}: provider {}: no atomics: their part left out",
            test_name(),
            provider()
        );
    } else {
        let (a, _b) = pair_with(atomic_caps);
        use libfabric::ep::atomic::AtomicOp;
        let aligned = RemoteRegion {
            addr: forged.addr & !7,
            ..forged
        };
        match a.ep.atomic::<u64>(
            buffer_with(&a, &1u64.to_ne_bytes()),
            1,
            AtomicOp::Sum,
            &aligned,
            0,
            a.peer,
        ) {
            // Refused for the address, or (verbs) for atomics.
            Err((_, Error::InvalidArgument(_) | Error::Unsupported { .. })) => {}
            Err((_, e)) => panic!("atomic: {e}"),
            Ok(()) => panic!("atomic: posted"),
        }
    }
    let mut seen = vec![0u8; 64];
    target.read_at(0, &mut seen).unwrap();
    assert_eq!(seen, vec![0u8; 64]);
}

/// Atomics land at offsets of a region peers reach, checked for alignment
/// by the initiator: a region whose first byte is not aligned to 8 bytes
/// is refused remote access (else a u64 atomic at offset 0 would be
/// misaligned at the target, in offset mode).
#[test]
fn a_misaligned_region_is_refused_remote_access() {
    let (_fabric, domain, _) = fabric_domain();
    // `len` bytes from `skip` bytes into a fresh leaked allocation (the
    // allocator aligns it to at least 8).
    let leaked = |skip: usize, len: usize| -> &'static mut [u8] {
        let whole = leak(64);
        assert_eq!(whole.as_ptr() as usize % 8, 0);
        &mut whole[skip..skip + len]
    };
    for access in [
        MrAccess::REMOTE_WRITE,
        MrAccess::REMOTE_READ,
        MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
    ] {
        for skip in [1, 4] {
            let e = MemoryRegion::register(&domain, leaked(skip, 16), access).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{access:?}: {e}");
        }
    }
    // Local access only: no alignment needed.
    drop(MemoryRegion::register(&domain, leaked(1, 16), MrAccess::SEND).unwrap());
    // Aligned: taken.
    drop(MemoryRegion::register(&domain, leaked(8, 16), MrAccess::REMOTE_WRITE).unwrap());
}

/// A region dropped while endpoints are open parks its memory in the
/// domain until they have closed; with none open, regions of the domain
/// register, drop and give their memory back with `into_inner` at once.
/// rxm registers memory sent from for peers' reads too (its read
/// rendezvous), and tcp answers a read that passed the key check from the
/// memory itself, queued until the socket drains: a pool dropped while
/// endpoints of its domain are open is kept on rxm, as a closed region's
/// memory is, until they have closed (a pool registered for receives
/// too: without `FI_MR_LOCAL`, rxm registers what is sent from itself).
/// Elsewhere the memory is freed at once.
#[test]
fn a_pool_peers_may_read_is_kept_until_the_endpoints_close() {
    let (a, b) = pair();
    let domain = b.domain.clone();
    let lent = provider().contains("ofi_rxm");
    assert_eq!(domain.retained_regions(), 0);
    let pool = BufferPool::new(&domain, 2, 4096).unwrap();
    let buffer = pool.take().unwrap();
    drop(pool);
    assert_eq!(
        domain.retained_regions(),
        0,
        "a buffer taken from it keeps the pool open"
    );
    drop(buffer);
    assert_eq!(
        domain.retained_regions(),
        usize::from(lent),
        "kept while the domain's endpoints are open on rxm only"
    );
    drop(BufferPool::with_access(&domain, 1, 64, MrAccess::RECV).unwrap());
    assert_eq!(
        domain.retained_regions(),
        2 * usize::from(lent),
        "a pool registered for receives only, kept on rxm too"
    );
    drop((a, b));
    assert_eq!(domain.retained_regions(), 0, "freed once they have closed");
    drop(BufferPool::new(&domain, 1, 64).unwrap());
    assert_eq!(
        domain.retained_regions(),
        0,
        "freed at once with no endpoint open"
    );
}

#[test]
fn regions_dropped_before_and_after_endpoints_close() {
    let (a, b) = pair();
    let domain = a.domain.clone();
    assert_eq!(domain.retained_regions(), 0);
    let parked = region(&a, MrAccess::REMOTE_WRITE);
    drop(parked);
    let closed = region(&a, MrAccess::REMOTE_READ);
    closed.close().map_err(|(_, e)| e).unwrap();
    assert_eq!(
        domain.retained_regions(),
        2,
        "kept while the domain's endpoints are open"
    );
    // An endpoint opened after the regions closed does not hold them.
    let late = Endpoint::open(&domain, domain.info()).unwrap();
    drop((a, b));
    if provider() == "sockets" {
        // There they wait until no endpoint of the domain is open.
        assert_eq!(
            domain.retained_regions(),
            2,
            "kept until the domain is idle"
        );
        drop(late);
        assert_eq!(domain.retained_regions(), 0, "freed once it is idle");
        return;
    }
    // On rxm, a's pool, dropped with it while the late endpoint is open,
    // waits for that one (peers may read a pool's memory there).
    let pools = usize::from(provider().contains("ofi_rxm"));
    assert_eq!(
        domain.retained_regions(),
        pools,
        "freed once they have closed"
    );
    drop(MemoryRegion::register(&domain, vec![0u8; 64], MrAccess::REMOTE_WRITE).unwrap());
    assert_eq!(
        domain.retained_regions(),
        pools + 1,
        "the late endpoint is open"
    );
    drop(late);
    assert_eq!(domain.retained_regions(), 0);
    let now = MemoryRegion::register(&domain, vec![0u8; 64], MrAccess::REMOTE_WRITE).unwrap();
    drop(now);
    let back = MemoryRegion::register(&domain, vec![7u8; 64], MrAccess::REMOTE_WRITE)
        .unwrap()
        .into_inner()
        .map_err(|(_, e)| e)
        .expect("into_inner with no endpoint open");
    assert_eq!(back, vec![7u8; 64]);
}
