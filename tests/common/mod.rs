//! Shared setup for the load, fault and panic tests: the tcp provider over
//! 127.0.0.1, connection helpers that drive progress while they wait, counts
//! that can be lowered through the environment, and a bitmap that proves
//! each numbered item arrived exactly once.
#![allow(dead_code)]

use libfabric::conn::ConnConfig;
use libfabric::cq::{CqAttr, CqRead, Format};
use libfabric::eq::{EqAttr, EqRead, Event, EventBuf};
use libfabric::info::{Caps, EpType};
use libfabric::wait::WaitObj;
use libfabric::{
    getinfo, BufferPool, CompletionQueue, Connection, Domain, Endpoint, Errno, EventQueue, Fabric,
    Hints, Info, Listener, PassiveEndpoint,
};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The provider every test here runs on.
pub const PROVIDER: &str = "tcp";
/// The address every test here listens on.
pub const NODE: &str = "127.0.0.1";

/// A count from the environment variable `name`, or `default`. Lets the
/// valgrind run use small numbers.
pub fn count(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .replace('_', "")
            .parse()
            .unwrap_or_else(|e| panic!("{name}={v:?} is not a count: {e}")),
        Err(_) => default,
    }
}

/// Hints for connected message endpoints of the tcp provider.
pub fn msg_hints() -> Hints {
    Hints::new()
        .provider(PROVIDER)
        .ep_type(EpType::Msg)
        .caps(Caps::MSG)
}

/// The first match of `hints`; fails with what to install when the tcp
/// provider is missing.
pub fn info_for(hints: &Hints) -> Info {
    let list = getinfo(hints).unwrap_or_else(|e| {
        panic!(
            "the libfabric tcp provider on {NODE} is not usable here: {e}. Install libfabric1 \
             (Debian: apt-get install libfabric1 libfabric-bin; `fi_info -p tcp` must list it)"
        )
    });
    list.into_iter()
        .next()
        .expect("fi_getinfo returned an empty list")
}

/// A fabric on 127.0.0.1 and the `fi_info` it came from.
pub fn fabric() -> (Fabric, Info) {
    let info = info_for(&msg_hints().node(NODE));
    (Fabric::open(&info).expect("fi_fabric"), info)
}

/// An event queue with a wait fd, large enough for bursts of
/// connection events.
pub fn fd_eq(fabric: &Fabric) -> EventQueue {
    EventQueue::open(fabric, &EqAttr::new().size(1024).wait(WaitObj::Fd)).expect("fi_eq_open")
}

/// A passive endpoint listening on an ephemeral port of 127.0.0.1, with
/// its event queue.
pub fn listener(fabric: &Fabric) -> (PassiveEndpoint, EventQueue) {
    let info = info_for(&msg_hints().node(NODE).service("0").source(true));
    let pep = PassiveEndpoint::open(fabric, &info).expect("fi_passive_ep");
    let eq = fd_eq(fabric);
    pep.bind_eq(&eq).expect("fi_pep_bind");
    pep.listen().expect("fi_listen");
    (pep, eq)
}

/// The `fi_info` of an active endpoint that connects to `addr`.
pub fn client_info(addr: SocketAddr) -> Info {
    info_for(&msg_hints().node(addr.ip().to_string()).service(addr.port()))
}

/// An event copied out of its buffer.
#[derive(Debug)]
pub enum Ev {
    /// `FI_CONNREQ` with its request (owned, answered once) and
    /// connection data.
    ConnReq {
        request: libfabric::ConnRequest,
        data: Vec<u8>,
    },
    /// `FI_CONNECTED` on the endpoint `fid`, with the peer's data.
    Connected {
        fid: libfabric::eq::Fid,
        data: Vec<u8>,
    },
    /// `FI_SHUTDOWN` on the endpoint `fid`.
    Shutdown { fid: libfabric::eq::Fid },
    /// An error entry.
    Error {
        fid: libfabric::eq::Fid,
        err: Errno,
        data: Vec<u8>,
    },
    /// Anything else, described.
    Other(String),
}

/// One event of `eq`, copied out, or `None` when it is empty.
pub fn try_event(eq: &EventQueue, buf: &mut EventBuf) -> Option<Ev> {
    match eq.read(buf).expect("fi_eq_read") {
        EqRead::Empty | EqRead::TimedOut => None,
        EqRead::ErrorPending => unreachable!("a read hands error entries back"),
        EqRead::Error(e) => Some(Ev::Error {
            fid: e.fid,
            err: e.err,
            data: e.err_data().to_vec(),
        }),
        EqRead::Event(Event::ConnReq(c)) => Some(Ev::ConnReq {
            request: c.request,
            data: c.data.to_vec(),
        }),
        EqRead::Event(Event::Connected(c)) => Some(Ev::Connected {
            fid: c.fid,
            data: c.data.to_vec(),
        }),
        EqRead::Event(Event::Shutdown(c)) => Some(Ev::Shutdown { fid: c.fid }),
        EqRead::Event(other) => Some(Ev::Other(format!("{other:?}"))),
    }
}

/// Reads `eq` until an event arrives, peeking `others` meanwhile: the tcp
/// provider moves connections forward only while their queues are read.
pub fn next_event(eq: &EventQueue, others: &[&EventQueue], timeout: Duration) -> Ev {
    let deadline = Instant::now() + timeout;
    let mut buf = EventBuf::new();
    loop {
        if let Some(ev) = try_event(eq, &mut buf) {
            return ev;
        }
        for o in others {
            let _ = o.peek(&mut buf);
        }
        assert!(Instant::now() < deadline, "no event within {timeout:?}");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// A connected pair of message endpoints on one fabric: each side with its
/// own domain, event queue, completion queue (format `F`) and pool.
pub struct Pair<F: Format> {
    pub fabric: Fabric,
    pub pep: PassiveEndpoint,
    /// The listener's queue, where connection requests arrive.
    pub listener_eq: EventQueue,
    /// The server endpoint's queue.
    pub server_eq: EventQueue,
    pub client_eq: EventQueue,
    pub server_domain: Domain,
    pub client_domain: Domain,
    pub server: Endpoint,
    pub client: Endpoint,
    pub server_cq: CompletionQueue<F>,
    pub client_cq: CompletionQueue<F>,
    pub server_pool: BufferPool,
    pub client_pool: BufferPool,
}

impl<F: Format> Pair<F> {
    /// Closes every object in order, each close returning `Ok`. The server
    /// endpoint closes first, which flushes its posted operations into the
    /// server CQ; `after_server` runs then (with the server CQ and the
    /// server and client pools), before anything else closes.
    pub fn close(self, after_server: impl FnOnce(&CompletionQueue<F>, &BufferPool, &BufferPool)) {
        let Pair {
            fabric,
            pep,
            listener_eq,
            server_eq,
            client_eq,
            server_domain,
            client_domain,
            server,
            client,
            server_cq,
            client_cq,
            server_pool,
            client_pool,
        } = self;
        server.close().expect("close the server endpoint");
        after_server(&server_cq, &server_pool, &client_pool);
        client.close().expect("close the client endpoint");
        drop((server_pool, client_pool));
        server_cq.close().expect("close the server CQ");
        client_cq.close().expect("close the client CQ");
        server_domain.close().expect("close the server domain");
        client_domain.close().expect("close the client domain");
        pep.close().expect("close the passive endpoint");
        listener_eq.close().expect("close the listener's EQ");
        server_eq.close().expect("close the server EQ");
        client_eq.close().expect("close the client EQ");
        fabric.close().expect("close the fabric");
    }
}

/// Connects a pair through the connection layer (the server accepts on
/// another thread); each pool has `slots` buffers of `slot_size` bytes.
pub fn connect_pair<F: Format>(cq_attr: CqAttr, slots: usize, slot_size: usize) -> Pair<F> {
    let (fabric, _) = fabric();
    let listen = info_for(&msg_hints().node(NODE).service(0).source(true));
    let listener = Listener::on(&fabric, &listen).expect("listen");
    let cinfo = client_info(listener.local_addr().expect("listener address"));
    let config = ConnConfig::new()
        .cq(cq_attr)
        .timeout(Some(Duration::from_secs(10)));
    let (server, client) = std::thread::scope(|s| {
        let server = s.spawn(|| {
            listener
                .incoming_timeout(Some(Duration::from_secs(10)))
                .and_then(|incoming| incoming.prepare::<F>(&config))
                .and_then(|p| p.establish(b"welcome"))
                .expect("accept")
        });
        let client = Connection::<F>::prepare(&fabric, &cinfo, &config)
            .and_then(|p| p.establish(b"hello"))
            .expect("connect");
        (server.join().expect("the accepting thread"), client)
    });
    let (s, c) = (server.into_parts(), client.into_parts());
    Pair {
        server_pool: BufferPool::new(&s.domain, slots, slot_size).expect("server pool"),
        client_pool: BufferPool::new(&c.domain, slots, slot_size).expect("client pool"),
        fabric,
        pep: listener.passive_endpoint().clone(),
        listener_eq: listener.eq().clone(),
        server_eq: s.eq,
        client_eq: c.eq,
        server_domain: s.domain,
        client_domain: c.domain,
        server: s.endpoint,
        client: c.endpoint,
        server_cq: s.cq,
        client_cq: c.cq,
    }
}

/// Reads `cq` until `expected` error completions of flushed operations
/// have handed their buffers back to `pool` (dropped, so the slots are
/// free again). Successful completions found meanwhile are reclaimed too and
/// counted in the result's second member.
pub fn reclaim_flushed<F: Format>(
    cq: &CompletionQueue<F>,
    pool: &BufferPool,
    expected: usize,
    timeout: Duration,
) -> (usize, usize) {
    let deadline = Instant::now() + timeout;
    let mut entries: Vec<F::Entry> = (0..16).map(|_| F::Entry::default()).collect();
    let (mut flushed, mut completed) = (0, 0);
    while flushed + completed < expected {
        match cq.read(&mut entries).expect("fi_cq_read") {
            CqRead::Completions(done) => {
                for e in &done {
                    if pool.reclaim(e).is_some() {
                        completed += 1;
                    }
                }
            }
            CqRead::Error(mut err) => {
                assert!(
                    matches!(
                        err.err,
                        Errno::CANCELED | Errno::NOTCONN | Errno::CONNRESET | Errno::SHUTDOWN
                    ),
                    "a flushed operation fails with ECANCELED, ENOTCONN or ECONNRESET: {err:?}"
                );
                if pool.reclaim_err(&mut err).is_some() {
                    flushed += 1;
                }
            }
            _ => {
                assert!(
                    Instant::now() < deadline,
                    "only {flushed} flushed and {completed} completed of {expected} operations \
                     came back within {timeout:?}"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
    (flushed, completed)
}

/// Reads the error completions an endpoint's close flushed into `cq` (tcp
/// and shm report the operations still posted as FI_ECANCELED; sockets,
/// rxm and rxd report nothing). Their buffers came back to their pools
/// when the endpoint closed, so none hands one out. Returns how many were
/// read.
pub fn read_flushed_of_closed<F: Format>(cq: &CompletionQueue<F>, pool: &BufferPool) -> usize {
    let mut entries: Vec<F::Entry> = (0..16).map(|_| F::Entry::default()).collect();
    let mut flushed = 0;
    loop {
        match cq.read(&mut entries).expect("fi_cq_read") {
            CqRead::Completions(done) => {
                for e in &done {
                    assert!(
                        pool.reclaim(e).is_none(),
                        "a completion of a closed endpoint hands out no buffer"
                    );
                }
            }
            CqRead::Error(mut err) => {
                assert!(
                    pool.reclaim_err(&mut err).is_none(),
                    "a flushed operation of a closed endpoint hands out no buffer: {err:?}"
                );
                flushed += 1;
            }
            _ => return flushed,
        }
    }
}

/// Takes every slot of `pool`, proving none is lost, and gives them back.
pub fn assert_pool_whole(pool: &BufferPool, slots: usize) {
    let taken: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
    assert_eq!(
        taken.len(),
        slots,
        "every buffer of the pool is back and can be taken again"
    );
}

/// One bit per numbered item: marking an item twice is reported.
pub struct Seen {
    words: Vec<AtomicU64>,
    len: u64,
}

impl Seen {
    pub fn new(len: u64) -> Self {
        Seen {
            words: (0..len.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            len,
        }
    }

    /// Marks item `i`; false if it was marked already (a duplicate) or out
    /// of range.
    pub fn mark(&self, i: u64) -> bool {
        if i >= self.len {
            return false;
        }
        let bit = 1u64 << (i % 64);
        self.words[(i / 64) as usize].fetch_or(bit, Ordering::Relaxed) & bit == 0
    }

    /// How many items are marked.
    pub fn count(&self) -> u64 {
        self.words
            .iter()
            .map(|w| u64::from(w.load(Ordering::Relaxed).count_ones()))
            .sum()
    }

    /// The first unmarked item, if any.
    pub fn first_missing(&self) -> Option<u64> {
        (0..self.len)
            .find(|&i| self.words[(i / 64) as usize].load(Ordering::Relaxed) & (1 << (i % 64)) == 0)
    }
}

/// Completions per second, for the reports.
pub fn rate(n: u64, elapsed: Duration) -> f64 {
    n as f64 / elapsed.as_secs_f64().max(1e-9)
}
