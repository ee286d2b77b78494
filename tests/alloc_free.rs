//! The steady state of the safe API allocates nothing: after a warm-up,
//! reading event and completion queues (empty or not), writing events,
//! `fi_trywait`, `Waiter::wait`, posting sends, receives and RMA writes
//! and reads and reclaiming their buffers, multi-receive messages and the
//! reposting of their buffer, inject writes, and a counter's
//! reads, adds and waits make zero heap allocations, counted by a global allocator.
//!
//! The allocator counts the allocations of the calling thread only, so the
//! test harness's other threads do not disturb the count. (libfabric's own C
//! allocations do not go through it: this is about the Rust layer.)
#![deny(clippy::undocumented_unsafe_blocks)]

use libfabric::cq::Addr;
use libfabric::cq::{CqAttr, CqRead, Msg, MsgEntry};
use libfabric::ep::{socket_addr, CqBind};
use libfabric::eq::{Entry, EqAttr, EqRead, Event, EventBuf};
use libfabric::info::{Caps, EpType, Info};
use libfabric::mr::{MemoryRegion, MrAccess};
use libfabric::wait::{trywait, TryWait, WaitObj, Waiter, Wake};
use libfabric::{
    getinfo, Buffer, BufferPool, CntrAttr, CompletionQueue, Counter, Domain, Endpoint, EventQueue,
    Fabric, Hints, PassiveEndpoint,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, Instant};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // try_with: the thread-local may be gone while a thread shuts down.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: every method forwards to the system allocator with the caller's
// arguments unchanged, so System's guarantees hold; counting touches only a
// const-initialised thread-local Cell, which itself never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded as is (the caller upholds alloc's contract).
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded as is.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded as is; ptr came from this allocator, i.e. System.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is; ptr came from System.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap allocations made by this thread while `f` runs.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

const WARM_UP: usize = 100;
const N: usize = 2_000;

fn hints() -> Hints {
    Hints::new()
        .provider("tcp")
        .ep_type(EpType::Msg)
        .caps(Caps::MSG | Caps::RMA)
}

fn info(hints: Hints) -> Info {
    getinfo(&hints)
        .expect("the tcp provider on 127.0.0.1 (libfabric1 installed?)")
        .into_iter()
        .next()
        .expect("getinfo returned an empty list")
}

fn fabric() -> (Fabric, Domain) {
    let info = info(hints().node("127.0.0.1"));
    let fabric = Fabric::open(&info).unwrap();
    let domain = Domain::open(&fabric, &info).unwrap();
    (fabric, domain)
}

fn fd_eq(fabric: &Fabric) -> EventQueue {
    EventQueue::open(
        fabric,
        &EqAttr::new().size(64).wait(WaitObj::Fd).write(true),
    )
    .unwrap()
}

fn fd_cq(domain: &Domain) -> CompletionQueue<Msg> {
    CompletionQueue::open(domain, &CqAttr::new().size(64).wait(WaitObj::Fd)).unwrap()
}

#[test]
fn event_queue_reads_and_writes_allocate_nothing() {
    let (fabric, _domain) = fabric();
    let eq = fd_eq(&fabric);
    let fid = eq.fid();
    let mut buf = EventBuf::new();
    let mut step = |i: u64| {
        assert!(matches!(eq.read(&mut buf), Ok(EqRead::Empty)));
        eq.write_notify(fid, 7, i).unwrap();
        assert!(matches!(eq.read(&mut buf), Ok(EqRead::Event(Event::Notify(e))) if e.data == i));
        eq.write_entry(&Entry::new(fid, 7, i)).unwrap();
        let read = eq.sread(&mut buf, Some(Duration::from_secs(1)));
        assert!(matches!(read, Ok(EqRead::Event(Event::Notify(e))) if e.data == i));
    };
    (0..WARM_UP as u64).for_each(&mut step);
    assert_eq!(allocations(|| (0..N as u64).for_each(&mut step)), 0);
}

#[test]
fn trywait_and_waiter_allocate_nothing() {
    let (fabric, domain) = fabric();
    let eq = fd_eq(&fabric);
    let cq = fd_cq(&domain);
    let mut waiter = Waiter::new(&[&eq, &cq]).unwrap();
    let mut buf = EventBuf::new();
    let mut step = |i: u64| {
        assert_eq!(trywait(&fabric, &[&eq, &cq]).unwrap(), TryWait::MayBlock);
        eq.write_notify(eq.fid(), 0, i).unwrap();
        assert_eq!(
            trywait(&fabric, &[&eq, &cq]).unwrap(),
            TryWait::EventsPending
        );
        assert_eq!(
            waiter.wait(Some(Duration::from_secs(1))).unwrap(),
            Wake::Ready
        );
        assert!(matches!(eq.read(&mut buf), Ok(EqRead::Event(_))));
    };
    (0..WARM_UP as u64).for_each(&mut step);
    assert_eq!(allocations(|| (0..N as u64).for_each(&mut step)), 0);
}

/// Reads `eq` until an event arrives, reading `other` meanwhile: the tcp
/// provider makes progress only while the queues are read.
fn wait_event<T>(eq: &EventQueue, other: &EventQueue, pick: impl Fn(Event<'_>) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = EventBuf::new();
    let mut scratch = EventBuf::new();
    loop {
        match eq.read(&mut buf).unwrap() {
            EqRead::Event(ev) => {
                if let Some(t) = pick(ev) {
                    return t;
                }
            }
            EqRead::Error(e) => panic!("error entry while connecting: {e:?}"),
            _ => {}
        }
        let _ = other.peek(&mut scratch);
        assert!(Instant::now() < deadline, "no connection event within 10 s");
        std::thread::sleep(Duration::from_micros(200));
    }
}

struct Pair {
    domain: Domain,
    client: Endpoint,
    server: Endpoint,
    client_cq: CompletionQueue<Msg>,
    server_cq: CompletionQueue<Msg>,
    _keep: (Fabric, PassiveEndpoint, EventQueue, EventQueue),
}

/// A connected pair of MSG endpoints over tcp on 127.0.0.1.
fn pair() -> Pair {
    let (fabric, domain) = fabric();
    let listen = info(hints().node("127.0.0.1").service("0").source(true));
    let pep = PassiveEndpoint::open(&fabric, &listen).unwrap();
    let server_eq = fd_eq(&fabric);
    pep.bind_eq(&server_eq).unwrap();
    pep.listen().unwrap();
    let addr = pep.local_addr().unwrap();
    let cinfo = info(
        hints()
            .node(addr.ip().to_string())
            .service(addr.port().to_string()),
    );
    let client_eq = fd_eq(&fabric);
    let client_cq = fd_cq(&domain);
    let client = Endpoint::open(&domain, &cinfo).unwrap();
    client.bind_eq(&client_eq).unwrap();
    client
        .bind_cq(&client_cq, CqBind::TRANSMIT | CqBind::RECV)
        .unwrap();
    client.enable().unwrap();
    client.connect(&[]).unwrap();
    let request = wait_event(&server_eq, &client_eq, |ev| match ev {
        Event::ConnReq(req) => Some(req.request),
        _ => None,
    });
    assert!(socket_addr(request.info().dest_addr()).is_some());
    let server_cq = fd_cq(&domain);
    let server = Endpoint::from_request(&domain, request).unwrap();
    server.bind_eq(&server_eq).unwrap();
    server
        .bind_cq(&server_cq, CqBind::TRANSMIT | CqBind::RECV)
        .unwrap();
    server.enable().unwrap();
    server.accept(&[]).unwrap();
    let connected = |ev: Event<'_>| matches!(ev, Event::Connected(_)).then_some(());
    wait_event(&client_eq, &server_eq, connected);
    wait_event(&server_eq, &client_eq, connected);
    Pair {
        domain,
        client,
        server,
        client_cq,
        server_cq,
        _keep: (fabric, pep, server_eq, client_eq),
    }
}

/// Spins on `cq` until one completion, and hands its buffer back.
fn complete(cq: &CompletionQueue<Msg>, pool: &BufferPool, blocking: bool) -> Buffer {
    let mut entries: [MsgEntry; 4] = Default::default();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let read = if blocking {
            cq.sread(&mut entries, Some(Duration::from_secs(1)))
        } else {
            cq.read(&mut entries)
        };
        match read.unwrap() {
            CqRead::Completions(done) => {
                assert_eq!(done.len(), 1);
                return pool.reclaim(&done[0]).expect("the buffer comes back");
            }
            CqRead::Error(e) => panic!("error completion: {e:?}"),
            _ => assert!(Instant::now() < deadline, "no completion within 10 s"),
        }
    }
}

#[test]
fn completions_posts_and_reclaims_allocate_nothing() {
    let p = pair();
    let pool = BufferPool::new(&p.domain, 4, 4096).unwrap();
    let mut rx = Some(pool.take().unwrap());
    let mut tx = Some(pool.take().unwrap());
    let mut entries: [MsgEntry; 4] = Default::default();
    let mut step = |i: usize| {
        // Empty queues.
        assert!(matches!(p.client_cq.read(&mut entries), Ok(CqRead::Empty)));
        assert!(matches!(p.server_cq.read(&mut entries), Ok(CqRead::Empty)));
        // A receive, a send, both completions, both buffers back.
        p.server.recv(rx.take().unwrap()).unwrap();
        let mut buf = tx.take().unwrap();
        buf[..8].copy_from_slice(&(i as u64).to_le_bytes());
        p.client.send(buf, 8).unwrap();
        let blocking = i % 2 == 1;
        tx = Some(complete(&p.client_cq, &pool, blocking));
        let got = complete(&p.server_cq, &pool, blocking);
        assert_eq!(got[..8], (i as u64).to_le_bytes());
        rx = Some(got);
        // An inject: no completion, no buffer.
        p.server.recv(rx.take().unwrap()).unwrap();
        p.client
            .inject(&(i as u64).to_le_bytes(), libfabric::cq::Addr::UNSPEC)
            .unwrap();
        rx = Some(complete(&p.server_cq, &pool, false));
    };
    (0..WARM_UP).for_each(&mut step);
    assert_eq!(allocations(|| (0..N).for_each(&mut step)), 0);
}

#[test]
fn multi_receive_messages_and_reposts_allocate_nothing() {
    use libfabric::av::{AddressVector, AvType};
    use libfabric::cq::{Data, DataEntry};
    let rdm = info(
        Hints::new()
            .provider("tcp;ofi_rxm")
            .node("127.0.0.1")
            .ep_type(EpType::Rdm)
            .caps(Caps::MSG | Caps::MULTI_RECV),
    );
    let fabric = Fabric::open(&rdm).unwrap();
    let domain = Domain::open(&fabric, &rdm).unwrap();
    let av = AddressVector::open(&domain, AvType::Table, 4).unwrap();
    let side = || {
        let cq =
            CompletionQueue::<Data>::open(&domain, &CqAttr::new().size(64).wait(WaitObj::None))
                .unwrap();
        let ep = Endpoint::open(&domain, &rdm).unwrap();
        ep.bind_av(&av).unwrap();
        ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
        ep.set_min_multi_recv(256).unwrap();
        ep.enable().unwrap();
        (ep, cq)
    };
    let (rx, rx_cq) = side();
    let (tx, tx_cq) = side();
    let dest = av.insert(&rx.name().unwrap()).unwrap();
    // One 4 KiB multi-receive buffer, released every 60 messages of 64
    // bytes (min_free 256), and posted again.
    let rx_pool = BufferPool::new(&domain, 1, 4096).unwrap();
    let tx_pool = BufferPool::new(&domain, 1, 4096).unwrap();
    let mut send = Some(tx_pool.take().unwrap());
    let mut entries: [DataEntry; 4] = Default::default();
    let posts = Cell::new(0);
    let mut step = |i: usize| {
        if let Some(buf) = rx_pool.take() {
            rx.recv_multi(buf, 256).unwrap();
            posts.set(posts.get() + 1);
        }
        let mut buf = send.take().unwrap();
        buf[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let deadline = Instant::now() + Duration::from_secs(10);
        // rxm connects on first use (during the warm-up).
        while let Err((back, e)) = tx.send_to(buf, 64, dest) {
            assert!(e.is_again(), "{e}");
            assert!(Instant::now() < deadline);
            buf = back;
            let _ = tx_cq.read(&mut entries);
            let _ = rx_cq.read(&mut entries);
        }
        let (mut got, mut sent) = (false, false);
        while !(got && sent) {
            if let Ok(CqRead::Completions(done)) = rx_cq.read(&mut entries) {
                for e in &done {
                    let back = rx_pool.reclaim_received(e);
                    let m = back.message.expect("a message");
                    assert_eq!(m[..8], (i as u64).to_le_bytes());
                    got = true;
                }
            }
            if !sent {
                if let Ok(CqRead::Completions(done)) = tx_cq.read(&mut entries) {
                    send = tx_pool.reclaim(&done[0]);
                    sent = true;
                }
            }
            assert!(Instant::now() < deadline, "message {i} did not arrive");
        }
    };
    (0..WARM_UP).for_each(&mut step);
    assert_eq!(allocations(|| (0..N).for_each(&mut step)), 0);
    // The buffer came back and was posted again all along.
    assert!(posts.get() > (WARM_UP + N) / 64, "{} posts", posts.get());
}

#[test]
fn rma_posts_and_counter_calls_allocate_nothing() {
    let p = pair();
    let pool = BufferPool::new(&p.domain, 4, 4096).unwrap();
    let target = MemoryRegion::register(
        &p.domain,
        vec![0u8; 4096],
        MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
    )
    .unwrap();
    let remote = target.remote();
    let counter = Counter::open(&p.domain, &CntrAttr::new()).unwrap();
    let mut local = Some(pool.take().unwrap());
    // The initiator's completion, the target's queue read meanwhile: the
    // target's progress (tcp's manual progress) serves the RMA.
    let rma_done = || {
        let mut entries: [MsgEntry; 4] = Default::default();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            assert!(matches!(p.server_cq.read(&mut entries), Ok(CqRead::Empty)));
            match p.client_cq.read(&mut entries).unwrap() {
                CqRead::Completions(done) => {
                    assert_eq!(done.len(), 1);
                    return pool.reclaim(&done[0]).expect("the buffer comes back");
                }
                CqRead::Error(e) => panic!("error completion: {e:?}"),
                _ => assert!(Instant::now() < deadline, "no completion within 10 s"),
            }
        }
    };
    let mut step = |i: usize| {
        // A write, then a read of what it wrote (one tcp connection: the
        // target serves them in order), each buffer back with its
        // completion; an inject write, read back the same way.
        let offset = (i % 64 * 8) as u64;
        let mut buf = local.take().unwrap();
        buf[..8].copy_from_slice(&(i as u64).to_le_bytes());
        p.client
            .write(buf, 8, &remote, offset, Addr::UNSPEC)
            .unwrap();
        let mut buf = rma_done();
        buf[..8].fill(0);
        p.client
            .read(buf, 8, &remote, offset, Addr::UNSPEC)
            .unwrap();
        let buf = rma_done();
        assert_eq!(buf[..8], (i as u64).to_le_bytes());
        let next = (i as u64 + 1).to_le_bytes();
        p.client
            .inject_write(&next, &remote, offset, Addr::UNSPEC)
            .unwrap();
        p.client
            .read(buf, 8, &remote, offset, Addr::UNSPEC)
            .unwrap();
        let buf = rma_done();
        assert_eq!(buf[..8], next);
        local = Some(buf);
        // A counter's calls.
        counter.add(1).unwrap();
        assert_eq!(counter.read().unwrap(), i as u64 + 1);
        assert_eq!(counter.read_err().unwrap(), 0);
        counter.wait(i as u64 + 1, Some(Duration::ZERO)).unwrap();
    };
    (0..WARM_UP).for_each(&mut step);
    assert_eq!(
        allocations(|| (WARM_UP..WARM_UP + N).for_each(&mut step)),
        0
    );
}

#[test]
fn async_reads_with_entries_pending_allocate_nothing() {
    let (fabric, _domain) = fabric();
    let eq = fd_eq(&fabric);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let aeq = {
        let _entered = rt.enter();
        libfabric::tokio::AsyncEventQueue::new(eq.clone()).unwrap()
    };
    let mut buf = EventBuf::new();
    // Counted inside the runtime: block_on itself may box a large future
    // (tokio does in debug builds), once per call, not per read. The warm-up
    // is longer than tokio's cooperative budget (128 polls), whose first
    // exhaustion grows a list of tokio's scheduler once.
    let counted = rt.block_on(async {
        async_reads(&eq, &aeq, &mut buf, 1_000).await;
        let before = ALLOCATIONS.with(Cell::get);
        async_reads(&eq, &aeq, &mut buf, N as u64).await;
        ALLOCATIONS.with(Cell::get) - before
    });
    assert_eq!(counted, 0);
}

async fn async_reads(
    eq: &EventQueue,
    aeq: &libfabric::tokio::AsyncEventQueue,
    buf: &mut EventBuf,
    n: u64,
) {
    for i in 0..n {
        eq.write_notify(eq.fid(), 0, i).unwrap();
        let read = aeq.read(buf).await;
        assert!(matches!(read, Ok(EqRead::Event(Event::Notify(e))) if e.data == i));
    }
}

#[test]
fn the_counter_sees_allocations() {
    let n = allocations(|| drop(std::hint::black_box(vec![1u8; 64])));
    assert_eq!(n, 1, "the counting allocator counts");
}
