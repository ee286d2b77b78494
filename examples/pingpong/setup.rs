//! Opening and connecting endpoints. MSG: a passive endpoint, `FI_CONNREQ`,
//! `fi_accept`, `FI_CONNECTED` on both sides, all read from event queues.
//! RDM: an address vector holding the peer's address.

use super::cli::{EpKind, Mode, Options};
use super::control::Msg;
use super::report::EventLog;
use super::Res;
use libfabric::av::AvType;
use libfabric::cq::{Addr, Context, CqAttr};
use libfabric::ep::{socket_addr, CqBind};
use libfabric::eq::{EqAttr, EqRead, Event, EventBuf};
use libfabric::info::{Caps, EpType, Info, InfoEntry};
use libfabric::wait::WaitObj;
use libfabric::{
    getinfo, AddressVector, Buffer, BufferPool, CompletionQueue, ConnRequest, Domain, Endpoint,
    Errno, EventQueue, Fabric, Hints, PassiveEndpoint,
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
pub struct Link {
    pub side: &'static str,
    pub ep: Endpoint,
    pub tx_cq: CompletionQueue<Context>,
    pub rx_cq: CompletionQueue<Context>,
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
    pub fabric: Fabric,
    pub log: Arc<EventLog>,
    _pep: Option<PassiveEndpoint>,
}

impl Link {
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
pub enum Listener {
    Msg {
        fabric: Fabric,
        pep: PassiveEndpoint,
        eq: EventQueue,
        log: Arc<EventLog>,
    },
    /// An RDM server's endpoint exists before any peer does.
    Rdm(Box<Link>),
}

/// Where a server's fabric endpoint is, for the client.
pub struct Address {
    /// MSG: the passive endpoint's port (on the host of the control
    /// connection).
    pub port: u16,
    /// RDM: the endpoint's address (`fi_getname`).
    pub name: Vec<u8>,
}

fn hints(opts: &Options) -> Res<Hints> {
    let ep = match opts.ep {
        EpKind::Msg => EpType::Msg,
        EpKind::Rdm => EpType::Rdm,
    };
    Ok(Hints::new()
        .provider(&opts.provider_name())
        .ep_type(ep)
        .caps(Caps::MSG))
}

fn first(hints: &Hints) -> Res<Info> {
    getinfo(hints)?
        .into_iter()
        .next()
        .ok_or_else(|| "fi_getinfo returned an empty list".into())
}

fn open_cqs(
    domain: &Domain,
    info: &InfoEntry,
    mode: Mode,
) -> Res<(CompletionQueue<Context>, CompletionQueue<Context>)> {
    // fi_pingpong's queues: FI_WAIT_NONE for busy polling; the blocking
    // modes need a wait fd.
    let wait = if mode == Mode::Spin {
        WaitObj::None
    } else {
        WaitObj::Fd
    };
    let tx = CompletionQueue::open(domain, &CqAttr::new().size(info.tx_size()).wait(wait))?;
    let rx = CompletionQueue::open(domain, &CqAttr::new().size(info.rx_size()).wait(wait))?;
    Ok((tx, rx))
}

/// What an endpoint is opened from.
enum Source<'a> {
    Info(&'a InfoEntry),
    /// A connection request, which the endpoint accepts.
    Request(ConnRequest),
}

struct Parts<'a> {
    side: &'static str,
    fabric: &'a Fabric,
    eq: Option<EventQueue>,
    pep: Option<PassiveEndpoint>,
    peer_name: String,
    log: &'a Arc<EventLog>,
}

/// Opens the domain, CQs, (AV,) and endpoint, binds and enables it.
fn link(p: Parts<'_>, source: Source<'_>, mode: Mode) -> Res<Link> {
    let info = match &source {
        Source::Info(info) => *info,
        Source::Request(request) => request.info(),
    };
    let domain = Domain::open(p.fabric, info)?;
    let (tx_cq, rx_cq) = open_cqs(&domain, info, mode)?;
    let rdm = info.ep_type() == EpType::Rdm;
    let ep = match source {
        Source::Info(info) => Endpoint::open(&domain, info)?,
        Source::Request(request) => {
            Endpoint::from_request(&domain, request).map_err(libfabric::Error::from)?
        }
    };
    let av = if rdm {
        let av = AddressVector::open(&domain, AvType::Table, 4)?;
        ep.bind_av(&av)?;
        Some(av)
    } else {
        None
    };
    if let Some(eq) = &p.eq {
        ep.bind_eq(eq)?;
    }
    ep.bind_cq(&tx_cq, CqBind::TRANSMIT)?;
    ep.bind_cq(&rx_cq, CqBind::RECV)?;
    ep.enable()?;
    Ok(Link {
        side: p.side,
        inject_size: ep.info().inject_size(),
        ep,
        tx_cq,
        rx_cq,
        eq: p.eq,
        av,
        peer: Addr::UNSPEC,
        peer_name: p.peer_name,
        pool: None,
        tx: None,
        domain,
        fabric: p.fabric.clone(),
        log: p.log.clone(),
        _pep: p.pep,
    })
}

fn fd_eq(fabric: &Fabric) -> Res<EventQueue> {
    Ok(EventQueue::open(fabric, &EqAttr::new().wait(WaitObj::Fd))?)
}

/// A connection-management event, copied out of the event buffer.
pub enum Cm {
    ConnReq(ConnRequest),
    Connected,
    Shutdown,
    /// An error entry: the error and the provider's text.
    Failed(Errno, String),
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
    let data_text = |data: &[u8]| {
        if data.is_empty() {
            String::new()
        } else {
            format!(
                ": {} bytes of connection data {:?}",
                data.len(),
                String::from_utf8_lossy(data)
            )
        }
    };
    loop {
        match eq.sread(&mut buf, Some(EQ_SLICE))? {
            EqRead::Event(Event::ConnReq(req)) => {
                let request = req.request;
                let from = socket_addr(request.info().dest_addr())
                    .map(|a| format!(" from {a}"))
                    .unwrap_or_default();
                log.record(side, format!("FI_CONNREQ{from}{}", data_text(req.data)));
                return Ok(Some(Cm::ConnReq(request)));
            }
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
                log.record(side, format!("error entry: {}", err.err));
                return Ok(Some(Cm::Failed(err.err, text)));
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
pub fn listen(opts: &Options, node: Option<&str>, log: &Arc<EventLog>) -> Res<(Listener, Address)> {
    let mut hints = hints(opts)?.service("0").source(true);
    if let Some(node) = node {
        hints = hints.node(node);
    }
    let info = first(&hints)?;
    let fabric = Fabric::open(&info)?;
    match opts.ep {
        EpKind::Msg => {
            let eq = fd_eq(&fabric)?;
            let pep = PassiveEndpoint::open(&fabric, &info)?;
            pep.bind_eq(&eq)?;
            pep.listen()?;
            let port = pep.local_addr()?.port();
            let listener = Listener::Msg {
                fabric,
                pep,
                eq,
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
            let parts = Parts {
                side: "server",
                fabric: &fabric,
                eq: None,
                pep: None,
                peer_name: "the client".into(),
                log,
            };
            let link = link(parts, Source::Info(&info), opts.mode)?;
            let name = link.ep.name()?;
            Ok((Listener::Rdm(Box::new(link)), Address { port: 0, name }))
        }
    }
}

/// Takes the client whose `Hello` came over the control connection: for
/// MSG endpoints waits for its connection request and accepts it; for RDM
/// puts its address in the address vector.
pub fn accept(listener: Listener, opts: &Options, hello: &Msg) -> Res<Link> {
    let max_size =
        usize::try_from(hello.a).map_err(|_| "the client asked for an impossible size")?;
    let (fabric, pep, eq, log) = match listener {
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
        Listener::Msg {
            fabric,
            pep,
            eq,
            log,
        } => (fabric, pep, eq, log),
    };
    let request = loop {
        match next_cm(&eq, "server", &log, Some(CONNECT_TIMEOUT), &|| {})? {
            Some(Cm::ConnReq(request)) => break request,
            Some(Cm::Failed(err, text)) => {
                return Err(format!("a connection request failed: {err} ({text})").into())
            }
            Some(_) => {}
            None => return Err(format!("no connection request within {CONNECT_TIMEOUT:?}").into()),
        }
    };
    let peer_name =
        socket_addr(request.info().dest_addr()).map_or("the client".into(), |a| a.to_string());
    let parts = Parts {
        side: "server",
        fabric: &fabric,
        eq: Some(eq.clone()),
        pep: Some(pep),
        peer_name,
        log: &log,
    };
    let mut link = link(parts, Source::Request(request), opts.mode)?;
    link.open_buffers(max_size)?;
    link.ep.accept(ACCEPT_DATA)?;
    match next_cm(&eq, "server", &log, Some(CONNECT_TIMEOUT), &|| {})? {
        Some(Cm::Connected) => Ok(link),
        Some(Cm::Failed(err, text)) => {
            Err(format!("accepting {}: {err} ({text})", link.peer_name).into())
        }
        Some(_) => Err("unexpected event while accepting".into()),
        None => Err(format!("no FI_CONNECTED within {CONNECT_TIMEOUT:?} after fi_accept").into()),
    }
}

/// Opens the client's endpoint for the server at `host` whose fabric
/// endpoint is `address`, with its buffers; `connect` then connects it.
pub fn open(opts: &Options, host: &str, address: &Msg, log: &Arc<EventLog>) -> Res<Link> {
    let mut hints = hints(opts)?.node(host);
    if opts.ep == EpKind::Msg {
        hints = hints.service(&address.a.to_string());
    }
    let info = first(&hints)?;
    let fabric = Fabric::open(&info)?;
    let (eq, peer_name) = match opts.ep {
        EpKind::Msg => (Some(fd_eq(&fabric)?), format!("{host}:{}", address.a)),
        EpKind::Rdm => {
            let addr = socket_addr(&address.bytes).map_or(host.to_string(), |a| a.to_string());
            (None, addr)
        }
    };
    let parts = Parts {
        side: "client",
        fabric: &fabric,
        eq,
        pep: None,
        peer_name,
        log,
    };
    let mut link = link(parts, Source::Info(&info), opts.mode)?;
    link.open_buffers(opts.max_size())?;
    if let Some(av) = &link.av {
        link.peer = av.insert(&address.bytes)?;
    }
    Ok(link)
}

/// MSG endpoints: `fi_connect` and the wait for `FI_CONNECTED`. RDM
/// endpoints have nothing to do.
pub fn connect(link: &Link) -> Res<()> {
    let Some(eq) = &link.eq else {
        return Ok(());
    };
    link.ep.connect(CONNECT_DATA)?;
    match next_cm(eq, "client", &link.log, Some(CONNECT_TIMEOUT), &|| {})? {
        Some(Cm::Connected) => Ok(()),
        Some(Cm::Failed(Errno::CONNREFUSED, _)) => {
            Err(format!("{} refused the connection", link.peer_name).into())
        }
        Some(Cm::Failed(err, text)) => {
            Err(format!("connecting to {}: {err} ({text})", link.peer_name).into())
        }
        Some(_) => Err(format!("unexpected event while connecting to {}", link.peer_name).into()),
        None => Err(format!(
            "no answer from {} within {CONNECT_TIMEOUT:?}",
            link.peer_name
        )
        .into()),
    }
}

/// MSG endpoints: `fi_shutdown` on the client; both sides wait for their
/// `FI_SHUTDOWN` (the server reads its CQs meanwhile, which is what makes
/// the tcp provider deliver it).
pub fn shutdown(link: &Link, initiate: bool) -> Res<()> {
    let Some(eq) = &link.eq else {
        return Ok(());
    };
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
