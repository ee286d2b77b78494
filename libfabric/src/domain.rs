//! `fi_domain(3)`: a domain (one NIC or provider instance), parent of
//! completion queues, endpoints, address vectors and memory regions.

use crate::error::{Error, Handback, ObjectKind, Result};
use crate::fabric::{Fabric, FabricInner};
use crate::fid::{close_last, OwnedFid};
use crate::info::{Info, InfoEntry, Threading};
use libfabric_sys::fabric as sys;
use std::ptr;
use std::sync::Arc;

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
}

/// Memory of memory regions that were closed (`fi_close` of the MR) while
/// endpoints of the domain were open, kept until each of those endpoints
/// has closed.
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

    /// An endpoint of the domain closed: the memory that waited for it is
    /// dropped, outside the lock.
    pub(crate) fn endpoint_closed(&self, id: u64) {
        let free = self.retired().closed(id);
        drop(free);
    }
}

/// An open domain. It keeps its fabric open.
///
/// Domains are opened only with the `FI_THREAD_SAFE` threading model (the
/// default of [`Hints`](crate::info::Hints)): under it fi_domain(3) lets any
/// thread use any object at any time, which is what makes this crate's
/// objects `Send` and `Sync` without locks of their own.
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
#[derive(Clone)]
pub struct Domain {
    pub(crate) inner: Arc<DomainInner>,
}

impl Domain {
    /// `fi_domain`: opens the domain that `info` names on `fabric`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `info`'s threading model is not
    /// `FI_THREAD_SAFE` or its memory registration mode has `FI_MR_ENDPOINT`;
    /// [`Error::ForeignObject`] for an `fi_info` of another provider or
    /// fabric; [`Error::Call`] when `fi_dupinfo` or `fi_domain` fails.
    #[doc(alias = "fi_domain")]
    pub fn open(fabric: &Fabric, info: &InfoEntry) -> Result<Self> {
        if info.threading() != Threading::Safe {
            return Err(Error::InvalidArgument(
                format!(
                    "the domain's threading model is {:?}; this crate needs FI_THREAD_SAFE \
                     (the default of Hints)",
                    info.threading()
                )
                .into(),
            ));
        }
        fabric.inner.check_info("fi_domain", info)?;
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
        Ok(Domain {
            inner: Arc::new(DomainInner {
                fid,
                info,
                fabric: fabric.inner.clone(),
                next_key: std::sync::atomic::AtomicU64::new(1),
                fd_cqs: std::sync::atomic::AtomicBool::new(false),
                fd_counters: std::sync::atomic::AtomicBool::new(false),
                retired: std::sync::Mutex::new(Retired::default()),
            }),
        })
    }

    /// The `fi_info` the domain was opened with.
    #[must_use]
    pub fn info(&self) -> &InfoEntry {
        &self.inner.info
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
    /// [`mr`](crate::mr) module). It grows for as long as such an endpoint
    /// stays open: register a region once and reuse it rather than
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
        close_last(
            self.inner,
            ObjectKind::Domain,
            |inner| Domain { inner },
            |i| i.fid.close(),
        )
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
                scope: "domain",
            });
        }
        Ok(())
    }
}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain")
            .field("provider", &self.info().provider())
            .field("name", &self.info().domain_name())
            .finish()
    }
}
