//! Connections in a few calls: a [`Listener`] that accepts, a
//! [`Connection::connect`] that connects, each handing back an endpoint
//! with its event queue and completion queue bound and enabled; and
//! [`Rdm`], a reliable unconnected endpoint with its address vector.
//!
//! These are the objects of the other modules put together the way
//! fi_cm(3) describes, with `FI_WAIT_FD` queues; every piece stays
//! reachable ([`Connection::endpoint`], [`Connection::cq`], ...) and
//! [`Connection::into_parts`] takes it apart.
//!
//! ```
//! use libfabric::prelude::*;
//! let listener = Listener::bind(&Hints::new().provider("tcp").node("127.0.0.1").service(0))?;
//! let addr = listener.local_addr()?;
//! let server = std::thread::spawn(move || -> libfabric::Result<Vec<u8>> {
//!     let conn = listener.accept()?;
//!     let pool = conn.buffer_pool(1, 64)?;
//!     conn.recv(pool.take().expect("a free buffer"))?;
//!     Ok(conn.wait_one(&pool, None)?.bytes().to_vec())
//! });
//! let conn = Connection::connect(&Hints::new().provider("tcp").addr(addr), b"")?;
//! let pool = conn.buffer_pool(1, 64)?;
//! let mut buf = pool.take().expect("a free buffer");
//! buf[..5].copy_from_slice(b"hello");
//! conn.send(buf, 5)?;
//! conn.wait_one(&pool, None)?;
//! assert_eq!(server.join().unwrap()?, b"hello");
//! # Ok::<(), libfabric::Error>(())
//! ```

use crate::av::{AddressVector, AvType};
use crate::buffer::{Buffer, BufferPool};
use crate::cntr::{CntrAttr, Counter};
use crate::connreq::ConnRequest;
use crate::cq::{Addr, Completion, CompletionQueue, CqAttr, Format, Msg};
use crate::domain::Domain;
use crate::ep::{CntrBind, CqBind, Endpoint};
use crate::eq::{EqAttr, EqRead, Event, EventBuf, EventQueue};
use crate::error::{Error, Result};
use crate::fabric::Fabric;
use crate::info::{getinfo, EpType, Hints, InfoEntry};
use crate::pep::PassiveEndpoint;
use crate::wait::Deadline;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

/// The first `fi_info` matching `hints` as a `ty` endpoint.
pub(crate) fn first_info(hints: &Hints, ty: EpType, source: bool) -> Result<crate::info::Info> {
    let list = getinfo(&hints.clone().ep_type(ty).source(source))?;
    let first = list.first().ok_or_else(|| Error::NoProvider {
        request: format!("{hints:?}"),
    })?;
    first.to_owned_info()
}

/// How the connection layer opens an endpoint's completion queues, and how
/// long it waits for a connection.
///
/// By default one completion queue of the format's entries, opened with
/// [`CqAttr::new`] (the provider's default size and wait object), takes
/// both transmit and receive completions, and waits have no time limit.
#[derive(Debug, Clone, Default)]
pub struct ConnConfig {
    cq: CqAttr,
    rx_cq: Option<CqAttr>,
    counter: Option<(CntrAttr, CntrBind)>,
    timeout: Option<Duration>,
}

impl ConnConfig {
    /// The defaults.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The attributes of the completion queue (of transmits only, once
    /// [`rx_cq`](Self::rx_cq) is set).
    #[must_use]
    pub fn cq(mut self, attr: CqAttr) -> Self {
        self.cq = attr;
        self
    }

    /// A completion queue of its own for receives, opened with `attr`.
    #[must_use]
    pub fn rx_cq(mut self, attr: CqAttr) -> Self {
        self.rx_cq = Some(attr);
        self
    }

    /// A [`Counter`] opened with `attr`, bound to the endpoint for the
    /// completions in `kinds` before it is enabled; reached with
    /// `counter()`.
    #[must_use]
    pub fn counter(mut self, attr: CntrAttr, kinds: CntrBind) -> Self {
        self.counter = Some((attr, kinds));
        self
    }

    /// How long a connect or accept waits for `FI_CONNECTED`, and a
    /// [`Listener::incoming`] for a request (`None`: for ever).
    #[must_use]
    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }
}

/// The completion queues of an endpoint, as a [`ConnConfig`] asks.
struct Queues<F: Format> {
    tx: CompletionQueue<F>,
    rx: Option<CompletionQueue<F>>,
    counter: Option<(Counter, CntrBind)>,
}

impl<F: Format> Queues<F> {
    fn open(domain: &Domain, config: &ConnConfig) -> Result<Self> {
        let tx = CompletionQueue::<F>::open(domain, &config.cq)?;
        let rx = match &config.rx_cq {
            Some(attr) => Some(CompletionQueue::<F>::open(domain, attr)?),
            None => None,
        };
        let counter = match &config.counter {
            Some((attr, kinds)) => Some((Counter::open(domain, attr)?, *kinds)),
            None => None,
        };
        Ok(Queues { tx, rx, counter })
    }

    fn bind(&self, ep: &Endpoint) -> Result<()> {
        if let Some((counter, kinds)) = &self.counter {
            ep.bind_cntr(counter, *kinds)?;
        }
        match &self.rx {
            None => ep.bind_cq(&self.tx, CqBind::TRANSMIT | CqBind::RECV),
            Some(rx) => {
                ep.bind_cq(&self.tx, CqBind::TRANSMIT)?;
                ep.bind_cq(rx, CqBind::RECV)
            }
        }
    }

    fn rx(&self) -> &CompletionQueue<F> {
        self.rx.as_ref().unwrap_or(&self.tx)
    }
}

/// Refuses an `fi_info` of another endpoint type than the one the call
/// builds (a listener of RDM endpoints, an "RDM" endpoint that is not
/// reliable).
fn check_ep_type(info: &InfoEntry, ty: EpType, call: &'static str) -> Result<()> {
    if info.ep_type() != ty {
        return Err(Error::InvalidArgument(
            format!(
                "{call}: needs an fi_info of endpoint type {ty:?}, not {:?}",
                info.ep_type()
            )
            .into(),
        ));
    }
    Ok(())
}

/// The error, as one of `call`, when `read` says the connection ended or
/// cannot be made: `FI_SHUTDOWN` ([`Errno::NOTCONN`](crate::Errno::NOTCONN))
/// or an error entry (its errno).
fn ended_by(read: &EqRead<'_>, call: &'static str) -> Option<Error> {
    let errno = match read {
        EqRead::Event(Event::Shutdown(_)) => crate::Errno::NOTCONN,
        EqRead::Error(e) => e.err,
        _ => return None,
    };
    Some(Error::Call { call, errno })
}

/// The accessors of the types that hold an endpoint with its queues,
/// domain and fabric ([`Pending`], [`Connection`], [`Rdm`]).
macro_rules! endpoint_accessors {
    ($ty:ident) => {
        impl<F: Format> $ty<F> {
            /// The endpoint.
            #[must_use]
            pub fn endpoint(&self) -> &Endpoint {
                &self.ep
            }

            /// The completion queue of transmits (and of receives, unless
            /// the configuration gave them their own).
            #[must_use]
            pub fn cq(&self) -> &CompletionQueue<F> {
                &self.queues.tx
            }

            /// The completion queue of receives.
            #[must_use]
            pub fn rx_cq(&self) -> &CompletionQueue<F> {
                self.queues.rx()
            }

            /// The counter the configuration asked for
            /// ([`ConnConfig::counter`]).
            #[must_use]
            pub fn counter(&self) -> Option<&Counter> {
                self.queues.counter.as_ref().map(|(c, _)| c)
            }

            /// The domain, to register buffers with.
            #[must_use]
            pub fn domain(&self) -> &Domain {
                &self.domain
            }

            /// The fabric.
            #[must_use]
            pub fn fabric(&self) -> &Fabric {
                &self.fabric
            }

            /// A pool of `count` buffers of `slot_size` bytes registered
            /// with the domain.
            ///
            /// # Errors
            /// As [`BufferPool::new`].
            pub fn buffer_pool(&self, count: usize, slot_size: usize) -> Result<BufferPool> {
                BufferPool::new(&self.domain, count, slot_size)
            }
        }
    };
}

endpoint_accessors!(Pending);
endpoint_accessors!(Connection);
endpoint_accessors!(Rdm);

/// `wait_one` on the transmit queue, for the types without a connection
/// whose end to watch.
macro_rules! wait_one_on_cq {
    ($ty:ident) => {
        impl<F: Format> $ty<F> {
            /// The next completion of [`cq`](Self::cq), its buffer back
            /// from `pool` ([`CompletionQueue::wait_one`]).
            ///
            /// # Errors
            /// As [`CompletionQueue::wait_one`].
            pub fn wait_one(
                &self,
                pool: &BufferPool,
                timeout: Option<Duration>,
            ) -> Result<Completion> {
                self.queues.tx.wait_one(pool, timeout)
            }
        }
    };
}

wait_one_on_cq!(Pending);
wait_one_on_cq!(Rdm);

/// How often [`Connection::wait_one`] looks at the connection's event queue
/// while it waits for a completion.
const PEER_CHECK: Duration = Duration::from_millis(100);

/// A listening passive endpoint (`fi_passive_ep`, `fi_listen`) with its
/// event queue, accepting connections as [`Connection`]s.
pub struct Listener {
    pep: PassiveEndpoint,
    eq: EventQueue,
    fabric: Fabric,
}

impl Listener {
    /// Opens a fabric for the first provider matching `hints` as a
    /// `FI_EP_MSG` endpoint with `FI_SOURCE` (so `node` and `service` name
    /// the local address; service `0` picks a free port), and listens.
    ///
    /// # Errors
    /// [`Error::NoProvider`] when nothing matches; the errors of the calls.
    pub fn bind(hints: &Hints) -> Result<Self> {
        let info = first_info(hints, EpType::Msg, true)?;
        let fabric = Fabric::open(&info)?;
        Self::on(&fabric, &info)
    }

    /// Listens on `fabric` with `info` (a `FI_EP_MSG` entry of it).
    ///
    /// # Errors
    /// The errors of `fi_eq_open`, `fi_passive_ep`, `fi_pep_bind` and
    /// `fi_listen`.
    pub fn on(fabric: &Fabric, info: &InfoEntry) -> Result<Self> {
        check_ep_type(info, EpType::Msg, "Listener::on")?;
        let eq = EventQueue::open(fabric, &EqAttr::new())?;
        let pep = PassiveEndpoint::open(fabric, info)?;
        pep.bind_eq(&eq)?;
        pep.listen()?;
        Ok(Listener {
            pep,
            eq,
            fabric: fabric.clone(),
        })
    }

    /// The address it listens on.
    ///
    /// # Errors
    /// The errors of `fi_getname`.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.pep.local_addr()
    }

    /// The next connection request, blocking until one arrives.
    ///
    /// # Errors
    /// An error entry of the listener's queue, as [`Error::Call`]; the
    /// errors of `fi_eq_sread`.
    pub fn incoming(&self) -> Result<Incoming> {
        self.incoming_timeout(None)
    }

    /// The next connection request, waiting at most `timeout` (`None`: for
    /// ever).
    ///
    /// # Errors
    /// [`Error::TimedOut`]; as [`incoming`](Self::incoming).
    pub fn incoming_timeout(&self, timeout: Option<Duration>) -> Result<Incoming> {
        self.eq
            .sread_until(timeout, "fi_eq_sread (FI_CONNREQ)", |read| {
                self.request_of(read)
            })
    }

    /// What a read of the listener's queue means: a request, an error, or
    /// `None` for nothing yet.
    pub(crate) fn request_of(&self, read: EqRead<'_>) -> Option<Result<Incoming>> {
        match read {
            EqRead::Event(Event::ConnReq(c)) => Some(Ok(Incoming {
                data: c.data.to_vec(),
                request: c.request,
                fabric: self.fabric.clone(),
            })),
            EqRead::Error(e) => Some(Err(Error::Call {
                call: "fi_listen",
                errno: e.err,
            })),
            _ => None,
        }
    }

    /// The next connection, accepted with no connection data: blocks until
    /// a request arrives and its connection is established.
    ///
    /// # Errors
    /// As [`incoming`](Self::incoming) and [`Incoming::accept`].
    pub fn accept(&self) -> Result<Connection> {
        self.incoming()?.accept(&[])
    }

    /// The passive endpoint.
    #[must_use]
    pub fn passive_endpoint(&self) -> &PassiveEndpoint {
        &self.pep
    }

    /// The event queue its connection requests arrive on.
    #[must_use]
    pub fn eq(&self) -> &EventQueue {
        &self.eq
    }

    /// The fabric.
    #[must_use]
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Listener")
            .field("addr", &self.local_addr().ok())
            .finish_non_exhaustive()
    }
}

/// A connection request a [`Listener`] received, to accept or reject.
/// Dropped unanswered, it is rejected.
#[derive(Debug)]
pub struct Incoming {
    request: ConnRequest,
    data: Vec<u8>,
    fabric: Fabric,
}

impl Incoming {
    /// The connection data the peer sent.
    #[must_use]
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The request itself.
    #[must_use]
    pub fn request(&self) -> &ConnRequest {
        &self.request
    }

    /// Accepts with `data` (at most the provider's `FI_OPT_CM_DATA_SIZE`)
    /// and the default [`ConnConfig`], with a `FI_CQ_FORMAT_MSG` completion
    /// queue; blocks until the connection is established.
    ///
    /// # Errors
    /// As [`prepare`](Self::prepare) and [`Pending::establish`].
    pub fn accept(self, data: &[u8]) -> Result<Connection> {
        self.prepare::<Msg>(&ConnConfig::new())?.establish(data)
    }

    /// Opens a domain from the request, the completion queues `config`
    /// asks for (of format `F`), an event queue and the endpoint; binds
    /// them and enables the endpoint. Post receives on the
    /// [`Pending`] connection, then [`establish`](Pending::establish) it,
    /// which accepts.
    ///
    /// # Errors
    /// The errors of those calls; the request is rejected when dropped.
    pub fn prepare<F: Format>(self, config: &ConnConfig) -> Result<Pending<F>> {
        let domain = Domain::open(&self.fabric, self.request.info())?;
        let queues = Queues::<F>::open(&domain, config)?;
        let eq = EventQueue::open(&self.fabric, &EqAttr::new())?;
        let ep = Endpoint::from_request(&domain, self.request)?;
        Pending::enabled(self.fabric, domain, eq, queues, ep, Role::Accept, config)
    }

    /// Rejects the request with `data`.
    ///
    /// # Errors
    /// The errors of `fi_reject`.
    pub fn reject(self, data: &[u8]) -> Result<()> {
        self.request.reject(data)?;
        Ok(())
    }
}

/// A connected `FI_EP_MSG` endpoint with its event queue and completion
/// queue (format `F`) bound, from [`Connection::connect`] or
/// [`Listener::accept`].
pub struct Connection<F: Format = Msg> {
    ep: Endpoint,
    queues: Queues<F>,
    eq: EventQueue,
    domain: Domain,
    fabric: Fabric,
    peer_data: Vec<u8>,
    /// Set once `FI_SHUTDOWN` (or an error entry) was read from `eq`.
    ended: std::sync::atomic::AtomicBool,
}

/// What a [`Connection`] is made of, from [`Connection::into_parts`].
#[derive(Debug)]
#[non_exhaustive]
pub struct ConnectionParts<F: Format> {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// Its completion queue of transmits (and of receives, unless the
    /// configuration gave them their own).
    pub cq: CompletionQueue<F>,
    /// Its completion queue of receives, when it has one of its own.
    pub rx_cq: Option<CompletionQueue<F>>,
    /// Its counter, when the configuration asked for one.
    pub counter: Option<Counter>,
    /// Its event queue.
    pub eq: EventQueue,
    /// Its domain.
    pub domain: Domain,
    /// Its fabric.
    pub fabric: Fabric,
    /// The connection data the peer sent with `FI_CONNECTED`.
    pub peer_data: Vec<u8>,
}

/// Which side of a connection an endpoint is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Connect,
    Accept,
}

/// A connection about to be made: its endpoint is enabled with its queues
/// bound, and `fi_connect` or `fi_accept` is not yet called. Receives
/// posted now are in place before the peer can send;
/// [`establish`](Self::establish) connects (or accepts) and waits for
/// `FI_CONNECTED`. Dropped, it closes its endpoint (a request it was
/// opened from is rejected).
pub struct Pending<F: Format = Msg> {
    pub(crate) fabric: Fabric,
    pub(crate) domain: Domain,
    pub(crate) eq: EventQueue,
    queues: Queues<F>,
    pub(crate) ep: Endpoint,
    role: Role,
    pub(crate) timeout: Option<Duration>,
}

impl<F: Format> Pending<F> {
    /// Binds `eq` and `queues` to `ep` and enables it.
    fn enabled(
        fabric: Fabric,
        domain: Domain,
        eq: EventQueue,
        queues: Queues<F>,
        ep: Endpoint,
        role: Role,
        config: &ConnConfig,
    ) -> Result<Self> {
        ep.bind_eq(&eq)?;
        queues.bind(&ep)?;
        ep.enable()?;
        Ok(Pending {
            fabric,
            domain,
            eq,
            queues,
            ep,
            role,
            timeout: config.timeout,
        })
    }

    /// The event queue of the endpoint's connection events.
    #[must_use]
    pub fn eq(&self) -> &EventQueue {
        &self.eq
    }

    /// `fi_connect` or `fi_accept` with `data`, then waits (up to the
    /// configured timeout) for `FI_CONNECTED`.
    ///
    /// # Errors
    /// The errors of the call; an error entry instead of `FI_CONNECTED` as
    /// [`Error::Call`] (a refused connection is
    /// [`Errno::CONNREFUSED`](crate::Errno::CONNREFUSED)); an
    /// `FI_SHUTDOWN` as [`Errno::NOTCONN`](crate::Errno::NOTCONN);
    /// [`Error::TimedOut`].
    pub fn establish(self, data: &[u8]) -> Result<Connection<F>> {
        self.start(data)?;
        let data = self
            .eq
            .sread_until(self.timeout, "fi_eq_sread (FI_CONNECTED)", |read| {
                self.outcome(read)
            })?;
        Ok(self.finish(data))
    }

    /// The `fi_connect` or `fi_accept` of this side.
    pub(crate) fn start(&self, data: &[u8]) -> Result<()> {
        match self.role {
            Role::Connect => self.ep.connect(data),
            Role::Accept => self.ep.accept(data),
        }
    }

    /// What a read of the connection's event queue means for it: its
    /// connection data once connected, an error if it cannot be, `None`
    /// for nothing yet.
    pub(crate) fn outcome(&self, read: EqRead<'_>) -> Option<Result<Vec<u8>>> {
        let call = match self.role {
            Role::Connect => "fi_connect",
            Role::Accept => "fi_accept",
        };
        if let EqRead::Event(Event::Connected(c)) = &read {
            return Some(Ok(c.data.to_vec()));
        }
        ended_by(&read, call).map(Err)
    }

    /// The connection, established with `peer_data`.
    pub(crate) fn finish(self, peer_data: Vec<u8>) -> Connection<F> {
        Connection {
            ep: self.ep,
            queues: self.queues,
            eq: self.eq,
            domain: self.domain,
            fabric: self.fabric,
            peer_data,
            ended: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl<F: Format> fmt::Debug for Pending<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pending")
            .field("endpoint", &self.ep)
            .field("role", &self.role)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Connects to the peer `hints` names (its `node` and `service`, for
    /// example with [`Hints::addr`]) with connection data `data`, over the
    /// first provider matching as a `FI_EP_MSG` endpoint, with the default
    /// [`ConnConfig`] (a `FI_CQ_FORMAT_MSG` completion queue); blocks until
    /// connected.
    ///
    /// # Errors
    /// [`Error::NoProvider`]; as [`Pending::establish`].
    pub fn connect(hints: &Hints, data: &[u8]) -> Result<Self> {
        let info = first_info(hints, EpType::Msg, false)?;
        let fabric = Fabric::open(&info)?;
        Self::prepare(&fabric, &info, &ConnConfig::new())?.establish(data)
    }
}

impl<F: Format> Connection<F> {
    /// Opens a domain on `fabric` for `info` (a `FI_EP_MSG` entry naming
    /// the peer), the completion queues `config` asks for, an event queue
    /// and the endpoint; binds them and enables it. Post receives on the
    /// [`Pending`] connection, then [`establish`](Pending::establish) it,
    /// which connects.
    ///
    /// # Errors
    /// The errors of those calls.
    pub fn prepare(fabric: &Fabric, info: &InfoEntry, config: &ConnConfig) -> Result<Pending<F>> {
        check_ep_type(info, EpType::Msg, "Connection::prepare")?;
        let domain = Domain::open(fabric, info)?;
        let queues = Queues::<F>::open(&domain, config)?;
        let eq = EventQueue::open(fabric, &EqAttr::new())?;
        let ep = Endpoint::open(&domain, info)?;
        Pending::enabled(
            fabric.clone(),
            domain,
            eq,
            queues,
            ep,
            Role::Connect,
            config,
        )
    }

    /// Posts a receive into `buffer` ([`Endpoint::recv`]).
    ///
    /// # Errors
    /// As [`Endpoint::recv`]: the buffer comes back with the error.
    pub fn recv(&self, buffer: Buffer) -> crate::error::Handback<Buffer> {
        self.ep.recv(buffer)
    }

    /// Sends the first `len` bytes of `buffer` ([`Endpoint::send`]).
    ///
    /// # Errors
    /// As [`Endpoint::send`]: the buffer comes back with the error.
    pub fn send(&self, buffer: Buffer, len: usize) -> crate::error::Handback<Buffer> {
        self.ep.send(buffer, len)
    }

    /// The next completion of [`cq`](Self::cq), its buffer back from
    /// `pool` ([`CompletionQueue::wait_one`]), waiting up to `timeout`
    /// (`None`: for ever). The connection's event queue is looked at
    /// meanwhile (every 100 ms): once the connection ended (`FI_SHUTDOWN`,
    /// which some providers report without failing the operations posted),
    /// a wait that finds no completion is [`Error::Call`] with
    /// [`Errno::NOTCONN`](crate::Errno::NOTCONN) instead of a wait for
    /// ever. Receives on a separate queue ([`ConnConfig::rx_cq`]) are waited
    /// for with [`rx_cq`](Self::rx_cq)`().wait_one(..)`.
    ///
    /// # Errors
    /// As [`CompletionQueue::wait_one`]; [`Errno::NOTCONN`](crate::Errno::NOTCONN)
    /// when the connection ended, or the errno of an error entry of its
    /// event queue.
    pub fn wait_one(&self, pool: &BufferPool, timeout: Option<Duration>) -> Result<Completion> {
        let deadline = Deadline::after(timeout);
        loop {
            let slice = if self.ended.load(std::sync::atomic::Ordering::Acquire) {
                Duration::ZERO
            } else {
                deadline
                    .left()
                    .map_or(PEER_CHECK, |left| left.min(PEER_CHECK))
            };
            match self.queues.tx.wait_one(pool, Some(slice)) {
                Err(Error::TimedOut { .. }) => {}
                other => return other,
            }
            self.check_ended()?;
            deadline.check("fi_cq_sread")?;
        }
    }

    /// Whether the connection's event queue said it ended.
    #[cfg(feature = "tokio")]
    pub(crate) fn is_ended(&self) -> bool {
        self.ended.load(std::sync::atomic::Ordering::Acquire)
    }

    /// [`Errno::NOTCONN`](crate::Errno::NOTCONN) once the connection's
    /// event queue said it ended (read now, or before), or the errno of an
    /// error entry there.
    pub(crate) fn check_ended(&self) -> Result<()> {
        use std::sync::atomic::Ordering;
        if self.ended.load(Ordering::Acquire) {
            return Err(Error::Call {
                call: "fi_eq_read",
                errno: crate::Errno::NOTCONN,
            });
        }
        let mut buf = EventBuf::new();
        loop {
            let read = self.eq.read(&mut buf)?;
            if matches!(
                read,
                EqRead::Empty | EqRead::TimedOut | EqRead::ErrorPending
            ) {
                return Ok(());
            }
            if let Some(end) = ended_by(&read, "fi_eq_read") {
                self.ended.store(true, Ordering::Release);
                return Err(end);
            }
        }
    }

    /// The connection data the peer sent with its `FI_CONNECTED` (the
    /// accepting side's, on the connecting side).
    #[must_use]
    pub fn peer_data(&self) -> &[u8] {
        &self.peer_data
    }

    /// The event queue of its connection events (`FI_SHUTDOWN`).
    #[must_use]
    pub fn eq(&self) -> &EventQueue {
        &self.eq
    }

    /// The pieces, to use or close one by one.
    #[must_use]
    pub fn into_parts(self) -> ConnectionParts<F> {
        ConnectionParts {
            endpoint: self.ep,
            cq: self.queues.tx,
            rx_cq: self.queues.rx,
            counter: self.queues.counter.map(|(c, _)| c),
            eq: self.eq,
            domain: self.domain,
            fabric: self.fabric,
            peer_data: self.peer_data,
        }
    }
}

impl<F: Format> fmt::Debug for Connection<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("endpoint", &self.ep)
            .field("peer_data_len", &self.peer_data.len())
            .finish_non_exhaustive()
    }
}

/// A reliable unconnected endpoint (`FI_EP_RDM`) with its completion
/// queues (format `F`) and an address vector of its peers, bound and
/// enabled.
///
/// A send to a peer the provider is still connecting to (rxm sets up a
/// connection per peer underneath) is refused with `-FI_EAGAIN` until the
/// sender's completion queue is read: retry after reading it.
///
/// ```
/// use libfabric::prelude::*;
/// let hints = Hints::new().provider("tcp;ofi_rxm").node("127.0.0.1");
/// let (a, b) = (Rdm::open(&hints, 8)?, Rdm::open(&hints, 8)?);
/// let to_b = a.insert(&b.name()?)?;
/// let (pa, pb) = (a.buffer_pool(1, 64)?, b.buffer_pool(1, 64)?);
/// b.endpoint().recv(pb.take().unwrap())?;
/// let receiver = std::thread::spawn(move || b.wait_one(&pb, None).map(|c| c.bytes().to_vec()));
/// let mut buf = pa.take().unwrap();
/// buf[..2].copy_from_slice(b"hi");
/// while let Err((back, e)) = a.endpoint().send_to(buf, 2, to_b) {
///     assert!(e.is_again(), "{e}");
///     buf = back;
///     // Nothing of `a` is in flight: this read only runs its progress.
///     let _ = a.cq().read(&mut [Default::default()])?;
/// }
/// a.wait_one(&pa, None)?;
/// assert_eq!(receiver.join().unwrap()?, b"hi");
/// # Ok::<(), libfabric::Error>(())
/// ```
pub struct Rdm<F: Format = Msg> {
    ep: Endpoint,
    queues: Queues<F>,
    av: AddressVector,
    domain: Domain,
    fabric: Fabric,
}

impl Rdm {
    /// Opens a fabric, a domain, a `FI_CQ_FORMAT_MSG` completion queue, an
    /// address vector with room for `peers` addresses and the endpoint for
    /// the first provider matching `hints` as `FI_EP_RDM`, and enables it.
    ///
    /// # Errors
    /// [`Error::NoProvider`]; the errors of the calls.
    pub fn open(hints: &Hints, peers: usize) -> Result<Self> {
        let info = first_info(hints, EpType::Rdm, false)?;
        let fabric = Fabric::open(&info)?;
        Self::open_on(&fabric, &info, peers, &ConnConfig::new())
    }
}

impl<F: Format> Rdm<F> {
    /// [`Rdm::open`] on `fabric` with `info` (a `FI_EP_RDM` entry) and the
    /// completion queues (of format `F`) `config` asks for.
    ///
    /// # Errors
    /// The errors of the calls.
    pub fn open_on(
        fabric: &Fabric,
        info: &InfoEntry,
        peers: usize,
        config: &ConnConfig,
    ) -> Result<Self> {
        check_ep_type(info, EpType::Rdm, "Rdm::open_on")?;
        let domain = Domain::open(fabric, info)?;
        let queues = Queues::<F>::open(&domain, config)?;
        let av = AddressVector::open(&domain, AvType::Table, peers)?;
        let ep = Endpoint::open(&domain, info)?;
        queues.bind(&ep)?;
        ep.bind_av(&av)?;
        ep.enable()?;
        Ok(Rdm {
            ep,
            queues,
            av,
            domain,
            fabric: fabric.clone(),
        })
    }

    /// The endpoint's address, for peers to [`insert`](Self::insert).
    ///
    /// # Errors
    /// The errors of `fi_getname`.
    pub fn name(&self) -> Result<Vec<u8>> {
        self.ep.name()
    }

    /// Adds a peer's address to the address vector.
    ///
    /// # Errors
    /// As [`AddressVector::insert`].
    pub fn insert(&self, addr: &[u8]) -> Result<Addr> {
        self.av.insert(addr)
    }

    /// The address vector.
    #[must_use]
    pub fn av(&self) -> &AddressVector {
        &self.av
    }
}

impl<F: Format> fmt::Debug for Rdm<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rdm")
            .field("endpoint", &self.ep)
            .finish_non_exhaustive()
    }
}
