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
use crate::connreq::ConnRequest;
use crate::cq::{Addr, Completion, CompletionQueue, CqAttr, Format, Msg};
use crate::domain::Domain;
use crate::ep::{CqBind, Endpoint};
use crate::eq::{EqAttr, EqRead, Event, EventBuf, EventQueue};
use crate::error::{Error, Result};
use crate::fabric::Fabric;
use crate::info::{getinfo, EpType, Hints, InfoEntry};
use crate::pep::PassiveEndpoint;
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
    /// An error entry of the listener's queue, as [`Error::Fabric`]; the
    /// errors of `fi_eq_sread`.
    pub fn incoming(&self) -> Result<Incoming> {
        let mut buf = EventBuf::new();
        loop {
            let read = self.eq.sread(&mut buf, None)?;
            if let Some(incoming) = self.request_of(read) {
                return incoming;
            }
        }
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
    /// and a `FI_CQ_FORMAT_MSG` completion queue; blocks until the
    /// connection is established.
    ///
    /// # Errors
    /// As [`accept_with`](Self::accept_with).
    pub fn accept(self, data: &[u8]) -> Result<Connection> {
        self.accept_with::<Msg>(data, &CqAttr::new())
    }

    /// Accepts with `data` and a completion queue of format `F` opened with
    /// `cq_attr`: opens a domain from the request, the queue, an event
    /// queue and the endpoint, binds them, enables, `fi_accept`s, and
    /// waits for `FI_CONNECTED`.
    ///
    /// # Errors
    /// The errors of those calls; an error entry instead of
    /// `FI_CONNECTED` (the peer went away) as [`Error::Fabric`].
    pub fn accept_with<F: Format>(self, data: &[u8], cq_attr: &CqAttr) -> Result<Connection<F>> {
        self.start::<F>(data, cq_attr)?.wait()
    }

    /// Everything [`accept_with`](Self::accept_with) does but the wait.
    pub(crate) fn start<F: Format>(self, data: &[u8], cq_attr: &CqAttr) -> Result<Pending<F>> {
        let domain = Domain::open(&self.fabric, self.request.info())?;
        let cq = CompletionQueue::<F>::open(&domain, cq_attr)?;
        let eq = EventQueue::open(&self.fabric, &EqAttr::new())?;
        let ep = Endpoint::from_request(&domain, self.request)?;
        ep.bind_eq(&eq)?;
        ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV)?;
        ep.enable()?;
        ep.accept(data)?;
        Ok(Pending {
            fabric: self.fabric,
            domain,
            eq,
            cq,
            ep,
            call: "fi_accept",
        })
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
    cq: CompletionQueue<F>,
    eq: EventQueue,
    domain: Domain,
    fabric: Fabric,
    peer_data: Vec<u8>,
}

/// What a [`Connection`] is made of, from [`Connection::into_parts`].
#[derive(Debug)]
#[non_exhaustive]
pub struct ConnectionParts<F: Format> {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// Its completion queue (transmits and receives).
    pub cq: CompletionQueue<F>,
    /// Its event queue.
    pub eq: EventQueue,
    /// Its domain.
    pub domain: Domain,
    /// Its fabric.
    pub fabric: Fabric,
    /// The connection data the peer sent with `FI_CONNECTED`.
    pub peer_data: Vec<u8>,
}

/// A connection whose `fi_connect` or `fi_accept` was made, waiting for
/// its `FI_CONNECTED`.
pub(crate) struct Pending<F: Format> {
    pub(crate) fabric: Fabric,
    pub(crate) domain: Domain,
    pub(crate) eq: EventQueue,
    pub(crate) cq: CompletionQueue<F>,
    pub(crate) ep: Endpoint,
    pub(crate) call: &'static str,
}

impl<F: Format> Pending<F> {
    /// What a read of the connection's event queue means for it: its
    /// connection data once connected, an error if it cannot be, `None`
    /// for nothing yet.
    pub(crate) fn outcome(&self, read: EqRead<'_>) -> Option<Result<Vec<u8>>> {
        let call = self.call;
        match read {
            EqRead::Event(Event::Connected(c)) => Some(Ok(c.data.to_vec())),
            EqRead::Event(Event::Shutdown(_)) => Some(Err(Error::Call {
                call,
                errno: crate::Errno::NOTCONN,
            })),
            EqRead::Error(e) => Some(Err(Error::Call { call, errno: e.err })),
            _ => None,
        }
    }

    /// Blocks until connected.
    fn wait(self) -> Result<Connection<F>> {
        let mut buf = EventBuf::new();
        loop {
            let read = self.eq.sread(&mut buf, None)?;
            if let Some(outcome) = self.outcome(read) {
                return outcome.map(|data| self.finish(data));
            }
        }
    }

    /// The connection, established with `peer_data`.
    pub(crate) fn finish(self, peer_data: Vec<u8>) -> Connection<F> {
        Connection {
            ep: self.ep,
            cq: self.cq,
            eq: self.eq,
            domain: self.domain,
            fabric: self.fabric,
            peer_data,
        }
    }
}

impl Connection {
    /// Connects to the peer `hints` names (its `node` and `service`, for
    /// example with [`Hints::addr`]) with connection data `data`, over the
    /// first provider matching as a `FI_EP_MSG` endpoint, with a
    /// `FI_CQ_FORMAT_MSG` completion queue; blocks until connected.
    ///
    /// # Errors
    /// [`Error::NoProvider`]; a refused connection as [`Error::Fabric`]
    /// with [`Errno::CONNREFUSED`](crate::Errno); the errors of the calls.
    pub fn connect(hints: &Hints, data: &[u8]) -> Result<Self> {
        let info = first_info(hints, EpType::Msg, false)?;
        let fabric = Fabric::open(&info)?;
        Self::connect_on(&fabric, &info, data, &CqAttr::new())
    }
}

impl<F: Format> Connection<F> {
    /// Connects on `fabric` with `info` (a `FI_EP_MSG` entry naming the
    /// peer) and a completion queue of format `F` opened with `cq_attr`.
    ///
    /// # Errors
    /// As [`Connection::connect`].
    pub fn connect_on(
        fabric: &Fabric,
        info: &InfoEntry,
        data: &[u8],
        cq_attr: &CqAttr,
    ) -> Result<Self> {
        Self::start(fabric, info, data, cq_attr)?.wait()
    }

    /// Everything [`connect_on`](Self::connect_on) does but the wait.
    pub(crate) fn start(
        fabric: &Fabric,
        info: &InfoEntry,
        data: &[u8],
        cq_attr: &CqAttr,
    ) -> Result<Pending<F>> {
        let domain = Domain::open(fabric, info)?;
        let cq = CompletionQueue::<F>::open(&domain, cq_attr)?;
        let eq = EventQueue::open(fabric, &EqAttr::new())?;
        let ep = Endpoint::open(&domain, info)?;
        ep.bind_eq(&eq)?;
        ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV)?;
        ep.enable()?;
        ep.connect(data)?;
        Ok(Pending {
            fabric: fabric.clone(),
            domain,
            eq,
            cq,
            ep,
            call: "fi_connect",
        })
    }

    /// A pool of `count` buffers of `slot_size` bytes registered with the
    /// connection's domain.
    ///
    /// # Errors
    /// As [`BufferPool::new`].
    pub fn buffer_pool(&self, count: usize, slot_size: usize) -> Result<BufferPool> {
        BufferPool::new(&self.domain, count, slot_size)
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

    /// The next completion, its buffer back from `pool`
    /// ([`CompletionQueue::wait_one`]).
    ///
    /// # Errors
    /// As [`CompletionQueue::wait_one`].
    pub fn wait_one(&self, pool: &BufferPool, timeout: Option<Duration>) -> Result<Completion> {
        self.cq.wait_one(pool, timeout)
    }

    /// The connection data the peer sent with its `FI_CONNECTED` (the
    /// accepting side's, on the connecting side).
    #[must_use]
    pub fn peer_data(&self) -> &[u8] {
        &self.peer_data
    }

    /// The endpoint.
    #[must_use]
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// The completion queue of its transmits and receives.
    #[must_use]
    pub fn cq(&self) -> &CompletionQueue<F> {
        &self.cq
    }

    /// The event queue of its connection events (`FI_SHUTDOWN`).
    #[must_use]
    pub fn eq(&self) -> &EventQueue {
        &self.eq
    }

    /// The domain.
    #[must_use]
    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    /// The fabric.
    #[must_use]
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// The pieces, to use or close one by one.
    #[must_use]
    pub fn into_parts(self) -> ConnectionParts<F> {
        ConnectionParts {
            endpoint: self.ep,
            cq: self.cq,
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

/// A reliable unconnected endpoint (`FI_EP_RDM`) with its completion queue
/// (format `F`) and an address vector of its peers, bound and enabled.
///
/// ```
/// use libfabric::prelude::*;
/// let hints = Hints::new().provider("tcp;ofi_rxm").node("127.0.0.1");
/// let (a, b) = (Rdm::open(&hints, 8)?, Rdm::open(&hints, 8)?);
/// let to_b = a.insert(&b.name()?)?;
/// let (pa, pb) = (a.buffer_pool(1, 64)?, b.buffer_pool(1, 64)?);
/// b.endpoint().recv(pb.take().unwrap())?;
/// let mut buf = pa.take().unwrap();
/// buf[..2].copy_from_slice(b"hi");
/// a.endpoint().send_to(buf, 2, to_b)?;
/// a.wait_one(&pa, None)?;
/// assert_eq!(b.wait_one(&pb, None)?.bytes(), b"hi");
/// # Ok::<(), libfabric::Error>(())
/// ```
pub struct Rdm<F: Format = Msg> {
    ep: Endpoint,
    cq: CompletionQueue<F>,
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
        Self::open_on(&fabric, &info, peers, &CqAttr::new())
    }
}

impl<F: Format> Rdm<F> {
    /// [`Rdm::open`] on `fabric` with `info` (a `FI_EP_RDM` entry) and a
    /// completion queue of format `F` opened with `cq_attr`.
    ///
    /// # Errors
    /// The errors of the calls.
    pub fn open_on(
        fabric: &Fabric,
        info: &InfoEntry,
        peers: usize,
        cq_attr: &CqAttr,
    ) -> Result<Self> {
        let domain = Domain::open(fabric, info)?;
        let cq = CompletionQueue::<F>::open(&domain, cq_attr)?;
        let av = AddressVector::open(&domain, AvType::Table, peers)?;
        let ep = Endpoint::open(&domain, info)?;
        ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV)?;
        ep.bind_av(&av)?;
        ep.enable()?;
        Ok(Rdm {
            ep,
            cq,
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

    /// A pool of `count` buffers of `slot_size` bytes registered with the
    /// endpoint's domain.
    ///
    /// # Errors
    /// As [`BufferPool::new`].
    pub fn buffer_pool(&self, count: usize, slot_size: usize) -> Result<BufferPool> {
        BufferPool::new(&self.domain, count, slot_size)
    }

    /// The next completion, its buffer back from `pool`
    /// ([`CompletionQueue::wait_one`]).
    ///
    /// # Errors
    /// As [`CompletionQueue::wait_one`].
    pub fn wait_one(&self, pool: &BufferPool, timeout: Option<Duration>) -> Result<Completion> {
        self.cq.wait_one(pool, timeout)
    }

    /// The endpoint.
    #[must_use]
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// The completion queue.
    #[must_use]
    pub fn cq(&self) -> &CompletionQueue<F> {
        &self.cq
    }

    /// The address vector.
    #[must_use]
    pub fn av(&self) -> &AddressVector {
        &self.av
    }

    /// The domain.
    #[must_use]
    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    /// The fabric.
    #[must_use]
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }
}

impl<F: Format> fmt::Debug for Rdm<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rdm")
            .field("endpoint", &self.ep)
            .finish_non_exhaustive()
    }
}
