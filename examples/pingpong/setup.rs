//! Opening and connecting endpoints. MSG: a passive endpoint, `FI_CONNREQ`,
//! `fi_accept`, `FI_CONNECTED` on both sides, all read from event queues.
//! RDM: an address vector and the server's address from fi_getinfo.

use super::cli::{EpKind, Mode, Options};
use super::report::EventLog;
use super::Res;
use libfabric::av::AvType;
use libfabric::cq::{Addr, Context, CqAttr};
use libfabric::ep::{socket_addr, CqBind};
use libfabric::eq::{EqAttr, ErrDataBuf, Event, EventBuf, Read};
use libfabric::info::{Caps, EpType, Info, InfoEntry};
use libfabric::wait::WaitObj;
use libfabric::ConnRequest;
use libfabric::{
    getinfo, AddressVector, BufferPool, CompletionQueue, Domain, Endpoint, Errno, EventQueue,
    Fabric, Hints, PassiveEndpoint,
};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connection data of the connection request and of the accept.
pub const CONNECT_DATA: &[u8] = b"pingpong: hello";
pub const ACCEPT_DATA: &[u8] = b"pingpong: welcome";
/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of a control message (and the size of the server's first receive).
pub const CTRL_LEN: usize = 256;
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
    /// RDM: the peers.
    pub av: Option<AddressVector>,
    /// RDM: the server's address on a client; unknown on a server until
    /// the client's first message names it.
    pub peer: Addr,
    /// Where the peer is, for messages.
    pub peer_name: String,
    /// Messages shorter than this go with `fi_inject`, as in fi_pingpong.
    pub inject_size: usize,
    /// One control-message slot: the server's first receive.
    pub ctrl: BufferPool,
    pub domain: Domain,
    pub log: Arc<EventLog>,
    pub fabric: Fabric,
    _pep: Option<PassiveEndpoint>,
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

fn hints(opts: &Options) -> Res<Hints> {
    let ep = match opts.ep {
        EpKind::Msg => EpType::Msg,
        EpKind::Rdm => EpType::Rdm,
    };
    Ok(Hints::new()?
        .provider(&opts.provider_name())?
        .ep_type(ep)
        .caps(Caps::MSG))
}

fn first(hints: &Hints) -> Res<Info> {
    getinfo(hints)?
        .into_iter()
        .next()
        .ok_or_else(|| "fi_getinfo returned an empty list".into())
}

/// The transmit inject size (`tx_attr->inject_size`), read from
/// libfabric's own description of the fi_info.
fn inject_size(info: &InfoEntry) -> usize {
    let text = info.to_text();
    let Some(at) = text.find("fi_tx_attr:") else {
        return 0;
    };
    text[at..]
        .lines()
        .find_map(|l| l.trim().strip_prefix("inject_size:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
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

struct Parts<'a> {
    side: &'static str,
    fabric: &'a Fabric,
    info: &'a InfoEntry,
    eq: Option<EventQueue>,
    pep: Option<PassiveEndpoint>,
    peer_name: String,
    log: &'a Arc<EventLog>,
    /// The connection request to accept (the server of MSG endpoints).
    request: Option<ConnRequest>,
}

/// Opens the domain, CQs, (AV,) endpoint and control buffer, binds and
/// enables the endpoint.
fn link(p: Parts<'_>, mode: Mode) -> Res<Link> {
    let domain = Domain::open(p.fabric, p.info)?;
    let (tx_cq, rx_cq) = open_cqs(&domain, p.info, mode)?;
    let ep = match p.request {
        Some(request) => Endpoint::from_request(&domain, request)?,
        None => Endpoint::open(&domain, p.info)?,
    };
    let av = if p.info.ep_type() == EpType::Rdm {
        let av = AddressVector::open(&domain, AvType::Map, 4)?;
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
    let ctrl = BufferPool::new(&domain, 1, CTRL_LEN)?;
    Ok(Link {
        side: p.side,
        inject_size: inject_size(ep.info()),
        ep,
        tx_cq,
        rx_cq,
        eq: p.eq,
        av,
        peer: Addr::UNSPEC,
        peer_name: p.peer_name,
        ctrl,
        domain,
        log: p.log.clone(),
        fabric: p.fabric.clone(),
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
    Refused(Errno, String),
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
            Read::Event(Event::ConnReq(req)) => {
                let request = req.request.ok_or("FI_CONNREQ without its request")?;
                let from = socket_addr(request.info().dest_addr())
                    .map(|a| format!(" from {a}"))
                    .unwrap_or_default();
                log.record(
                    side,
                    format!(
                        "FI_CONNREQ{from}: {} bytes of connection data {:?}",
                        req.data.len(),
                        String::from_utf8_lossy(req.data)
                    ),
                );
                return Ok(Some(Cm::ConnReq(request)));
            }
            Read::Event(Event::Connected(c)) => {
                let data = c
                    .data
                    .iter()
                    .position(|&b| b == 0)
                    .map_or(c.data, |n| &c.data[..n]);
                let text = if data.is_empty() {
                    String::new()
                } else {
                    format!(
                        ": {} bytes of connection data {:?}",
                        data.len(),
                        String::from_utf8_lossy(data)
                    )
                };
                log.record(side, format!("FI_CONNECTED{text}"));
                return Ok(Some(Cm::Connected));
            }
            Read::Event(Event::Shutdown(_)) => {
                log.record(side, "FI_SHUTDOWN".into());
                return Ok(Some(Cm::Shutdown));
            }
            Read::Event(other) => log.record(side, format!("{other:?}")),
            Read::ErrorPending => {
                let mut data = ErrDataBuf::new();
                if let Some(err) = eq.read_err(&mut data)? {
                    let text = eq.strerror(&err);
                    log.record(side, format!("error entry: {}", err.err));
                    return Ok(Some(Cm::Refused(err.err, text)));
                }
            }
            Read::Empty | Read::TimedOut => {}
        }
        drive();
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
    }
}

/// Starts a server on `node` (all interfaces if `None`) and `port` (0: any
/// free port); returns it and the address it listens on.
pub fn listen(
    opts: &Options,
    node: Option<&str>,
    port: u16,
    log: &Arc<EventLog>,
) -> Res<(Listener, SocketAddr)> {
    let mut hints = hints(opts)?.service(&port.to_string())?.source(true);
    if let Some(node) = node {
        hints = hints.node(node)?;
    }
    let info = first(&hints)?;
    let fabric = Fabric::open(&info)?;
    match opts.ep {
        EpKind::Msg => {
            let eq = fd_eq(&fabric)?;
            let pep = PassiveEndpoint::open(&fabric, &info)?;
            pep.bind_eq(&eq)?;
            pep.listen()?;
            let addr = pep.local_addr()?;
            Ok((
                Listener::Msg {
                    fabric,
                    pep,
                    eq,
                    log: log.clone(),
                },
                addr,
            ))
        }
        EpKind::Rdm => {
            let parts = Parts {
                side: "server",
                fabric: &fabric,
                info: &info,
                eq: None,
                pep: None,
                peer_name: "the client".into(),
                log,
                request: None,
            };
            let link = link(parts, opts.mode)?;
            let name = link.ep.name()?;
            let addr =
                socket_addr(&name).ok_or("the RDM endpoint's address is not a socket address")?;
            // The client's first message lands here.
            let buf = link.ctrl.take().ok_or("no control buffer")?;
            link.ep.recv(buf)?;
            Ok((Listener::Rdm(Box::new(link)), addr))
        }
    }
}

/// Waits for the client: for MSG endpoints the connection request, then
/// accepts it; an RDM server is ready at once.
pub fn accept(listener: Listener, opts: &Options) -> Res<Link> {
    let (fabric, pep, eq, log) = match listener {
        Listener::Rdm(link) => return Ok(*link),
        Listener::Msg {
            fabric,
            pep,
            eq,
            log,
        } => (fabric, pep, eq, log),
    };
    let request = loop {
        match next_cm(&eq, "server", &log, None, &|| {})? {
            Some(Cm::ConnReq(request)) => break request,
            Some(Cm::Refused(err, text)) => {
                return Err(format!("a connection request failed: {err} ({text})").into())
            }
            _ => {}
        }
    };
    // The request's fi_info describes the domain to open; the request itself
    // is consumed by the endpoint that accepts it.
    let info = request.info().to_owned_info()?;
    let peer_name = socket_addr(info.dest_addr()).map_or("the client".into(), |a| a.to_string());
    let parts = Parts {
        side: "server",
        fabric: &fabric,
        info: &info,
        eq: Some(eq.clone()),
        pep: Some(pep),
        peer_name,
        log: &log,
        request: Some(request),
    };
    let link = link(parts, opts.mode)?;
    // The client's first message lands here; posted before accepting, as
    // fi_pingpong does.
    let buf = link.ctrl.take().ok_or("no control buffer")?;
    link.ep.recv(buf)?;
    link.ep.accept(ACCEPT_DATA)?;
    match next_cm(&eq, "server", &log, Some(CONNECT_TIMEOUT), &|| {})? {
        Some(Cm::Connected) => Ok(link),
        Some(Cm::Refused(err, text)) => {
            Err(format!("accepting {}: {err} ({text})", link.peer_name).into())
        }
        Some(_) => Err("unexpected event while accepting".into()),
        None => Err(format!("no FI_CONNECTED within {CONNECT_TIMEOUT:?} after fi_accept").into()),
    }
}

/// Connects to the server at `host`:`port`.
pub fn connect(opts: &Options, host: &str, port: u16, log: &Arc<EventLog>) -> Res<Link> {
    let info = first(&hints(opts)?.node(host)?.service(&port.to_string())?)?;
    let fabric = Fabric::open(&info)?;
    let peer_name = format!("{host}:{port}");
    let eq = match opts.ep {
        EpKind::Msg => Some(fd_eq(&fabric)?),
        EpKind::Rdm => None,
    };
    let parts = Parts {
        side: "client",
        fabric: &fabric,
        info: &info,
        eq: eq.clone(),
        pep: None,
        peer_name,
        log,
        request: None,
    };
    let mut link = link(parts, opts.mode)?;
    let Some(eq) = eq else {
        let av = link
            .av
            .as_ref()
            .ok_or("an RDM endpoint without an address vector")?;
        if info.dest_addr().is_empty() {
            return Err(format!("fi_getinfo gave no address for {host}:{port}").into());
        }
        link.peer = av.insert(info.dest_addr())?;
        return Ok(link);
    };
    link.ep.connect(CONNECT_DATA)?;
    match next_cm(&eq, "client", log, Some(CONNECT_TIMEOUT), &|| {})? {
        Some(Cm::Connected) => Ok(link),
        Some(Cm::Refused(Errno::ConnRefused, _)) => Err(format!(
            "{} refused the connection: is `pingpong -s` running there?",
            link.peer_name
        )
        .into()),
        Some(Cm::Refused(err, text)) => {
            Err(format!("connecting to {}: {err} ({text})", link.peer_name).into())
        }
        Some(_) => Err(format!("unexpected event while connecting to {}", link.peer_name).into()),
        None => Err(format!(
            "no answer from {} within {CONNECT_TIMEOUT:?}: is `pingpong -s` running there?",
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
    match next_cm(
        eq,
        link.side,
        &link.log,
        Some(Duration::from_secs(5)),
        &drive,
    )? {
        Some(Cm::Shutdown) => Ok(()),
        _ => {
            link.log
                .record(link.side, "no FI_SHUTDOWN within 5 s".into());
            Ok(())
        }
    }
}
