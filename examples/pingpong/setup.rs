//! Opening and connecting endpoints through the crate's connection layer.
//! MSG: a `Listener`, the connection request, `fi_accept`, `FI_CONNECTED`
//! on both sides. RDM: an `Rdm` endpoint whose address vector holds the
//! peer's address.

use super::cli::{EpKind, Mode, Op, Options};
use super::control::Msg;
use super::report::EventLog;
use super::Res;
use libfabric::conn::{ConnConfig, Pending, Rdm};
use libfabric::cq::{Addr, Context, CqAttr, Format};
use libfabric::ep::socket_addr;
use libfabric::eq::{EqRead, Event, EventBuf};
use libfabric::info::{Caps, EpType, Info, InfoEntry};
use libfabric::wait::WaitObj;
use libfabric::{
    getinfo, AddressVector, Buffer, BufferPool, CompletionQueue, Connection, Domain, Endpoint,
    Errno, Error, EventQueue, Fabric, Hints,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connection data of the connection request and of the accept.
pub const CONNECT_DATA: &[u8] = b"pingpong: hello";
pub const ACCEPT_DATA: &[u8] = b"pingpong: welcome";
/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Event-queue waits return this often to read the queue again: the tcp
/// provider makes progress only while its queues are read.
const EQ_SLICE: Duration = Duration::from_millis(10);

/// A side's endpoint, ready to move data, and everything it uses.
pub struct Link<F: Format = Context> {
    pub side: &'static str,
    pub ep: Endpoint,
    pub tx_cq: CompletionQueue<F>,
    pub rx_cq: CompletionQueue<F>,
    /// MSG: the endpoint's event queue.
    pub eq: Option<EventQueue>,
    /// RDM: the peer's address.
    pub av: Option<AddressVector>,
    pub peer: Addr,
    /// Where the peer is, for messages.
    pub peer_name: String,
    /// Messages shorter than this go with `fi_inject`, as in fi_pingpong.
    pub inject_size: usize,
    /// Two slots of the largest size: one to send from, one posted to
    /// receive into (see [`Link::open_buffers`]).
    pub pool: Option<BufferPool>,
    pub tx: Option<Buffer>,
    pub domain: Domain,
    pub log: Arc<EventLog>,
    /// A client's connection until [`connect`] makes it.
    pending: Option<Pending<F>>,
    /// The connection the endpoint belongs to, once made.
    _conn: Option<Box<Connection<F>>>,
    /// The RDM endpoint it is.
    _rdm: Option<Box<Rdm<F>>>,
}

impl<F: Format> Link<F> {
    /// Allocates the two message buffers and posts the receive, before the
    /// peer can send (fi_pingpong posts its first receive before it
    /// connects or accepts, too).
    fn open_buffers(&mut self, max_size: usize) -> Res<()> {
        let pool = BufferPool::new(&self.domain, 2, max_size.max(1))?;
        let rx = pool.take().ok_or("no receive buffer")?;
        self.tx = Some(pool.take().ok_or("no transmit buffer")?);
        self.ep.recv(rx).map_err(libfabric::Error::from)?;
        self.pool = Some(pool);
        Ok(())
    }
}

/// A server waiting for its client.
pub enum Listener<F: Format> {
    Msg {
        listener: libfabric::Listener,
        log: Arc<EventLog>,
    },
    /// An RDM server's endpoint exists before any peer does.
    Rdm(Box<Link<F>>),
}

/// Where a server's fabric endpoint is, for the client.
pub struct Address {
    /// MSG: the passive endpoint's port (on the host of the control
    /// connection).
    pub port: u16,
    /// RDM: the endpoint's address (`fi_getname`).
    pub name: Vec<u8>,
}

/// The RMA capabilities both sides ask for: only the roles the op needs
/// (fi_getinfo(3): `FI_RMA` with some of READ/WRITE/REMOTE_READ/REMOTE_WRITE
/// means only those). The two sides ask for the same (the sockets provider
/// refuses a connection whose caps differ from the listener's); what each
/// side's peer may reach is decided by the access of its region.
fn rma_caps(op: Op) -> Caps {
    match op {
        Op::Msg => Caps::empty(),
        Op::Write | Op::WriteData => Caps::RMA | Caps::WRITE | Caps::REMOTE_WRITE,
        Op::Read => Caps::RMA | Caps::READ | Caps::REMOTE_READ,
    }
}

fn hints(opts: &Options) -> Res<Hints> {
    let ep = match opts.ep {
        EpKind::Msg => EpType::Msg,
        EpKind::Rdm => EpType::Rdm,
    };
    let hints = Hints::new()
        .provider(opts.provider_name())
        .ep_type(ep)
        .caps(Caps::MSG | rma_caps(opts.op));
    // shm checks an RMA's key, access and bounds at the target only when an
    // RMA ordering is asked for (else the crate refuses its RMA calls).
    Ok(if opts.op.is_rma() && opts.provider_name() == "shm" {
        hints.msg_order(libfabric::sys::FI_ORDER_RAW | libfabric::sys::FI_ORDER_WAW)
    } else {
        hints
    })
}

/// The first fi_info for `hints`; when an RMA run finds none, says whether
/// the provider lacks RMA.
fn first(hints: &Hints, opts: &Options) -> Res<Info> {
    let failed = match getinfo(hints) {
        Ok(list) => match list.into_iter().next() {
            Some(info) => return Ok(info),
            None => None,
        },
        Err(e) => Some(e),
    };
    if opts.op.is_rma() {
        let plain = Hints::new()
            .provider(opts.provider_name())
            .ep_type(match opts.ep {
                EpKind::Msg => EpType::Msg,
                EpKind::Rdm => EpType::Rdm,
            })
            .caps(Caps::MSG);
        if getinfo(&plain).is_ok_and(|list| list.into_iter().next().is_some()) {
            return Err(format!(
                "provider {} offers no RMA (FI_RMA with the roles -o {} needs) for these \
                 endpoints",
                opts.provider_name(),
                opts.op
            )
            .into());
        }
    }
    Err(match failed {
        Some(e) => e.into(),
        None => "fi_getinfo returned an empty list".into(),
    })
}

/// fi_pingpong's queues, a transmit and a receive one: `FI_WAIT_NONE` for
/// busy polling; the blocking modes need a wait fd. The waits for a
/// connection end after [`CONNECT_TIMEOUT`].
fn config(info: &InfoEntry, mode: Mode) -> ConnConfig {
    let wait = if mode == Mode::Spin {
        WaitObj::None
    } else {
        WaitObj::Fd
    };
    ConnConfig::new()
        .cq(CqAttr::new().size(info.tx_size()).wait(wait))
        .rx_cq(CqAttr::new().size(info.rx_size()).wait(wait))
        .timeout(Some(CONNECT_TIMEOUT))
}

/// A link over a prepared connection's endpoint and queues.
fn pending_link<F: Format>(
    side: &'static str,
    pending: Pending<F>,
    peer_name: String,
    log: &Arc<EventLog>,
) -> Link<F> {
    Link {
        side,
        inject_size: pending.endpoint().info().inject_size(),
        ep: pending.endpoint().clone(),
        tx_cq: pending.cq().clone(),
        rx_cq: pending.rx_cq().clone(),
        eq: Some(pending.eq().clone()),
        av: None,
        peer: Addr::UNSPEC,
        peer_name,
        pool: None,
        tx: None,
        domain: pending.domain().clone(),
        log: log.clone(),
        pending: Some(pending),
        _conn: None,
        _rdm: None,
    }
}

/// A link over an RDM endpoint.
fn rdm_link<F: Format>(
    side: &'static str,
    rdm: Rdm<F>,
    peer_name: String,
    log: &Arc<EventLog>,
) -> Link<F> {
    Link {
        side,
        inject_size: rdm.endpoint().info().inject_size(),
        ep: rdm.endpoint().clone(),
        tx_cq: rdm.cq().clone(),
        rx_cq: rdm.rx_cq().clone(),
        eq: None,
        av: Some(rdm.av().clone()),
        peer: Addr::UNSPEC,
        peer_name,
        pool: None,
        tx: None,
        domain: rdm.domain().clone(),
        log: log.clone(),
        pending: None,
        _conn: None,
        _rdm: Some(Box::new(rdm)),
    }
}

fn data_text(data: &[u8]) -> String {
    if data.is_empty() {
        String::new()
    } else {
        format!(
            ": {} bytes of connection data {:?}",
            data.len(),
            String::from_utf8_lossy(data)
        )
    }
}

/// Makes a prepared link's connection (`fi_connect` or `fi_accept` with
/// `data`, then `FI_CONNECTED`), logging what it sees.
fn establish<F: Format>(link: &mut Link<F>, data: &[u8]) -> Res<()> {
    let Some(pending) = link.pending.take() else {
        return Ok(());
    };
    let conn = match pending.establish(data) {
        Ok(conn) => conn,
        Err(e) => {
            let what = match &e {
                Error::Call { errno, .. } => {
                    link.log.record(link.side, format!("error entry: {errno}"));
                    match *errno {
                        Errno::CONNREFUSED => format!("{} refused the connection", link.peer_name),
                        _ => format!("connecting with {}: {e}", link.peer_name),
                    }
                }
                Error::TimedOut { .. } => {
                    format!(
                        "no FI_CONNECTED with {} within {CONNECT_TIMEOUT:?}",
                        link.peer_name
                    )
                }
                _ => format!("connecting with {}: {e}", link.peer_name),
            };
            return Err(what.into());
        }
    };
    link.log.record(
        link.side,
        format!("FI_CONNECTED{}", data_text(conn.peer_data())),
    );
    link._conn = Some(Box::new(conn));
    Ok(())
}

/// A connection-management event, copied out of the event buffer.
pub enum Cm {
    Connected,
    Shutdown,
    /// An error entry.
    Failed,
}

/// Reads `eq` until a connection event arrives or `timeout` passes,
/// logging what it sees. `drive` runs between reads (the tcp provider makes
/// progress only while the queues are read).
pub fn next_cm(
    eq: &EventQueue,
    side: &'static str,
    log: &EventLog,
    timeout: Option<Duration>,
    drive: &dyn Fn(),
) -> Res<Option<Cm>> {
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut buf = EventBuf::new();
    loop {
        match eq.sread(&mut buf, Some(EQ_SLICE))? {
            EqRead::Event(Event::Connected(c)) => {
                log.record(side, format!("FI_CONNECTED{}", data_text(c.data)));
                return Ok(Some(Cm::Connected));
            }
            EqRead::Event(Event::Shutdown(_)) => {
                log.record(side, "FI_SHUTDOWN".into());
                return Ok(Some(Cm::Shutdown));
            }
            EqRead::Event(other) => log.record(side, format!("{other:?}")),
            EqRead::Error(err) => {
                let text = eq.strerror(&err);
                log.record(side, format!("error entry: {} ({text})", err.err));
                return Ok(Some(Cm::Failed));
            }
            EqRead::Empty | EqRead::TimedOut | EqRead::ErrorPending => {}
        }
        drive();
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
    }
}

/// Opens a server's fabric endpoint on `node` (MSG: all interfaces if
/// `None`; RDM: the provider's default address) and a free port.
pub fn listen<F: Format>(
    opts: &Options,
    node: Option<&str>,
    log: &Arc<EventLog>,
) -> Res<(Listener<F>, Address)> {
    let mut hints = hints(opts)?.service(0).source(true);
    if let Some(node) = node {
        hints = hints.node(node);
    }
    let info = first(&hints, opts)?;
    let fabric = Fabric::open(&info)?;
    match opts.ep {
        EpKind::Msg => {
            let listener = libfabric::Listener::on(&fabric, &info)?;
            let port = listener.local_addr()?.port();
            let listener = Listener::Msg {
                listener,
                log: log.clone(),
            };
            Ok((
                listener,
                Address {
                    port,
                    name: Vec::new(),
                },
            ))
        }
        EpKind::Rdm => {
            let rdm = Rdm::open_on(&fabric, &info, 4, &config(&info, opts.mode))?;
            let link = rdm_link("server", rdm, "the client".into(), log);
            let name = link.ep.name()?;
            Ok((Listener::Rdm(Box::new(link)), Address { port: 0, name }))
        }
    }
}

/// Takes the client whose `Hello` came over the control connection: for
/// MSG endpoints waits for its connection request and accepts it; for RDM
/// puts its address in the address vector.
pub fn accept<F: Format>(listener: Listener<F>, opts: &Options, hello: &Msg) -> Res<Link<F>> {
    let max_size =
        usize::try_from(hello.a).map_err(|_| "the client asked for an impossible size")?;
    let (listener, log) = match listener {
        Listener::Rdm(link) => {
            let mut link = *link;
            link.open_buffers(max_size)?;
            let av = link
                .av
                .as_ref()
                .ok_or("an RDM endpoint without an address vector")?;
            link.peer = av.insert(&hello.bytes)?;
            link.peer_name =
                socket_addr(&hello.bytes).map_or("the client".into(), |a| a.to_string());
            return Ok(link);
        }
        Listener::Msg { listener, log } => (listener, log),
    };
    let incoming = match listener.incoming_timeout(Some(CONNECT_TIMEOUT)) {
        Ok(incoming) => incoming,
        Err(Error::TimedOut { .. }) => {
            return Err(format!("no connection request within {CONNECT_TIMEOUT:?}").into())
        }
        Err(e) => return Err(format!("a connection request failed: {e}").into()),
    };
    let from = socket_addr(incoming.request().info().dest_addr());
    log.record(
        "server",
        format!(
            "FI_CONNREQ{}{}",
            from.map(|a| format!(" from {a}")).unwrap_or_default(),
            data_text(incoming.data())
        ),
    );
    let peer_name = from.map_or("the client".into(), |a| a.to_string());
    let config = config(incoming.request().info(), opts.mode);
    let pending = incoming.prepare::<F>(&config)?;
    let mut link = pending_link("server", pending, peer_name, &log);
    link.open_buffers(max_size)?;
    establish(&mut link, ACCEPT_DATA)?;
    Ok(link)
}

/// Opens the client's endpoint for the server at `host` whose fabric
/// endpoint is `address`, with its buffers; `connect` then connects it.
pub fn open<F: Format>(
    opts: &Options,
    host: &str,
    address: &Msg,
    log: &Arc<EventLog>,
) -> Res<Link<F>> {
    let mut hints = hints(opts)?.node(host);
    if opts.ep == EpKind::Msg {
        hints = hints.service(address.a);
    }
    let info = first(&hints, opts)?;
    let fabric = Fabric::open(&info)?;
    let config = config(&info, opts.mode);
    let mut link = match opts.ep {
        EpKind::Msg => {
            let pending = Connection::<F>::prepare(&fabric, &info, &config)?;
            pending_link("client", pending, format!("{host}:{}", address.a), log)
        }
        EpKind::Rdm => {
            let addr = socket_addr(&address.bytes).map_or(host.to_string(), |a| a.to_string());
            rdm_link(
                "client",
                Rdm::open_on(&fabric, &info, 4, &config)?,
                addr,
                log,
            )
        }
    };
    link.open_buffers(opts.max_size())?;
    if let Some(av) = &link.av {
        link.peer = av.insert(&address.bytes)?;
    }
    Ok(link)
}

/// MSG endpoints: `fi_connect` and the wait for `FI_CONNECTED`. RDM
/// endpoints have nothing to do.
pub fn connect<F: Format>(link: &mut Link<F>) -> Res<()> {
    establish(link, CONNECT_DATA)
}

/// MSG endpoints: `fi_shutdown` on the client; both sides wait for their
/// `FI_SHUTDOWN` (the server reads its CQs meanwhile, which is what makes
/// the tcp provider deliver it). Not on sockets, where the crate refuses
/// `fi_shutdown` (see `Endpoint::shutdown`): the close ends the connection.
pub fn shutdown<F: Format>(link: &Link<F>, initiate: bool) -> Res<()> {
    let Some(eq) = &link.eq else {
        return Ok(());
    };
    if link.ep.info().provider() == "sockets" {
        return Ok(());
    }
    if initiate {
        link.ep.shutdown()?;
    }
    let drive = || {
        let _ = link.tx_cq.read(&mut [Default::default()]);
        let _ = link.rx_cq.read(&mut [Default::default()]);
    };
    if !matches!(
        next_cm(
            eq,
            link.side,
            &link.log,
            Some(Duration::from_secs(5)),
            &drive
        )?,
        Some(Cm::Shutdown)
    ) {
        link.log
            .record(link.side, "no FI_SHUTDOWN within 5 s".into());
    }
    Ok(())
}
