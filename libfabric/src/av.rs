//! Address vectors (`fi_av(3)`): peer addresses for connectionless
//! endpoints.
//!
//! ```
//! use libfabric::{av::AvType, cq::{CqAttr, Tagged}, ep::CqBind, info::{Caps, EpType}};
//! use libfabric::{getinfo, AddressVector, CompletionQueue, Domain, Endpoint, Fabric, Hints};
//! let hints = Hints::new().provider("tcp;ofi_rxm").ep_type(EpType::Rdm)
//!     .caps(Caps::MSG | Caps::TAGGED).node("127.0.0.1");
//! let info = getinfo(&hints)?.into_iter().next().expect("tcp;ofi_rxm");
//! let domain = Domain::open(&Fabric::open(&info)?, &info)?;
//! let av = AddressVector::open(&domain, AvType::Table, 8)?;
//! let cq = CompletionQueue::<Tagged>::open(&domain, &CqAttr::new())?;
//! let ep = Endpoint::open(&domain, &info)?;
//! ep.bind_av(&av)?;
//! ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV)?;
//! ep.enable()?;
//! let me = av.insert(&ep.name()?)?; // the endpoint's own address
//! av.remove(me)?;
//! # Ok::<(), libfabric::Error>(())
//! ```
//!
//! # What is checked
//! `fi_av_insert` takes no length: providers read as many bytes as the
//! domain's address format has (libfabric's util AV copies
//! `ofi_sizeof_addr_format` bytes, `prov/util/src/util_av.c` 996-1000 and
//! 311 in 1.17, and parses the `sockaddr` family), so [`AddressVector::insert`]
//! refuses a slice shorter than that. Transfers name peers by the
//! [`Addr`] an insert returned; endpoints refuse any other value, because
//! providers index their tables with it unchecked.

use crate::cq::Addr;
use crate::domain::{Domain, DomainInner};
use crate::error::{check_queue_size, classify, Errno, Error, Handback, ObjectKind, Result};
use crate::fid::{close_last, OwnedFid};
use crate::threading::{ThreadModel, ThreadSafe};
use libfabric_sys::fabric as sys;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Kind of address vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AvType {
    /// `FI_AV_TABLE`: addresses are indices from 0, which this crate can
    /// check before each transfer. The only kind offered: `FI_AV_MAP`'s
    /// addresses are provider values that cannot be checked, and
    /// libfabric 2.x deprecates it.
    Table,
}

/// `sizeof(struct sockaddr_in)`, `sockaddr_in6` and libfabric's
/// `union ofi_sock_ip` / `struct ofi_sockaddr_ib` (48 bytes).
const SIN: usize = std::mem::size_of::<libc::sockaddr_in>();
const SIN6: usize = std::mem::size_of::<libc::sockaddr_in6>();
const SOCK_IP: usize = 48;
const AF_IB: u16 = 27;

/// How many bytes an address of the domain's format takes, as the provider
/// will read it, or why it cannot be inserted.
pub(crate) fn address_len(format: u32, src_addrlen: usize, addr: &[u8]) -> Result<usize> {
    let family_len = || -> Result<usize> {
        if addr.len() < 2 {
            return Err(short(2, addr.len()));
        }
        match u16::from_ne_bytes([addr[0], addr[1]]) {
            f if f == libc::AF_INET as u16 => Ok(SIN),
            f if f == libc::AF_INET6 as u16 => Ok(SIN6),
            AF_IB => Ok(SOCK_IP),
            f => Err(Error::InvalidArgument(
                format!("fi_av_insert: socket address family {f} is not one libfabric reads")
                    .into(),
            )),
        }
    };
    match format {
        sys::FI_SOCKADDR_IN => Ok(family_len()?.max(SIN)),
        sys::FI_SOCKADDR_IN6 => Ok(family_len()?.max(SIN6)),
        sys::FI_SOCKADDR | sys::FI_SOCKADDR_IB => Ok(family_len()?.max(SOCK_IP)),
        sys::FI_ADDR_STR => match addr.iter().position(|&b| b == 0) {
            Some(nul) => Ok(nul + 1),
            None => Err(Error::InvalidArgument(
                "fi_av_insert: an FI_ADDR_STR address must end with a NUL byte".into(),
            )),
        },
        // A provider-specific binary format: as long as the domain's own
        // address (fi_getinfo gives its length in src_addrlen).
        _ if src_addrlen > 0 => Ok(src_addrlen),
        other => Err(Error::InvalidArgument(
            format!("fi_av_insert: the length of addresses of format {other} is not known").into(),
        )),
    }
}

#[cold]
fn short(needed: usize, given: usize) -> Error {
    Error::BufferTooSmall {
        what: "fi_av_insert address",
        needed,
        given,
    }
}

/// The provider's entries an address vector's inserts hold, each with
/// how many inserts hold it (see `Deferred::held`).
type Held = std::collections::HashMap<u64, u32>;

/// One insert fewer holds the provider's entry `addr` (a removal of it
/// succeeded).
fn release_use(held: &mut Held, addr: u64) {
    if let std::collections::hash_map::Entry::Occupied(mut uses) = held.entry(addr) {
        *uses.get_mut() -= 1;
        if *uses.get() == 0 {
            uses.remove();
        }
    }
}

/// Removals put off while endpoints are bound, and how many are bound.
#[derive(Default)]
pub(crate) struct Deferred {
    endpoints: usize,
    removals: Vec<u64>,
    /// The provider's entries that inserts made and removals have not
    /// released, with the inserts each holds: the util providers count an
    /// insert of an address already there as another use of its entry,
    /// released by as many removals (`ofi_av_insert_addr`,
    /// `ofi_av_remove_addr`, `prov/util/src/util_av.c`). (rxd frees an
    /// entry at its first removal: there a second insert is counted for
    /// good, which only refuses inserts early.) An insert is refused
    /// before the provider is called once there are `capacity` of them
    /// (see `AddressVector::insert`).
    held: Held,
    /// Endpoints bound to the vector whose enable failed, still open: shm
    /// would map inserted addresses into their missing regions (see
    /// `Endpoint::enable`), so inserts are refused while there are any.
    pub(crate) failed_endpoints: usize,
}

pub(crate) struct AvInner {
    pub(crate) fid: OwnedFid<sys::fid_av>,
    /// A process-unique id (the shm_peers module's key).
    pub(crate) id: u64,
    /// Whether its inserts and removals are recorded in the shm_peers
    /// module (see `quirks::closed_peers_dangle`).
    shm: bool,
    /// Bit i set: index i was returned by an insert and not removed.
    live: Box<[AtomicU64]>,
    /// Inserts, removals and binds, one at a time; holds the removals put
    /// off while endpoints are bound.
    pub(crate) lock: Mutex<Deferred>,
    pub(crate) domain: Arc<DomainInner>,
}

impl AvInner {
    /// Whether `addr` names a live entry: the check every transfer to or
    /// from an address makes (one load).
    #[inline(always)]
    pub(crate) fn is_live(&self, addr: Addr) -> bool {
        let i = addr.0;
        match self.live.get((i / 64) as usize) {
            Some(word) => word.load(Ordering::Acquire) & (1 << (i % 64)) != 0,
            None => false,
        }
    }

    fn set_live(&self, i: u64, live: bool) {
        let bit = 1 << (i % 64);
        let word = &self.live[(i / 64) as usize];
        if live {
            word.fetch_or(bit, Ordering::Release);
        } else {
            word.fetch_and(!bit, Ordering::Release);
        }
    }

    fn capacity(&self) -> u64 {
        self.live.len() as u64 * 64
    }

    /// `fi_av_remove` of `addr`; on success one insert fewer holds its
    /// entry in `held`.
    fn remove_raw(&self, held: &mut Held, addr: u64) -> std::ffi::c_int {
        let mut raw = addr;
        // SAFETY: fi_av_remove(3) reads one fi_addr_t, an entry this vector
        // returned from fi_av_insert and has not removed; no endpoint is
        // bound (see `unbound`), so no transfer can name it concurrently.
        let ret = unsafe { sys::fi_av_remove(self.fid.as_ptr(), &mut raw, 1, 0) };
        if ret == 0 {
            release_use(held, addr);
            if self.shm {
                crate::shm_peers::lock().removed(self.id, addr);
            }
        }
        ret
    }

    /// An endpoint was bound to the vector.
    pub(crate) fn bound(&self) {
        self.lock
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .endpoints += 1;
    }

    /// An endpoint bound to the vector was closed: once none is left, the
    /// removals put off are done.
    pub(crate) fn unbound(&self) {
        let mut d = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        d.endpoints -= 1;
        if d.endpoints == 0 {
            for addr in std::mem::take(&mut d.removals) {
                let _ = self.remove_raw(&mut d.held, addr);
            }
        }
    }
}

impl Drop for AvInner {
    fn drop(&mut self) {
        if self.shm {
            // No endpoint is bound any more (each holds the vector), and
            // its provider close (the field) drops its map.
            crate::shm_peers::lock().av_closed(self.id);
        }
    }
}

/// An open address vector (`FI_AV_TABLE`) of a fixed capacity.
///
/// `T` is the threading model of its domain (see [`Domain`]):
/// the objects bound to it are of the same model, and under the serialized
/// models it is neither `Send` nor `Sync`.
pub struct AddressVector<T: ThreadModel = ThreadSafe> {
    pub(crate) inner: Arc<AvInner>,
    _model: std::marker::PhantomData<T>,
}

impl<T: ThreadModel> Clone for AddressVector<T> {
    fn clone(&self) -> Self {
        AddressVector::from_inner(self.inner.clone())
    }
}

impl<T: ThreadModel> AddressVector<T> {
    /// A handle of the model `T` over `inner`, opened as an
    /// `AddressVector<T>`.
    pub(crate) fn from_inner(inner: Arc<AvInner>) -> Self {
        AddressVector {
            inner,
            _model: std::marker::PhantomData,
        }
    }

    /// `fi_av_open` with room for `count` addresses (1 up to
    /// [`MAX_QUEUE_SIZE`](crate::error::MAX_QUEUE_SIZE)); inserting more
    /// than that is refused.
    ///
    /// # Errors
    /// [`Error::TooLarge`] for `count` over the maximum;
    /// [`Error::InvalidArgument`] for a `count` of 0; [`Error::OutOfMemory`]
    /// when the entry table cannot be allocated; [`Error::Call`] when
    /// `fi_av_open` fails.
    #[doc(alias = "fi_av_open")]
    pub fn open(domain: &Domain<T>, ty: AvType, count: usize) -> Result<Self> {
        domain.inner.run_deferred();
        check_queue_size("address vector count", count)?;
        if count == 0 {
            return Err(Error::InvalidArgument(
                "an address vector needs room for at least one address".into(),
            ));
        }
        let AvType::Table = ty;
        let words = count.div_ceil(64);
        // The provider is asked for room for the whole capacity, which the
        // entries inserts make never pass: its table is then never grown
        // (see `insert`).
        let capacity = words * 64;
        let mut live = Vec::new();
        live.try_reserve_exact(words)
            .map_err(|_| Error::OutOfMemory {
                what: "address vector entries",
                bytes: words * 8,
            })?;
        live.extend((0..words).map(|_| AtomicU64::new(0)));
        let mut attr = sys::fi_av_attr {
            type_: sys::FI_AV_TABLE,
            count: capacity,
            ..Default::default()
        };
        let mut raw = ptr::null_mut();
        // SAFETY: fi_av_open(3) reads attr; OwnedFid closes the AV before the
        // domain handle is released.
        let ret = unsafe {
            sys::fi_av_open(
                domain.inner.fid.as_ptr(),
                &mut attr,
                &mut raw,
                ptr::null_mut(),
            )
        };
        let fid = OwnedFid::opened("fi_av_open", ret, raw)?;
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Ok(AddressVector::from_inner(Arc::new(AvInner {
            fid,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            shm: crate::quirks::closed_peers_dangle(domain.inner.info.provider()),
            live: live.into_boxed_slice(),
            lock: Mutex::new(Deferred::default()),
            domain: domain.inner.clone(),
        })))
    }

    /// `fi_av_insert` of one address in the domain's format (for example
    /// the bytes of `Endpoint::name`).
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] when `addr` is shorter than the domain's
    /// address format (the provider would read past it),
    /// [`Error::TooLarge`] when the provider holds as many entries as the
    /// vector's capacity, refused before the provider is called (entries
    /// of removals put off while endpoints are bound count; an address
    /// inserted again while it is in the vector, or while a removal of it
    /// is put off, gets the same entry, which rxm and shm count as one
    /// more use that one removal does not release, so the vector counts
    /// one place more for it from then on: insert each address once), or
    /// when the provider
    /// returned an index past the capacity (that entry is removed as by
    /// [`remove`](Self::remove): once no endpoint is bound), [`Error::State`] on shm
    /// for the address of an endpoint of this process that closed (see
    /// [`Endpoint::close`](crate::Endpoint::close)), and the provider's
    /// error.
    #[doc(alias = "fi_av_insert")]
    pub fn insert(&self, addr: &[u8]) -> Result<Addr> {
        let info = &self.inner.domain.info;
        let needed = address_len(info.addr_format(), info.src_addr().len(), addr)?;
        if addr.len() < needed {
            return Err(short(needed, addr.len()));
        }
        let mut deferred = self.inner.lock.lock().unwrap_or_else(|e| e.into_inner());
        // The provider's table is never grown while endpoints may read it:
        // a post looks an address up in it without the vector's lock (rxm
        // `rxm_get_conn`, shm `smr_verify_peer`, through
        // `ofi_bufpool_get_ibuf`; sockets `sock_ep_get_conn` keeps a
        // pointer into it after its lock), while an insert past its first
        // block grows it, moving what they read (`ofi_bufpool_grow`
        // reallocates its region table; `sock_resize_av_table`
        // reallocates the table). The provider was asked for room for the
        // capacity (`open`: util providers round it up to a power of two,
        // sockets sizes its table to it), so an insert that could make one
        // entry more than that is refused before the call, whatever the
        // address (one already there would make none, but which it is
        // only the provider knows). (rxd keeps a second vector of its
        // own, at its datagram provider, which it fills itself with the
        // peers that send to it, `rxd_cq.c`: outside what this bounds.)
        if deferred.held.len() as u64 >= self.inner.capacity() {
            return Err(Error::TooLarge {
                what: "address vector entries",
                limit: self.inner.capacity() as usize,
                given: deferred.held.len() + 1,
            });
        }
        if deferred.failed_endpoints > 0 {
            return Err(Error::State {
                call: "fi_av_insert",
                reason: "an endpoint bound to this address vector failed to enable, and the provider may map inserted addresses into it (shm crashes): close that endpoint first",
            });
        }
        // shm: the address of an endpoint of this process that closed is
        // refused, and what is inserted recorded (see the shm_peers
        // module), with the record locked across the insert.
        let shm_name = self
            .inner
            .shm
            .then(|| crate::shm_peers::normalize(&addr[..needed]));
        let mut registry = shm_name.as_ref().map(|_| crate::shm_peers::lock());
        if let (Some(registry), Some(name)) = (&registry, &shm_name) {
            registry.check_insert(name, &addr[..needed])?;
        }
        let mut out = Addr::UNSPEC;
        // SAFETY: fi_av_insert(3) reads one address from addr, at most
        // `needed` bytes as checked above for the domain's address format,
        // and writes one fi_addr_t.
        let ret = unsafe {
            sys::fi_av_insert(
                self.inner.fid.as_ptr(),
                addr.as_ptr().cast(),
                1,
                (&mut out as *mut Addr).cast(),
                0,
                ptr::null_mut(),
            )
        };
        if ret != 1 {
            return Err(Error::call(
                "fi_av_insert",
                classify(ret).err().unwrap_or(Errno::INVAL),
            ));
        }
        *deferred.held.entry(out.0).or_insert(0) += 1;
        if out.0 >= self.inner.capacity() {
            // The provider's entry goes again, as a removal does: while
            // endpoints are bound, once the last one is closed. The entry
            // may be one the provider uses already: shm maps a peer that
            // connected to an endpoint of the vector into the vector's map
            // on its own (`smr_progress_connreq`), an insert of its name
            // then finds it there, and the removal unmaps it
            // (`smr_map_del`, `prov/util/src/util_shm.c` 514-538 in 1.17)
            // while the endpoint still processes that peer's messages (an
            // insert refused here crashed the process that way). Put off
            // once per entry: a second insert of the address finds it.
            if deferred.endpoints > 0 {
                if !deferred.removals.contains(&out.0) {
                    deferred.removals.push(out.0);
                }
            } else {
                let mut raw = out.0;
                // SAFETY: fi_av_remove(3) of the address just inserted;
                // no endpoint is bound (the vector's lock is held, so
                // none is bound meanwhile), so no transfer uses it. (Not
                // `remove_raw`: the shm record, which it would lock, is
                // held here and has not recorded the address.)
                let ret = unsafe { sys::fi_av_remove(self.inner.fid.as_ptr(), &mut raw, 1, 0) };
                if ret == 0 {
                    release_use(&mut deferred.held, out.0);
                }
            }
            return Err(Error::TooLarge {
                what: "address vector entries",
                limit: self.inner.capacity() as usize,
                given: out.0 as usize + 1,
            });
        }
        if let (Some(registry), Some(name)) = (&mut registry, shm_name) {
            registry.inserted(self.inner.id, out.0, name);
        }
        drop(registry);
        // The same address inserted again while its removal is put off is
        // live again.
        deferred.removals.retain(|&a| a != out.0);
        self.inner.set_live(out.0, true);
        Ok(out)
    }

    /// `fi_av_remove` of one address an insert returned. From here
    /// transfers naming it are refused; while endpoints are bound to the
    /// vector, the provider's removal waits until the last one is closed.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an address not in the vector.
    #[doc(alias = "fi_av_remove")]
    pub fn remove(&self, addr: Addr) -> Result<()> {
        let mut deferred = self.inner.lock.lock().unwrap_or_else(|e| e.into_inner());
        if !self.inner.is_live(addr) {
            return Err(Error::InvalidArgument(
                format!("fi_av_remove: {addr:?} is not an address of this vector").into(),
            ));
        }
        // Transfers naming it are refused from here. While endpoints are
        // bound, one of them may be inside a post that checked the address
        // just before, and providers look the address up without a lock of
        // the AV's: the provider's removal waits until no endpoint is bound.
        self.inner.set_live(addr.0, false);
        if deferred.endpoints > 0 {
            deferred.removals.push(addr.0);
            return Ok(());
        }
        let ret = self.inner.remove_raw(&mut deferred.held, addr.0);
        if ret != 0 {
            self.inner.set_live(addr.0, true);
            return Err(Error::from_ret("fi_av_remove", ret));
        }
        Ok(())
    }

    /// Whether `addr` is an address of this vector (inserted, not removed).
    #[must_use]
    pub fn contains(&self, addr: Addr) -> bool {
        self.inner.is_live(addr)
    }

    /// Closes the vector now (`fi_close`).
    ///
    /// # Errors
    /// [`Error::InUse`] while endpoints bound to it or other handles exist;
    /// [`Error::Call`] when `fi_close` fails. The vector comes back with the
    /// error, still open.
    pub fn close(self) -> Handback<Self> {
        close_last(
            self.inner,
            ObjectKind::AddressVector,
            AddressVector::from_inner,
            |i| i.fid.close(),
        )
    }
}

impl<T: ThreadModel> std::fmt::Debug for AddressVector<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressVector")
            .field("capacity", &self.inner.capacity())
            .finish_non_exhaustive()
    }
}
