//! Shared setup for the libfabric suite. The provider is a parameter:
//! `LIBFABRIC_TEST_PROVIDER` (default `tcp`) and `LIBFABRIC_TEST_NODE`
//! (default `127.0.0.1`), so the same tests run on `verbs` over soft-RoCE.
#![allow(dead_code)]

use libfabric::av::AvType;
use libfabric::conn::ConnConfig;
use libfabric::cq::{CqAttr, CqError, CqRead, Format, Msg, MsgEntry};
use libfabric::ep::CqBind;
use libfabric::eq::{EqAttr, EqError, EqRead, ErrDataBuf, Event, EventBuf};
use libfabric::info::{Caps, EpType};
use libfabric::wait::WaitObj;
use libfabric::{
    getinfo, AddressVector, BufferPool, CompletionQueue, ConnRequest, Connection, Domain, Endpoint,
    EventQueue, Fabric, Hints, Info, Listener, PassiveEndpoint,
};
use std::time::{Duration, Instant};

/// A count the environment may set (`name`), else `default`: smaller runs
/// under valgrind, longer ones to hunt a race.
pub fn env_count(name: &str, default: u64) -> u64 {
    env_setting(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A setting the environment gives (`name`): an empty value is no setting
/// (`VAR= cargo test`, or a script's empty variable).
fn env_setting(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A setting the environment may give (`name`), else `default`.
fn env_or(name: &str, default: &str) -> String {
    env_setting(name).unwrap_or_else(|| default.into())
}

/// The provider the tests run on (`LIBFABRIC_TEST_PROVIDER`), tcp if unset.
pub fn provider() -> String {
    env_or("LIBFABRIC_TEST_PROVIDER", "tcp")
}

/// The address the tests listen and connect on (`LIBFABRIC_TEST_NODE`).
pub fn node() -> String {
    env_or("LIBFABRIC_TEST_NODE", "127.0.0.1")
}

/// A TCP port of every local IPv4 address on which nothing listens, kept
/// so while the returned socket is open: the socket is bound to it (without
/// `SO_REUSEADDR`, so no other socket can take it) and never listens, so a
/// connection to it is refused. A listener bound and closed at once would
/// free the port for any process to take, such as the tests of another
/// provider running at the same time (`tests/versions/provider-matrix.sh`).
pub fn refusing_port() -> (std::os::fd::OwnedFd, u16) {
    use nix::sys::socket::{
        bind, getsockname, socket, AddressFamily, SockFlag, SockType, SockaddrIn,
    };
    use std::os::fd::AsRawFd;
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .expect("socket");
    bind(fd.as_raw_fd(), &SockaddrIn::new(0, 0, 0, 0, 0)).expect("bind to port 0");
    let port = getsockname::<SockaddrIn>(fd.as_raw_fd())
        .expect("getsockname")
        .port();
    (fd, port)
}

/// Whether the suite runs over an iWARP device (`LIBFABRIC_TEST_IWARP=1`,
/// set for soft-iWARP in the guest): iWARP carries no immediate data, so
/// its domains have `cq_data_size` 0.
pub fn is_iwarp() -> bool {
    std::env::var("LIBFABRIC_TEST_IWARP").as_deref() == Ok("1")
}

pub fn is_tcp() -> bool {
    provider().starts_with("tcp")
}

/// Fails with a message that says what is missing, never skips.
pub fn msg_hints() -> Hints {
    Hints::new()
        .provider(provider())
        .ep_type(EpType::Msg)
        .caps(Caps::MSG)
        .cq_data_size(if is_iwarp() { 0 } else { 4 })
}

pub fn info_for(hints: &Hints) -> Info {
    let list = getinfo(hints).unwrap_or_else(|e| {
        panic!(
            "provider {:?} is not usable here: {e}. Install libfabric1 (tcp provider) or run \
             the verbs suite inside tests/rxe/vm.sh",
            provider()
        )
    });
    list.into_iter()
        .next()
        .expect("getinfo returned an empty list")
}

/// Whether the provider gives connected (FI_EP_MSG) endpoints; the RDM
/// utility providers and shm give only FI_EP_RDM.
pub fn msg_capable() -> bool {
    let p = provider();
    !(p.contains("ofi_rxm") || p.contains("ofi_rxd") || p == "shm")
}

/// The endpoint type the suite uses on this provider.
pub fn ep_type() -> EpType {
    if msg_capable() {
        EpType::Msg
    } else {
        EpType::Rdm
    }
}

/// The hints of the suite's provider and endpoint type, with the node
/// (shm names no network node).
pub fn provider_hints() -> Hints {
    let hints = if msg_capable() {
        msg_hints()
    } else {
        Hints::new()
            .provider(provider())
            .ep_type(EpType::Rdm)
            .caps(Caps::MSG | Caps::TAGGED)
    };
    if provider() == "shm" {
        hints
    } else {
        hints.node(node())
    }
}

/// The name of the running test (libtest names its thread after it).
pub fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("unknown test")
        .to_string()
}

/// Returns from the calling test when `info` gives connected (MSG)
/// endpoints, printing a typed skip line saying why (`$why`).
#[macro_export]
macro_rules! skip_if_msg {
    ($info:expr, $why:literal) => {
        if $info.ep_type() == libfabric::info::EpType::Msg {
            println!(
                "SKIP {}: provider {}: {}",
                $crate::common::test_name(),
                $crate::common::provider(),
                $why
            );
            return;
        }
    };
}

/// Returns early from a test that needs connected (FI_EP_MSG) endpoints
/// on a provider that has none, printing a typed skip line.
#[macro_export]
macro_rules! skip_unless_msg {
    () => {
        if !$crate::common::msg_capable() {
            println!(
                "SKIP {}: provider {}: no FI_EP_MSG endpoints (connection management)",
                $crate::common::test_name(),
                $crate::common::provider()
            );
            return;
        }
    };
}

/// A completion queue with an `FI_WAIT_FD` wait object, or `None` with a
/// typed skip printed when the provider has none (shm refuses it:
/// [`Error::UnsupportedWait`](libfabric::Error::UnsupportedWait)).
pub fn fd_cq<F: Format>(domain: &Domain) -> Option<CompletionQueue<F>> {
    match CompletionQueue::<F>::open(domain, &CqAttr::new().wait(WaitObj::Fd)) {
        Ok(cq) => Some(cq),
        Err(libfabric::Error::UnsupportedWait { .. }) if provider() == "shm" => {
            println!(
                "SKIP {}: provider {}: no FI_WAIT_FD completion queues",
                test_name(),
                provider()
            );
            None
        }
        Err(e) => panic!("a FI_WAIT_FD completion queue on {}: {e}", provider()),
    }
}

/// [`fd_cq`], whose wait fd can be polled: `None` with a typed skip on
/// providers that open FI_WAIT_FD queues but give no fd for them (rxd:
/// `FI_GETWAIT` answers -FI_ENOSYS).
pub fn pollable_cq<F: Format>(domain: &Domain) -> Option<CompletionQueue<F>> {
    use libfabric::wait::Waitable;
    let cq = fd_cq::<F>(domain)?;
    match cq.wait_fd() {
        Ok(_) => Some(cq),
        Err(e) if provider() == "udp;ofi_rxd" && e.errno() == Some(libfabric::Errno::NOSYS) => {
            println!(
                "SKIP {}: provider {}: no wait fd for its completion queues (FI_GETWAIT: -FI_ENOSYS)",
                test_name(),
                provider()
            );
            None
        }
        Err(e) => panic!("the wait fd of a completion queue on {}: {e}", provider()),
    }
}

pub fn node_info() -> Info {
    info_for(&provider_hints())
}

pub fn fabric() -> (Fabric, Info) {
    let info = node_info();
    (Fabric::open(&info).expect("fi_fabric"), info)
}

pub fn fabric_domain() -> (Fabric, Domain, Info) {
    let (fabric, info) = fabric();
    let domain = Domain::open(&fabric, &info).expect("fi_domain");
    (fabric, domain, info)
}

/// An endpoint of the suite's provider bound to `cq` for transmits and
/// receives, with an event queue (MSG) or an address vector (RDM) and
/// nothing else, not enabled yet (counters may still be bound).
pub fn endpoint_on<F: Format>(
    fabric: &Fabric,
    domain: &Domain,
    info: &Info,
    cq: &CompletionQueue<F>,
) -> Endpoint {
    let ep = Endpoint::open(domain, info).unwrap();
    if info.ep_type() == EpType::Msg {
        ep.bind_eq(&fd_eq(fabric)).unwrap();
    } else {
        ep.bind_av(&AddressVector::open(domain, AvType::Table, 4).unwrap())
            .unwrap();
    }
    ep.bind_cq(cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
    ep
}

pub fn fd_eq(fabric: &Fabric) -> EventQueue {
    EventQueue::open(
        fabric,
        &EqAttr::new().size(64).wait(WaitObj::Fd).write(true),
    )
    .unwrap()
}

/// An event copied out of the buffer.
#[derive(Debug)]
pub enum Ev {
    Notify {
        context: usize,
        data: u64,
    },
    ConnReq {
        request: ConnRequest,
        data: Vec<u8>,
    },
    Connected {
        data: Vec<u8>,
    },
    Shutdown,
    Error {
        err: libfabric::Errno,
        data: Vec<u8>,
    },
    Other(String),
}

pub fn own(read: EqRead<'_>, eq: &EventQueue) -> Option<Ev> {
    match read {
        EqRead::Empty | EqRead::TimedOut => None,
        EqRead::ErrorPending => {
            let mut buf = ErrDataBuf::new();
            let e: EqError<'_> = eq.read_err(&mut buf).unwrap().expect("error entry");
            Some(Ev::Error {
                err: e.err,
                data: e.err_data().to_vec(),
            })
        }
        EqRead::Error(e) => Some(Ev::Error {
            err: e.err,
            data: e.err_data().to_vec(),
        }),
        EqRead::Event(Event::Notify(e)) => Some(Ev::Notify {
            context: e.context,
            data: e.data,
        }),
        EqRead::Event(Event::ConnReq(c)) => Some(Ev::ConnReq {
            request: c.request,
            data: c.data.to_vec(),
        }),
        EqRead::Event(Event::Connected(c)) => Some(Ev::Connected {
            data: c.data.to_vec(),
        }),
        EqRead::Event(Event::Shutdown(_)) => Some(Ev::Shutdown),
        EqRead::Event(other) => Some(Ev::Other(format!("{other:?}"))),
    }
}

/// Reads `eq` until an event arrives, also reading `others` (the tcp
/// provider progresses connections only while its queues are read).
pub fn next_event(eq: &EventQueue, others: &[&EventQueue], timeout: Duration) -> Ev {
    let deadline = Instant::now() + timeout;
    let mut buf = EventBuf::new();
    loop {
        if let Some(ev) = own(eq.read(&mut buf).unwrap(), eq) {
            return ev;
        }
        for o in others {
            // Progress only; the tests that read `o` look at it themselves.
            let _ = o.peek(&mut buf);
        }
        assert!(Instant::now() < deadline, "no event within {timeout:?}");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// A connected pair of MSG endpoints, each with an EQ and one CQ of format F.
///
/// The server's domain is opened from the connection request's `fi_info`, as
/// providers bound to a device (verbs) require; each side has its own
/// registered pool.
pub struct Pair<F: Format> {
    pub fabric: Fabric,
    pub client_domain: Domain,
    pub server_domain: Domain,
    pub client_pool: BufferPool,
    pub server_pool: BufferPool,
    pub pep: PassiveEndpoint,
    /// The listener's queue, where connection requests arrive.
    pub listener_eq: EventQueue,
    /// The server endpoint's queue.
    pub server_eq: EventQueue,
    pub client_eq: EventQueue,
    pub server: Endpoint,
    pub client: Endpoint,
    pub server_cq: CompletionQueue<F>,
    pub client_cq: CompletionQueue<F>,
    pub connected_data: Vec<u8>,
}

impl Pair<Msg> {
    /// Posts a receive of a buffer of `server_pool` on the server and shuts
    /// the connection down (on verbs, both sides: the local side's
    /// disconnect flushes too), then reads the server's queue until the
    /// receive comes back cancelled: its error entry, in `entries`.
    pub fn cancelled_receive(&self, entries: &mut [MsgEntry; 1]) -> Box<CqError<'static>> {
        self.server.recv(self.server_pool.take().unwrap()).unwrap();
        self.client.shutdown().unwrap();
        if !is_tcp() {
            let ev = next_event(&self.server_eq, &[&self.client_eq], Duration::from_secs(10));
            assert!(matches!(ev, Ev::Shutdown), "{ev:?}");
            self.server.shutdown().unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let _ = self.client_eq.peek(&mut EventBuf::new());
            let _ = self.server_eq.peek(&mut EventBuf::new());
            match self.server_cq.read(&mut entries[..]).unwrap() {
                CqRead::Error(err) => return err,
                CqRead::Completions(c) => panic!("unexpected completion {:?}", c[0]),
                _ => {}
            }
            assert!(Instant::now() < deadline, "the receive was never cancelled");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The `fi_info` a listener on the suite's node binds with (any port).
pub fn listen_info() -> Info {
    info_for(&msg_hints().node(node()).service(0).source(true))
}

pub fn listener(fabric: &Fabric) -> (PassiveEndpoint, EventQueue, Info) {
    let info = listen_info();
    let pep = PassiveEndpoint::open(fabric, &info).expect("fi_passive_ep");
    let eq = fd_eq(fabric);
    pep.bind_eq(&eq).unwrap();
    pep.listen().expect("fi_listen");
    (pep, eq, info)
}

pub fn client_info(pep: &PassiveEndpoint) -> Info {
    let addr = pep.local_addr().expect("listener address");
    info_for(
        &msg_hints()
            .node(addr.ip().to_string())
            .service(addr.port().to_string()),
    )
}

/// An enabled active endpoint on `domain` for `pep`, with `eq` and a fresh
/// CQ bound; not yet connected.
pub fn enabled_client(domain: &Domain, eq: &EventQueue, pep: &PassiveEndpoint) -> Endpoint {
    let ep = Endpoint::open(domain, &client_info(pep)).unwrap();
    ep.bind_eq(eq).unwrap();
    let cq = CompletionQueue::<libfabric::cq::Msg>::open(domain, &CqAttr::new()).unwrap();
    ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
    ep.enable().unwrap();
    ep
}

/// [`enabled_client`], connecting with `data`.
pub fn connecting(
    domain: &Domain,
    eq: &EventQueue,
    pep: &PassiveEndpoint,
    data: &[u8],
) -> Endpoint {
    let ep = enabled_client(domain, eq, pep);
    ep.connect(data).unwrap();
    ep
}

pub fn connect_pair<F: Format>(cq_attr: CqAttr) -> Pair<F> {
    connect_pair_with::<F>(cq_attr, b"client hello", b"server hello")
}

pub fn connect_pair_with<F: Format>(
    cq_attr: CqAttr,
    req_data: &[u8],
    accept_data: &[u8],
) -> Pair<F> {
    connect_pair_config(ConnConfig::new().cq(cq_attr), req_data, accept_data).0
}

/// [`connect_pair_with`] with both ends built from `config` (its timeout
/// is set to 10 s); also returns the server's and the client's counter
/// when `config` asks for one.
pub fn connect_pair_config<F: Format>(
    config: ConnConfig,
    req_data: &[u8],
    accept_data: &[u8],
) -> (
    Pair<F>,
    Option<libfabric::Counter>,
    Option<libfabric::Counter>,
) {
    let (fabric, _) = fabric();
    let listener = Listener::on(&fabric, &listen_info()).expect("listen");
    let cinfo = client_info(listener.passive_endpoint());
    let config = config.timeout(Some(Duration::from_secs(10)));
    let (server, client) = std::thread::scope(|s| {
        let server = s.spawn(|| {
            let incoming = listener
                .incoming_timeout(Some(Duration::from_secs(10)))
                .expect("a connection request");
            assert_eq!(incoming.data(), req_data, "connection request data");
            incoming
                .prepare::<F>(&config)
                .and_then(|p| p.establish(accept_data))
                .expect("accept")
        });
        let client = Connection::<F>::prepare(&fabric, &cinfo, &config)
            .and_then(|p| p.establish(req_data))
            .expect("connect");
        (server.join().expect("the accepting thread"), client)
    });
    let (s, c) = (server.into_parts(), client.into_parts());
    let counters = (s.counter, c.counter);
    let pair = Pair {
        client_pool: BufferPool::new(&c.domain, 8, 4096).unwrap(),
        server_pool: BufferPool::new(&s.domain, 8, 4096).unwrap(),
        fabric,
        client_domain: c.domain,
        server_domain: s.domain,
        pep: listener.passive_endpoint().clone(),
        listener_eq: listener.eq().clone(),
        server_eq: s.eq,
        client_eq: c.eq,
        server: s.endpoint,
        client: c.endpoint,
        server_cq: s.cq,
        client_cq: c.cq,
        connected_data: c.peer_data,
    };
    (pair, counters.0, counters.1)
}

/// A queue's wait fd as a `BorrowedFd`, to poll it in tests.
pub fn borrowed(fd: libfabric::wait::WaitFd<'_>) -> std::os::fd::BorrowedFd<'_> {
    use std::os::fd::AsRawFd;
    // SAFETY: the fd stays open while the queue it was borrowed from lives,
    // which the lifetime ties it to; the tests only poll it for readiness.
    unsafe { std::os::fd::BorrowedFd::borrow_raw(fd.as_raw_fd()) }
}

/// The RDM provider the suite's provider gives multi-receive with: the
/// provider itself (sockets, and the connectionless ones), or rxm over a
/// provider of connected endpoints.
pub fn multi_recv_provider() -> String {
    let p = provider();
    if p == "sockets" || !msg_capable() {
        p
    } else if is_tcp() {
        "tcp;ofi_rxm".into()
    } else {
        format!("{p};ofi_rxm")
    }
}

/// `Endpoint::shutdown`, or `false` on sockets, where it is refused (its
/// `fi_shutdown` closes the connection's socket twice): checks that it is
/// refused with `Error::Unsupported` and prints the SKIP line of the
/// calling test.
pub fn shut_down<T: libfabric::ThreadModel>(ep: &Endpoint<T>) -> bool {
    if provider() == "sockets" {
        let e = ep.shutdown().unwrap_err();
        assert!(matches!(e, libfabric::Error::Unsupported { .. }), "{e}");
        println!(
            "SKIP {}: provider sockets: fi_shutdown closes the connection's socket twice (refused: {e})",
            test_name()
        );
        return false;
    }
    ep.shutdown().unwrap();
    true
}
