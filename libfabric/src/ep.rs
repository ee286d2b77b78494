//! Endpoints (`fi_endpoint(3)`, `fi_cm(3)`, `fi_msg(3)`, `fi_tagged(3)`):
//! enough to produce real connection events and completions.
//!
//! A whole connection over the tcp provider, both sides in one process
//! (the tcp provider progresses connections while their queues are read):
//!
//! ```
//! use libfabric::cq::{CqAttr, Msg, MsgEntry, Read as CqRead};
//! use libfabric::ep::CqBind;
//! use libfabric::eq::{EqAttr, Event, EventBuf, Read};
//! use libfabric::info::{Caps, EpType};
//! use libfabric::wait::WaitObj;
//! use libfabric::*;
//!
//! fn hints() -> Result<Hints> {
//!     Ok(Hints::new()?.provider("tcp")?.ep_type(EpType::Msg).caps(Caps::MSG))
//! }
//! fn first(h: Hints) -> Result<Info> {
//!     Ok(getinfo(&h)?.into_iter().next().expect("tcp provider"))
//! }
//! // Passive side: listen on an ephemeral port of 127.0.0.1.
//! let info = first(hints()?.node("127.0.0.1")?.service("0")?.source(true))?;
//! let fabric = Fabric::open(&info)?;
//! let eq = EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::Fd))?;
//! let pep = PassiveEndpoint::open(&fabric, &info)?;
//! pep.bind_eq(&eq)?;
//! pep.listen()?;
//! let port = pep.local_addr()?.port();
//!
//! // Active side: connect with 5 bytes of connection data.
//! let cinfo = first(hints()?.node("127.0.0.1")?.service(&port.to_string())?)?;
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
//!     if let Read::Event(Event::ConnReq(req)) = eq.sread(&mut buf, Some(std::time::Duration::from_millis(10)))? {
//!         assert_eq!(req.data, b"hello");
//!         break req.request.expect("a read request is owned");
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
//!     if let Read::Event(Event::Connected(c)) = client_eq.read(&mut buf)? {
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
//!         break server_pool.reclaim(&mut done[0]).expect("the receive's buffer");
//!     }
//! };
//! assert_eq!(&rx[..4], b"ping");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::av::{AddressVector, AvInner};
use crate::buffer::Buffer;
use crate::connreq::{ConnRequest, RequestError};
use crate::cq::{Addr, CompletionQueue, CqInner, Format};
use crate::domain::{Domain, DomainInner};
use crate::eq::{EqInner, EventQueue, Fid, RegisteredObject};
use crate::error::{check, Errno, Error, Result};
use crate::fabric::{Fabric, FabricInner};
use crate::fid::{close_last, OwnedFid};
use crate::info::{Info, InfoEntry};
use bitflags::bitflags;
use libfabric_sys::fabric as sys;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::ptr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

bitflags! {
    /// How a completion queue is bound to an endpoint (`fi_ep_bind` flags).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct CqBind: u64 {
        /// `FI_TRANSMIT`: completions of sends.
        const TRANSMIT = sys::FI_TRANSMIT;
        /// `FI_RECV`: completions of receives.
        const RECV = sys::FI_RECV;
        /// `FI_SELECTIVE_COMPLETION`: only operations posted with
        /// `FI_COMPLETION` complete (not used by this crate's posts).
        const SELECTIVE_COMPLETION = sys::FI_SELECTIVE_COMPLETION;
    }
}

/// An object an endpoint is bound to, kept open while the endpoint is.
enum Bound {
    Eq(Arc<EqInner>),
    Cq(#[allow(dead_code)] Arc<CqInner>),
    Av(#[allow(dead_code)] Arc<AvInner>),
}

pub(crate) struct EpInner {
    pub(crate) fid: OwnedFid<sys::fid_ep>,
    info: Info,
    bound: Mutex<Vec<Bound>>,
    _domain: Arc<DomainInner>,
}

/// A post refused by the provider, with the buffer handed back: nothing is
/// lost. `Errno::Again` means the queue is full: read completions and retry.
pub struct PostError {
    /// Why.
    pub error: Error,
    /// The buffer, unchanged.
    pub buffer: Buffer,
}

impl PostError {
    /// Whether the provider asked to retry later (`-FI_EAGAIN`).
    pub fn is_again(&self) -> bool {
        self.error.errno() == Some(Errno::Again)
    }
}

impl fmt::Debug for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostError")
            .field("error", &self.error)
            .finish()
    }
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (the buffer was handed back)", self.error)
    }
}

impl std::error::Error for PostError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<PostError> for Error {
    fn from(e: PostError) -> Self {
        e.error
    }
}

/// An active endpoint. Cloning gives another handle. It keeps its domain
/// and every EQ, CQ and AV bound to it open, so they cannot be closed
/// first (which fi_close(3) would refuse with `-FI_EBUSY`).
#[derive(Clone)]
pub struct Endpoint {
    pub(crate) inner: Arc<EpInner>,
}

fn cm_data_size(fid: *mut sys::fid) -> Option<usize> {
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

pub(crate) fn check_cm_data(fid: *mut sys::fid, data: &[u8]) -> Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    if let Some(max) = cm_data_size(fid) {
        if data.len() > max {
            return Err(Error::InvalidArgument(format!(
                "{} bytes of connection data exceed the provider's FI_OPT_CM_DATA_SIZE of {max}",
                data.len()
            )));
        }
    }
    Ok(())
}

fn name_of(fid: *mut sys::fid, peer: bool) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; 128];
    loop {
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
        if ret == -sys::errno::FI_ETOOSMALL && len > buf.len() {
            buf.resize(len, 0);
            continue;
        }
        check(if peer { "fi_getpeer" } else { "fi_getname" }, ret)?;
        buf.truncate(len);
        return Ok(buf);
    }
}

/// Decodes a `sockaddr_in` / `sockaddr_in6` as libfabric's socket providers
/// name endpoints.
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
    ($call:literal, $buffer:ident, |$p:ident| $body:expr) => {{
        let $p = $buffer.post_parts();
        // In flight before the call: the completion can be read, and the
        // buffer reclaimed, by another thread before the call returns.
        let posted = $buffer.into_flight();
        // SAFETY: fi_msg(3)/fi_tagged(3): the buffer's memory (registered,
        // desc from fi_mr_desc) and its context stay valid and untouched
        // until the completion, because the Buffer was moved into the
        // provider (into_flight) and only BufferPool::reclaim, fed by that
        // completion, gives it back.
        let ret = unsafe { $body };
        if ret == 0 {
            Ok(())
        } else {
            Err(PostError {
                error: Error::fabric($call, ret as i64),
                buffer: posted.refused(),
            })
        }
    }};
}

impl Endpoint {
    /// `fi_endpoint`: opens an endpoint described by `info` (from
    /// `getinfo`, or the `info` of a connection request to accept).
    #[doc(alias = "fi_endpoint")]
    pub fn open(domain: &Domain, info: &InfoEntry) -> Result<Self> {
        // SAFETY: as_raw is a valid fi_info.
        if !unsafe { (*info.as_raw()).handle }.is_null() {
            return Err(Error::InvalidArgument(
                "this fi_info carries a connection request's handle: open the endpoint with \
                 Endpoint::from_request, which consumes the request"
                    .into(),
            ));
        }
        Self::open_owned(domain, info.to_owned_info()?).map_err(|(e, _)| e)
    }

    /// Opens the endpoint that accepts `request` (`fi_endpoint` with the
    /// request's `fi_info`); bind it, enable it and call
    /// [`accept`](Self::accept). The request is consumed: the endpoint now
    /// owns its handle. On error the request comes back unanswered.
    pub fn from_request(
        domain: &Domain,
        request: ConnRequest,
    ) -> std::result::Result<Self, RequestError> {
        let (info, pep) = request.into_parts();
        Self::open_owned(domain, info).map_err(|(error, info)| RequestError {
            error,
            // fi_endpoint failed: the handle was not consumed.
            request: Some(ConnRequest::new(info, pep)),
        })
    }

    /// `fi_endpoint` with an owned fi_info, handed back on failure.
    fn open_owned(domain: &Domain, info: Info) -> std::result::Result<Self, (Error, Info)> {
        let mut raw = ptr::null_mut();
        // SAFETY: fi_endpoint(3) with an open domain and a valid fi_info;
        // OwnedFid closes the endpoint before the domain handle drops.
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
            Err(e) => return Err((e, info)),
        };
        Ok(Endpoint {
            inner: Arc::new(EpInner {
                fid,
                info,
                bound: Mutex::new(Vec::new()),
                _domain: domain.inner.clone(),
            }),
        })
    }

    fn raw(&self) -> *mut sys::fid_ep {
        self.inner.fid.as_ptr()
    }

    fn keep(&self, bound: Bound) {
        self.inner
            .bound
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(bound);
    }

    /// The endpoint's fid, as events name it.
    pub fn fid(&self) -> Fid {
        Fid::from_raw(self.inner.fid.fid())
    }

    /// The `fi_info` it was opened with.
    pub fn info(&self) -> &InfoEntry {
        &self.inner.info
    }

    /// `fi_ep_bind` to an event queue (connection events).
    #[doc(alias = "fi_ep_bind")]
    pub fn bind_eq(&self, eq: &EventQueue) -> Result<()> {
        // SAFETY: fi_ep_bind(3) of two open objects; the EQ is kept open by
        // the Arc stored below as long as the endpoint is.
        check("fi_ep_bind(eq)", unsafe {
            sys::fi_ep_bind(self.raw(), eq.inner.fid.fid(), 0)
        })?;
        if let Some(max) = cm_data_size(self.inner.fid.fid()) {
            eq.inner.max_cm_data.fetch_max(max, Ordering::Relaxed);
        }
        eq.inner.registry.insert(
            self.fid(),
            RegisteredObject::Endpoint(Arc::downgrade(&self.inner)),
        );
        self.keep(Bound::Eq(eq.inner.clone()));
        Ok(())
    }

    /// `fi_ep_bind` to a completion queue, for transmit and/or receive
    /// completions.
    pub fn bind_cq<F: Format>(&self, cq: &CompletionQueue<F>, flags: CqBind) -> Result<()> {
        // SAFETY: as bind_eq.
        check("fi_ep_bind(cq)", unsafe {
            sys::fi_ep_bind(self.raw(), cq.inner.fid.fid(), flags.bits())
        })?;
        self.keep(Bound::Cq(cq.inner.clone()));
        Ok(())
    }

    /// `fi_ep_bind` to an address vector (connectionless endpoints).
    pub fn bind_av(&self, av: &AddressVector) -> Result<()> {
        // SAFETY: as bind_eq.
        check("fi_ep_bind(av)", unsafe {
            sys::fi_ep_bind(self.raw(), av.inner.fid.fid(), 0)
        })?;
        self.keep(Bound::Av(av.inner.clone()));
        Ok(())
    }

    /// `fi_enable`.
    #[doc(alias = "fi_enable")]
    pub fn enable(&self) -> Result<()> {
        // SAFETY: fi_enable(3) on an open endpoint.
        check("fi_enable", unsafe { sys::fi_enable(self.raw()) })?;
        // Some providers know the connection data size only once enabled.
        if let Some(max) = cm_data_size(self.inner.fid.fid()) {
            for bound in self
                .inner
                .bound
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
            {
                if let Bound::Eq(eq) = bound {
                    eq.max_cm_data.fetch_max(max, Ordering::Relaxed);
                }
            }
        }
        Ok(())
    }

    /// `fi_connect` to the destination of the endpoint's `fi_info`, sending
    /// `data` (at most `FI_OPT_CM_DATA_SIZE` bytes). The result arrives as an
    /// `FI_CONNECTED` event, or an error entry (`ECONNREFUSED`) if rejected.
    #[doc(alias = "fi_connect")]
    pub fn connect(&self, data: &[u8]) -> Result<()> {
        check_cm_data(self.inner.fid.fid(), data)?;
        let info = &self.inner.info;
        // SAFETY: fi_connect(3): dest_addr is the fi_info's (or NULL), data
        // is read during the call.
        let ret = unsafe {
            sys::fi_connect(
                self.raw(),
                info.ptr.as_ref().dest_addr,
                data.as_ptr().cast(),
                data.len(),
            )
        };
        check("fi_connect", ret)
    }

    /// `fi_accept` of the connection request this endpoint was opened from,
    /// sending `data` back.
    #[doc(alias = "fi_accept")]
    pub fn accept(&self, data: &[u8]) -> Result<()> {
        check_cm_data(self.inner.fid.fid(), data)?;
        // SAFETY: fi_accept(3): data is read during the call.
        check("fi_accept", unsafe {
            sys::fi_accept(self.raw(), data.as_ptr().cast(), data.len())
        })
    }

    /// `fi_shutdown`: both sides get `FI_SHUTDOWN`.
    #[doc(alias = "fi_shutdown")]
    pub fn shutdown(&self) -> Result<()> {
        // SAFETY: fi_shutdown(3) on an open endpoint.
        check("fi_shutdown", unsafe { sys::fi_shutdown(self.raw(), 0) })
    }

    /// `fi_getname`: the local address.
    pub fn name(&self) -> Result<Vec<u8>> {
        name_of(self.inner.fid.fid(), false)
    }

    /// `fi_getpeer`: the peer's address.
    pub fn peer(&self) -> Result<Vec<u8>> {
        name_of(self.inner.fid.fid(), true)
    }

    /// `FI_OPT_CM_DATA_SIZE`: the most connection data this endpoint can carry.
    pub fn cm_data_size(&self) -> Option<usize> {
        cm_data_size(self.inner.fid.fid())
    }

    /// `fi_recv` into the whole buffer.
    #[doc(alias = "fi_recv")]
    #[inline]
    pub fn recv(&self, buffer: Buffer) -> Result<(), PostError> {
        self.recv_from(buffer, Addr::UNSPEC)
    }

    /// `fi_recv` from one source address (connectionless endpoints).
    pub fn recv_from(&self, buffer: Buffer, src: Addr) -> Result<(), PostError> {
        let len = buffer.len();
        post!("fi_recv", buffer, |p| sys::fi_recv(
            self.raw(),
            p.addr,
            len,
            p.desc,
            src.0,
            p.context
        ))
    }

    /// `fi_send` of the first `len` bytes.
    #[doc(alias = "fi_send")]
    #[inline]
    pub fn send(&self, buffer: Buffer, len: usize) -> Result<(), PostError> {
        self.send_to(buffer, len, Addr::UNSPEC)
    }

    fn check_len(buffer: Buffer, len: usize) -> Result<Buffer, PostError> {
        if len > buffer.len() {
            return Err(PostError {
                error: Error::BufferTooSmall {
                    what: "send length",
                    needed: len,
                    given: buffer.len(),
                },
                buffer,
            });
        }
        Ok(buffer)
    }

    /// `fi_send` to an address (connectionless endpoints).
    pub fn send_to(&self, buffer: Buffer, len: usize, dest: Addr) -> Result<(), PostError> {
        let buffer = Self::check_len(buffer, len)?;
        post!("fi_send", buffer, |p| sys::fi_send(
            self.raw(),
            p.addr,
            len,
            p.desc,
            dest.0,
            p.context
        ))
    }

    /// `fi_senddata`: a send that carries remote CQ data, seen by the
    /// receiver in a [`Data`](crate::cq::Data) or [`Tagged`](crate::cq::Tagged)
    /// completion with `REMOTE_CQ_DATA`.
    #[doc(alias = "fi_senddata")]
    pub fn send_data(
        &self,
        buffer: Buffer,
        len: usize,
        data: u64,
        dest: Addr,
    ) -> Result<(), PostError> {
        let buffer = Self::check_len(buffer, len)?;
        post!("fi_senddata", buffer, |p| sys::fi_senddata(
            self.raw(),
            p.addr,
            len,
            p.desc,
            data,
            dest.0,
            p.context
        ))
    }

    /// `fi_tsend`: a tagged send.
    #[doc(alias = "fi_tsend")]
    pub fn tsend(&self, buffer: Buffer, len: usize, tag: u64, dest: Addr) -> Result<(), PostError> {
        let buffer = Self::check_len(buffer, len)?;
        post!("fi_tsend", buffer, |p| sys::fi_tsend(
            self.raw(),
            p.addr,
            len,
            p.desc,
            dest.0,
            tag,
            p.context
        ))
    }

    /// `fi_trecv`: a tagged receive matching `tag` except the `ignore` bits.
    #[doc(alias = "fi_trecv")]
    pub fn trecv(&self, buffer: Buffer, tag: u64, ignore: u64, src: Addr) -> Result<(), PostError> {
        let len = buffer.len();
        post!("fi_trecv", buffer, |p| sys::fi_trecv(
            self.raw(),
            p.addr,
            len,
            p.desc,
            src.0,
            tag,
            ignore,
            p.context
        ))
    }

    /// `fi_inject`: sends `data` with no completion; the provider copies it
    /// before returning, so any slice will do. Limited to the provider's
    /// `inject_size`.
    #[doc(alias = "fi_inject")]
    pub fn inject(&self, data: &[u8], dest: Addr) -> Result<()> {
        // SAFETY: fi_msg(3): fi_inject's buffer may be reused as soon as the
        // call returns; no context, no completion.
        let ret = unsafe { sys::fi_inject(self.raw(), data.as_ptr().cast(), data.len(), dest.0) };
        check("fi_inject", ret as i32)
    }

    /// Closes the endpoint now, returning its error; [`Error::InUse`] while
    /// other handles exist.
    pub fn close(self) -> Result<()> {
        close_last(self.inner, "endpoint", |i| i.fid.close())
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("fid", &self.fid())
            .finish()
    }
}

pub(crate) struct PepInner {
    pub(crate) fid: OwnedFid<sys::fid_pep>,
    bound: Mutex<Vec<Arc<EqInner>>>,
    _fabric: Arc<FabricInner>,
}

/// A passive endpoint: listens for connection requests, which arrive on its
/// event queue as [`Event::ConnReq`](crate::eq::Event::ConnReq).
#[derive(Clone)]
pub struct PassiveEndpoint {
    pub(crate) inner: Arc<PepInner>,
}

impl PassiveEndpoint {
    /// `fi_passive_ep`.
    #[doc(alias = "fi_passive_ep")]
    pub fn open(fabric: &Fabric, info: &InfoEntry) -> Result<Self> {
        let mut raw = ptr::null_mut();
        // SAFETY: fi_passive_ep(3) with an open fabric and valid fi_info.
        let ret = unsafe {
            sys::fi_passive_ep(
                fabric.inner.fid.as_ptr(),
                info.as_raw() as *mut _,
                &mut raw,
                ptr::null_mut(),
            )
        };
        let fid = OwnedFid::opened("fi_passive_ep", ret, raw)?;
        Ok(PassiveEndpoint {
            inner: Arc::new(PepInner {
                fid,
                bound: Mutex::new(Vec::new()),
                _fabric: fabric.inner.clone(),
            }),
        })
    }

    /// The passive endpoint's fid, as `FI_CONNREQ` events name it.
    pub fn fid(&self) -> Fid {
        Fid::from_raw(self.inner.fid.fid())
    }

    /// `fi_pep_bind` to the event queue that receives its connection requests.
    #[doc(alias = "fi_pep_bind")]
    pub fn bind_eq(&self, eq: &EventQueue) -> Result<()> {
        // SAFETY: fi_pep_bind(3) of two open objects; the EQ is kept open by
        // the Arc stored below.
        check("fi_pep_bind", unsafe {
            sys::fi_pep_bind(self.inner.fid.as_ptr(), eq.inner.fid.fid(), 0)
        })?;
        if let Some(max) = cm_data_size(self.inner.fid.fid()) {
            eq.inner.max_cm_data.fetch_max(max, Ordering::Relaxed);
        }
        eq.inner.registry.insert(
            self.fid(),
            RegisteredObject::Passive(Arc::downgrade(&self.inner)),
        );
        self.inner
            .bound
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(eq.inner.clone());
        Ok(())
    }

    /// `fi_listen`.
    #[doc(alias = "fi_listen")]
    pub fn listen(&self) -> Result<()> {
        // SAFETY: fi_listen(3) on an open passive endpoint.
        check("fi_listen", unsafe {
            sys::fi_listen(self.inner.fid.as_ptr())
        })
    }

    /// `fi_getname`: the address it listens on.
    pub fn name(&self) -> Result<Vec<u8>> {
        name_of(self.inner.fid.fid(), false)
    }

    /// The address it listens on, for socket-based providers.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        let name = self.name()?;
        socket_addr(&name)
            .ok_or_else(|| Error::InvalidArgument("the address is not a socket address".into()))
    }

    /// `FI_OPT_CM_DATA_SIZE`.
    pub fn cm_data_size(&self) -> Option<usize> {
        cm_data_size(self.inner.fid.fid())
    }

    /// Closes it now; [`Error::InUse`] while other handles exist.
    pub fn close(self) -> Result<()> {
        close_last(self.inner, "passive endpoint", |i| i.fid.close())
    }
}

impl fmt::Debug for PassiveEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PassiveEndpoint")
            .field("fid", &self.fid())
            .finish()
    }
}
