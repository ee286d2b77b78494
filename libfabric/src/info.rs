//! Discovery: `fi_getinfo(3)` hints, the list of matching providers and the
//! owned `fi_info` entries that open fabrics, domains and endpoints.

use crate::error::{check, classify, Errno, Error, Result};
use bitflags::bitflags;
use libfabric_sys::fabric as sys;
use std::ffi::{c_char, CStr, CString};
use std::fmt;
use std::ops::Deref;
use std::ptr::{self, NonNull};

bitflags! {
    /// Capabilities (`fi_info::caps`, `FI_MSG`, `FI_TAGGED`, ...).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Caps: u64 {
        /// `FI_MSG`: send and receive messages.
        const MSG = sys::FI_MSG;
        /// `FI_RMA`
        const RMA = sys::FI_RMA;
        /// `FI_TAGGED`: tagged messages.
        const TAGGED = sys::FI_TAGGED;
        /// `FI_ATOMIC`
        const ATOMIC = sys::FI_ATOMIC;
        /// `FI_READ`
        const READ = sys::FI_READ;
        /// `FI_WRITE`
        const WRITE = sys::FI_WRITE;
        /// `FI_RECV`
        const RECV = sys::FI_RECV;
        /// `FI_SEND`
        const SEND = sys::FI_SEND;
        /// `FI_REMOTE_READ`
        const REMOTE_READ = sys::FI_REMOTE_READ;
        /// `FI_REMOTE_WRITE`
        const REMOTE_WRITE = sys::FI_REMOTE_WRITE;
        /// `FI_MULTI_RECV`
        const MULTI_RECV = sys::FI_MULTI_RECV;
        /// `FI_SOURCE`: completions carry the source address (`read_from`).
        const SOURCE = sys::FI_SOURCE;
        /// `FI_SOURCE_ERR`
        const SOURCE_ERR = sys::FI_SOURCE_ERR;
        /// `FI_DIRECTED_RECV`
        const DIRECTED_RECV = sys::FI_DIRECTED_RECV;
        /// `FI_RMA_EVENT`
        const RMA_EVENT = sys::FI_RMA_EVENT;
        /// `FI_LOCAL_COMM`
        const LOCAL_COMM = sys::FI_LOCAL_COMM;
        /// `FI_REMOTE_COMM`
        const REMOTE_COMM = sys::FI_REMOTE_COMM;
        /// `FI_HMEM`
        const HMEM = sys::FI_HMEM;
        /// Bits this crate does not name.
        const _ = !0;
    }
}

bitflags! {
    /// Mode bits (`fi_info::mode`): what the application promises to do.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Mode: u64 {
        /// `FI_CONTEXT`
        const CONTEXT = sys::FI_CONTEXT;
        /// `FI_CONTEXT2`
        const CONTEXT2 = sys::FI_CONTEXT2;
        /// `FI_MSG_PREFIX`
        const MSG_PREFIX = sys::FI_MSG_PREFIX;
        /// `FI_RX_CQ_DATA`
        const RX_CQ_DATA = sys::FI_RX_CQ_DATA;
        /// `FI_LOCAL_MR`: deprecated since libfabric 1.5 (replaced by the
        /// `FI_MR_LOCAL` registration mode) and by 2.0 (`#[deprecated]`
        /// when built against 2.x headers).
        #[cfg_attr(
            libfabric_2,
            deprecated(note = "libfabric 2.x deprecates FI_LOCAL_MR: use the FI_MR_LOCAL registration mode")
        )]
        const LOCAL_MR = sys::FI_LOCAL_MR;
        /// `FI_ASYNC_IOV`
        const ASYNC_IOV = sys::FI_ASYNC_IOV;
        /// Bits this crate does not name.
        const _ = !0;
    }
}

/// Endpoint type (`enum fi_ep_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EpType {
    /// `FI_EP_UNSPEC`
    Unspec,
    /// `FI_EP_MSG`: reliable, connected.
    Msg,
    /// `FI_EP_RDM`: reliable, unconnected.
    Rdm,
    /// `FI_EP_DGRAM`: unreliable datagrams.
    Dgram,
    /// A value this crate does not name.
    Other(u32),
}

impl EpType {
    pub(crate) fn raw(self) -> sys::fi_ep_type {
        match self {
            EpType::Unspec => sys::FI_EP_UNSPEC,
            EpType::Msg => sys::FI_EP_MSG,
            EpType::Rdm => sys::FI_EP_RDM,
            EpType::Dgram => sys::FI_EP_DGRAM,
            EpType::Other(v) => v,
        }
    }

    pub(crate) fn from_raw(raw: sys::fi_ep_type) -> Self {
        match raw {
            sys::FI_EP_UNSPEC => EpType::Unspec,
            sys::FI_EP_MSG => EpType::Msg,
            sys::FI_EP_RDM => EpType::Rdm,
            sys::FI_EP_DGRAM => EpType::Dgram,
            other => EpType::Other(other),
        }
    }
}

/// Threading model of a domain (`enum fi_threading`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Threading {
    /// `FI_THREAD_UNSPEC`
    Unspec,
    /// `FI_THREAD_SAFE`: every object may be used from any thread at once.
    Safe,
    /// `FI_THREAD_FID`
    Fid,
    /// `FI_THREAD_DOMAIN`
    Domain,
    /// `FI_THREAD_COMPLETION`
    Completion,
    /// `FI_THREAD_ENDPOINT`
    Endpoint,
    /// A value this crate does not name.
    Other(u32),
}

impl Threading {
    /// The `enum fi_threading` value.
    pub(crate) fn raw(self) -> sys::fi_threading {
        match self {
            Threading::Unspec => sys::FI_THREAD_UNSPEC,
            Threading::Safe => sys::FI_THREAD_SAFE,
            Threading::Fid => sys::FI_THREAD_FID,
            Threading::Domain => sys::FI_THREAD_DOMAIN,
            Threading::Completion => sys::FI_THREAD_COMPLETION,
            Threading::Endpoint => sys::FI_THREAD_ENDPOINT,
            Threading::Other(raw) => raw,
        }
    }

    pub(crate) fn from_raw(raw: sys::fi_threading) -> Self {
        match raw {
            sys::FI_THREAD_UNSPEC => Threading::Unspec,
            sys::FI_THREAD_SAFE => Threading::Safe,
            sys::FI_THREAD_FID => Threading::Fid,
            sys::FI_THREAD_DOMAIN => Threading::Domain,
            sys::FI_THREAD_COMPLETION => Threading::Completion,
            sys::FI_THREAD_ENDPOINT => Threading::Endpoint,
            other => Threading::Other(other),
        }
    }
}

/// The hints given to [`getinfo`]: what the application needs.
///
/// A plain value: cloning is cheap and the setters cannot fail. The strings
/// are checked once, by [`getinfo`] (a NUL byte in one is
/// [`Error::InvalidArgument`]).
///
/// ```
/// use libfabric::info::{getinfo, Caps, EpType, Hints};
/// let hints = Hints::new()
///     .provider("tcp")
///     .ep_type(EpType::Msg)
///     .caps(Caps::MSG)
///     .node("127.0.0.1");
/// let list = getinfo(&hints)?;
/// assert!(list.iter().all(|info| info.provider().starts_with("tcp")));
/// # Ok::<(), libfabric::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hints {
    provider: Option<String>,
    fabric_name: Option<String>,
    domain_name: Option<String>,
    ep_type: EpType,
    caps: Caps,
    mode: Mode,
    mr_mode: i32,
    cq_data_size: usize,
    queue_sizes: (usize, usize),
    msg_order: u64,
    node: Option<String>,
    service: Option<String>,
    source: bool,
    threading: Threading,
}

impl Default for Hints {
    fn default() -> Self {
        Self::new()
    }
}

impl Hints {
    /// Hints that state what this crate's objects support:
    /// - `FI_THREAD_SAFE` domains, which its `Send`/`Sync` types rely on
    ///   (see [`threading`](Self::threading) for the serialized models);
    /// - mode `FI_CONTEXT | FI_CONTEXT2`: every operation is posted with
    ///   its own `fi_context2` (see [`BufferPool`](crate::BufferPool)); and
    ///   `FI_RX_CQ_DATA`: remote CQ data arrives in posted receives;
    /// - memory registration modes `FI_MR_LOCAL | FI_MR_VIRT_ADDR |
    ///   FI_MR_ALLOCATED | FI_MR_PROV_KEY`: buffers are allocated and
    ///   registered by the pool and posted with their descriptor.
    ///
    /// Without them, providers that need any of these (verbs) would not
    /// match. Nothing else is asked for: any provider, endpoint type and
    /// capabilities.
    #[must_use]
    pub fn new() -> Self {
        Hints {
            provider: None,
            fabric_name: None,
            domain_name: None,
            ep_type: EpType::Unspec,
            caps: Caps::empty(),
            mode: Mode::CONTEXT | Mode::CONTEXT2 | Mode::RX_CQ_DATA,
            mr_mode: (sys::FI_MR_LOCAL
                | sys::FI_MR_VIRT_ADDR
                | sys::FI_MR_ALLOCATED
                | sys::FI_MR_PROV_KEY),
            cq_data_size: 0,
            queue_sizes: (0, 0),
            msg_order: 0,
            node: None,
            service: None,
            source: false,
            threading: Threading::Safe,
        }
    }

    /// The threading model to ask for (`domain_attr->threading`; default
    /// [`Threading::Safe`]). A domain of a serialized model is opened with
    /// [`Domain::open_model`](crate::Domain::open_model) as a
    /// `Domain<ThreadDomain>` or `Domain<ThreadCompletion>` (see the
    /// [`threading`](crate::threading) module). Providers may answer with
    /// a model that promises more (`tcp;ofi_rxm` gives `FI_THREAD_SAFE`):
    /// [`InfoEntry::threading`] says what was granted.
    ///
    /// ```
    /// use libfabric::info::{getinfo, EpType, Hints, Threading};
    /// let list = getinfo(&Hints::new().provider("udp;ofi_rxd").ep_type(EpType::Rdm)
    ///     .threading(Threading::Domain))?;
    /// assert!(list.iter().all(|info| info.threading() != Threading::Unspec));
    /// # Ok::<(), libfabric::Error>(())
    /// ```
    #[must_use]
    pub fn threading(mut self, model: Threading) -> Self {
        self.threading = model;
        self
    }

    /// Only this provider (`fabric_attr->prov_name`), such as `"tcp"`,
    /// `"tcp;ofi_rxm"` or `"verbs"`.
    #[must_use]
    pub fn provider(mut self, name: impl Into<String>) -> Self {
        self.provider = Some(name.into());
        self
    }

    /// Only this fabric (`fabric_attr->name`).
    #[must_use]
    pub fn fabric_name(mut self, name: impl Into<String>) -> Self {
        self.fabric_name = Some(name.into());
        self
    }

    /// Only this domain (`domain_attr->name`), such as `"rxe0"`.
    #[must_use]
    pub fn domain_name(mut self, name: impl Into<String>) -> Self {
        self.domain_name = Some(name.into());
        self
    }

    /// Endpoint type.
    #[must_use]
    pub fn ep_type(mut self, ty: EpType) -> Self {
        self.ep_type = ty;
        self
    }

    /// Capabilities needed.
    #[must_use]
    pub fn caps(mut self, caps: Caps) -> Self {
        self.caps = caps;
        self
    }

    /// Mode bits the application supports.
    #[must_use]
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// Memory registration modes the application supports (`FI_MR_*`).
    #[must_use]
    pub fn mr_mode(mut self, mr_mode: i32) -> Self {
        self.mr_mode = mr_mode;
        self
    }

    /// Size of remote CQ data the application needs (`domain_attr->cq_data_size`).
    #[must_use]
    pub fn cq_data_size(mut self, bytes: usize) -> Self {
        self.cq_data_size = bytes;
        self
    }

    /// Ordering of transmits the application needs (`FI_ORDER_*` bits, for
    /// both `tx_attr->msg_order` and `rx_attr->msg_order`). On shm, asking
    /// for an RMA ordering (such as `FI_ORDER_RAW`) turns off its direct
    /// RMA path, which the RMA calls need (see
    /// [`Endpoint::write`](crate::Endpoint::write)).
    #[must_use]
    pub fn msg_order(mut self, order: u64) -> Self {
        self.msg_order = order;
        self
    }

    /// Transmit and receive queue depths (`tx_attr->size`, `rx_attr->size`).
    #[must_use]
    pub fn queue_sizes(mut self, tx: usize, rx: usize) -> Self {
        self.queue_sizes = (tx, rx);
        self
    }

    /// The node (host name or address) to resolve.
    #[must_use]
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// The service (port) to resolve: a number or a name.
    #[must_use]
    pub fn service(mut self, service: impl ToString) -> Self {
        self.service = Some(service.to_string());
        self
    }

    /// [`node`](Self::node) and [`service`](Self::service) from a socket
    /// address.
    #[must_use]
    pub fn addr(self, addr: std::net::SocketAddr) -> Self {
        let node = match addr {
            // The scope of a link-local address is part of its node name
            // for getaddrinfo(3).
            std::net::SocketAddr::V6(a) if a.scope_id() != 0 => {
                format!("{}%{}", a.ip(), a.scope_id())
            }
            _ => addr.ip().to_string(),
        };
        self.node(node).service(addr.port())
    }

    /// `FI_SOURCE`: node and service name the local address to bind to
    /// (a listener) instead of the peer.
    #[must_use]
    pub fn source(mut self, source: bool) -> Self {
        self.source = source;
        self
    }

    /// The provider asked for, if any.
    #[must_use]
    pub fn provider_name(&self) -> Option<&str> {
        self.provider.as_deref()
    }

    /// The `fi_info` these hints stand for, with the node and service as C
    /// strings, for `fi_getinfo`.
    fn to_raw(&self) -> Result<(Info, Option<CString>, Option<CString>)> {
        // SAFETY: fi_allocinfo (fi_getinfo(3)) returns a zeroed fi_info with
        // all attribute structs allocated, or NULL; it is released with
        // fi_freeinfo, which Info's Drop does.
        let raw = unsafe { sys::fi_allocinfo() };
        let info = Info::from_raw(raw).ok_or(Error::OutOfMemory {
            what: "fi_allocinfo",
            bytes: size_of::<sys::fi_info>(),
        })?;
        let p = info.ptr.as_ptr();
        let strings = [
            self.provider.as_deref().map(cstring).transpose()?,
            self.fabric_name.as_deref().map(cstring).transpose()?,
            self.domain_name.as_deref().map(cstring).transpose()?,
        ];
        // SAFETY: fi_allocinfo allocated fabric_attr, domain_attr, ep_attr,
        // tx_attr and rx_attr, owned by this fresh fi_info alone.
        // fi_freeinfo frees the name strings with free(), so they are
        // strdup'ed (malloc).
        unsafe {
            let [prov, fabric, domain] = &strings;
            if let Some(s) = prov {
                (*(*p).fabric_attr).prov_name = libc::strdup(s.as_ptr());
            }
            if let Some(s) = fabric {
                (*(*p).fabric_attr).name = libc::strdup(s.as_ptr());
            }
            if let Some(s) = domain {
                (*(*p).domain_attr).name = libc::strdup(s.as_ptr());
            }
            let domain_attr = &mut *(*p).domain_attr;
            domain_attr.threading = self.threading.raw();
            domain_attr.mr_mode = self.mr_mode;
            domain_attr.cq_data_size = self.cq_data_size;
            (*(*p).ep_attr).type_ = self.ep_type.raw();
            (*p).caps = self.caps.bits();
            (*p).mode = self.mode.bits();
            (*(*p).tx_attr).size = self.queue_sizes.0;
            (*(*p).rx_attr).size = self.queue_sizes.1;
            (*(*p).tx_attr).msg_order = self.msg_order;
            (*(*p).rx_attr).msg_order = self.msg_order;
        }
        let node = self.node.as_deref().map(cstring).transpose()?;
        let service = self.service.as_deref().map(cstring).transpose()?;
        Ok((info, node, service))
    }

    fn describe(&self) -> String {
        let mut parts = Vec::new();
        parts.push(format!(
            "provider {}",
            self.provider.as_deref().unwrap_or("any")
        ));
        parts.push(format!("endpoint type {:?}", self.ep_type));
        if !self.caps.is_empty() {
            parts.push(format!("caps {:?}", self.caps));
        }
        if let Some(node) = &self.node {
            parts.push(format!("node {node}"));
        }
        if let Some(service) = &self.service {
            parts.push(format!("service {service}"));
        }
        if self.threading != Threading::Safe {
            parts.push(format!("threading {:?}", self.threading));
        }
        parts.join(", ")
    }
}

fn cstring(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::InvalidArgument(format!("{s:?} contains a NUL byte").into()))
}

/// Checks that the runtime library is at least the header version.
pub(crate) fn check_runtime_version() -> Result<()> {
    let runtime = sys::runtime_version();
    if sys::FI_VERSION_LT(runtime, sys::HEADER_VERSION) {
        return Err(Error::RuntimeTooOld {
            runtime_major: sys::FI_MAJOR(runtime),
            runtime_minor: sys::FI_MINOR(runtime),
            header_major: sys::FI_MAJOR(sys::HEADER_VERSION),
            header_minor: sys::FI_MINOR(sys::HEADER_VERSION),
        });
    }
    Ok(())
}

/// `fi_getinfo`: the providers, fabrics and domains that match `hints`,
/// asking for the API version of the headers the bindings came from.
///
/// # Errors
/// [`Error::NoProvider`] when nothing matches; [`Error::RuntimeTooOld`] for
/// a runtime library older than the headers; [`Error::InvalidArgument`] for
/// a hint string with a NUL byte; [`Error::OutOfMemory`] when
/// `fi_allocinfo` fails; [`Error::Call`] for any other `fi_getinfo` error.
#[doc(alias = "fi_getinfo")]
pub fn getinfo(hints: &Hints) -> Result<InfoList> {
    check_runtime_version()?;
    crate::startup_env::note();
    let (info, node, service) = hints.to_raw()?;
    let mut head = ptr::null_mut();
    // SAFETY: fi_getinfo(3): node and service are NUL-terminated or NULL,
    // hints is a valid fi_info; on success *info is a list the caller frees
    // with fi_freeinfo (InfoList's Drop). fi_getinfo does not keep hints.
    let ret = unsafe {
        sys::fi_getinfo(
            sys::HEADER_VERSION,
            node.as_ref().map_or(ptr::null(), |s| s.as_ptr()),
            service.as_ref().map_or(ptr::null(), |s| s.as_ptr()),
            if hints.source { sys::FI_SOURCE } else { 0 },
            info.ptr.as_ptr(),
            &mut head,
        )
    };
    if classify(ret) == Err(Errno::NODATA) {
        return Err(Error::NoProvider {
            request: hints.describe(),
        });
    }
    check("fi_getinfo", ret)?;
    Ok(InfoList {
        head: NonNull::new(head),
    })
}

/// The list `fi_getinfo` returned, freed with `fi_freeinfo` when dropped.
pub struct InfoList {
    head: Option<NonNull<sys::fi_info>>,
}

// SAFETY: the list is plain heap data owned by this value; libfabric keeps no
// reference to it and nothing in it is thread-affine.
unsafe impl Send for InfoList {}
// SAFETY: shared access only reads the data.
unsafe impl Sync for InfoList {}

impl InfoList {
    /// The entries, best match first.
    #[must_use]
    pub fn iter(&self) -> InfoIter<'_> {
        InfoIter {
            next: self.head.map(|p| p.as_ptr() as *const _),
            _list: std::marker::PhantomData,
        }
    }

    /// The first (best) entry.
    #[must_use]
    pub fn first(&self) -> Option<&InfoEntry> {
        self.iter().next()
    }

    /// How many entries there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// Whether the list is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.head.is_none()
    }
}

impl Drop for InfoList {
    fn drop(&mut self) {
        if let Some(head) = self.head {
            // SAFETY: the list came from fi_getinfo and is freed once.
            unsafe { sys::fi_freeinfo(head.as_ptr()) };
        }
    }
}

impl fmt::Debug for InfoList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a InfoList {
    type Item = &'a InfoEntry;
    type IntoIter = InfoIter<'a>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl IntoIterator for InfoList {
    type Item = Info;
    type IntoIter = InfoListIntoIter;
    /// Every entry, owned: the list's nodes taken apart one by one (no
    /// copy, nothing that can fail).
    fn into_iter(self) -> Self::IntoIter {
        InfoListIntoIter { rest: self }
    }
}

/// The entries of an [`InfoList`], owned, best match first: each node of
/// the list is detached and handed out as an [`Info`]; the ones not taken
/// are freed with the iterator (the rest is an [`InfoList`]).
#[derive(Debug)]
pub struct InfoListIntoIter {
    rest: InfoList,
}

impl Iterator for InfoListIntoIter {
    type Item = Info;

    fn next(&mut self) -> Option<Info> {
        let node = self.rest.head?;
        // SAFETY: node heads the rest of a list fi_getinfo returned, owned
        // by this iterator. Detached (next set to NULL), it is one node that
        // fi_freeinfo frees alone: every node's attributes, strings and
        // addresses are allocations of its own, which fi_freeinfo frees
        // node by node (`src/fabric.c` 1041-1072 in 1.22).
        unsafe {
            self.rest.head = NonNull::new((*node.as_ptr()).next);
            (*node.as_ptr()).next = ptr::null_mut();
        }
        Info::from_raw(node.as_ptr())
    }
}

/// Iterator over the entries of an [`InfoList`].
#[derive(Debug)]
pub struct InfoIter<'a> {
    next: Option<*const sys::fi_info>,
    _list: std::marker::PhantomData<&'a InfoList>,
}

impl<'a> Iterator for InfoIter<'a> {
    type Item = &'a InfoEntry;
    fn next(&mut self) -> Option<&'a InfoEntry> {
        let cur = self.next?;
        // SAFETY: cur is a node of a list that lives as long as 'a; InfoEntry
        // is a transparent wrapper of fi_info.
        let entry = unsafe { &*(cur as *const InfoEntry) };
        self.next = NonNull::new(entry.0.next).map(|p| p.as_ptr() as *const _);
        Some(entry)
    }
}

/// One `fi_info`, borrowed from a list or an [`Info`].
#[repr(transparent)]
pub struct InfoEntry(sys::fi_info);

fn c_str<'a>(p: *const c_char) -> &'a str {
    if p.is_null() {
        ""
    } else {
        // SAFETY: libfabric's strings in fi_info are NUL-terminated and live
        // as long as the fi_info that holds them.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("")
    }
}

fn bytes<'a>(p: *const std::ffi::c_void, len: usize) -> &'a [u8] {
    if p.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: fi_info(3): src_addr/dest_addr point to *_addrlen bytes
        // owned by the fi_info.
        unsafe { std::slice::from_raw_parts(p.cast(), len) }
    }
}

impl InfoEntry {
    /// The raw `fi_info`, for calls this crate does not wrap.
    #[must_use]
    pub fn as_raw(&self) -> *const sys::fi_info {
        &self.0
    }

    fn fabric_attr(&self) -> Option<&sys::fi_fabric_attr> {
        // SAFETY: attribute pointers are NULL or valid for the fi_info's life.
        unsafe { self.0.fabric_attr.as_ref() }
    }

    fn domain_attr(&self) -> Option<&sys::fi_domain_attr> {
        // SAFETY: as above.
        unsafe { self.0.domain_attr.as_ref() }
    }

    fn ep_attr(&self) -> Option<&sys::fi_ep_attr> {
        // SAFETY: as above.
        unsafe { self.0.ep_attr.as_ref() }
    }

    /// Provider name, such as `"tcp"` or `"tcp;ofi_rxm"`.
    #[must_use]
    pub fn provider(&self) -> &str {
        self.fabric_attr().map_or("", |a| c_str(a.prov_name))
    }

    /// Fabric name.
    #[must_use]
    pub fn fabric_name(&self) -> &str {
        self.fabric_attr().map_or("", |a| c_str(a.name))
    }

    /// Domain name.
    #[must_use]
    pub fn domain_name(&self) -> &str {
        self.domain_attr().map_or("", |a| c_str(a.name))
    }

    /// Endpoint type.
    #[must_use]
    pub fn ep_type(&self) -> EpType {
        EpType::from_raw(self.ep_attr().map_or(sys::FI_EP_UNSPEC, |a| a.type_))
    }

    /// Capabilities.
    #[must_use]
    pub fn caps(&self) -> Caps {
        Caps::from_bits_retain(self.0.caps)
    }

    /// Mode bits.
    #[must_use]
    pub fn mode(&self) -> Mode {
        Mode::from_bits_retain(self.0.mode)
    }

    /// Address format (`FI_SOCKADDR_IN`, ...).
    #[must_use]
    pub fn addr_format(&self) -> u32 {
        self.0.addr_format
    }

    /// Source address bytes.
    #[must_use]
    pub fn src_addr(&self) -> &[u8] {
        bytes(self.0.src_addr, self.0.src_addrlen)
    }

    /// Destination address bytes.
    #[must_use]
    pub fn dest_addr(&self) -> &[u8] {
        bytes(self.0.dest_addr, self.0.dest_addrlen)
    }

    /// Threading model of the domain.
    #[must_use]
    pub fn threading(&self) -> Threading {
        Threading::from_raw(self.domain_attr().map_or(0, |a| a.threading))
    }

    /// Memory registration mode bits (`FI_MR_*`).
    #[must_use]
    pub fn mr_mode(&self) -> i32 {
        self.domain_attr().map_or(0, |a| a.mr_mode)
    }

    /// Bytes of a memory registration key (`domain_attr->mr_key_size`).
    #[must_use]
    pub fn mr_key_size(&self) -> usize {
        self.domain_attr().map_or(0, |a| a.mr_key_size)
    }

    /// Most iovecs one memory region may cover (`domain_attr->mr_iov_limit`).
    #[must_use]
    pub fn mr_iov_limit(&self) -> usize {
        self.domain_attr().map_or(0, |a| a.mr_iov_limit)
    }

    /// Bytes of remote CQ data the domain carries.
    #[must_use]
    pub fn cq_data_size(&self) -> usize {
        self.domain_attr().map_or(0, |a| a.cq_data_size)
    }

    /// Largest message.
    #[must_use]
    pub fn max_msg_size(&self) -> usize {
        self.ep_attr().map_or(0, |a| a.max_msg_size)
    }

    /// Transmit queue depth.
    #[must_use]
    pub fn tx_size(&self) -> usize {
        // SAFETY: NULL or valid for the fi_info's life.
        unsafe { self.0.tx_attr.as_ref() }.map_or(0, |a| a.size)
    }

    /// Largest message `fi_inject` takes (`tx_attr->inject_size`).
    #[must_use]
    pub fn inject_size(&self) -> usize {
        // SAFETY: NULL or valid for the fi_info's life.
        unsafe { self.0.tx_attr.as_ref() }.map_or(0, |a| a.inject_size)
    }

    /// Ordering of transmits (`tx_attr->msg_order`, `FI_ORDER_*` bits).
    #[must_use]
    pub fn msg_order(&self) -> u64 {
        // SAFETY: NULL or valid for the fi_info's life.
        unsafe { self.0.tx_attr.as_ref() }.map_or(0, |a| a.msg_order)
    }

    /// Receive queue depth.
    #[must_use]
    pub fn rx_size(&self) -> usize {
        // SAFETY: NULL or valid for the fi_info's life.
        unsafe { self.0.rx_attr.as_ref() }.map_or(0, |a| a.size)
    }

    /// Whether it carries a connection request's handle (`fi_info::handle`).
    pub(crate) fn has_handle(&self) -> bool {
        !self.0.handle.is_null()
    }

    /// An owned copy (`fi_dupinfo`).
    ///
    /// # Errors
    /// [`Error::Call`] with [`Errno::NOMEM`] when `fi_dupinfo` fails.
    pub fn to_owned_info(&self) -> Result<Info> {
        // SAFETY: fi_dupinfo(3) deep-copies one fi_info (next is not
        // followed) into memory the caller frees with fi_freeinfo.
        let dup = unsafe { sys::fi_dupinfo(&self.0) };
        Info::from_raw(dup).ok_or(Error::Call {
            call: "fi_dupinfo",
            errno: Errno::NOMEM,
        })
    }

    /// `fi_tostr(FI_TYPE_INFO)`: libfabric's own multi-line description.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut buf = vec![0 as c_char; 16384];
        // SAFETY: fi_tostr_r writes at most len bytes, NUL-terminated, and
        // returns buf.
        unsafe {
            sys::fi_tostr_r(
                buf.as_mut_ptr(),
                buf.len(),
                (&self.0 as *const sys::fi_info).cast(),
                sys::FI_TYPE_INFO,
            );
            CStr::from_ptr(buf.as_ptr()).to_string_lossy().into_owned()
        }
    }
}

impl fmt::Debug for InfoEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Info")
            .field("provider", &self.provider())
            .field("fabric", &self.fabric_name())
            .field("domain", &self.domain_name())
            .field("ep_type", &self.ep_type())
            .field("caps", &self.caps())
            .finish()
    }
}

/// One owned `fi_info` (freed with `fi_freeinfo`): from
/// [`InfoEntry::to_owned_info`], an [`InfoList`] iterated by value, or a
/// connection request.
pub struct Info {
    pub(crate) ptr: NonNull<sys::fi_info>,
}

// SAFETY: an fi_info is plain heap data owned by this value.
unsafe impl Send for Info {}
// SAFETY: shared access only reads it.
unsafe impl Sync for Info {}

impl Info {
    /// Takes ownership of an `fi_info` that must later be freed with
    /// `fi_freeinfo`; `None` for NULL.
    pub(crate) fn from_raw(raw: *mut sys::fi_info) -> Option<Self> {
        NonNull::new(raw).map(|ptr| Info { ptr })
    }
}

impl Deref for Info {
    type Target = InfoEntry;
    fn deref(&self) -> &InfoEntry {
        // SAFETY: ptr is a valid fi_info owned by self; InfoEntry is
        // transparent over it.
        unsafe { &*(self.ptr.as_ptr() as *const InfoEntry) }
    }
}

impl Clone for Info {
    fn clone(&self) -> Self {
        self.to_owned_info().expect("fi_dupinfo: out of memory")
    }
}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: owned, freed once. For a single node next is NULL.
        unsafe { sys::fi_freeinfo(self.ptr.as_ptr()) };
    }
}

impl fmt::Debug for Info {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
