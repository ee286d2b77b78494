//! Endpoints (`fi_endpoint(3)`, `fi_cm(3)`, `fi_msg(3)`, `fi_tagged(3)`):
//! enough to produce real connection events and completions.
//!
//! A whole connection over the tcp provider, both sides in one process
//! (the tcp provider progresses connections while their queues are read):
//!
//! ```
//! use libfabric::cq::{Msg, MsgEntry};
//! use libfabric::prelude::*;
//! use libfabric::{Info, PassiveEndpoint, Result};
//!
//! fn hints() -> Result<Hints> {
//!     Ok(Hints::new().provider("tcp").ep_type(EpType::Msg).caps(Caps::MSG))
//! }
//! fn first(h: Hints) -> Result<Info> {
//!     Ok(getinfo(&h)?.into_iter().next().expect("tcp provider"))
//! }
//! // Passive side: listen on an ephemeral port of 127.0.0.1.
//! let info = first(hints()?.node("127.0.0.1").service("0").source(true))?;
//! let fabric = Fabric::open(&info)?;
//! let eq = EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::Fd))?;
//! let pep = PassiveEndpoint::open(&fabric, &info)?;
//! pep.bind_eq(&eq)?;
//! pep.listen()?;
//! let port = pep.local_addr()?.port();
//!
//! // Active side: connect with 5 bytes of connection data.
//! let cinfo = first(hints()?.node("127.0.0.1").service(port))?;
//! let domain = Domain::open(&fabric, &cinfo)?;
//! let client_eq = EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::Fd))?;
//! let client_cq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new())?;
//! let client = Endpoint::open(&domain, &cinfo)?;
//! client.bind_eq(&client_eq)?;
//! client.bind_cq(&client_cq, CqBind::TRANSMIT | CqBind::RECV)?;
//! client.enable()?;
//! client.connect(b"hello")?;
//!
//! // Passive side: the request arrives on the EQ; accept it.
//! let mut buf = EventBuf::new();
//! let request = loop {
//!     let _ = client_eq.peek(&mut EventBuf::new()); // progress the client
//!     if let EqRead::Event(Event::ConnReq(req)) = eq.sread(&mut buf, Some(std::time::Duration::from_millis(10)))? {
//!         assert_eq!(req.data, b"hello");
//!         break req.request;
//!     }
//! };
//! let server_domain = Domain::open(&fabric, request.info())?;
//! let server_cq = CompletionQueue::<Msg>::open(&server_domain, &CqAttr::new())?;
//! let server = Endpoint::from_request(&server_domain, request)?;
//! server.bind_eq(&eq)?;
//! server.bind_cq(&server_cq, CqBind::TRANSMIT | CqBind::RECV)?;
//! server.enable()?;
//! server.accept(b"welcome")?;
//! loop {
//!     let _ = eq.peek(&mut EventBuf::new()); // progress the server
//!     if let EqRead::Event(Event::Connected(c)) = client_eq.read(&mut buf)? {
//!         assert_eq!(c.data, b"welcome");
//!         break;
//!     }
//! }
//!
//! // Data: the buffers move into the provider and come back with their
//! // completions.
//! let server_pool = BufferPool::new(&server_domain, 2, 4096)?;
//! let client_pool = BufferPool::new(&domain, 2, 4096)?;
//! server.recv(server_pool.take().unwrap())?;
//! let mut tx = client_pool.take().unwrap();
//! tx[..4].copy_from_slice(b"ping");
//! client.send(tx, 4)?;
//! let mut entries: [MsgEntry; 1] = Default::default();
//! let rx = loop {
//!     let _ = client_cq.read(&mut [MsgEntry::default()]);
//!     if let CqRead::Completions(done) = server_cq.read(&mut entries)? {
//!         assert_eq!(done[0].len(), 4);
//!         break server_pool.reclaim(&done[0]).expect("the receive's buffer");
//!     }
//! };
//! assert_eq!(&rx[..4], b"ping");
//! # Ok::<(), libfabric::Error>(())
//! ```

use crate::av::{AddressVector, AvInner};
use crate::buffer::Buffer;
use crate::cntr::{CntrInner, Counter};
use crate::connreq::{ConnRequest, RequestSource};
use crate::cq::{Addr, CompletionQueue, CqInner, Format};
use crate::domain::{Domain, DomainInner};
use crate::eq::{check_cm_data_size, EqInner, EventQueue, Fid, RegisteredObject};
use crate::error::{check, classify, Errno, Error, Handback, ObjectKind, ObjectScope, Result};
use crate::fid::{close_last, OwnedFid};
use crate::info::{Caps, EpType, Info, InfoEntry};
use crate::progress::{ProgressLock, ProgressWrite};
use crate::threading::{ThreadModel, ThreadSafe};
use bitflags::bitflags;
use libfabric_sys::fabric as sys;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

bitflags! {
    /// How a completion queue is bound to an endpoint (`fi_ep_bind` flags).
    ///
    /// `FI_SELECTIVE_COMPLETION` is not offered: this crate's posts do not
    /// ask for `FI_COMPLETION`, so under it no buffer would come back.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct CqBind: u64 {
        /// `FI_TRANSMIT`: completions of sends.
        const TRANSMIT = sys::FI_TRANSMIT;
        /// `FI_RECV`: completions of receives.
        const RECV = sys::FI_RECV;
    }
}

bitflags! {
    /// What a counter bound to an endpoint counts (`fi_ep_bind` flags of
    /// fi_cntr(3)): one counter per kind, bound before
    /// [`Endpoint::enable`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct CntrBind: u64 {
        /// `FI_SEND`: completed sends.
        const SEND = sys::FI_SEND;
        /// `FI_RECV`: completed receives.
        const RECV = sys::FI_RECV;
        /// `FI_READ`: completed RMA reads and fetching atomics.
        const READ = sys::FI_READ;
        /// `FI_WRITE`: completed RMA writes and atomics.
        const WRITE = sys::FI_WRITE;
        /// `FI_REMOTE_READ`: RMA reads by peers of this endpoint's memory.
        const REMOTE_READ = sys::FI_REMOTE_READ;
        /// `FI_REMOTE_WRITE`: RMA writes by peers into this endpoint's memory.
        const REMOTE_WRITE = sys::FI_REMOTE_WRITE;
    }
}

/// The kinds a counter counts, in the order of `Bound::cntrs`.
const CNTR_KINDS: [CntrBind; 6] = [
    CntrBind::SEND,
    CntrBind::RECV,
    CntrBind::READ,
    CntrBind::WRITE,
    CntrBind::REMOTE_READ,
    CntrBind::REMOTE_WRITE,
];

// The endpoint's state bits. Posts check the bits they need with one load.
/// `fi_enable` succeeded.
const ENABLED: u32 = 1 << 0;
/// A completion queue for transmits is bound.
const TX_CQ: u32 = 1 << 1;
/// A completion queue for receives is bound.
const RX_CQ: u32 = 1 << 2;
/// An event queue is bound.
const EQ: u32 = 1 << 3;
/// An address vector is bound.
const AV: u32 = 1 << 4;
/// `fi_connect` or `fi_accept` was called.
const CONNECTING: u32 = 1 << 5;
/// The info grants `FI_MSG`.
const CAP_MSG: u32 = 1 << 6;
/// The info grants `FI_TAGGED`.
const CAP_TAGGED: u32 = 1 << 7;
/// The connection is established: an `FI_CONNECTED` event naming the
/// endpoint was read from its event queue after `fi_connect` or
/// `fi_accept`. Connectionless endpoints have it from the start.
const CONNECTED: u32 = 1 << 8;
/// The connection is over: `fi_shutdown` was called, or an `FI_SHUTDOWN`
/// naming the endpoint was read. Never cleared; it outweighs `CONNECTED`.
const DISCONNECTED: u32 = 1 << 9;
/// The transmit CQ was given to the provider (`fi_ep_bind`, in `enable`).
const TX_CQ_GIVEN: u32 = 1 << 10;
/// The receive CQ was given to the provider.
const RX_CQ_GIVEN: u32 = 1 << 11;
/// The address vector was given to the provider (`fi_ep_bind`, in
/// `enable`).
const AV_GIVEN: u32 = 1 << 12;
/// An `enable` failed on a provider that runs such an endpoint in its
/// queues' progress: final (see `Endpoint::enable`).
const ENABLE_FAILED: u32 = 1 << 13;
/// The info grants `FI_MULTI_RECV`.
const CAP_MULTI: u32 = 1 << 14;
/// The receive CQ's entries carry `buf` (the `Data` and `Tagged`
/// formats), where a multi-receive's message landed.
const RX_CQ_BUF: u32 = 1 << 15;
/// Registered as a shm endpoint others of this process may address (see
/// the shm_peers module): its close is put off until none can.
const SHM_PEER: u32 = 1 << 16;
/// Closed by the application, its provider close put off (`SHM_PEER`).
const PARKING: u32 = 1 << 17;
/// Its provider close is due (the shm_peers module closes it now).
const RELEASING: u32 = 1 << 18;

const SEND_READY: u32 = ENABLED | TX_CQ | CAP_MSG | CONNECTED;
const RECV_READY: u32 = ENABLED | RX_CQ | CAP_MSG;
const TSEND_READY: u32 = ENABLED | TX_CQ | CAP_TAGGED | CONNECTED;
const TRECV_READY: u32 = ENABLED | RX_CQ | CAP_TAGGED;

/// What an endpoint is bound to, kept open while the endpoint is.
#[derive(Default)]
struct Bound {
    eq: Option<Arc<EqInner>>,
    tx: Option<Arc<CqInner>>,
    rx: Option<Arc<CqInner>>,
    /// The counter of each kind, in the order of `CNTR_KINDS`.
    cntrs: [Option<Arc<CntrInner>>; 6],
    /// The kinds whose counter was given to the provider (`fi_ep_bind`, in
    /// `enable`).
    cntrs_given: Option<CntrBind>,
}

impl Bound {
    /// The distinct counters bound, each with the kinds it counts.
    fn distinct_cntrs(&self) -> Vec<(Arc<CntrInner>, CntrBind)> {
        let mut out: Vec<(Arc<CntrInner>, CntrBind)> = Vec::new();
        for (kind, cntr) in CNTR_KINDS.iter().zip(&self.cntrs) {
            let Some(cntr) = cntr else { continue };
            match out.iter_mut().find(|(c, _)| Arc::ptr_eq(c, cntr)) {
                Some((_, kinds)) => *kinds |= *kind,
                None => out.push((cntr.clone(), *kind)),
            }
        }
        out
    }

    /// The counters given to the provider.
    fn given_cntrs(&self) -> Vec<(Arc<CntrInner>, CntrBind)> {
        let given = self.cntrs_given.unwrap_or(CntrBind::empty());
        let mut all = self.distinct_cntrs();
        all.retain(|(_, kinds)| kinds.intersects(given));
        all
    }
}

/// An endpoint's `FI_OPT_MIN_MULTI_RECV`.
#[derive(Default)]
struct MinMultiRecv {
    /// As set and read back.
    value: Option<usize>,
    /// A multi-receive was posted with it: fixed.
    posted: bool,
}

/// The request an endpoint was opened from, until `fi_accept` succeeds.
struct PendingAccept {
    source: RequestSource,
    handle: *mut sys::fid,
    info: Info,
}

pub(crate) struct EpInner {
    pub(crate) fid: OwnedFid<sys::fid_ep>,
    /// A process-unique id, recorded with each buffer posted on it.
    id: u64,
    info: Arc<Info>,
    state: AtomicU32,
    connectionless: bool,
    inject_size: usize,
    /// The provider may carry a transfer out from the peer's side,
    /// copying into or out of the buffer after this endpoint closed
    /// (`quirks::peers_copy_from_their_side`): decided at the close, not
    /// per post.
    pub(crate) peers_copy: bool,
    cq_data_size: usize,
    /// What every RMA post checks, fixed at open (see `ep::rma`).
    rma: rma::RmaFacts,
    bound: Mutex<Bound>,
    /// The address vector, read by every post to or from an address.
    av: OnceLock<Arc<AvInner>>,
    pending: Mutex<Option<PendingAccept>>,
    /// `FI_OPT_MIN_MULTI_RECV` as set, fixed once a multi-receive was
    /// posted; held while one is.
    min_multi_recv: Mutex<MinMultiRecv>,
    /// The addresses posted to or received from on a connectionless
    /// endpoint, as bit `addr % 64` (an over-estimate): shm maps this
    /// endpoint into the vector of a peer it posted to (see the shm_peers
    /// module). Kept only where `tracks_peers`.
    posted_to: AtomicU64,
    /// Whether a quirk of the provider reads `posted_to`
    /// (`quirks::peers_copy_from_their_side`, whose close asks whom it
    /// posted to, and `quirks::closed_peers_dangle`, whose parked
    /// endpoints are asked whom they may have mapped): elsewhere a post
    /// does not record its address (four instructions a post).
    tracks_peers: bool,
    domain: Arc<DomainInner>,
    /// Under a serialized threading model, the connection events its event
    /// queue saw (`CONNECTED`, `DISCONNECTED`), and `CONNECTING` mirrored
    /// from `state`: the queue, which any thread may read, records them
    /// here rather than holding (and maybe dropping last, closing) the
    /// endpoint itself; the endpoint takes them in on its own thread
    /// (`Endpoint::take_in_events`).
    conn_events: Option<Arc<AtomicU32>>,
}

// SAFETY: the raw handle in PendingAccept is only passed to fi_reject on
// the FI_THREAD_SAFE passive endpoint it belongs to, under the mutex.
unsafe impl Send for PendingAccept {}

/// Applies an `FI_CONNECTED` (`connected`) or `FI_SHUTDOWN` to a state
/// word (an endpoint's, or its event record: see `EpInner::conn_events`).
pub(crate) fn record_connection_event(state: &AtomicU32, connected: bool) {
    if !connected {
        state.fetch_or(DISCONNECTED, Ordering::AcqRel);
    } else if state.load(Ordering::Acquire) & CONNECTING != 0 {
        state.fetch_or(CONNECTED, Ordering::AcqRel);
    }
}

impl EpInner {
    /// A connectionless endpoint closed without an address vector crashes
    /// rxm: `rxm_ep_close` frees its connections by the AV's peer count
    /// (`prov/rxm/src/rxm_conn.c` 375, `prov/util/src/rxm_av.c` 42-44 in
    /// 1.17, a NULL dereference). One never bound to an AV (and so never
    /// enabled) gets a one-entry AV of its domain bound just before it
    /// closes; the AV closes after it.
    fn av_for_close(&mut self) -> Option<AddressVector<ThreadSafe>> {
        if !self.fid.is_open() || !self.connectionless || *self.state.get_mut() & AV_GIVEN != 0 {
            return None;
        }
        // A handle used for this one call, here, on the thread the endpoint
        // is closed on (its domain's, for a serialized domain).
        let domain = Domain::<ThreadSafe>::from_inner(self.domain.clone());
        let av = AddressVector::open(&domain, crate::av::AvType::Table, 1).ok()?;
        // SAFETY: fi_ep_bind(3) of two open objects of one domain, before
        // fi_enable (this endpoint was never enabled: enabling needs an AV).
        let ret = unsafe { sys::fi_ep_bind(self.fid.as_ptr(), av.inner.fid.fid(), 0) };
        (ret == 0).then_some(av)
    }
}

impl EpInner {
    /// A connection event naming this endpoint was read from its event
    /// queue: `FI_CONNECTED` (`connected`) or `FI_SHUTDOWN`.
    ///
    /// `FI_CONNECTED` counts only after this endpoint's own `fi_connect` or
    /// `fi_accept`: an event still queued for an endpoint that closed, at
    /// whose address this one was opened, cannot mark an idle endpoint
    /// connected. (The MSG providers remove a closing endpoint's events
    /// anyway: `prov/tcp/src/tcpx_ep.c` 626, `prov/verbs/src/verbs_ep.c`
    /// 546, `prov/sockets/src/sock_ep.c` 691-699 in 1.17; and a sockets
    /// send before its connection is up looks the connection up or fails
    /// with `-FI_ENOENT`, `sock_ep.c` 1854-1895.)
    pub(crate) fn connection_event(&self, connected: bool) {
        record_connection_event(&self.state, connected);
    }

    /// Sets or clears `CONNECTING`, in the event record too.
    fn set_connecting(&self, on: bool) -> u32 {
        if let Some(events) = &self.conn_events {
            if on {
                events.fetch_or(CONNECTING, Ordering::AcqRel);
            } else {
                events.fetch_and(!CONNECTING, Ordering::AcqRel);
            }
        }
        if on {
            self.state.fetch_or(CONNECTING, Ordering::AcqRel)
        } else {
            self.state.fetch_and(!CONNECTING, Ordering::AcqRel)
        }
    }

    /// `fi_close` of the endpoint, with an AV bound first where the
    /// provider needs one (see `av_for_close`), its receives in flight
    /// cancelled first, and its completion queues' progress held off.
    fn close_fid(&mut self) -> Result<()> {
        self.close_fid_with(false)
    }

    /// [`close_fid`](Self::close_fid), with the progress locks of its
    /// queues and counters already held by the caller when `held` (the
    /// shm_peers module closing several at once).
    fn close_fid_with(&mut self, held: bool) -> Result<()> {
        if !self.fid.is_open() {
            return Ok(());
        }
        let _av = self.av_for_close();
        let state = *self.state.get_mut();
        if state & ENABLED != 0 {
            // Several providers drop what is posted on an endpoint that
            // closes, without a completion (sockets, tcp;ofi_rxm,
            // udp;ofi_rxd): cancelled first, a receive completes with
            // FI_ECANCELED and its buffer comes back through the queue
            // (rxm: `rxm_ep_cancel_recv` writes an FI_ECANCELED error entry,
            // `prov/rxm/src/rxm_ep.c` 409-441; rxd: `rxd_ep_cancel_recv`,
            // `prov/rxd/src/rxd_ep.c` 102-132; sockets: `sock_rx_ctx_cancel`,
            // `prov/sockets/src/sock_ep.c` 448-491, in 1.17). Each matches
            // the context against its queued receives only; sends and what
            // is not found are left, and come back at the close
            // (buffer.rs).
            for context in crate::buffer::contexts_in_flight(&self.domain, self.id) {
                // SAFETY: fi_cancel(3) on the open endpoint with the context
                // of an operation posted on it; the provider compares the
                // context with those it holds and never writes it unless it
                // holds it, and the slot's memory outlives the endpoint.
                unsafe { sys::fi_cancel(self.fid.fid(), context) };
            }
        }
        if state & (SHM_PEER | RELEASING) == SHM_PEER {
            // Other endpoints of this process may still use its region:
            // its provider close waits (see the shm_peers module). Its
            // receives were cancelled above.
            *self.state.get_mut() |= PARKING;
            return Ok(());
        }
        let bound = self.bound.get_mut().unwrap_or_else(|e| e.into_inner());
        let cqs = if state & (TX_CQ_GIVEN | RX_CQ_GIVEN) != 0 {
            distinct_cqs(bound)
        } else {
            [None, None]
        };
        let cntrs = bound.given_cntrs();
        let _exclusive = if held {
            Vec::new()
        } else {
            exclusive(&cqs, &cntrs)
        };
        if crate::quirks::keeps_closed_endpoints_in_waits(self.info.provider()) {
            // Waits on this endpoint's queues and counters would call back
            // into it once it is closed (see ProgressLock::set_poisoned):
            // refused from now on.
            poison_waits(&cqs, &cntrs);
        }
        // Inserts into its vector are held off while it closes: shm walks
        // the vector's endpoints in each insert with no lock of its own and
        // writes into each one's region (`smr_av_insert`,
        // `prov/shm/src/smr_av.c` 117-120 in 1.17), while the close unlinks
        // the endpoint under a lock the insert does not take, unmaps its
        // region and frees it (`smr_ep_close`). The vector's lock comes
        // after the queues' progress locks, as in `enable`.
        let av = if state & AV_GIVEN != 0 {
            self.av.get().cloned()
        } else {
            None
        };
        let inserts_held = av
            .as_ref()
            .map(|av| av.lock.lock().unwrap_or_else(|e| e.into_inner()));
        self.fid.close()?;
        drop(inserts_held);
        // Closed: memory of regions closed while it was open no longer
        // waits for it (see domain::Retired).
        self.domain.endpoint_closed(self.id);
        // On the domain's thread (an endpoint of a serialized domain is
        // closed where its handles live): closes other threads parked.
        self.domain.run_deferred();
        Ok(())
    }
}

impl EpInner {
    /// Its id.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Whether a transfer it posted may still be carried out by a peer of
    /// another process after its close (see `quirks::peers_copy_from_their_side`):
    /// on such a provider, when it may have posted to an address that is
    /// not an endpoint of this process (see
    /// `shm_peers::Registry::may_have_posted_elsewhere`).
    fn may_have_posted_elsewhere(&mut self) -> bool {
        if !self.peers_copy {
            return false;
        }
        let posted_to = *self.posted_to.get_mut();
        match self.av.get() {
            Some(av) => crate::shm_peers::lock().may_have_posted_elsewhere(av.id, posted_to),
            None => posted_to != 0,
        }
    }

    /// Whether it may have posted to (or received from) address `addr`.
    pub(crate) fn may_have_posted_to(&self, addr: u64) -> bool {
        self.posted_to.load(Ordering::Relaxed) & (1u64 << (addr & 63)) != 0
    }

    /// The endpoint whole, moved out of `self` (which is left closed and
    /// bound to nothing), to be kept open by the shm_peers module.
    fn take_parked(&mut self) -> EpInner {
        let av = OnceLock::new();
        if let Some(a) = self.av.take() {
            let _ = av.set(a);
        }
        EpInner {
            fid: self.fid.take(),
            id: self.id,
            info: self.info.clone(),
            state: AtomicU32::new(*self.state.get_mut() & !PARKING),
            connectionless: self.connectionless,
            inject_size: self.inject_size,
            peers_copy: self.peers_copy,
            tracks_peers: self.tracks_peers,
            cq_data_size: self.cq_data_size,
            rma: self.rma,
            bound: Mutex::new(std::mem::take(
                self.bound.get_mut().unwrap_or_else(|e| e.into_inner()),
            )),
            av,
            pending: Mutex::new(
                self.pending
                    .get_mut()
                    .unwrap_or_else(|e| e.into_inner())
                    .take(),
            ),
            domain: self.domain.clone(),
            conn_events: self.conn_events.clone(),
            min_multi_recv: Mutex::new(std::mem::take(
                self.min_multi_recv
                    .get_mut()
                    .unwrap_or_else(|e| e.into_inner()),
            )),
            posted_to: AtomicU64::new(*self.posted_to.get_mut()),
        }
    }
}

/// Closes in the provider the shm endpoints the shm_peers module found
/// no open endpoint may address any more, with the progress of all their
/// queues and counters held off until the last one is closed: one of them
/// may map another, and must not run once that one's region is gone.
pub(crate) fn release_group(mut members: Vec<EpInner>) {
    if members.is_empty() {
        return;
    }
    let mut cqs: Vec<Arc<CqInner>> = Vec::new();
    let mut cntrs: Vec<Arc<CntrInner>> = Vec::new();
    for m in &mut members {
        let state = m.state.get_mut();
        *state |= RELEASING;
        let given = *state & (TX_CQ_GIVEN | RX_CQ_GIVEN) != 0;
        let bound = m.bound.get_mut().unwrap_or_else(|e| e.into_inner());
        if given {
            cqs.extend(distinct_cqs(bound).into_iter().flatten().map(|(c, _)| c));
        }
        cntrs.extend(bound.given_cntrs().into_iter().map(|(c, _)| c));
    }
    let guards = write_all(
        cqs.iter()
            .map(|c| c.lifecycle())
            .chain(cntrs.iter().map(|c| &c.lifecycle)),
    );
    for m in &mut members {
        // A failure leaves it open: its drop below tries once more, on its
        // own, and otherwise keeps what it is bound to.
        let _ = m.close_fid_with(true);
    }
    drop(guards);
    drop(members);
}

impl Drop for EpInner {
    fn drop(&mut self) {
        if self.close_fid().is_err() {
            // Still open: it keeps what it is bound to (the fields below).
            return;
        }
        if *self.state.get_mut() & PARKING != 0 {
            // Kept open, whole, until no other endpoint may address it;
            // `self` is left closed and bound to nothing.
            let parked = self.take_parked();
            crate::shm_peers::park(parked);
            return;
        }
        // Before the vector's removals put off for it run (`unbound`):
        // whom it posted to is read from the vector's record.
        let keep_transmits = self.may_have_posted_elsewhere();
        let pending = self.pending.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = pending.take() {
            // Opened from a request and never accepted: see
            // quirks::frees_requests_only_when_answered.
            if crate::quirks::frees_requests_only_when_answered(p.info.provider()) {
                // SAFETY: fi_reject(3) on the open passive endpoint the
                // request came from, with its handle, consumed by nothing
                // else (the accept that would have consumed it never ran).
                unsafe { sys::fi_reject(p.source.pep.fid.as_ptr(), p.handle, ptr::null(), 0) };
            }
        }
        if let Some(av) = self.av.get() {
            av.unbound();
        }
        if *self.state.get_mut() & ENABLE_FAILED != 0 {
            // Closed: its queues' progress and its vector's inserts no
            // longer reach it. Nothing was bound after the failure
            // (bind_guard), so these are the queues and vector it marked.
            let bound = self.bound.get_mut().unwrap_or_else(|e| e.into_inner());
            for (cq, _) in distinct_cqs(bound).iter().flatten() {
                cq.lifecycle().set_broken(false);
            }
            for (cntr, _) in bound.distinct_cntrs() {
                cntr.lifecycle.set_broken(false);
            }
            if let Some(av) = self.av.get() {
                let mut deferred = av.lock.lock().unwrap_or_else(|e| e.into_inner());
                deferred.failed_endpoints = deferred.failed_endpoints.saturating_sub(1);
            }
        }
        // Closed: buffers it still had in flight that the provider dropped
        // without a completion come back to their pools now. Their
        // contexts are posted with again once none of its queues can hand
        // out a completion naming them (see the epochs module).
        // A send's completion can only be in the transmit queue, a
        // receive's in the receive queue.
        let bound = self.bound.get_mut().unwrap_or_else(|e| e.into_inner());
        let [sends, receives] =
            crate::buffer::reclaim_closed_endpoint(&self.domain, self.id, keep_transmits);
        for (marks, cq) in [(sends, &bound.tx), (receives, &bound.rx)] {
            match (marks, cq) {
                (Some(marks), Some(cq)) => cq.epochs.await_empty_read(marks, cq.lifecycle()),
                (Some(marks), None) => marks.settle(),
                (None, _) => {}
            }
        }
    }
}

/// Whether an endpoint of `caps` transmits and receives, as libfabric's
/// `ofi_needs_tx` / `ofi_needs_rx` decide (`src/common.c` 188-248 in 1.17),
/// a receive queue also being needed for remote CQ data.
fn directions(caps: u64, cq_data_size: usize) -> (bool, bool) {
    let either = |caps: u64, kinds: u64, local: u64, remote: u64| {
        caps & kinds != 0 && (caps & local != 0 || caps & remote == 0)
    };
    let send = either(
        caps,
        sys::FI_MSG | sys::FI_TAGGED,
        sys::FI_SEND,
        sys::FI_RECV,
    );
    let recv = either(
        caps,
        sys::FI_MSG | sys::FI_TAGGED,
        sys::FI_RECV,
        sys::FI_SEND,
    );
    let rma = either(
        caps,
        sys::FI_RMA | sys::FI_ATOMIC,
        sys::FI_READ | sys::FI_WRITE,
        sys::FI_REMOTE_READ | sys::FI_REMOTE_WRITE,
    );
    (send || rma, recv || cq_data_size > 0)
}

/// The distinct completion queues an endpoint is bound to, each with the
/// directions it serves, in address order (the order their locks are taken
/// in: see `wait::with_progress_guards`).
fn distinct_cqs(bound: &Bound) -> [Option<(Arc<CqInner>, CqBind)>; 2] {
    match (&bound.tx, &bound.rx) {
        (Some(tx), Some(rx)) if Arc::ptr_eq(tx, rx) => {
            [Some((tx.clone(), CqBind::TRANSMIT | CqBind::RECV)), None]
        }
        (tx, rx) => {
            let mut both = [
                tx.as_ref().map(|c| (c.clone(), CqBind::TRANSMIT)),
                rx.as_ref().map(|c| (c.clone(), CqBind::RECV)),
            ];
            both.sort_unstable_by_key(|c| c.as_ref().map_or(0, |(c, _)| lock_address(c)));
            both
        }
    }
}

fn lock_address(cq: &Arc<CqInner>) -> usize {
    cq.lifecycle() as *const ProgressLock as usize
}

/// The progress locks of the queues and counters, held exclusively, each
/// once, in address order (the order `wait::with_progress_guards` takes
/// them shared in).
fn exclusive<'a>(
    cqs: &'a [Option<(Arc<CqInner>, CqBind)>; 2],
    cntrs: &'a [(Arc<CntrInner>, CntrBind)],
) -> Vec<ProgressWrite<'a>> {
    write_all(
        cqs.iter()
            .flatten()
            .map(|(cq, _)| cq.lifecycle())
            .chain(cntrs.iter().map(|(c, _)| &c.lifecycle)),
    )
}

/// Takes each of `locks` exclusively, once, in address order (the order
/// every taker of several progress locks uses).
fn write_all<'a>(locks: impl Iterator<Item = &'a ProgressLock>) -> Vec<ProgressWrite<'a>> {
    let mut locks: Vec<&ProgressLock> = locks.collect();
    locks.sort_unstable_by_key(|l| *l as *const ProgressLock as usize);
    locks.dedup_by(|a, b| std::ptr::eq(*a, *b));
    locks.into_iter().map(ProgressLock::write).collect()
}

/// Refuses from now on the waits of the queues and counters that have a
/// wait object (see `ProgressLock::set_poisoned`). Called holding their
/// progress locks exclusively.
fn poison_waits(cqs: &[Option<(Arc<CqInner>, CqBind)>; 2], cntrs: &[(Arc<CntrInner>, CntrBind)]) {
    for (cq, _) in cqs.iter().flatten() {
        if cq.wait_obj != crate::wait::WaitObj::None {
            cq.lifecycle().set_poisoned();
        }
    }
    for (cntr, _) in cntrs {
        if cntr.wait_obj != crate::wait::WaitObj::None {
            cntr.lifecycle.set_poisoned();
        }
    }
}

/// An active endpoint. Cloning gives another handle. It keeps its domain
/// and every EQ, CQ, counter and AV bound to it open, so they cannot be
/// closed first (which fi_close(3) would refuse with `-FI_EBUSY`).
///
/// # What is checked before each call
/// The providers do not check that an endpoint is ready for a call, and
/// several dereference what is missing (tcp's `fi_listen`, `fi_connect` and
/// `fi_accept` use the bound EQ, its transfers the bound CQs; rxm and rxd
/// index their address tables with the address given). So, before the C
/// call: binds only before [`enable`](Self::enable), each kind once, of
/// objects of the same domain (CQ, counter, AV) or fabric (EQ); `enable` needs an
/// event queue (connected endpoints) or an address vector
/// (connectionless ones); transfers need the endpoint enabled, a CQ bound
/// for their direction, the capability (`FI_MSG` for sends and receives,
/// `FI_TAGGED` for tagged ones) and, on connectionless endpoints, an
/// address of the bound address vector; sends and `inject` on connected
/// endpoints, an established connection: `FI_CONNECTED` for the endpoint
/// read from its event queue after its `connect` or `accept` (tcp's
/// transmit path crashes before), and no [`shutdown`](Self::shutdown) or
/// `FI_SHUTDOWN` since (receives may be posted before the connection is
/// up); `inject` at most `inject_size`
/// bytes; remote CQ data only where the domain carries it. Each refusal is
/// a typed [`Error`] and hands the buffer back.
///
/// A post that fails, refused here or by the provider, hands the buffer
/// back with the error (a [`Handback`]): nothing is lost.
/// [`Error::is_again`] means the queue is full: read completions and post
/// the buffer again.
///
/// `T` is the threading model of its domain (see [`Domain`]):
/// the objects bound to it are of the same model, and under the serialized
/// models it is neither `Send` nor `Sync`.
pub struct Endpoint<T: ThreadModel = ThreadSafe> {
    pub(crate) inner: Arc<EpInner>,
    _model: std::marker::PhantomData<T>,
}

impl<T: ThreadModel> Clone for Endpoint<T> {
    fn clone(&self) -> Self {
        Endpoint::from_inner(self.inner.clone())
    }
}

/// `FI_OPT_CM_DATA_SIZE` of an endpoint or passive endpoint.
pub(crate) fn cm_data_size(fid: *mut sys::fid) -> Option<usize> {
    let mut size: usize = 0;
    let mut len = std::mem::size_of::<usize>();
    // SAFETY: fi_getopt(3) FI_OPT_CM_DATA_SIZE writes a size_t.
    let ret = unsafe {
        sys::fi_getopt(
            fid,
            sys::FI_OPT_ENDPOINT as i32,
            sys::FI_OPT_CM_DATA_SIZE as i32,
            (&mut size as *mut usize).cast(),
            &mut len,
        )
    };
    (ret == 0).then_some(size)
}

/// Refuses connection data longer than the endpoint's
/// `FI_OPT_CM_DATA_SIZE`, or any when the provider does not say its size
/// (providers copy it into fixed-size messages: tcp's `cm_ctx->msg.data`).
pub(crate) fn check_cm_data(fid: *mut sys::fid, data: &[u8]) -> Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    let max = cm_data_size(fid).unwrap_or(0);
    if data.len() > max {
        return Err(Error::TooLarge {
            what: "connection data (FI_OPT_CM_DATA_SIZE)",
            limit: max,
            given: data.len(),
        });
    }
    Ok(())
}

pub(crate) fn name_of(fid: *mut sys::fid, peer: bool) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; 128];
    for _ in 0..4 {
        let mut len = buf.len();
        // SAFETY: fi_getname/fi_getpeer (fi_cm(3)) write at most *addrlen
        // bytes and set *addrlen to the size needed; -FI_ETOOSMALL if short.
        let ret = unsafe {
            if peer {
                sys::fi_getpeer(fid.cast(), buf.as_mut_ptr().cast(), &mut len)
            } else {
                sys::fi_getname(fid, buf.as_mut_ptr().cast(), &mut len)
            }
        };
        if classify(ret) == Err(Errno::TOOSMALL) && len > buf.len() && len <= 1 << 16 {
            buf.resize(len, 0);
            continue;
        }
        check(if peer { "fi_getpeer" } else { "fi_getname" }, ret)?;
        buf.truncate(len.min(buf.len()));
        return Ok(buf);
    }
    Err(Error::call(
        if peer { "fi_getpeer" } else { "fi_getname" },
        Errno::TOOSMALL,
    ))
}

/// Decodes a `sockaddr_in` / `sockaddr_in6` as libfabric's socket providers
/// name endpoints.
#[must_use]
pub fn socket_addr(bytes: &[u8]) -> Option<SocketAddr> {
    if bytes.len() >= std::mem::size_of::<libc::sockaddr_in>() {
        let family = u16::from_ne_bytes([bytes[0], bytes[1]]);
        if family == libc::AF_INET as u16 {
            let port = u16::from_be_bytes([bytes[2], bytes[3]]);
            let ip = Ipv4Addr::new(bytes[4], bytes[5], bytes[6], bytes[7]);
            return Some(SocketAddr::V4(SocketAddrV4::new(ip, port)));
        }
        if family == libc::AF_INET6 as u16
            && bytes.len() >= std::mem::size_of::<libc::sockaddr_in6>()
        {
            let port = u16::from_be_bytes([bytes[2], bytes[3]]);
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&bytes[8..24]);
            return Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(ip),
                port,
                0,
                0,
            )));
        }
    }
    None
}

macro_rules! post {
    ($ep:expr, $call:literal, $receive:literal, $buffer:ident, |$p:ident| $body:expr) => {{
        // In flight before the call: the completion can be read, and the
        // buffer reclaimed, by another thread before the call returns.
        let (posted, $p) = $buffer.into_flight($ep.inner.id, $receive);
        // SAFETY: fi_msg(3)/fi_tagged(3)/fi_rma(3)/fi_atomic(3): the
        // endpoint is enabled with a CQ
        // bound for this direction and the capability granted, and any
        // address is a live entry of its AV (checked by the caller); the
        // buffer's memory (registered, desc from fi_mr_desc) and its context
        // stay valid and untouched until the completion, because the Buffer
        // was moved into the provider (into_flight) and only
        // BufferPool::reclaim, fed by that completion, gives it back.
        let ret = unsafe { $body };
        if ret == 0 {
            Ok(())
        } else {
            $crate::ep::post_refused(posted, $call, ret)
        }
    }};
}

/// A post the provider refused (`ret`, not 0): no completion will come,
/// so the buffer comes back with the call's error. Out of line, so that
/// the post saves no registers for it.
#[cold]
#[inline(never)]
pub(crate) fn post_refused<R: crate::error::Ret>(
    posted: crate::buffer::Posted,
    call: &'static str,
    ret: R,
) -> Handback<Buffer> {
    Err((posted.refused(), Error::from_ret(call, ret)))
}

#[cold]
#[inline(never)]
fn not_ready(call: &'static str, state: u32, need: u32) -> Error {
    let missing = need & !state;
    if missing & ENABLED != 0 {
        return Error::State {
            call,
            reason: "the endpoint is not enabled (Endpoint::enable)",
        };
    }
    if missing & TX_CQ != 0 {
        return Error::State {
            call,
            reason: "no completion queue is bound for transmits (CqBind::TRANSMIT)",
        };
    }
    if missing & RX_CQ != 0 {
        return Error::State {
            call,
            reason: "no completion queue is bound for receives (CqBind::RECV)",
        };
    }
    if missing & EQ != 0 {
        return Error::State {
            call,
            reason: "no event queue is bound (Endpoint::bind_eq)",
        };
    }
    if missing & CAP_TAGGED != 0 {
        return Error::MissingCapability {
            call,
            needed: Caps::TAGGED,
        };
    }
    if missing & CAP_MSG != 0 {
        return Error::MissingCapability {
            call,
            needed: Caps::MSG,
        };
    }
    if state & DISCONNECTED != 0 {
        return Error::State {
            call,
            reason: "the connection is shut down (Endpoint::shutdown, or FI_SHUTDOWN read \
                     from the event queue)",
        };
    }
    if state & CONNECTING != 0 {
        return Error::State {
            call,
            reason: "the connection is not established yet: read FI_CONNECTED for this \
                     endpoint from its event queue first",
        };
    }
    Error::State {
        call,
        reason: "the endpoint is not connected (Endpoint::connect or accept, then \
                 FI_CONNECTED from its event queue)",
    }
}

#[cold]
#[inline(never)]
fn foreign_buffer(call: &'static str) -> Error {
    Error::ForeignObject {
        call,
        what: "buffer (its pool)",
        scope: ObjectScope::Domain,
    }
}

/// Why remote CQ data is refused, as `Endpoint::cq_data_fits` finds it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CqDataFault {
    /// The domain's `cq_data_size` is 0.
    NoCqData,
    /// The data does not fit the domain's `cq_data_size` (these bytes).
    TooLarge(usize),
}

impl CqDataFault {
    /// The error of this fault for `data` given to `call`.
    #[cold]
    #[inline(never)]
    pub(crate) fn error(self, call: &'static str, data: u64) -> Error {
        match self {
            CqDataFault::NoCqData => Error::State {
                call,
                reason: "the domain carries no remote CQ data (cq_data_size is 0)",
            },
            CqDataFault::TooLarge(bytes) => Error::TooLarge {
                what: "remote CQ data (domain cq_data_size bytes)",
                limit: (1usize << (bytes * 8)) - 1,
                given: data as usize,
            },
        }
    }
}

#[cold]
#[inline(never)]
pub(crate) fn bad_address(call: &'static str, addr: Addr) -> Error {
    Error::InvalidArgument(
        format!("{call}: {addr:?} is not an address of the endpoint's address vector").into(),
    )
}

impl<T: ThreadModel> Endpoint<T> {
    /// A handle of the model `T` over `inner`, opened as an `Endpoint<T>`.
    pub(crate) fn from_inner(inner: Arc<EpInner>) -> Self {
        Endpoint {
            inner,
            _model: std::marker::PhantomData,
        }
    }

    /// `fi_endpoint`: opens an endpoint described by `info` (from
    /// `getinfo`; to accept a connection request use
    /// [`from_request`](Self::from_request)).
    ///
    /// # Errors
    /// [`Error::ForeignObject`] for an `fi_info` of another provider,
    /// fabric or domain; [`Error::InvalidArgument`] for a connection
    /// request's.
    #[doc(alias = "fi_endpoint")]
    pub fn open(domain: &Domain<T>, info: &InfoEntry) -> Result<Self> {
        if info.has_handle() {
            return Err(Error::InvalidArgument(
                "this fi_info carries a connection request's handle: open the endpoint with \
                 Endpoint::from_request, which consumes the request"
                    .into(),
            ));
        }
        domain.inner.check_info("fi_endpoint", info)?;
        Self::open_owned(domain, info.to_owned_info()?, None).map_err(|(e, _, _)| e)
    }

    /// Opens the endpoint that accepts `request` (`fi_endpoint` with the
    /// request's `fi_info`); bind it, enable it and call
    /// [`accept`](Self::accept). The request is consumed: the endpoint now
    /// owns its handle, and one dropped before its accept succeeded rejects
    /// it. On error the request comes back unanswered.
    ///
    /// # Errors
    /// [`Error::ForeignObject`] when `domain` is not of the provider and
    /// fabric the request arrived on.
    pub fn from_request(
        domain: &Domain<T>,
        request: ConnRequest,
    ) -> std::result::Result<Self, (ConnRequest, Error)> {
        let same_fabric = request
            .source()
            .is_some_and(|s| Arc::ptr_eq(&s.pep.fabric, &domain.inner.fabric));
        let check = if same_fabric {
            domain.inner.check_info("fi_endpoint", request.info())
        } else {
            Err(Error::ForeignObject {
                call: "fi_endpoint",
                what: "connection request",
                scope: ObjectScope::Fabric,
            })
        };
        if let Err(error) = check {
            return Err((request, error));
        }
        let (info, source) = request.into_parts();
        Self::open_owned(domain, info, source).map_err(|(error, info, source)| {
            // fi_endpoint failed: the handle was not consumed.
            (ConnRequest::new(info, source), error)
        })
    }

    /// `fi_endpoint` with an owned fi_info, handed back on failure.
    #[allow(clippy::type_complexity)]
    fn open_owned(
        domain: &Domain<T>,
        info: Info,
        source: Option<RequestSource>,
    ) -> std::result::Result<Self, (Error, Info, Option<RequestSource>)> {
        let ep_type = info.ep_type();
        if !matches!(ep_type, EpType::Msg | EpType::Rdm | EpType::Dgram) {
            let e =
                Error::InvalidArgument(format!("fi_endpoint: endpoint type {ep_type:?}").into());
            return Err((e, info, source));
        }
        // 56 bits: the rest of a slot's state word. Ids only grow (the
        // domain's retired memory relies on it).
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed) & ((1 << 56) - 1);
        // Counted open from before fi_endpoint, under the domain's retired
        // lock: a memory region closing meanwhile waits for this endpoint
        // too (see domain::Retired).
        domain.inner.run_deferred();
        domain.inner.retired().opening(id);
        let mut raw = ptr::null_mut();
        // SAFETY: fi_endpoint(3) with an open domain and an fi_info of its
        // provider, fabric and domain (checked by the callers); OwnedFid
        // closes the endpoint before the domain handle drops.
        let ret = unsafe {
            sys::fi_endpoint(
                domain.inner.fid.as_ptr(),
                info.ptr.as_ptr(),
                &mut raw,
                ptr::null_mut(),
            )
        };
        let fid = match OwnedFid::opened("fi_endpoint", ret, raw) {
            Ok(fid) => fid,
            Err(e) => {
                domain.inner.endpoint_closed(id);
                return Err((e, info, source));
            }
        };
        let caps = info.caps();
        // A connectionless endpoint reaches every address of its AV.
        let mut state = if ep_type == EpType::Msg { 0 } else { CONNECTED };
        if caps.contains(Caps::MSG) {
            state |= CAP_MSG;
        }
        if caps.contains(Caps::TAGGED) {
            state |= CAP_TAGGED;
        }
        if caps.contains(Caps::MULTI_RECV) {
            state |= CAP_MULTI;
        }
        let pending = match source {
            Some(source) => match info.to_owned_info() {
                Ok(copy) => Some(PendingAccept {
                    source,
                    // SAFETY: a valid fi_info; its handle is the request's.
                    handle: unsafe { (*info.as_raw()).handle },
                    info: copy,
                }),
                Err(e) => {
                    let mut fid = fid;
                    if fid.close().is_ok() {
                        domain.inner.endpoint_closed(id);
                    }
                    return Err((e, info, Some(source)));
                }
            },
            None => None,
        };
        Ok(Endpoint::from_inner(Arc::new(EpInner {
            fid,
            id,
            connectionless: ep_type != EpType::Msg,
            inject_size: info.inject_size(),
            peers_copy: crate::quirks::peers_copy_from_their_side(info.provider()),
            tracks_peers: crate::quirks::peers_copy_from_their_side(info.provider())
                || crate::quirks::closed_peers_dangle(info.provider()),
            cq_data_size: info.cq_data_size(),
            rma: rma::RmaFacts::of(&info, &domain.inner.info),
            info: Arc::new(info),
            state: AtomicU32::new(state),
            bound: Mutex::new(Bound::default()),
            av: OnceLock::new(),
            pending: Mutex::new(pending),
            min_multi_recv: Mutex::new(MinMultiRecv::default()),
            posted_to: AtomicU64::new(0),
            domain: domain.inner.clone(),
            conn_events: (!T::LOCKED).then(Arc::default),
        })))
    }

    fn raw(&self) -> *mut sys::fid_ep {
        self.inner.fid.as_ptr()
    }

    /// Checks that the state bits `need` are all set, and that the
    /// connection is not shut down. A serialized endpoint first takes in
    /// the connection events its event queue recorded, so that a shutdown
    /// recorded there stops this post (one load when there is none).
    #[inline(always)]
    fn ready(&self, call: &'static str, need: u32) -> Result<()> {
        self.ready_state(need)
            .map_err(|state| not_ready(call, state, need))
    }

    /// [`ready`](Self::ready)'s check, giving the state found when it
    /// fails (for `not_ready` to explain).
    #[inline(always)]
    fn ready_state(&self, need: u32) -> std::result::Result<(), u32> {
        if !T::LOCKED {
            self.take_in_events();
        }
        let state = self.inner.state.load(Ordering::Acquire);
        if state & (need | DISCONNECTED) != need {
            return Err(state);
        }
        Ok(())
    }

    /// Takes in the connection events recorded for a serialized endpoint
    /// (see `EpInner::conn_events`); nothing for a thread-safe one.
    #[inline(always)]
    fn take_in_events(&self) {
        if let Some(events) = &self.inner.conn_events {
            // The queue records CONNECTED only while CONNECTING is set in
            // the record, as `connection_event` does in the state.
            let seen = events.load(Ordering::Acquire) & (CONNECTED | DISCONNECTED);
            if seen & !self.inner.state.load(Ordering::Acquire) != 0 {
                self.inner.state.fetch_or(seen, Ordering::AcqRel);
            }
        }
    }

    /// Checks a peer address: a live entry of the bound AV on connectionless
    /// endpoints (`unspec_ok`: or `Addr::UNSPEC`, "any source"); ignored by
    /// connected ones, which are given `FI_ADDR_UNSPEC`.
    #[inline(always)]
    fn check_peer(&self, call: &'static str, addr: Addr, unspec_ok: bool) -> Result<u64> {
        self.live_peer(addr, unspec_ok)
            .ok_or_else(|| bad_address(call, addr))
    }

    /// [`check_peer`](Self::check_peer)'s check: the address to give the
    /// provider, or `None` for one that is not a live entry.
    #[inline(always)]
    fn live_peer(&self, addr: Addr, unspec_ok: bool) -> Option<u64> {
        if !self.inner.connectionless {
            return Some(sys::FI_ADDR_UNSPEC);
        }
        if unspec_ok && addr == Addr::UNSPEC {
            return Some(addr.0);
        }
        match self.inner.av.get() {
            Some(av) if av.is_live(addr) => {
                if self.inner.tracks_peers {
                    self.note_posted_to(addr);
                }
                Some(addr.0)
            }
            _ => None,
        }
    }

    /// Records in `posted_to` that the endpoint posts to (or receives
    /// from) `addr`; the first time only, a read-modify-write.
    #[inline(always)]
    fn note_posted_to(&self, addr: Addr) {
        // A rotation, which the check of a live address does not share:
        // the shift of `1` was computed, for this cold branch, on every
        // post.
        let bit = 1u64.rotate_left(addr.0 as u32);
        if self.inner.posted_to.load(Ordering::Relaxed) & bit == 0 {
            self.inner.posted_to.fetch_or(bit, Ordering::Relaxed);
        }
    }

    /// Refuses a buffer registered with another domain.
    #[inline(always)]
    fn check_buffer(&self, call: &'static str, buffer: &Buffer) -> Result<()> {
        if !buffer.of_domain(&self.inner.domain) {
            return Err(foreign_buffer(call));
        }
        Ok(())
    }

    fn bind_guard(&self, call: &'static str) -> Result<std::sync::MutexGuard<'_, Bound>> {
        let bound = self.inner.bound.lock().unwrap_or_else(|e| e.into_inner());
        let state = self.inner.state.load(Ordering::Acquire);
        if state & ENABLED != 0 {
            return Err(Error::State {
                call,
                reason: "the endpoint is already enabled: bind before Endpoint::enable",
            });
        }
        if state & ENABLE_FAILED != 0 {
            return Err(Error::State {
                call,
                reason: "the endpoint failed to enable, and its provider keeps it in its queues' progress: close it and open another",
            });
        }
        Ok(bound)
    }

    /// The endpoint's fid, as events name it.
    #[must_use]
    pub fn fid(&self) -> Fid {
        Fid::from_raw(self.inner.fid.fid())
    }

    /// The `fi_info` it was opened with.
    #[must_use]
    pub fn info(&self) -> &InfoEntry {
        &self.inner.info
    }

    /// `fi_ep_bind` to an event queue (connection events), once, before
    /// [`enable`](Self::enable).
    ///
    /// # Errors
    /// [`Error::ForeignObject`] for a queue of another fabric;
    /// [`Error::State`] after `enable` or when a queue is already bound;
    /// [`Error::TooLarge`] for an endpoint whose connection data
    /// (`FI_OPT_CM_DATA_SIZE`) is more than an event queue holds
    /// ([`DEFAULT_CM_DATA_CAPACITY`](crate::eq::DEFAULT_CM_DATA_CAPACITY);
    /// no provider has one).
    #[doc(alias = "fi_ep_bind")]
    pub fn bind_eq(&self, eq: &EventQueue) -> Result<()> {
        if !Arc::ptr_eq(&eq.inner.fabric, &self.inner.domain.fabric) {
            return Err(Error::ForeignObject {
                call: "fi_ep_bind",
                what: "event queue",
                scope: ObjectScope::Fabric,
            });
        }
        let mut bound = self.bind_guard("fi_ep_bind")?;
        if bound.eq.is_some() {
            return Err(Error::State {
                call: "fi_ep_bind",
                reason: "an event queue is already bound to this endpoint",
            });
        }
        let cm_data = self.cm_data_size();
        if let Some(size) = cm_data {
            check_cm_data_size(size)?;
        }
        // SAFETY: fi_ep_bind(3) of two open objects of one fabric; the EQ is
        // kept open by the Arc stored below as long as the endpoint is.
        check("fi_ep_bind(eq)", unsafe {
            sys::fi_ep_bind(self.raw(), eq.inner.fid.fid(), 0)
        })?;
        if let Some(size) = cm_data {
            eq.inner.raise_cm_data(size);
        }
        eq.inner.registry.insert(
            self.fid(),
            match &self.inner.conn_events {
                None => RegisteredObject::Endpoint(Arc::downgrade(&self.inner)),
                Some(events) => RegisteredObject::Serialized(events.clone()),
            },
        );
        bound.eq = Some(eq.inner.clone());
        self.inner.state.fetch_or(EQ, Ordering::Release);
        Ok(())
    }

    /// Binds a completion queue, for transmit and/or receive completions,
    /// before [`enable`](Self::enable); one queue per direction. The
    /// provider is given it (`fi_ep_bind`) by `enable`, just before
    /// `fi_enable`: rxm, rxd and shm crash a read of a queue with a bound,
    /// never enabled endpoint. An error of that `fi_ep_bind` is `enable`'s.
    ///
    /// # Errors
    /// [`Error::ForeignObject`] for a queue of another domain;
    /// [`Error::State`] after `enable` or when a queue is already bound for
    /// a direction; [`Error::InvalidArgument`] for flags other than
    /// `TRANSMIT` and `RECV`, or none.
    pub fn bind_cq<F: Format>(&self, cq: &CompletionQueue<F, T>, flags: CqBind) -> Result<()> {
        if !Arc::ptr_eq(&cq.inner.domain, &self.inner.domain) {
            return Err(Error::ForeignObject {
                call: "fi_ep_bind",
                what: "completion queue",
                scope: ObjectScope::Domain,
            });
        }
        let known = CqBind::TRANSMIT | CqBind::RECV;
        if flags.is_empty() || !known.contains(flags) {
            return Err(Error::InvalidArgument(
                format!(
                    "fi_ep_bind: completion queue flags {flags:?}: give TRANSMIT, RECV or both"
                )
                .into(),
            ));
        }
        let mut bound = self.bind_guard("fi_ep_bind")?;
        let tx = flags.contains(CqBind::TRANSMIT);
        let rx = flags.contains(CqBind::RECV);
        if (tx && bound.tx.is_some()) || (rx && bound.rx.is_some()) {
            return Err(Error::State {
                call: "fi_ep_bind",
                reason: "a completion queue is already bound for this direction",
            });
        }
        // The provider is given the queue in `enable`, just before
        // fi_enable: a bound, never enabled endpoint crashes the util
        // providers' progress of the queue (see CqInner::lifecycle).
        let mut bits = 0;
        if tx {
            bound.tx = Some(cq.inner.clone());
            bits |= TX_CQ;
        }
        if rx {
            bound.rx = Some(cq.inner.clone());
            bits |= RX_CQ;
            if F::FORMAT == sys::FI_CQ_FORMAT_DATA || F::FORMAT == sys::FI_CQ_FORMAT_TAGGED {
                bits |= RX_CQ_BUF;
            }
        }
        self.inner.state.fetch_or(bits, Ordering::Release);
        Ok(())
    }

    /// Binds a counter, for the kinds of completions in `flags`, before
    /// [`enable`](Self::enable); one counter per kind, one counter may
    /// count several. The endpoint keeps the counter open. As with
    /// [`bind_cq`](Self::bind_cq), the provider is given it (`fi_ep_bind`)
    /// by `enable`, just before `fi_enable`: the util providers run the
    /// endpoints bound to a counter in every read and wait of it
    /// (`ofi_cntr_progress`, `prov/util/src/util_cntr.c` 237-250, reached
    /// from 77, 87 and 155 in 1.17; the endpoint is listed at the bind,
    /// `prov/util/src/util_ep.c` 160), and rxm's progress reads state only
    /// `fi_enable` creates (see `CqInner::lifecycle`). An error of that
    /// `fi_ep_bind` is `enable`'s.
    ///
    /// Counting the RMA that peers target at the endpoint
    /// ([`CntrBind::REMOTE_READ`], [`CntrBind::REMOTE_WRITE`]) needs an
    /// endpoint with `FI_RMA_EVENT` (ask for
    /// [`Caps::RMA_EVENT`](crate::info::Caps::RMA_EVENT) in the hints;
    /// udp;ofi_rxd, shm and sockets offer it and count; tcp offers it but
    /// counts only writes with remote CQ data, so it is refused there;
    /// tcp;ofi_rxm and verbs do not offer it).
    ///
    /// # Errors
    /// [`Error::ForeignObject`] for a counter of another domain;
    /// [`Error::State`] after `enable` or when a counter is already bound
    /// for one of the kinds; [`Error::InvalidArgument`] for no kind;
    /// [`Error::MissingCapability`] for `REMOTE_READ` or `REMOTE_WRITE` on
    /// an endpoint without `FI_RMA_EVENT`; [`Error::Unsupported`] for them
    /// on tcp (it counts only remote writes that carry CQ data).
    ///
    /// ```
    /// use libfabric::prelude::*;
    /// use libfabric::cntr::{CntrAttr, CntrBind, Counter};
    /// let info = getinfo(&Hints::new().provider("tcp").node("127.0.0.1"))?.into_iter().next().unwrap();
    /// let domain = Domain::open(&Fabric::open(&info)?, &info)?;
    /// let ep = Endpoint::open(&domain, &info)?;
    /// let counter = Counter::open(&domain, &CntrAttr::new())?;
    /// ep.bind_cntr(&counter, CntrBind::SEND | CntrBind::RECV)?;
    /// // The endpoint holds it: closing it now hands it back.
    /// let (counter, e) = counter.close().unwrap_err();
    /// assert!(matches!(e, libfabric::Error::InUse { .. }));
    /// drop(ep);
    /// counter.close().map_err(|(_, e)| e)?;
    /// # Ok::<(), libfabric::Error>(())
    /// ```
    #[doc(alias = "fi_ep_bind")]
    pub fn bind_cntr(&self, cntr: &Counter<T>, flags: CntrBind) -> Result<()> {
        if !Arc::ptr_eq(&cntr.inner.domain, &self.inner.domain) {
            return Err(Error::ForeignObject {
                call: "fi_ep_bind",
                what: "counter",
                scope: ObjectScope::Domain,
            });
        }
        if flags.is_empty() || !CntrBind::all().contains(flags) {
            return Err(Error::InvalidArgument(
                format!(
                    "fi_ep_bind: counter flags {flags:?}: give one or more of SEND, RECV, READ, \
                     WRITE, REMOTE_READ, REMOTE_WRITE"
                )
                .into(),
            ));
        }
        // fi_endpoint(3): counting RMA that peers target at this endpoint
        // needs an endpoint created with FI_RMA_EVENT.
        if flags.intersects(CntrBind::REMOTE_READ | CntrBind::REMOTE_WRITE) {
            if !self.inner.info.caps().contains(Caps::RMA_EVENT) {
                return Err(Error::MissingCapability {
                    call: "fi_ep_bind",
                    needed: Caps::RMA_EVENT,
                });
            }
            if !crate::quirks::counts_remote_rma_at_endpoints(self.inner.info.provider()) {
                return Err(Error::Unsupported {
                    call: "fi_ep_bind",
                    reason:
                        "tcp counts at the target only remote writes that carry CQ data: plain \
                             writes and reads are internal transfers that no counter counts",
                });
            }
        }
        let mut bound = self.bind_guard("fi_ep_bind")?;
        let taken = CNTR_KINDS
            .iter()
            .zip(&bound.cntrs)
            .any(|(kind, c)| flags.contains(*kind) && c.is_some());
        if taken {
            return Err(Error::State {
                call: "fi_ep_bind",
                reason: "a counter is already bound for one of these kinds",
            });
        }
        for (kind, slot) in CNTR_KINDS.iter().zip(bound.cntrs.iter_mut()) {
            if flags.contains(*kind) {
                *slot = Some(cntr.inner.clone());
            }
        }
        Ok(())
    }

    /// `fi_ep_bind` to an address vector (connectionless endpoints), once,
    /// before [`enable`](Self::enable).
    ///
    /// # Errors
    /// [`Error::ForeignObject`] for a vector of another domain;
    /// [`Error::State`] after `enable` or when one is already bound.
    pub fn bind_av(&self, av: &AddressVector<T>) -> Result<()> {
        if !Arc::ptr_eq(&av.inner.domain, &self.inner.domain) {
            return Err(Error::ForeignObject {
                call: "fi_ep_bind",
                what: "address vector",
                scope: ObjectScope::Domain,
            });
        }
        let _bound = self.bind_guard("fi_ep_bind")?;
        if self.inner.av.get().is_some() {
            return Err(Error::State {
                call: "fi_ep_bind",
                reason: "an address vector is already bound to this endpoint",
            });
        }
        // Given to the provider only in `enable`: shm's insert walks the
        // endpoints bound to the vector and maps the address into each
        // one's region (`smr_av_insert`, `prov/shm/src/smr_av.c` 117-120 in
        // 1.17, 130-133 in 1.22), which only `fi_enable` creates: an insert
        // between the bind and the enable crashed.
        av.inner.bound();
        let _ = self.inner.av.set(av.inner.clone());
        self.inner.state.fetch_or(AV, Ordering::Release);
        Ok(())
    }

    /// `fi_ep_bind` of the completion queues, then `fi_enable`, once.
    /// Needs an event queue bound on connected (MSG) endpoints and an
    /// address vector on connectionless ones, and a completion queue for
    /// each direction its caps use (on tcp of libfabric 1.17, both,
    /// whatever its caps: it answers peers through them). The queues' reads, waits and
    /// polls on other threads wait meanwhile (the util providers' progress
    /// crashes on an endpoint being enabled).
    ///
    /// On rxm, rxd and shm a failed enable is final: the provider keeps the
    /// endpoint in its queues' progress and in its address vector, so
    /// until the endpoint is closed the queues' reads and polls and the
    /// vector's inserts are [`Error::State`] (waits on the queues stay
    /// refused, as after any close there), and the endpoint binds and
    /// enables nothing more. Close it and open another.
    ///
    /// # Errors
    /// [`Error::State`] when what it needs is not bound, it is already
    /// enabled, an enable of it failed on rxm, rxd or shm, or, on shm, its
    /// address vector may map an endpoint of this process that closed, or
    /// such an endpoint had its name (see [`close`](Self::close)); the
    /// provider's error.
    #[doc(alias = "fi_enable")]
    pub fn enable(&self) -> Result<()> {
        let mut bound = self.bind_guard("fi_enable")?;
        let state = self.inner.state.load(Ordering::Acquire);
        if self.inner.connectionless && state & AV == 0 {
            return Err(Error::State {
                call: "fi_enable",
                reason: "a connectionless endpoint needs an address vector bound first",
            });
        }
        if !self.inner.connectionless && state & EQ == 0 {
            return Err(Error::State {
                call: "fi_enable",
                reason: "a connected endpoint needs an event queue bound first",
            });
        }
        // A completion queue for each direction the endpoint's caps use,
        // before any C call: a provider that refuses fi_enable for a
        // missing one (-FI_ENOCQ) keeps the queues already given to it,
        // and their reads then crash on the never enabled endpoint (rxm,
        // shm). The rule is libfabric's own (`ofi_needs_tx`/`ofi_needs_rx`,
        // `src/common.c` 188-248; rxm also wants a receive queue for remote
        // CQ data, `prov/rxm/src/rxm_ep.c` 1301-1318; shm `smr_ep.c`
        // 1674-1676; tcp `tcpx_ep.c` 651-655, in 1.17).
        let (needs_tx, needs_rx) =
            directions(self.inner.info.caps().bits(), self.inner.cq_data_size);
        if needs_tx && state & TX_CQ == 0 {
            return Err(Error::State {
                call: "fi_enable",
                reason: "the endpoint's caps send: bind a completion queue for transmits (CqBind::TRANSMIT) first",
            });
        }
        if !self.inner.connectionless
            && state & (TX_CQ | RX_CQ) != TX_CQ | RX_CQ
            && crate::quirks::answers_peers_through_its_queues(self.inner.info.provider())
        {
            return Err(Error::State {
                call: "fi_enable",
                reason: "tcp of libfabric 1.17 answers a peer's reads and writes through both of the endpoint's completion queues, whatever its caps: bind one for transmits and one for receives (CqBind::TRANSMIT, CqBind::RECV) first",
            });
        }
        if needs_rx && state & RX_CQ == 0 {
            return Err(Error::State {
                call: "fi_enable",
                reason: "the endpoint's caps receive (or the domain carries remote CQ data): bind a completion queue for receives (CqBind::RECV) first",
            });
        }
        if state & SHM_PEER == 0 && crate::quirks::closed_peers_dangle(self.inner.info.provider()) {
            if let Some(av) = self.inner.av.get() {
                // Known to the shm_peers module before the provider can map
                // it anywhere: from here its close waits for the endpoints
                // that may address it, and a vector that may map an
                // endpoint that closed is refused.
                let name = crate::shm_peers::normalize(&self.name()?);
                crate::shm_peers::lock().register(self.inner.id, name, av.id)?;
                self.inner.state.fetch_or(SHM_PEER, Ordering::AcqRel);
            }
        }
        // The address vector, the completion queues, then fi_enable, with
        // the vector's inserts and removals and the queues' progress held
        // off meanwhile (see bind_av and CqInner::lifecycle).
        let cqs = distinct_cqs(&bound);
        let cntrs = bound.distinct_cntrs();
        let exclusive = exclusive(&cqs, &cntrs);
        let given = self.give_and_enable(&cqs, &cntrs, &mut bound.cntrs_given);
        if given.is_err()
            && crate::quirks::runs_unenabled_endpoints_in_progress(self.inner.info.provider())
        {
            // Whatever part of it the provider took (an AV, a queue whose
            // bind failed half-way: rxd holds an FI_WAIT_FD queue whose
            // bind failed with -EMFILE), it keeps the endpoint in the
            // queues' progress and the vector's inserts. Final: the
            // endpoint binds and enables nothing more; its queues' reads and
            // polls and its vector's inserts are refused until it is
            // closed, and their waits for good, as after a close (see
            // ProgressLock::set_poisoned).
            self.inner.state.fetch_or(ENABLE_FAILED, Ordering::AcqRel);
            for (cq, _) in cqs.iter().flatten() {
                cq.lifecycle().set_broken(true);
            }
            for (cntr, _) in &cntrs {
                cntr.lifecycle.set_broken(true);
            }
            poison_waits(&cqs, &cntrs);
            if let Some(av) = self.inner.av.get() {
                av.lock
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .failed_endpoints += 1;
            }
        }
        drop(exclusive);
        given?;
        self.inner.state.fetch_or(ENABLED, Ordering::Release);
        // Some providers may know the connection data size only once
        // enabled. One the queue cannot take is refused at connect and
        // accept (admit_cm_data).
        if let (Some(size), Some(eq)) = (self.cm_data_size(), &bound.eq) {
            if check_cm_data_size(size).is_ok() {
                eq.raise_cm_data(size);
            }
        }
        Ok(())
    }

    /// The address vector (with its inserts held off), the completion
    /// queues not given yet, then `fi_enable`: the part of `enable` that
    /// runs with the queues' progress held off.
    fn give_and_enable(
        &self,
        cqs: &[Option<(Arc<CqInner>, CqBind)>; 2],
        cntrs: &[(Arc<CntrInner>, CntrBind)],
        cntrs_given: &mut Option<CntrBind>,
    ) -> Result<()> {
        let av = self.inner.av.get();
        let _av_calls = av.map(|av| av.lock.lock().unwrap_or_else(|e| e.into_inner()));
        if let Some(av) = av {
            if self.inner.state.load(Ordering::Acquire) & AV_GIVEN == 0 {
                // SAFETY: fi_ep_bind(3) of two open objects of one domain
                // (checked in bind_av), before fi_enable, once; the AV is
                // kept open by the Arc in `av` as long as the endpoint is.
                check("fi_ep_bind(av)", unsafe {
                    sys::fi_ep_bind(self.raw(), av.fid.fid(), 0)
                })?;
                self.inner.state.fetch_or(AV_GIVEN, Ordering::Release);
            }
        }
        for (cq, flags) in cqs.iter().flatten() {
            // Each direction once (an enable the provider refused may have
            // given some already).
            let given = self.inner.state.load(Ordering::Acquire);
            let mut flags = *flags;
            if given & TX_CQ_GIVEN != 0 {
                flags.remove(CqBind::TRANSMIT);
            }
            if given & RX_CQ_GIVEN != 0 {
                flags.remove(CqBind::RECV);
            }
            if flags.is_empty() {
                continue;
            }
            // SAFETY: fi_ep_bind(3) of two open objects of one domain
            // (checked in bind_cq), before fi_enable, each direction once;
            // the CQ is kept open by the Arc in `bound` as long as the
            // endpoint is.
            check("fi_ep_bind(cq)", unsafe {
                sys::fi_ep_bind(self.raw(), cq.fid.fid(), flags.bits())
            })?;
            let mut bits = 0;
            if flags.contains(CqBind::TRANSMIT) {
                bits |= TX_CQ_GIVEN;
            }
            if flags.contains(CqBind::RECV) {
                bits |= RX_CQ_GIVEN;
            }
            self.inner.state.fetch_or(bits, Ordering::Release);
        }
        for (cntr, kinds) in cntrs {
            // Each kind once (an enable the provider refused may have given
            // some already).
            let given = cntrs_given.unwrap_or(CntrBind::empty());
            let kinds = *kinds - given;
            if kinds.is_empty() {
                continue;
            }
            // SAFETY: fi_ep_bind(3) of two open objects of one domain
            // (checked in bind_cntr), before fi_enable, each kind once; the
            // counter is kept open by the Arc in `bound` as long as the
            // endpoint is.
            check("fi_ep_bind(cntr)", unsafe {
                sys::fi_ep_bind(self.raw(), cntr.fid.fid(), kinds.bits())
            })?;
            *cntrs_given = Some(given | kinds);
        }
        // SAFETY: fi_enable(3) on an open endpoint with what it needs bound
        // (enable: the queues its caps use, and on tcp of 1.17 both queues
        // whatever they are, which its answers to peers go through).
        check("fi_enable", unsafe { sys::fi_enable(self.raw()) })
    }

    /// Refuses connection management on a connectionless endpoint (before
    /// any option of it is asked: see `cm_data_size`).
    fn connected_only(&self, call: &'static str) -> Result<()> {
        if self.inner.connectionless {
            return Err(Error::State {
                call,
                reason: "only connected (FI_EP_MSG) endpoints connect",
            });
        }
        Ok(())
    }

    /// Admits the endpoint's connection data into its event queue before
    /// a connect or accept makes events that carry it possible
    /// ([`EqInner::admit_cm_data`]).
    fn admit_cm_data(&self) -> Result<()> {
        let eq = self
            .inner
            .bound
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .eq
            .clone();
        match eq {
            Some(eq) => eq.admit_cm_data(self.cm_data_size()),
            None => Ok(()),
        }
    }

    /// Marks the endpoint as connecting, once.
    fn start_connecting(&self, call: &'static str) -> Result<()> {
        if self.inner.connectionless {
            return Err(Error::State {
                call,
                reason: "only connected (FI_EP_MSG) endpoints connect",
            });
        }
        self.ready(call, ENABLED | EQ)?;
        if self.inner.set_connecting(true) & CONNECTING != 0 {
            return Err(Error::State {
                call,
                reason: "the endpoint already connected or accepted",
            });
        }
        Ok(())
    }

    /// `fi_connect` to the destination of the endpoint's `fi_info`, sending
    /// `data` (at most `FI_OPT_CM_DATA_SIZE` bytes). The result arrives as an
    /// `FI_CONNECTED` event, or an error entry (`ECONNREFUSED`) if rejected.
    ///
    /// # Errors
    /// [`Error::TooLarge`] for data over `FI_OPT_CM_DATA_SIZE`, or an
    /// endpoint whose connection data its event queue cannot hold (see
    /// [`bind_eq`](Self::bind_eq));
    /// [`Error::State`] on an endpoint not enabled, with no event queue,
    /// opened from a request, already connecting, or whose `fi_info` has no
    /// destination.
    #[doc(alias = "fi_connect")]
    pub fn connect(&self, data: &[u8]) -> Result<()> {
        self.connected_only("fi_connect")?;
        check_cm_data(self.inner.fid.fid(), data)?;
        self.admit_cm_data()?;
        if self
            .inner
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
        {
            return Err(Error::State {
                call: "fi_connect",
                reason: "an endpoint opened from a connection request accepts it instead",
            });
        }
        let info = &self.inner.info;
        if info.dest_addr().is_empty() {
            return Err(Error::State {
                call: "fi_connect",
                reason: "the endpoint's fi_info names no destination (Hints::node/service)",
            });
        }
        self.start_connecting("fi_connect")?;
        // SAFETY: fi_connect(3) on an enabled endpoint with its EQ bound:
        // dest_addr is the fi_info's (dest_addrlen bytes of its format),
        // data is read during the call.
        let ret = unsafe {
            sys::fi_connect(
                self.raw(),
                info.ptr.as_ref().dest_addr,
                data.as_ptr().cast(),
                data.len(),
            )
        };
        if ret != 0 {
            // Failed before anything was started: the endpoint is idle
            // again, so a shutdown stays refused and a new connect may be
            // made (tcp goes back to idle, `prov/tcp/src/tcpx_ep.c` 174-178;
            // sockets frees its request, `prov/sockets/src/sock_ep_msg.c`
            // 540-547).
            self.inner.set_connecting(false);
        }
        check("fi_connect", ret)
    }

    /// `fi_accept` of the connection request this endpoint was opened from,
    /// sending `data` back.
    ///
    /// # Errors
    /// [`Error::TooLarge`] for data over `FI_OPT_CM_DATA_SIZE`, or as for
    /// [`connect`](Self::connect);
    /// [`Error::State`] on an endpoint not opened from a request, not
    /// enabled, with no event queue, or already accepted.
    #[doc(alias = "fi_accept")]
    pub fn accept(&self, data: &[u8]) -> Result<()> {
        self.connected_only("fi_accept")?;
        check_cm_data(self.inner.fid.fid(), data)?;
        self.admit_cm_data()?;
        let mut pending = self.inner.pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.is_none() {
            return Err(Error::State {
                call: "fi_accept",
                reason: "only an endpoint opened from a connection request accepts",
            });
        }
        self.start_connecting("fi_accept")?;
        // SAFETY: fi_accept(3) on an enabled endpoint opened from a request,
        // with its EQ bound; data is read during the call.
        let ret = unsafe { sys::fi_accept(self.raw(), data.as_ptr().cast(), data.len()) };
        if ret == 0 {
            // The provider consumed the handle.
            *pending = None;
        } else {
            self.inner.set_connecting(false);
        }
        check("fi_accept", ret)
    }

    /// `fi_shutdown`: both sides get `FI_SHUTDOWN`. From this call on,
    /// sends on the endpoint are refused ([`Error::State`]); receives may
    /// still be posted, and come back flushed or when the endpoint closes.
    /// It may be called again, and after the peer shut the connection down.
    ///
    /// Not on sockets, whose `fi_shutdown` closes the connection's socket
    /// a second time after its connection manager did or before the
    /// endpoint's close does (closing whatever the process opened under
    /// that number in between): close the endpoint instead.
    ///
    /// # Errors
    /// [`Error::State`] before a connect or accept;
    /// [`Error::Unsupported`] on sockets (after that check).
    #[doc(alias = "fi_shutdown")]
    pub fn shutdown(&self) -> Result<()> {
        self.take_in_events();
        let need = ENABLED | EQ | CONNECTING;
        if self.inner.state.load(Ordering::Acquire) & need != need {
            return Err(Error::State {
                call: "fi_shutdown",
                reason: "the endpoint has not connected or accepted",
            });
        }
        if crate::quirks::shutdown_closes_twice(self.inner.info.provider()) {
            return Err(Error::Unsupported {
                call: "fi_shutdown",
                reason: "sockets closes the connection's socket in fi_shutdown and again in its connection manager or at the endpoint's close, which closes whatever the process opened under that number meanwhile: close the endpoint instead",
            });
        }
        // From here transfers are refused: the connection is going away
        // whatever fi_shutdown returns.
        self.inner.state.fetch_or(DISCONNECTED, Ordering::AcqRel);
        // SAFETY: fi_shutdown(3) on an open endpoint that connected or
        // accepted (tcp answers an endpoint whose connection already ended
        // with 0: `tcpx_ep_disable` ignores states other than connecting,
        // accepting and connected, `prov/tcp/src/tcpx_ep.c` 303-330).
        check("fi_shutdown", unsafe { sys::fi_shutdown(self.raw(), 0) })
    }

    /// `fi_getname`: the local address.
    ///
    /// # Errors
    /// [`Error::Call`] when `fi_getname` fails (`FI_ETOOSMALL` for an address
    /// over 64 KiB).
    pub fn name(&self) -> Result<Vec<u8>> {
        let name = name_of(self.inner.fid.fid(), false)?;
        if crate::quirks::closed_peers_dangle(self.inner.info.provider()) {
            // An address vector may take it before the endpoint's region
            // file exists (see `shm_peers::check_region_file`).
            crate::shm_peers::lock().handed_out(&name);
        }
        Ok(name)
    }

    /// `fi_getpeer`: the peer's address.
    ///
    /// # Errors
    /// [`Error::Call`] when `fi_getpeer` fails (`FI_ETOOSMALL` for an address
    /// over 64 KiB).
    pub fn peer(&self) -> Result<Vec<u8>> {
        name_of(self.inner.fid.fid(), true)
    }

    /// `FI_OPT_CM_DATA_SIZE`: the most connection data this endpoint can
    /// carry; `None` for connectionless endpoints, which carry none (and
    /// whose providers may not answer the option: shm 1.22 dereferences a
    /// receive context that exists only once enabled,
    /// `prov/shm/src/smr_ep.c` 122).
    #[must_use]
    pub fn cm_data_size(&self) -> Option<usize> {
        if self.inner.connectionless {
            return None;
        }
        cm_data_size(self.inner.fid.fid())
    }

    /// `fi_recv` into the whole buffer.
    ///
    /// # Errors
    /// As [`recv_from`](Self::recv_from): the buffer comes back with the
    /// error.
    #[doc(alias = "fi_recv")]
    #[inline]
    pub fn recv(&self, buffer: Buffer) -> Handback<Buffer> {
        self.recv_from(buffer, Addr::UNSPEC)
    }

    /// `fi_recv` from one source address (connectionless endpoints;
    /// `Addr::UNSPEC` for any).
    ///
    /// A message longer than the buffer completes as an error completion
    /// with [`Errno::TRUNC`](crate::Errno::TRUNC) on most providers. Two
    /// do otherwise (seen with libfabric 1.17), and nothing the receiver
    /// passes can prevent it, so post buffers as long as the longest
    /// message a peer sends:
    /// - `udp;ofi_rxd` completes it as a full buffer, with no error: it
    ///   compares the bytes received with the truncated length
    ///   (`rxd_complete_rx`, `prov/rxd/src/rxd_cq.c` 116 in 1.17).
    /// - shm, for a message over 4096 bytes (sent by cross-memory attach),
    ///   never completes it: the receiver's progress copies until the
    ///   sender's whole length is copied, into a buffer that holds less,
    ///   and the read of its completion queue spins in that copy
    ///   (`smr_progress_iov` and `smr_cma_loop`, `prov/shm/src/smr_progress.c`
    ///   346-348 and `smr.h` 422-449 in 1.17; 1.22 and 2.1 copy with the
    ///   same loop, `cma_copy`, `include/ofi_cma.h` 43-70).
    ///
    /// # Errors
    /// Each with the buffer handed back: [`Error::State`] on an endpoint not
    /// enabled, with no receive completion queue, or shut down;
    /// [`Error::MissingCapability`] without `FI_MSG`; [`Error::ForeignObject`]
    /// for a buffer of another domain; [`Error::InvalidArgument`] for a
    /// `src` not in the bound address vector; [`Error::Call`] when `fi_recv`
    /// fails (`FI_EAGAIN` when the queue is full: [`Error::is_again`]).
    pub fn recv_from(&self, buffer: Buffer, src: Addr) -> Handback<Buffer> {
        let src = match self
            .ready("fi_recv", RECV_READY)
            .and_then(|()| self.check_buffer("fi_recv", &buffer))
            .and_then(|()| self.check_peer("fi_recv", src, true))
        {
            Ok(src) => src,
            Err(error) => return Err((buffer, error)),
        };
        let len = buffer.len();
        post!(self, "fi_recv", true, buffer, |p| sys::fi_recv(
            self.raw(),
            p.addr,
            len,
            p.desc,
            src,
            p.context
        ))
    }

    /// `fi_recvmsg` with `FI_MULTI_RECV`: the buffer receives several
    /// messages, one after another (fi_msg(3)). Each completes with a
    /// [`Message`](crate::Message) of the bytes it landed in
    /// ([`BufferPool::reclaim_received`](crate::BufferPool::reclaim_received),
    /// [`Completion::message`](crate::cq::Completion::message)); once
    /// fewer than `min_free` bytes are left the provider releases the
    /// buffer, and it comes back when no message of it is held.
    ///
    /// `min_free` is the endpoint's `FI_OPT_MIN_MULTI_RECV`, which applies
    /// to every multi-receive buffer posted on it: set with
    /// [`set_min_multi_recv`](Self::set_min_multi_recv) (before
    /// [`enable`](Self::enable) where the provider needs it), or by the
    /// first multi-receive; later ones must give the same value. Give at least the largest message a peer sends. A message
    /// larger than what is left is truncated (an error completion,
    /// [`Errno::TRUNC`](crate::Errno::TRUNC)) and ends the buffer; where the error entry does not say where it landed
    /// (rxm, sockets) the buffer comes back only when its endpoint closes.
    /// The endpoint needs [`Caps::MULTI_RECV`], and a
    /// receive queue of the [`Data`](crate::cq::Data) or
    /// [`Tagged`](crate::cq::Tagged) format, whose entries say where each
    /// message landed.
    ///
    /// ```
    /// use libfabric::cq::{CqAttr, Data};
    /// use libfabric::prelude::*;
    /// use libfabric::av::{AddressVector, AvType};
    /// let hints = Hints::new()
    ///     .provider("tcp;ofi_rxm")
    ///     .node("127.0.0.1")
    ///     .ep_type(EpType::Rdm)
    ///     .caps(Caps::MSG | Caps::MULTI_RECV);
    /// let info = getinfo(&hints)?.into_iter().next().unwrap();
    /// let domain = Domain::open(&Fabric::open(&info)?, &info)?;
    /// let av = AddressVector::open(&domain, AvType::Table, 4)?;
    /// let open = || -> libfabric::Result<(Endpoint, CompletionQueue<Data>)> {
    ///     let cq = CompletionQueue::<Data>::open(&domain, &CqAttr::new().wait(WaitObj::None))?;
    ///     let ep = Endpoint::open(&domain, &info)?;
    ///     ep.bind_av(&av)?;
    ///     ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV)?;
    ///     // Released once fewer than 256 bytes are left (set before
    ///     // enable: some providers take it only then).
    ///     ep.set_min_multi_recv(256)?;
    ///     ep.enable()?;
    ///     Ok((ep, cq))
    /// };
    /// let (rx, rx_cq) = open()?;
    /// let (tx, tx_cq) = open()?;
    /// let dest = av.insert(&rx.name()?)?;
    /// let pool = BufferPool::new(&domain, 8, 4096)?;
    /// // One buffer for several messages.
    /// rx.recv_multi(pool.take().unwrap(), 256).map_err(|(_, e)| e)?;
    /// let mut got = Vec::new();
    /// // Progress both sides: send buffers come back, messages are kept.
    /// let poll = |got: &mut Vec<Vec<u8>>| {
    ///     let _ = tx_cq.read(&mut [Default::default()]);
    ///     if let Ok(done) = rx_cq.wait_one(&pool, Some(std::time::Duration::ZERO)) {
    ///         got.push(done.message.expect("a message").to_vec());
    ///     }
    /// };
    /// for text in [&b"first"[..], b"second message"] {
    ///     let mut buf = pool.take().unwrap();
    ///     buf[..text.len()].copy_from_slice(text);
    ///     while let Err((back, e)) = tx.send_to(buf, text.len(), dest) {
    ///         assert!(e.is_again(), "{e}"); // rxm connects on first use
    ///         poll(&mut got);
    ///         buf = back;
    ///     }
    /// }
    /// while got.len() < 2 {
    ///     poll(&mut got);
    /// }
    /// assert_eq!(got, [&b"first"[..], b"second message"]);
    /// # Ok::<(), libfabric::Error>(())
    /// ```
    ///
    /// # Errors
    /// Each with the buffer handed back (`Some`): as
    /// [`recv_from`](Self::recv_from) (with `fi_recvmsg` as the call), but
    /// that when `fi_recvmsg` fails on rxm the buffer is kept (`None`) and
    /// comes back with the endpoint's close: rxm first pairs pieces of it
    /// with unexpected messages, whose rendezvous reads go on, and fails
    /// when it runs out of receive entries part-way (`rxm_post_mrecv`,
    /// `prov/rxm/src/rxm_msg.c` 99-147); [`Error::MissingCapability`]
    /// without `FI_MULTI_RECV`; [`Error::Unsupported`] on a provider that
    /// can write past a multi-receive buffer (see `quirks`);
    /// [`Error::State`] with a receive queue of a format without `buf`;
    /// [`Error::BufferTooSmall`] for a buffer of at most `min_free` bytes;
    /// the errors of [`set_min_multi_recv`](Self::set_min_multi_recv)
    /// (a `min_free` of 0, another than the one posted with before, one
    /// the provider does not apply).
    #[doc(alias = "fi_recvmsg")]
    #[doc(alias = "FI_MULTI_RECV")]
    #[doc(alias = "FI_OPT_MIN_MULTI_RECV")]
    pub fn recv_multi(&self, buffer: Buffer, min_free: usize) -> Handback<Option<Buffer>> {
        self.recv_multi_from(buffer, min_free, Addr::UNSPEC)
    }

    /// [`recv_multi`](Self::recv_multi) of messages from one source
    /// address (connectionless endpoints; `Addr::UNSPEC` for any).
    ///
    /// # Errors
    /// As [`recv_multi`](Self::recv_multi).
    pub fn recv_multi_from(
        &self,
        buffer: Buffer,
        min_free: usize,
        src: Addr,
    ) -> Handback<Option<Buffer>> {
        let call = "fi_recvmsg";
        let mut min = self
            .inner
            .min_multi_recv
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let src = match self
            .check_multi(call, &buffer, min_free)
            .and_then(|()| self.check_peer(call, src, true))
            .and_then(|src| {
                self.apply_min_multi_recv(&mut min, min_free)?;
                min.posted = true;
                Ok(src)
            }) {
            Ok(src) => src,
            Err(error) => return Err((Some(buffer), error)),
        };
        let len = buffer.len();
        let (posted, p) = buffer.into_flight_multi(self.inner.id, min_free);
        let iov = libc::iovec {
            iov_base: p.addr,
            iov_len: len,
        };
        let mut desc = p.desc;
        let msg = sys::fi_msg {
            msg_iov: (&raw const iov).cast(),
            desc: &raw mut desc,
            iov_count: 1,
            addr: src,
            context: p.context,
            data: 0,
        };
        // SAFETY: fi_msg(3) fi_recvmsg with FI_MULTI_RECV: the endpoint is
        // enabled with a receive CQ, FI_MSG and FI_MULTI_RECV granted, src
        // a live address or FI_ADDR_UNSPEC (checked above); the fi_msg and
        // its one iovec and descriptor are read during the call (rxm copies
        // them into its receive entry, `rxm_recv_entry_init_common`,
        // `prov/rxm/src/rxm_ep.c` 587-614; sockets into its rx entry,
        // `sock_ep_recvmsg`, `prov/sockets/src/sock_msg.c` 130-132 in
        // 1.17). The buffer's memory (registered,
        // desc from fi_mr_desc) and its context stay valid until the
        // provider is done with it: the Buffer was moved into the provider
        // (into_flight_multi), and only a completion that ends the
        // multi-receive, or the endpoint's close, gives it back.
        let ret = unsafe { sys::fi_recvmsg(self.raw(), &msg, sys::FI_MULTI_RECV) };
        drop(min);
        if ret == 0 {
            Ok(())
        } else if crate::quirks::multi_recv_fails_after_taking_part(self.inner.info.provider()) {
            posted.kept_broken();
            Err((None, Error::from_ret(call, ret)))
        } else {
            Err((Some(posted.refused()), Error::from_ret(call, ret)))
        }
    }

    /// The checks of a multi-receive post, but the source address.
    fn check_multi(&self, call: &'static str, buffer: &Buffer, min_free: usize) -> Result<()> {
        self.ready(call, RECV_READY)?;
        if self.inner.state.load(Ordering::Acquire) & CAP_MULTI == 0 {
            return Err(Error::MissingCapability {
                call,
                needed: Caps::MULTI_RECV,
            });
        }
        if let Some(reason) = crate::quirks::multi_recv_overruns(self.inner.info.provider()) {
            return Err(Error::Unsupported { call, reason });
        }
        if self.inner.state.load(Ordering::Acquire) & RX_CQ_BUF == 0 {
            return Err(Error::State {
                call,
                reason: "a multi-receive needs a receive completion queue of the Data or \
                         Tagged format (their entries say where each message landed)",
            });
        }
        self.check_buffer(call, buffer)?;
        if min_free == 0 {
            return Err(Error::InvalidArgument(
                "fi_recvmsg(FI_MULTI_RECV): a min_free of 0 never releases a buffer that \
                 was filled exactly; give at least the largest message expected"
                    .into(),
            ));
        }
        let needed = min_free.checked_add(1).ok_or(Error::TooLarge {
            what: "multi-receive min_free",
            limit: usize::MAX - 1,
            given: min_free,
        })?;
        if buffer.len() < needed {
            return Err(Error::BufferTooSmall {
                what: "multi-receive buffer (more than min_free bytes)",
                needed,
                given: buffer.len(),
            });
        }
        Ok(())
    }

    /// Sets the endpoint's `FI_OPT_MIN_MULTI_RECV` (`fi_setopt`): a
    /// multi-receive buffer is released once fewer than `min_free` bytes
    /// are left in it. Set once, before the endpoint's first
    /// [`recv_multi`](Self::recv_multi) (which sets it otherwise), and
    /// before [`enable`](Self::enable) for rxm of libfabric 2, which hands
    /// the value to its receive queue at enable and ignores later changes
    /// (`rxm_ep_setopt`, `prov/rxm/src/rxm_ep.c` 306-308, used at
    /// 1375-1377 in 2.1). The value is read back (`fi_getopt`):
    /// the buffer's accounting rests on the one the provider applies.
    ///
    /// # Errors
    /// [`Error::MissingCapability`] without `FI_MULTI_RECV`;
    /// [`Error::Unsupported`] where multi-receive is refused (see
    /// [`recv_multi`](Self::recv_multi));
    /// [`Error::InvalidArgument`] for 0, or once a multi-receive was
    /// posted with another value; [`Error::Unsupported`] when the provider
    /// does not apply it (reads back another value); [`Error::Call`] when
    /// `fi_setopt` or `fi_getopt` fails.
    #[doc(alias = "FI_OPT_MIN_MULTI_RECV")]
    pub fn set_min_multi_recv(&self, min_free: usize) -> Result<()> {
        let mut min = self
            .inner
            .min_multi_recv
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.apply_min_multi_recv(&mut min, min_free)
    }

    /// Sets `FI_OPT_MIN_MULTI_RECV` unless it is set to `min_free` already
    /// (`min` is the endpoint's record, locked).
    fn apply_min_multi_recv(&self, min: &mut MinMultiRecv, min_free: usize) -> Result<()> {
        let call = "fi_setopt(FI_OPT_MIN_MULTI_RECV)";
        if self.inner.state.load(Ordering::Acquire) & CAP_MULTI == 0 {
            return Err(Error::MissingCapability {
                call,
                needed: Caps::MULTI_RECV,
            });
        }
        // Before the fi_setopt: shm's dereferences a receive context that
        // exists only once the endpoint is enabled (`smr_ep_setopt`,
        // `prov/shm/src/smr_ep.c` 135-138 in 1.17; it crashed here).
        if let Some(reason) = crate::quirks::multi_recv_overruns(self.inner.info.provider()) {
            return Err(Error::Unsupported { call, reason });
        }
        if min_free == 0 {
            return Err(Error::InvalidArgument(
                "FI_OPT_MIN_MULTI_RECV: 0 never releases a buffer that was filled exactly; \
                 give at least the largest message expected"
                    .into(),
            ));
        }
        if min.value == Some(min_free) {
            return Ok(());
        }
        if min.posted {
            return Err(Error::InvalidArgument(
                format!(
                    "FI_OPT_MIN_MULTI_RECV: this endpoint's min_free is {} and a multi-receive \
                     was posted with it; it is fixed from then on (a lower value would let the \
                     provider place messages where a buffer posted before counts none), not \
                     {min_free}",
                    min.value.unwrap_or(0)
                )
                .into(),
            ));
        }
        let value: usize = min_free;
        // SAFETY: fi_endpoint(3): FI_OPT_MIN_MULTI_RECV takes a size_t,
        // read during the call (rxm `rxm_ep_setopt`, `rxm_ep.c` 500-505;
        // sockets `sock_ep_setopt`, `sock_ep.c` 1097-1104 in 1.17).
        check(call, unsafe {
            sys::fi_setopt(
                self.inner.fid.fid(),
                sys::FI_OPT_ENDPOINT as i32,
                sys::FI_OPT_MIN_MULTI_RECV as i32,
                (&raw const value).cast(),
                std::mem::size_of::<usize>(),
            )
        })?;
        let mut applied: usize = 0;
        let mut len = std::mem::size_of::<usize>();
        // SAFETY: fi_endpoint(3): fi_getopt writes a size_t for
        // FI_OPT_MIN_MULTI_RECV and its size into len (rxm
        // `rxm_ep_getopt`, `rxm_ep.c` 466-472 in 1.17, the receive
        // queue's value in 2.1, 272-282; sockets `sock_ep_getopt`, `sock_ep.c`
        // 1066-1068).
        check("fi_getopt(FI_OPT_MIN_MULTI_RECV)", unsafe {
            sys::fi_getopt(
                self.inner.fid.fid(),
                sys::FI_OPT_ENDPOINT as i32,
                sys::FI_OPT_MIN_MULTI_RECV as i32,
                (&raw mut applied).cast(),
                &mut len,
            )
        })?;
        if applied != min_free || len != std::mem::size_of::<usize>() {
            return Err(Error::Unsupported {
                call,
                reason: "the provider did not apply it (fi_getopt reads back another value): \
                         rxm of libfabric 2 takes it only before Endpoint::enable",
            });
        }
        min.value = Some(min_free);
        Ok(())
    }

    /// `fi_send` of the first `len` bytes.
    ///
    /// # Errors
    /// As [`send_to`](Self::send_to): the buffer comes back with the error.
    #[doc(alias = "fi_send")]
    #[inline]
    pub fn send(&self, buffer: Buffer, len: usize) -> Handback<Buffer> {
        self.send_to(buffer, len, Addr::UNSPEC)
    }

    /// The checks of a send: ready bits, length, peer.
    #[inline(always)]
    fn check_send(
        &self,
        call: &'static str,
        need: u32,
        buffer: &Buffer,
        len: usize,
        dest: Addr,
    ) -> Result<u64> {
        self.ready(call, need)?;
        self.check_buffer(call, buffer)?;
        if len > buffer.len() {
            return Err(Error::BufferTooSmall {
                what: "send length",
                needed: len,
                given: buffer.len(),
            });
        }
        self.check_peer(call, dest, false)
    }

    /// `fi_send` to an address (connectionless endpoints).
    ///
    /// # Errors
    /// Each with the buffer handed back: [`Error::State`] on an endpoint not
    /// enabled, with no transmit completion queue, not connected, or shut
    /// down; [`Error::MissingCapability`] without `FI_MSG`;
    /// [`Error::ForeignObject`] for a buffer of another domain;
    /// [`Error::BufferTooSmall`] for `len` over the buffer's length;
    /// [`Error::InvalidArgument`] for a `dest` not in the bound address
    /// vector; [`Error::Call`] when `fi_send` fails (`FI_EAGAIN` when the
    /// queue is full: [`Error::is_again`]).
    pub fn send_to(&self, buffer: Buffer, len: usize, dest: Addr) -> Handback<Buffer> {
        let dest = match self.check_send("fi_send", SEND_READY, &buffer, len, dest) {
            Ok(dest) => dest,
            Err(error) => return Err((buffer, error)),
        };
        post!(self, "fi_send", false, buffer, |p| sys::fi_send(
            self.raw(),
            p.addr,
            len,
            p.desc,
            dest,
            p.context
        ))
    }

    /// `fi_senddata`: a send that carries remote CQ data, seen by the
    /// receiver in a [`Data`](crate::cq::Data) or [`Tagged`](crate::cq::Tagged)
    /// completion with `REMOTE_CQ_DATA`. `data` must fit the domain's
    /// `cq_data_size` bytes.
    ///
    /// # Errors
    /// As [`send_to`](Self::send_to), with `fi_senddata` as the call, and
    /// [`Error::State`] when the domain carries no CQ data or
    /// [`Error::TooLarge`] when `data` does not fit it: the buffer comes
    /// back with the error.
    #[doc(alias = "fi_senddata")]
    pub fn send_data(&self, buffer: Buffer, len: usize, data: u64, dest: Addr) -> Handback<Buffer> {
        let checked = self
            .check_send("fi_senddata", SEND_READY, &buffer, len, dest)
            .and_then(|dest| self.check_cq_data("fi_senddata", data).map(|()| dest));
        let dest = match checked {
            Ok(dest) => dest,
            Err(error) => return Err((buffer, error)),
        };
        post!(self, "fi_senddata", false, buffer, |p| sys::fi_senddata(
            self.raw(),
            p.addr,
            len,
            p.desc,
            data,
            dest,
            p.context
        ))
    }

    fn check_cq_data(&self, call: &'static str, data: u64) -> Result<()> {
        self.cq_data_fits(data)
            .map_err(|fault| fault.error(call, data))
    }

    /// [`check_cq_data`](Self::check_cq_data)'s check, the fault told as
    /// a [`CqDataFault`].
    #[inline(always)]
    pub(crate) fn cq_data_fits(&self, data: u64) -> std::result::Result<(), CqDataFault> {
        let bytes = self.inner.cq_data_size;
        if bytes == 0 {
            return Err(CqDataFault::NoCqData);
        }
        if bytes < 8 && data >> (bytes * 8) != 0 {
            return Err(CqDataFault::TooLarge(bytes));
        }
        Ok(())
    }

    /// `fi_tsend`: a tagged send.
    ///
    /// # Errors
    /// As [`send_to`](Self::send_to), with `FI_TAGGED` as the capability
    /// needed and `fi_tsend` as the call: the buffer comes back with the
    /// error.
    #[doc(alias = "fi_tsend")]
    pub fn tsend(&self, buffer: Buffer, len: usize, tag: u64, dest: Addr) -> Handback<Buffer> {
        let dest = match self.check_send("fi_tsend", TSEND_READY, &buffer, len, dest) {
            Ok(dest) => dest,
            Err(error) => return Err((buffer, error)),
        };
        post!(self, "fi_tsend", false, buffer, |p| sys::fi_tsend(
            self.raw(),
            p.addr,
            len,
            p.desc,
            dest,
            tag,
            p.context
        ))
    }

    /// `fi_trecv`: a tagged receive matching `tag` except the `ignore` bits.
    ///
    /// # Errors
    /// As [`recv_from`](Self::recv_from), with `FI_TAGGED` as the capability
    /// needed and `fi_trecv` as the call: the buffer comes back with the
    /// error.
    #[doc(alias = "fi_trecv")]
    pub fn trecv(&self, buffer: Buffer, tag: u64, ignore: u64, src: Addr) -> Handback<Buffer> {
        let src = match self
            .ready("fi_trecv", TRECV_READY)
            .and_then(|()| self.check_buffer("fi_trecv", &buffer))
            .and_then(|()| self.check_peer("fi_trecv", src, true))
        {
            Ok(src) => src,
            Err(error) => return Err((buffer, error)),
        };
        let len = buffer.len();
        post!(self, "fi_trecv", true, buffer, |p| sys::fi_trecv(
            self.raw(),
            p.addr,
            len,
            p.desc,
            src,
            tag,
            ignore,
            p.context
        ))
    }

    /// `fi_inject`: sends `data` with no completion; the provider copies it
    /// before returning, so any slice will do. At most the provider's
    /// `inject_size` bytes ([`InfoEntry::inject_size`]).
    ///
    /// # Errors
    /// [`Error::TooLarge`] over `inject_size` (tcp only asserts it in debug
    /// builds and otherwise copies past its buffer); the checks of a send.
    #[doc(alias = "fi_inject")]
    pub fn inject(&self, data: &[u8], dest: Addr) -> Result<()> {
        if data.len() > self.inner.inject_size {
            return Err(Error::TooLarge {
                what: "fi_inject length (inject_size)",
                limit: self.inner.inject_size,
                given: data.len(),
            });
        }
        self.ready("fi_inject", SEND_READY)?;
        let dest = self.check_peer("fi_inject", dest, false)?;
        // SAFETY: fi_msg(3): fi_inject's buffer may be reused as soon as the
        // call returns; no context, no completion. The endpoint is enabled
        // with a transmit CQ, data is within inject_size and dest a live
        // address (checked above).
        let ret = unsafe { sys::fi_inject(self.raw(), data.as_ptr().cast(), data.len(), dest) };
        check("fi_inject", ret)
    }

    /// Closes the endpoint now (`fi_close`), returning its error.
    ///
    /// Buffers still posted on it come back to their pools once it is
    /// closed (whether or not the provider reports them: tcp and shm flush
    /// them as `FI_ECANCELED` error completions, sockets, rxm and rxd drop
    /// them); a completion of one of them read afterwards hands out no
    /// buffer. The same happens when the last handle is dropped.
    ///
    /// On shm, an endpoint that an open endpoint of this process may still
    /// address (one whose address vector holds this endpoint's address, or
    /// one this endpoint's vector addresses, which shm maps back at the
    /// first send) stays open in the provider until no such endpoint is
    /// left: shm lets those use this endpoint's memory directly, and its
    /// close unmaps it (a send, an RMA or a queue read of theirs crashed).
    /// Its receives are cancelled now, and messages sent to it meanwhile
    /// are never received. Its queues, counters, address vector and domain
    /// stay in use until then ([`Error::InUse`] for their `close`), and its
    /// buffers come back then (or with their completions, if its queue is
    /// read meanwhile). An
    /// address vector that may map a closed shm endpoint takes no new
    /// endpoint, and no vector takes its address (both [`Error::State`]).
    ///
    /// Also on shm, a send or RMA write over 4096 bytes, or an RMA read,
    /// is carried out by the peer, which copies out of or into the buffer
    /// from its own process whenever it progresses, this endpoint closed
    /// or not. When this endpoint may have posted to a peer of another
    /// process, the buffers of such transfers still in flight are not
    /// handed back by the close: they come back with a completion written
    /// before it, or never (they and their pool's memory stay allocated
    /// for the life of the process). Let such transfers complete before
    /// closing.
    ///
    /// # Errors
    /// [`Error::InUse`] while other handles exist; [`Error::Call`] when
    /// `fi_close` fails. The endpoint comes back with the error, still open.
    pub fn close(self) -> Handback<Self> {
        close_last(
            self.inner,
            ObjectKind::Endpoint,
            Endpoint::from_inner,
            EpInner::close_fid,
        )
    }
}

impl<T: ThreadModel> fmt::Debug for Endpoint<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("fid", &self.fid())
            .field("ep_type", &self.info().ep_type())
            .finish()
    }
}

// RMA posts (`fi_rma(3)`) and atomics (`fi_atomic(3)`): their own
// `impl Endpoint` blocks.
pub mod atomic;
mod rma;
