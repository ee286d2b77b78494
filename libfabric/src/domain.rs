//! `fi_domain(3)`: a domain (one NIC or provider instance), parent of
//! completion queues, endpoints, address vectors and memory regions.

use crate::error::{Error, Handback, ObjectKind, ObjectScope, Result};
use crate::fabric::{Fabric, FabricInner};
use crate::fid::{close_last, OwnedFid};
use crate::info::{Info, InfoEntry};
use crate::threading::{ThreadModel, ThreadSafe};
use libfabric_sys::fabric as sys;
use std::marker::PhantomData;
use std::ptr;
use std::sync::Arc;

/// A close parked by a thread other than the domain's (see
/// [`DomainInner::close_on_owner`]).
pub(crate) type DeferredClose = Box<dyn FnOnce(&DomainInner) + Send>;

pub(crate) struct DomainInner {
    pub(crate) fid: OwnedFid<sys::fid_domain>,
    pub(crate) info: Info,
    pub(crate) fabric: Arc<FabricInner>,
    /// The next key to request for a memory region when the provider does
    /// not choose them (no `FI_MR_PROV_KEY`): fi_mr(3) wants requested
    /// keys unique within the domain.
    pub(crate) next_key: std::sync::atomic::AtomicU64,
    /// Whether the provider gave the domain an `FI_WAIT_FD` completion
    /// queue (counter) before (see `wait::open_with_default_wait`).
    pub(crate) fd_cqs: std::sync::atomic::AtomicBool,
    pub(crate) fd_counters: std::sync::atomic::AtomicBool,
    /// The domain's open endpoints and the memory of closed regions that
    /// waits for them (see [`Retired`]).
    pub(crate) retired: std::sync::Mutex<Retired>,
    /// The thread its handles live on, for the serialized models: the one
    /// that opened it (its handles are neither `Send` nor `Sync`).
    pub(crate) owner: Option<std::thread::ThreadId>,
    /// Closes parked by other threads, done on the owner's thread.
    pub(crate) deferred: std::sync::Mutex<Vec<DeferredClose>>,
}

/// Memory of memory regions (and of buffer pools peers may read:
/// `quirks::lends_sent_memory_to_peers`) that were closed (`fi_close` of
/// the MR) while endpoints of the domain were open, kept until each of
/// those endpoints has closed.
///
/// Closing an MR only removes its key from the domain's key map
/// (`ofi_mr_close`, `prov/util/src/util_mr_map.c` 222-238 in 1.22): an RMA
/// whose header arrived before, and passed the key check then, goes on
/// copying into or out of the region's addresses (tcp verifies the key
/// when a write's header arrives and then receives the payload straight
/// into the region, `xnet_progress.c` 912 in 1.22; rxd, shm and sockets
/// likewise look the key up once per operation). Such an RMA is carried
/// by an endpoint of the domain that was open when the MR closed; a
/// closed endpoint's provider reaches none of its transfers' memory any
/// more (the citations at `buffer::reclaim_closed_endpoint`). An endpoint
/// opened after the MR closed finds the key gone. So the memory is safe
/// to free, or to hand back, once every endpoint open at the MR's close
/// has closed.
#[derive(Default)]
pub(crate) struct Retired {
    /// Ids of the domain's endpoints from just before their `fi_endpoint`
    /// until their `fi_close` succeeded.
    open: std::collections::BTreeSet<u64>,
    /// Memory waiting for the endpoints open at its region's close: those
    /// whose id is at most the mark (endpoint ids only grow).
    parked: Vec<(u64, Box<dyn Send>)>,
}

/// The mark of what waits for the domain to have no endpoint open.
const UNTIL_IDLE: u64 = u64::MAX;

impl Retired {
    /// Notes an endpoint about to be opened (before `fi_endpoint`).
    pub(crate) fn opening(&mut self, id: u64) {
        self.open.insert(id);
    }

    /// How many endpoints of the domain are open (or being opened).
    pub(crate) fn open_endpoints(&self) -> usize {
        self.open.len()
    }

    /// How many closed regions' memory is kept.
    pub(crate) fn parked(&self) -> usize {
        self.parked.len()
    }

    /// Parks `memory` of a region whose MR was closed while holding this
    /// lock, or hands it back when no endpoint is open.
    pub(crate) fn park(&mut self, memory: Box<dyn Send>) -> Option<Box<dyn Send>> {
        match self.open.last() {
            Some(&newest) => {
                self.parked.push((newest, memory));
                None
            }
            None => Some(memory),
        }
    }

    /// Parks what may be dropped only once no endpoint of the domain is
    /// open at all (endpoints opened later included). The caller checked
    /// that one is open now.
    pub(crate) fn park_until_idle(&mut self, kept: Box<dyn Send>) {
        self.parked.push((UNTIL_IDLE, kept));
    }

    /// An endpoint closed (or its `fi_endpoint` failed): the memory that
    /// waited for it alone, to drop once the lock is released.
    pub(crate) fn closed(&mut self, id: u64) -> Vec<Box<dyn Send>> {
        self.open.remove(&id);
        let idle = self.open.is_empty();
        let oldest_open = self.open.first().copied().unwrap_or(u64::MAX);
        let mut free = Vec::new();
        let mut i = 0;
        while i < self.parked.len() {
            if idle || self.parked[i].0 < oldest_open {
                free.push(self.parked.swap_remove(i).1);
            } else {
                i += 1;
            }
        }
        free
    }
}

impl Drop for DomainInner {
    fn drop(&mut self) {
        // The last handle of the domain is gone, so no object of it is in
        // use on any thread (each holds an Arc of this): the parked closes
        // are serialized here whatever the thread.
        self.run_parked_closes();
        // An endpoint whose close failed stays open in the provider (its
        // id stays in the set): memory parked for it may still be reached
        // through it, so it is leaked rather than freed.
        let retired = self.retired.get_mut().unwrap_or_else(|e| e.into_inner());
        let parked = std::mem::take(&mut retired.parked);
        if retired.open.is_empty() {
            // Now, before the domain's fid closes (fields drop after this):
            // what is parked may hold open MRs of the domain (sockets).
            drop(parked);
        } else {
            std::mem::forget(parked);
        }
    }
}

impl DomainInner {
    /// The retired-memory lock (poisoning ignored: its state stays
    /// consistent, each update being one step).
    pub(crate) fn retired(&self) -> std::sync::MutexGuard<'_, Retired> {
        self.retired.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a provider call on an object of the domain may be made on
    /// this thread right now, from a path that is not a handle's (a `Drop`
    /// reached through a `Send` value): always under `FI_THREAD_SAFE`,
    /// only on the owner's thread under the serialized models.
    pub(crate) fn callable_here(&self) -> bool {
        self.owner
            .is_none_or(|owner| owner == std::thread::current().id())
    }

    /// Runs `close` now where [`callable_here`](Self::callable_here), else
    /// parks it for the owner's thread: its next opening of an object,
    /// close of an endpoint, [`Domain::run_deferred`], or the domain's own
    /// close. `close` is given the domain, which it may not hold itself
    /// (the parked close would keep the domain open).
    pub(crate) fn close_on_owner(&self, close: impl FnOnce(&DomainInner) + Send + 'static) {
        if self.callable_here() {
            close(self);
        } else {
            self.deferred
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Box::new(close));
        }
    }

    /// Runs the closes other threads parked. Only on the owner's thread
    /// (the callers are handle methods of the domain's objects, which live
    /// there).
    pub(crate) fn run_deferred(&self) {
        if self.owner.is_some() {
            self.run_parked_closes();
        }
    }

    /// Runs the closes parked so far, outside the lock.
    fn run_parked_closes(&self) {
        let parked = std::mem::take(&mut *self.deferred.lock().unwrap_or_else(|e| e.into_inner()));
        for close in parked {
            close(self);
        }
    }

    /// An endpoint of the domain closed: the memory that waited for it is
    /// dropped, outside the lock.
    pub(crate) fn endpoint_closed(&self, id: u64) {
        let free = self.retired().closed(id);
        drop(free);
    }
}

/// An open domain. It keeps its fabric open.
///
/// `T` is the domain's threading model ([`threading`](crate::threading)),
/// carried by every object opened from it:
/// - [`ThreadSafe`] (`FI_THREAD_SAFE`, the default, asked for by
///   [`Hints::new`](crate::info::Hints::new)): fi_domain(3) lets any thread
///   use any object at any time, which is what makes the domain and its
///   objects `Send` and `Sync` without locks of their own. Opened with
///   [`Domain::open`].
/// - [`ThreadDomain`](crate::ThreadDomain) (`FI_THREAD_DOMAIN`): the
///   application serializes access to all objects of the domain. The
///   domain and its objects are neither `Send` nor `Sync`, so they all stay
///   on the thread that opened the domain, and that serializes them; the
///   provider then leaves its locks out, and so do this crate's reads.
/// - [`ThreadCompletion`](crate::ThreadCompletion) (`FI_THREAD_COMPLETION`):
///   encoded like `ThreadDomain`.
///
/// The serialized models are opened with [`Domain::open_model`] from an
/// `fi_info` asked for with [`Hints::threading`](crate::info::Hints::threading).
///
/// ```
/// use libfabric::{info::{getinfo, Hints}, Domain, Fabric};
/// let list = getinfo(&Hints::new().provider("tcp").node("127.0.0.1"))?;
/// let info = list.first().unwrap();
/// let fabric = Fabric::open(info)?;
/// let domain = Domain::open(&fabric, info)?;
/// assert_eq!(domain.info().provider(), info.provider());
/// # Ok::<(), libfabric::Error>(())
/// ```
///
/// A domain driven from one thread, with a send and a receive over an
/// `FI_THREAD_DOMAIN` reliable endpoint (udp;ofi_rxd):
///
/// ```
/// use libfabric::cq::{CqAttr, CqRead, Msg, MsgEntry};
/// use libfabric::info::{getinfo, Caps, EpType, Hints, Threading};
/// use libfabric::{AddressVector, BufferPool, CompletionQueue, Domain, Endpoint, Fabric, ThreadDomain};
/// use libfabric::{av::AvType, ep::CqBind};
/// let hints = Hints::new().provider("udp;ofi_rxd").ep_type(EpType::Rdm).caps(Caps::MSG)
///     .threading(Threading::Domain);
/// let list = getinfo(&hints)?;
/// let info = list.first().unwrap();
/// let fabric = Fabric::open(info)?;
/// let domain = Domain::<ThreadDomain>::open_model(&fabric, info)?;
/// let cq = CompletionQueue::<Msg, _>::open(&domain, &CqAttr::new())?;
/// let av = AddressVector::open(&domain, AvType::Table, 4)?;
/// let ep = Endpoint::open(&domain, info)?;
/// ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV)?;
/// ep.bind_av(&av)?;
/// ep.enable()?;
/// let me = av.insert(&ep.name()?)?;
/// let pool = BufferPool::new(&domain, 4, 64)?;
/// ep.recv(pool.take().unwrap()).map_err(|(_, e)| e)?;
/// let mut ping = pool.take().unwrap();
/// ping[..4].copy_from_slice(b"ping");
/// ep.send_to(ping, 4, me).map_err(|(_, e)| e)?;
/// let mut entries: [MsgEntry; 8] = Default::default();
/// let mut got = None;
/// for _ in 0..1_000_000 {
///     if let CqRead::Completions(done) = cq.read(&mut entries)? {
///         for c in &done {
///             if let Some(buffer) = pool.reclaim(c) {
///                 if c.flags().contains(libfabric::cq::CompletionFlags::RECV) {
///                     got = Some(buffer[..c.len()].to_vec());
///                 }
///             }
///         }
///     }
///     if got.is_some() { break; }
/// }
/// assert_eq!(got.as_deref(), Some(&b"ping"[..]));
/// # Ok::<(), libfabric::Error>(())
/// ```
pub struct Domain<T: ThreadModel = ThreadSafe> {
    pub(crate) inner: Arc<DomainInner>,
    pub(crate) _model: PhantomData<T>,
}

impl<T: ThreadModel> Clone for Domain<T> {
    fn clone(&self) -> Self {
        Domain::from_inner(self.inner.clone())
    }
}

impl Domain<ThreadSafe> {
    /// `fi_domain`: opens the `FI_THREAD_SAFE` domain that `info` names on
    /// `fabric` (see [`open_model`](Self::open_model) for the other models).
    ///
    /// # Errors
    /// As [`open_model`](Self::open_model): [`Error::InvalidArgument`] when
    /// `info`'s threading model is not `FI_THREAD_SAFE`.
    #[doc(alias = "fi_domain")]
    pub fn open(fabric: &Fabric, info: &InfoEntry) -> Result<Self> {
        Self::open_model(fabric, info)
    }
}

impl<T: ThreadModel> Domain<T> {
    /// A handle of the model `T` over `inner`. The caller knows `inner` was
    /// opened as a `Domain<T>`.
    pub(crate) fn from_inner(inner: Arc<DomainInner>) -> Self {
        Domain {
            inner,
            _model: PhantomData,
        }
    }

    /// `fi_domain` with the threading model `T`: opens the domain that
    /// `info` names on `fabric`, as a `Domain<T>`. `info`'s threading model
    /// (asked for with [`Hints::threading`](crate::info::Hints::threading))
    /// must give what `T` lets safe code do: `FI_THREAD_SAFE` for
    /// [`ThreadSafe`]; `FI_THREAD_DOMAIN` or any stronger model for
    /// [`ThreadDomain`](crate::ThreadDomain); `FI_THREAD_COMPLETION` or
    /// stronger for [`ThreadCompletion`](crate::ThreadCompletion). The
    /// provider is given `info`'s model.
    ///
    /// ```
    /// use libfabric::info::{getinfo, EpType, Hints, Threading};
    /// use libfabric::{Domain, Error, Fabric, ThreadDomain, ThreadSafe};
    /// let list = getinfo(&Hints::new().provider("udp;ofi_rxd").ep_type(EpType::Rdm)
    ///     .threading(Threading::Domain))?;
    /// let info = list.first().unwrap();
    /// let fabric = Fabric::open(info)?;
    /// let domain = Domain::<ThreadDomain>::open_model(&fabric, info)?;
    /// // an FI_THREAD_DOMAIN fi_info cannot give Send + Sync objects:
    /// assert!(matches!(Domain::<ThreadSafe>::open_model(&fabric, info), Err(Error::InvalidArgument(_))));
    /// # drop(domain);
    /// # Ok::<(), libfabric::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `info`'s threading model does not
    /// give what `T` needs, or its memory registration mode has
    /// `FI_MR_ENDPOINT`; [`Error::ForeignObject`] for an `fi_info` of
    /// another provider or fabric; [`Error::Unsupported`] for a serialized
    /// model on shm (whose endpoints of one process close together, across
    /// domains and threads), and on rxm with its write rendezvous on
    /// (`FI_OFI_RXM_USE_RNDV_WRITE`, when libfabric started or now), which
    /// registers memory given for receives for peers' writes (see
    /// [`BufferPool::new`](crate::BufferPool::new)); [`Error::Call`] when `fi_dupinfo` or
    /// `fi_domain` fails.
    #[doc(alias = "fi_domain")]
    pub fn open_model(fabric: &Fabric, info: &InfoEntry) -> Result<Self> {
        if !T::accepts(info.threading()) {
            return Err(Error::InvalidArgument(
                format!(
                    "the domain's threading model is {:?}; a Domain<{}> needs {} \
                     (ask for it with Hints::threading)",
                    info.threading(),
                    std::any::type_name::<T>()
                        .rsplit("::")
                        .next()
                        .unwrap_or("?"),
                    match T::THREADING {
                        crate::info::Threading::Safe => "FI_THREAD_SAFE (the default of Hints)",
                        crate::info::Threading::Domain => "FI_THREAD_DOMAIN or stronger",
                        _ => "FI_THREAD_COMPLETION or stronger",
                    }
                )
                .into(),
            ));
        }
        fabric.inner.check_info("fi_domain", info)?;
        if !T::LOCKED && crate::quirks::closed_peers_dangle(info.provider()) {
            // Closing an shm endpoint waits until no endpoint of the process
            // may address it, and then closes a group of them, whatever
            // domain they are of, on the thread of the last close
            // (shm_peers): that would use a serialized domain off its
            // thread.
            return Err(Error::Unsupported {
                call: "fi_domain",
                reason: "shm endpoints of one process close together across domains and threads \
                         (shm maps a peer of the same process through the peer's own memory), \
                         which a serialized threading model cannot allow: use ThreadSafe",
            });
        }
        if crate::quirks::lets_peers_write_receive_memory(info.provider()) {
            return Err(Error::Unsupported {
                call: "fi_domain",
                reason: "rxm's write rendezvous (FI_OFI_RXM_USE_RNDV_WRITE) registers receive \
                         memory for remote writes, so a peer could write into buffers lent as \
                         &mut [u8]: start the program without it (in the environment and in \
                         libfabric.conf)",
            });
        }
        if info.mr_mode() & sys::FI_MR_ENDPOINT != 0 {
            // Memory regions would have to be bound to endpoints and enabled
            // before use; this crate's pools are not, and such a provider
            // would take their descriptors as unusable.
            return Err(Error::InvalidArgument(
                "the domain's memory registration mode has FI_MR_ENDPOINT, which this crate \
                 does not support (leave it out of Hints::mr_mode)"
                    .into(),
            ));
        }
        let info = info.to_owned_info()?;
        if !T::LOCKED && crate::quirks::tears_endpoints_down_in_eq_reads(info.provider()) {
            // SAFETY: the fi_info is ours (just duplicated) and its
            // domain_attr, when present, a valid struct of it; only the
            // threading field changes, to a model the provider accepts for
            // any fi_info it gave (FI_THREAD_SAFE is the strongest).
            unsafe {
                let attr = (*info.ptr.as_ptr()).domain_attr;
                if !attr.is_null() {
                    (*attr).threading = sys::FI_THREAD_SAFE;
                }
            }
        }
        let mut raw = ptr::null_mut();
        // SAFETY: fi_domain(3): fabric is open, info valid; the domain is
        // closed by OwnedFid before the fabric handle below is released.
        let ret = unsafe {
            sys::fi_domain(
                fabric.inner.fid.as_ptr(),
                info.ptr.as_ptr(),
                &mut raw,
                ptr::null_mut(),
            )
        };
        let fid = OwnedFid::opened("fi_domain", ret, raw)?;
        Ok(Domain::from_inner(Arc::new(DomainInner {
            fid,
            info,
            fabric: fabric.inner.clone(),
            next_key: std::sync::atomic::AtomicU64::new(1),
            fd_cqs: std::sync::atomic::AtomicBool::new(false),
            fd_counters: std::sync::atomic::AtomicBool::new(false),
            retired: std::sync::Mutex::new(Retired::default()),
            owner: (!T::LOCKED).then(|| std::thread::current().id()),
            deferred: std::sync::Mutex::new(Vec::new()),
        })))
    }

    /// The `fi_info` the domain was opened with.
    #[must_use]
    pub fn info(&self) -> &InfoEntry {
        &self.inner.info
    }

    /// How many closes of objects of the domain other threads parked (see
    /// the [`threading`](crate::threading) module): a
    /// [`BufferPool`](crate::BufferPool) whose last handle went on a thread
    /// other than a serialized domain's has its memory region closed on
    /// the domain's thread. Always 0 for [`ThreadSafe`].
    #[must_use]
    pub fn deferred_closes(&self) -> usize {
        self.inner
            .deferred
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Does the closes other threads parked (see
    /// [`deferred_closes`](Self::deferred_closes)) now. Opening an object of
    /// the domain, closing an endpoint and closing the domain do it too.
    pub fn run_deferred(&self) {
        self.inner.run_deferred();
    }

    /// The fabric it belongs to.
    #[must_use]
    pub fn fabric(&self) -> Fabric {
        Fabric {
            inner: self.inner.fabric.clone(),
        }
    }

    /// How many closed [`MemoryRegion`](crate::mr::MemoryRegion)s' memory
    /// the domain keeps: regions dropped (or closed) while endpoints of the
    /// domain were open keep their memory here until each of those
    /// endpoints has closed, since an RMA that passed the key check before
    /// the region closed may still copy into or out of it (see the
    /// [`mr`](crate::mr) module). On rxm, whose read rendezvous lets peers
    /// read memory registered for sends, a dropped
    /// [`BufferPool`](crate::BufferPool)'s memory is kept the same way and
    /// counted here. It grows for as long as such an endpoint stays open:
    /// register a region (or a pool) once and reuse it rather than
    /// registering and dropping one per transfer.
    ///
    /// ```
    /// use libfabric::mr::{MemoryRegion, MrAccess};
    /// use libfabric::{info::{getinfo, Hints}, Domain, Endpoint, Fabric};
    /// let list = getinfo(&Hints::new().provider("tcp").node("127.0.0.1"))?;
    /// let info = list.first().unwrap();
    /// let domain = Domain::open(&Fabric::open(info)?, info)?;
    /// let endpoint = Endpoint::open(&domain, info)?;
    /// drop(MemoryRegion::register(&domain, vec![0u8; 4096], MrAccess::REMOTE_WRITE)?);
    /// assert_eq!(domain.retained_regions(), 1);
    /// drop(endpoint); // closed: nothing can reach the memory any more
    /// assert_eq!(domain.retained_regions(), 0);
    /// # Ok::<(), libfabric::Error>(())
    /// ```
    #[must_use]
    pub fn retained_regions(&self) -> usize {
        self.inner.retired().parked()
    }

    /// The raw `fid_domain`.
    #[must_use]
    pub fn as_raw(&self) -> *mut sys::fid_domain {
        self.inner.fid.as_ptr()
    }

    /// Closes the domain now (`fi_close`), returning its error.
    ///
    /// # Errors
    /// [`Error::InUse`] while other handles or objects opened from it exist;
    /// [`Error::Call`] when `fi_close` fails. The domain comes back with the
    /// error, still open.
    pub fn close(self) -> Handback<Self> {
        close_last(self.inner, ObjectKind::Domain, Domain::from_inner, |i| {
            i.run_deferred();
            i.fid.close()
        })
    }
}

impl DomainInner {
    /// Refuses an `fi_info` of another provider, fabric or domain.
    pub(crate) fn check_info(&self, call: &'static str, info: &InfoEntry) -> Result<()> {
        self.fabric.check_info(call, info)?;
        if info.domain_name() != self.info.domain_name() {
            return Err(Error::ForeignObject {
                call,
                what: "fi_info",
                scope: ObjectScope::Domain,
            });
        }
        Ok(())
    }
}

impl<T: ThreadModel> std::fmt::Debug for Domain<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain")
            .field("provider", &self.info().provider())
            .field("name", &self.info().domain_name())
            .field("threading", &T::THREADING)
            .finish()
    }
}
