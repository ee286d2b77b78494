//! Memory registration of the application's own memory (`fi_mr(3)`), and
//! the description of a region that a peer reaches with RMA (`fi_rma(3)`).
//!
//! A [`MemoryRegion`] owns the memory it registers (a `Vec<u8>`, a
//! `Box<[u8]>`, or a `&'static mut [u8]`; see [`RegionMemory`]), so the
//! memory cannot be freed or moved while it is registered. Memory borrowed
//! for a shorter life cannot be registered: after its region closes, an
//! RMA already under way may still copy into it (see *Closing* below),
//! and only owned memory can be kept until that cannot happen.
//! Registration asks for exactly the [`MrAccess`] given: no remote access
//! unless asked for. Providers may register for more, and where that lets
//! peers write memory the crate lends as a slice, the crate refuses:
//! verbs' registration cache (see [`MemoryRegion::register`]) and rxm's
//! write rendezvous ([`Domain::open_model`](crate::Domain::open_model)).
//! rxm's default read rendezvous registers memory given for sends
//! (`MrAccess::SEND`, and every [`BufferPool`](crate::BufferPool)) for
//! peers' reads at its message provider (`rxm_mr_get_msg_access`,
//! `prov/rxm/src/rxm_domain.c` 388-398 in 1.17, the same in 1.22 and 2.1):
//! a peer that knows the key and address can read that memory. A read
//! changes nothing this process sees, so slices stay sound; keep secrets
//! out of memory registered for sends on rxm.
//!
//! A region that peers may write (`REMOTE_WRITE`) can change at any time,
//! under any reference the process holds to it. So while it is registered
//! its contents are reached only by copies
//! ([`read_at`](MemoryRegion::read_at), [`write_at`](MemoryRegion::write_at));
//! a region that peers may only read can be borrowed as a slice, and one
//! without remote access as a mutable slice. The memory comes back as it
//! was given by [`into_inner`](MemoryRegion::into_inner), once deregistered.
//!
//! A peer learns where to write or read from a [`RemoteRegion`] (address,
//! length, key), sent to it in a message ([`RemoteRegion::to_bytes`]).
//! Every RMA call of [`Endpoint`](crate::Endpoint) takes an offset into
//! the remote region and a length, checked against it before the call.
//!
//! # Closing
//! Closing an MR (`fi_close`) only removes its key from the domain's key
//! map (`ofi_mr_close`, `prov/util/src/util_mr_map.c` 222-238 in 1.22):
//! an RMA whose header arrived before, and passed the key check then,
//! goes on copying into or out of the region's memory (tcp checks a
//! write's key when its header arrives and then receives the payload
//! straight into the region, `prov/tcp/src/xnet_progress.c` 912 in 1.22).
//! Such an RMA is carried by an endpoint of the region's domain that was
//! open when the MR closed; once each of those has closed, nothing
//! reaches the memory. So:
//! - dropping a region closes its MR and keeps the memory in the domain
//!   until every endpoint of the domain open at that moment has closed
//!   (at the latest until the domain itself is dropped); then it is
//!   dropped. On sockets, whose progress thread reads a region's record
//!   after the key lookup that found it, the MR itself stays open with its
//!   memory until no endpoint of the domain is open at all: peers can still
//!   write and read it meanwhile (into memory nothing else can reach). Memory kept this way adds up while such an endpoint stays
//!   open ([`Domain::retained_regions`] counts it): reuse long-lived
//!   regions rather than registering one per transfer;
//! - [`into_inner`](MemoryRegion::into_inner) gives the memory back only
//!   while no endpoint of the domain is open, and otherwise hands the
//!   region back, still registered, with [`Error::State`].
//!
//! Several buffers can be one region (`Vec<Vec<u8>>`, `fi_mr_regv`), and
//! registration can go through `fi_mr_regattr` ([`MemoryRegion::register_attr`]).
//!
//! One registration mechanism serves regions and
//! [`BufferPool`](crate::BufferPool)s: the domain's `mr_mode` decides who
//! chooses keys (`FI_MR_PROV_KEY`: the provider; else a key unique within
//! the domain, from a counter of the domain) and how peers address the
//! region (`FI_MR_VIRT_ADDR`: by virtual address, else by offset from 0).
//! Descriptors (`fi_mr_desc`, needed under `FI_MR_LOCAL`) are always
//! passed with posts. Every region is allocated memory, which satisfies
//! `FI_MR_ALLOCATED`.
//!
//! ```
//! use libfabric::mr::{MemoryRegion, MrAccess};
//! use libfabric::{info::{getinfo, Hints}, Domain, Fabric};
//! let list = getinfo(&Hints::new().provider("tcp").node("127.0.0.1"))?;
//! let info = list.first().unwrap();
//! let domain = Domain::open(&Fabric::open(info)?, info)?;
//! let mut region = MemoryRegion::register(&domain, vec![0u8; 4096], MrAccess::REMOTE_WRITE)?;
//! region.write_at(0, b"hello")?;
//! let remote = region.remote(); // send remote.to_bytes() to the peer
//! assert_eq!(remote.len, 4096);
//! let memory: Vec<u8> = region.into_inner().map_err(|(_, e)| e)?;
//! assert_eq!(&memory[..5], b"hello");
//! # Ok::<(), libfabric::Error>(())
//! ```

use crate::cntr::{CntrInner, Counter};
use crate::domain::{Domain, DomainInner};
use crate::error::{check, classify, Errno, Error, ObjectScope, Result};
use crate::fid::OwnedFid;
use crate::info::Caps;
use crate::threading::{ThreadModel, ThreadSafe};
use bitflags::bitflags;
use libfabric_sys::fabric as sys;
use std::ffi::c_void;
use std::fmt;
use std::mem::ManuallyDrop;
use std::ops::Range;
use std::ptr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

bitflags! {
    /// The access a memory region is registered for (`fi_mr_reg`'s
    /// `access`). Least privilege: ask only for what is used.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct MrAccess: u64 {
        /// `FI_SEND`: the memory may be sent from.
        const SEND = sys::FI_SEND;
        /// `FI_RECV`: the memory may be received into.
        const RECV = sys::FI_RECV;
        /// `FI_READ`: the memory may be the local destination of an RMA
        /// read.
        const READ = sys::FI_READ;
        /// `FI_WRITE`: the memory may be the local source of an RMA write.
        const WRITE = sys::FI_WRITE;
        /// `FI_REMOTE_READ`: peers may read the memory with RMA.
        const REMOTE_READ = sys::FI_REMOTE_READ;
        /// `FI_REMOTE_WRITE`: peers may write the memory with RMA.
        const REMOTE_WRITE = sys::FI_REMOTE_WRITE;
    }
}

bitflags! {
    /// What a counter bound to a memory region counts (`fi_mr_bind` flags
    /// of fi_mr(3)), for [`MemoryRegion::register_counted`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct MrCntrBind: u64 {
        /// `FI_REMOTE_WRITE`: each remote RMA write or atomic that
        /// modifies the region. (fi_mr(3) names no other: remote reads of a
        /// region are counted only at the endpoint, with
        /// [`CntrBind::REMOTE_READ`](crate::CntrBind::REMOTE_READ).)
        const REMOTE_WRITE = sys::FI_REMOTE_WRITE;
    }
}

impl MrAccess {
    /// Every local use (`SEND | RECV | READ | WRITE`), no remote access:
    /// what a [`BufferPool`](crate::BufferPool) asks for by default.
    pub const LOCAL: MrAccess = MrAccess::SEND
        .union(MrAccess::RECV)
        .union(MrAccess::READ)
        .union(MrAccess::WRITE);
}

/// A registration: the MR, its descriptor and key, and where peers address
/// it from. The one place `fi_mr_reg` is called.
pub(crate) struct Registration {
    pub(crate) mr: OwnedFid<sys::fid_mr>,
    pub(crate) desc: *mut c_void,
    pub(crate) key: u64,
    /// What a peer passes as the region's first byte: its virtual address
    /// under `FI_MR_VIRT_ADDR`, else 0.
    pub(crate) remote_base: u64,
}

/// Registers `len` bytes at `addr` with `domain` for `access`, honouring
/// the domain's `mr_mode` (see the module documentation).
///
/// # Safety
/// `addr` must be valid for reads and writes of `len` bytes (allocated,
/// not freed) until the returned MR is closed.
pub(crate) unsafe fn register(
    domain: &Arc<DomainInner>,
    addr: *mut u8,
    len: usize,
    access: MrAccess,
) -> Result<Registration> {
    // SAFETY: the caller's contract, for the one iovec.
    unsafe { register_iov(domain, &[(addr, len)], access, Call::Reg, None) }
}

/// Which registration call: `fi_mr_reg` (one iovec), `fi_mr_regv`, or
/// `fi_mr_regattr` with `FI_HMEM_SYSTEM`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    Reg,
    RegAttr,
}

/// [`register`] of several iovecs as one region: `fi_mr_regv` (or
/// `fi_mr_reg` for one), or `fi_mr_regattr` when `call` says so. With a
/// counter, the MR is bound to it (`fi_mr_bind`) and, where the domain's
/// `mr_mode` has `FI_MR_RMA_EVENT`, registered with the `FI_RMA_EVENT`
/// flag and enabled (`fi_mr_enable`) after the bind, before its key is
/// read: fi_mr(3)'s order.
///
/// # Safety
/// Each `(addr, len)` must be valid for reads and writes of `len` bytes
/// until the returned MR is closed. A counter given must be of `domain`
/// and stay open until the MR is closed and no RMA that passed its key
/// check can still count (the caller parks it with the memory).
pub(crate) unsafe fn register_iov(
    domain: &Arc<DomainInner>,
    iov: &[(*mut u8, usize)],
    access: MrAccess,
    call: Call,
    cntr: Option<(&CntrInner, MrCntrBind)>,
) -> Result<Registration> {
    let info = &domain.info;
    let mr_mode = info.mr_mode();
    let name = match (call, iov.len()) {
        (Call::RegAttr, _) => "fi_mr_regattr",
        (Call::Reg, 1) => "fi_mr_reg",
        (Call::Reg, _) => "fi_mr_regv",
    };
    if iov.is_empty() || iov.iter().any(|&(_, len)| len == 0) {
        return Err(Error::InvalidArgument(
            "a memory region needs at least one byte in each of at least one iovec".into(),
        ));
    }
    let limit = info.mr_iov_limit().max(1);
    if iov.len() > limit {
        return Err(Error::TooLarge {
            what: "iovecs of one memory region (domain mr_iov_limit)",
            limit,
            given: iov.len(),
        });
    }
    let (addr, _) = iov[0];
    if access.is_empty() {
        return Err(Error::InvalidArgument(
            "a memory region needs at least one access flag (MrAccess)".into(),
        ));
    }
    let key_size = info.mr_key_size();
    if key_size > 8 {
        return Err(Error::Unsupported {
            call: name,
            reason: "the domain's memory registration keys are longer than 8 bytes (raw keys, \
                   fi_mr_raw_attr), which this crate does not wrap",
        });
    }
    let rma_event_mode = mr_mode & sys::FI_MR_RMA_EVENT != 0;
    if rma_event_mode && cntr.is_none() {
        return Err(Error::Unsupported {
            call: name,
            reason: "the domain's memory registration mode has FI_MR_RMA_EVENT: only regions \
                   bound to a counter (MemoryRegion::register_counted) are registered there",
        });
    }
    // Without FI_MR_PROV_KEY the application chooses the keys, and they
    // must be unique within the domain (fi_mr(3)); with it the provider
    // ignores the requested key.
    let requested_key = if mr_mode & sys::FI_MR_PROV_KEY != 0 {
        0
    } else {
        let key = domain.next_key.fetch_add(1, Ordering::Relaxed);
        if key_size < 8 && key >> (key_size * 8) != 0 {
            return Err(Error::TooLarge {
                what: "memory registration key (domain mr_key_size bytes)",
                limit: (1usize << (key_size * 8)).saturating_sub(1),
                given: usize::try_from(key).unwrap_or(usize::MAX),
            });
        }
        key
    };
    let iovecs: Vec<libc::iovec> = iov
        .iter()
        .map(|&(base, len)| libc::iovec {
            iov_base: base.cast(),
            iov_len: len,
        })
        .collect();
    // fi_mr(3): under FI_MR_RMA_EVENT a region to be bound to a counter
    // says so at its creation (created disabled, enabled after the bind).
    let flags = if rma_event_mode { sys::FI_RMA_EVENT } else { 0 };
    let mut mr = ptr::null_mut();
    // SAFETY: fi_mr_reg(3) / fi_mr_regv / fi_mr_regattr on an open domain:
    // the caller keeps every iovec valid until the MR is closed; their
    // count is within mr_iov_limit; `access` holds only FI_* access bits;
    // offset is 0 and flags FI_RMA_EVENT or 0; the requested key is unique within the
    // domain (or ignored under FI_MR_PROV_KEY); no context. The iovec
    // array and the attribute are read during the call only. The
    // attribute is zeroed first, so the members of later versions are
    // their defaults, and its iface is FI_HMEM_SYSTEM (0): host memory.
    let ret = unsafe {
        match (call, iovecs.len()) {
            (Call::RegAttr, _) => {
                let mut attr = sys::fi_mr_attr {
                    iov_count: iovecs.len(),
                    access: access.bits(),
                    requested_key,
                    iface: sys::FI_HMEM_SYSTEM,
                    ..Default::default()
                };
                set_mr_iov(&mut attr, iovecs.as_ptr().cast());
                sys::fi_mr_regattr(domain.fid.as_ptr(), &attr, flags, &mut mr)
            }
            (Call::Reg, 1) => sys::fi_mr_reg(
                domain.fid.as_ptr(),
                iovecs[0].iov_base.cast_const(),
                iovecs[0].iov_len,
                access.bits(),
                0,
                requested_key,
                flags,
                &mut mr,
                ptr::null_mut(),
            ),
            (Call::Reg, count) => sys::fi_mr_regv(
                domain.fid.as_ptr(),
                iovecs.as_ptr().cast(),
                count,
                access.bits(),
                0,
                requested_key,
                flags,
                &mut mr,
                ptr::null_mut(),
            ),
        }
    };
    let mr = OwnedFid::opened(name, ret, mr)?;
    if let Some((cntr, events)) = cntr {
        // Dropping `mr` on an error closes it, before anything can have
        // reached it: its key was not given out yet.
        bind_and_enable(&mr, cntr, events, rma_event_mode)?;
    }
    // SAFETY: fi_mr_desc(3) on an open MR returns its local descriptor
    // (may be NULL), valid while the MR is open.
    let desc = unsafe { sys::fi_mr_desc(mr.as_ptr()) };
    // SAFETY: fi_mr_key(3) on an open MR.
    let key = unsafe { sys::fi_mr_key(mr.as_ptr()) };
    if key == sys::FI_KEY_NOTAVAIL {
        // Dropping `mr` closes it.
        return Err(Error::Unsupported {
            call: "fi_mr_key",
            reason: "the provider has no 64-bit key for the region (raw keys)",
        });
    }
    let remote_base = if mr_mode & sys::FI_MR_VIRT_ADDR != 0 {
        addr as u64
    } else {
        0
    };
    Ok(Registration {
        mr,
        desc,
        key,
        remote_base,
    })
}

/// `fi_mr_bind` of a counter to a just-registered MR, then `fi_mr_enable`
/// under `FI_MR_RMA_EVENT`.
fn bind_and_enable(
    mr: &OwnedFid<sys::fid_mr>,
    cntr: &CntrInner,
    events: MrCntrBind,
    enable: bool,
) -> Result<()> {
    // SAFETY: fi_mr_bind(3) of an open MR and an open counter of the same
    // domain (checked by the caller), with FI_REMOTE_WRITE only (the one
    // counter flag fi_mr(3) names), before the MR's key is given out and
    // before fi_mr_enable. sockets stores the counter's pointer in the MR
    // without taking a reference (`sock_mr_bind`,
    // `prov/sockets/src/sock_mr.c` 66-95 in 1.17 and 1.22: a different
    // domain is -FI_EINVAL, flags other than FI_REMOTE_WRITE are
    // ignored) and increments it from its progress thread for each remote
    // write or atomic completed at the region (`sock_pe_report_mr_completion`,
    // `prov/sockets/src/sock_progress.c` 315-335 in 1.22); its counter
    // close does not see the bind (`sock_cntr_close` refuses only while
    // endpoints hold it, `sock_cntr.c` 423-424). So the region keeps the
    // counter's handle until its MR is closed and, as its memory, until no
    // endpoint open at that close can still complete a write to it (see
    // `MemoryRegion::retire`). The util providers' regions (tcp, rxm,
    // rxd, shm; `ofi_mr_fi_ops`, `prov/util/src/util_mr_map.c` 232 in
    // 1.17, 243 in 1.22) and verbs' (`prov/verbs/src/verbs_mr.c` 55) have
    // `fi_no_bind`: -FI_ENOSYS, nothing kept.
    let ret = unsafe { sys::fi_mr_bind(mr.as_ptr(), cntr.fid.fid(), events.bits()) };
    match classify(ret) {
        Ok(_) => {}
        Err(Errno::NOSYS | Errno::OPNOTSUPP) => {
            return Err(Error::Unsupported {
                call: "fi_mr_bind",
                reason: "the provider counts no RMA at a memory region (fi_mr_bind of a counter \
                         is -FI_ENOSYS: libfabric's util regions of tcp, rxm, rxd and shm, and \
                         verbs); count at the target endpoint instead (Endpoint::bind_cntr with \
                         CntrBind::REMOTE_WRITE)",
            })
        }
        Err(errno) => return Err(Error::call("fi_mr_bind", errno)),
    }
    if enable {
        // SAFETY: fi_mr_enable(3) of an open MR registered with
        // FI_RMA_EVENT under FI_MR_RMA_EVENT, after its one bind.
        check("fi_mr_enable", unsafe { sys::fi_mr_enable(mr.as_ptr()) })?;
    }
    Ok(())
}

/// The checks of [`MemoryRegion::register_counted`] before registration.
fn check_counted<T: ThreadModel>(
    domain: &Domain<T>,
    access: MrAccess,
    counter: &Counter<T>,
    events: MrCntrBind,
) -> Result<()> {
    if !Arc::ptr_eq(&counter.inner.domain, &domain.inner) {
        return Err(Error::ForeignObject {
            call: "fi_mr_bind",
            what: "counter",
            scope: ObjectScope::Domain,
        });
    }
    if events.is_empty() || !MrCntrBind::all().contains(events) {
        return Err(Error::InvalidArgument(
            format!(
                "fi_mr_bind: counter flags {:#x}: a region's counter counts REMOTE_WRITE \
                 (MrCntrBind) and nothing else",
                events.bits()
            )
            .into(),
        ));
    }
    if !access.contains(MrAccess::REMOTE_WRITE) {
        return Err(Error::InvalidArgument(
            "fi_mr_bind: a counter of remote writes bound to a region peers may not write \
             (no MrAccess::REMOTE_WRITE) would never count"
                .into(),
        ));
    }
    if !domain.inner.info.caps().contains(Caps::RMA_EVENT) {
        return Err(Error::MissingCapability {
            call: "fi_mr_bind",
            needed: Caps::RMA_EVENT,
        });
    }
    Ok(())
}

/// Sets `fi_mr_attr::mr_iov`, a member of its own or (headers with
/// dma-buf registration, 1.20 on) of an anonymous union with `dmabuf`:
/// decided from the headers at build time (`build.rs`).
fn set_mr_iov(attr: &mut sys::fi_mr_attr, iov: *const libc::iovec) {
    #[cfg(mr_iov_in_union)]
    {
        attr.__bindgen_anon_1.mr_iov = iov.cast();
    }
    #[cfg(not(mr_iov_in_union))]
    {
        attr.mr_iov = iov.cast();
    }
}

mod sealed {
    pub trait Sealed {}
}

/// Memory a [`MemoryRegion`] can own: bytes at addresses that stay the
/// same, and valid, for as long as the value exists, wherever the value is
/// moved, and that nothing else reaches while the region owns it.
///
/// Sealed: implemented for `Vec<u8>` (its heap buffer; the region never
/// changes its length or capacity), `Box<[u8]>`, and `&'static mut [u8]`
/// (exclusively borrowed for ever), each one iovec; and for
/// `Vec<Vec<u8>>` and `Vec<Box<[u8]>>`, one iovec per element, registered
/// as one region (`fi_mr_regv`).
///
/// The memory is owned outright (`Send + 'static`): a closed region's
/// memory may have to be kept in its domain until RMA under way can no
/// longer reach it (see the module documentation), which memory borrowed
/// for a shorter life cannot be. (A region over such a borrow could also
/// be forgotten with `mem::forget`, ending the borrow while the memory is
/// still registered.)
///
/// ```compile_fail
/// use libfabric::mr::{MemoryRegion, MrAccess};
/// fn register(domain: &libfabric::Domain) {
///     let mut bytes = vec![0u8; 64];
///     // Borrowed for less than 'static: refused.
///     let _ = MemoryRegion::register(domain, &mut bytes[..], MrAccess::REMOTE_WRITE);
/// }
/// ```
pub trait RegionMemory: sealed::Sealed + Send + 'static {
    /// The bytes: address and length of each iovec.
    #[doc(hidden)]
    fn iovecs(&mut self) -> Vec<(*mut u8, usize)>;
}

impl sealed::Sealed for Vec<u8> {}
impl RegionMemory for Vec<u8> {
    fn iovecs(&mut self) -> Vec<(*mut u8, usize)> {
        vec![(self.as_mut_ptr(), self.len())]
    }
}

impl sealed::Sealed for Box<[u8]> {}
impl RegionMemory for Box<[u8]> {
    fn iovecs(&mut self) -> Vec<(*mut u8, usize)> {
        vec![(self.as_mut_ptr(), self.len())]
    }
}

impl sealed::Sealed for &'static mut [u8] {}
impl RegionMemory for &'static mut [u8] {
    fn iovecs(&mut self) -> Vec<(*mut u8, usize)> {
        vec![(self.as_mut_ptr(), self.len())]
    }
}

// The elements' heap buffers stay where they are when the outer vector
// moves; the region never changes the outer vector or its elements.
impl sealed::Sealed for Vec<Vec<u8>> {}
impl RegionMemory for Vec<Vec<u8>> {
    fn iovecs(&mut self) -> Vec<(*mut u8, usize)> {
        self.iter_mut().map(|v| (v.as_mut_ptr(), v.len())).collect()
    }
}

impl sealed::Sealed for Vec<Box<[u8]>> {}
impl RegionMemory for Vec<Box<[u8]>> {
    fn iovecs(&mut self) -> Vec<(*mut u8, usize)> {
        self.iter_mut().map(|v| (v.as_mut_ptr(), v.len())).collect()
    }
}

/// The alignment the first byte of a region peers reach must have: the
/// largest [`AtomicType`](crate::ep::atomic::AtomicType).
pub const ATOMIC_ALIGN: usize = 8;

/// The memory interface of a registration (`fi_mr_attr::iface`), for
/// [`MemoryRegion::register_attr`]. The memory types a region owns are
/// host memory: only [`HmemIface::System`] is registered; device
/// interfaces are refused with [`Error::Unsupported`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HmemIface {
    /// `FI_HMEM_SYSTEM`: host memory.
    System,
    /// `FI_HMEM_CUDA` on a device.
    Cuda {
        /// The CUDA device.
        device: i32,
    },
    /// `FI_HMEM_ROCR`.
    Rocr,
    /// `FI_HMEM_ZE` on a device.
    Ze {
        /// The Level Zero device.
        device: i32,
    },
    /// `FI_HMEM_NEURON` on a device.
    Neuron {
        /// The Neuron device.
        device: i32,
    },
    /// `FI_HMEM_SYNAPSEAI` on a device.
    SynapseAi {
        /// The SynapseAI device.
        device: i32,
    },
}

/// The application's memory `M`, registered with a domain (`fi_mr_reg`).
///
/// The region owns `M` until [`into_inner`](Self::into_inner) gives it
/// back deregistered (only while no endpoint of its domain is open);
/// dropping the region deregisters it (`fi_close`) and drops `M` once the
/// endpoints of the domain open at that moment have closed (see the
/// module documentation). It keeps its domain open.
///
/// # Access to the memory while registered
/// Peers reach a region registered with [`MrAccess::REMOTE_WRITE`] at any
/// time, through the provider (its progress thread, or the kernel on its
/// behalf), so a `&[u8]` or `&mut [u8]` to it would be a data race. Such
/// a region is read and written with copies that never form a reference
/// to the memory ([`read_at`](Self::read_at),
/// [`write_at`](Self::write_at), volatile byte copies); a region that
/// peers may only read lends `&[u8]` ([`as_slice`](Self::as_slice)); one
/// without remote access `&mut [u8]` too ([`as_mut_slice`](Self::as_mut_slice)).
/// What a peer wrote is seen once its RMA completed at the peer (and, for
/// a write with remote CQ data, once that completion was read here).
///
/// `T` is the threading model of its domain (see
/// [`Domain`]): a region of a serialized domain is neither
/// `Send` nor `Sync` (its close is a call on an object of the domain).
pub struct MemoryRegion<M: RegionMemory, T: ThreadModel = ThreadSafe> {
    reg: Registration,
    /// The counter bound to it (`fi_mr_bind`): kept with the memory after
    /// the MR closes (see `retire`).
    cntr: Option<Arc<CntrInner>>,
    /// The iovecs, in order; reached as one range of `len` bytes.
    iov: Box<[(*mut u8, usize)]>,
    len: usize,
    access: MrAccess,
    domain: Arc<DomainInner>,
    memory: ManuallyDrop<M>,
    _model: std::marker::PhantomData<T>,
}

// SAFETY: the region owns M (Send when M is); the MR and domain are
// FI_THREAD_SAFE objects when T is Send (only ThreadSafe is: the regions
// of serialized domains stay on their domain's thread); the raw pointers
// point into M.
unsafe impl<M: RegionMemory + Send, T: ThreadModel + Send> Send for MemoryRegion<M, T> {}
// SAFETY: &self only reads the memory (read_at, as_slice) or the MR's
// fixed fields; writes take &mut self; shared only when T is Sync
// (ThreadSafe).
unsafe impl<M: RegionMemory + Sync, T: ThreadModel + Sync> Sync for MemoryRegion<M, T> {}

impl<M: RegionMemory, T: ThreadModel> MemoryRegion<M, T> {
    /// `fi_mr_reg`: registers `memory` with `domain` for `access`, taking
    /// ownership of it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for empty memory or no access flag;
    /// [`Error::Unsupported`] for a domain whose keys are longer than 8
    /// bytes or whose `mr_mode` has `FI_MR_RMA_EVENT`;
    /// [`Error::TooLarge`] when the domain's requested keys
    /// (`mr_key_size` bytes) are used up; [`Error::Call`] when `fi_mr_reg`
    /// fails. The memory is dropped with the error.
    #[doc(alias = "fi_mr_reg")]
    pub fn register(domain: &Domain<T>, memory: M, access: MrAccess) -> Result<Self> {
        Self::new(domain, memory, access, Call::Reg, None)
    }

    /// `fi_mr_reg` and `fi_mr_bind`: registers `memory` as
    /// [`register`](Self::register) does, with `counter` bound to the
    /// region for `events` before its key exists, so that the counter
    /// counts every remote write or atomic that modifies it (fi_mr(3)).
    /// Where the domain's `mr_mode` has `FI_MR_RMA_EVENT`, the region is
    /// registered with the `FI_RMA_EVENT` flag and enabled
    /// (`fi_mr_enable`) after the bind. No counter can be bound later:
    /// once the key exists, a peer may already be writing.
    ///
    /// The domain must have the `FI_RMA_EVENT` capability (ask for
    /// [`Caps::RMA_EVENT`] in the hints). Of the providers without
    /// hardware only sockets counts at a region; the others (libfabric's
    /// util regions: tcp, tcp;ofi_rxm, udp;ofi_rxd, shm; and verbs) count
    /// remote writes only at the target endpoint
    /// ([`Endpoint::bind_cntr`](crate::Endpoint::bind_cntr) with
    /// [`CntrBind::REMOTE_WRITE`](crate::CntrBind::REMOTE_WRITE)).
    ///
    /// The region holds the counter: [`Counter::close`] is
    /// [`Error::InUse`] while the region exists, and after it is dropped
    /// for as long as its memory is kept in the domain. On sockets that is
    /// until no endpoint of the domain is open, the region staying
    /// registered meanwhile (its provider record is read after the key
    /// lookup that finds it, `prov/sockets/src/sock_progress.c` 315-335 in
    /// 1.22); a write that completes after the drop is not counted there
    /// (the counter is found by that lookup).
    ///
    /// A counter bound both to a region and, for
    /// [`CntrBind::REMOTE_WRITE`](crate::CntrBind::REMOTE_WRITE), to the
    /// target endpoint counts each write to the region twice on sockets
    /// (once for each binding).
    ///
    /// ```
    /// use libfabric::mr::{MemoryRegion, MrAccess, MrCntrBind};
    /// use libfabric::info::Caps;
    /// use libfabric::{getinfo, CntrAttr, Counter, Domain, Error, Fabric, Hints};
    /// let hints = Hints::new().provider("sockets").node("127.0.0.1")
    ///     .caps(Caps::MSG | Caps::RMA | Caps::RMA_EVENT);
    /// let info = getinfo(&hints)?.into_iter().next().unwrap();
    /// let domain = Domain::open(&Fabric::open(&info)?, &info)?;
    /// let counter = Counter::open(&domain, &CntrAttr::new())?;
    /// let region = MemoryRegion::register_counted(
    ///     &domain,
    ///     vec![0u8; 4096],
    ///     MrAccess::REMOTE_WRITE,
    ///     &counter,
    ///     MrCntrBind::REMOTE_WRITE,
    /// )?;
    /// // Send region.remote() to the peer; each write it makes counts:
    /// // counter.wait(n, timeout) returns once n have landed.
    /// assert_eq!(counter.read()?, 0);
    /// // The region holds the counter.
    /// let (counter, e) = counter.close().unwrap_err();
    /// assert!(matches!(e, Error::InUse { .. }));
    /// drop(region);
    /// counter.close().map_err(|(_, e)| e)?;
    /// # Ok::<(), libfabric::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::ForeignObject`] for a counter of another domain;
    /// [`Error::InvalidArgument`] for no event or bits [`MrCntrBind`]
    /// does not name, or `access` without [`MrAccess::REMOTE_WRITE`]
    /// (nothing would count); [`Error::MissingCapability`] when the
    /// domain's info lacks `FI_RMA_EVENT`; [`Error::Unsupported`] when the
    /// provider binds no counter to a region (`fi_mr_bind` is
    /// `-FI_ENOSYS`); as [`register`](Self::register) otherwise, and
    /// [`Error::Call`] when `fi_mr_bind` or `fi_mr_enable` fails. The
    /// memory is dropped with the error.
    #[doc(alias = "fi_mr_bind")]
    #[doc(alias = "fi_mr_enable")]
    pub fn register_counted(
        domain: &Domain<T>,
        memory: M,
        access: MrAccess,
        counter: &Counter<T>,
        events: MrCntrBind,
    ) -> Result<Self> {
        Self::new(domain, memory, access, Call::Reg, Some((counter, events)))
    }

    /// `fi_mr_regattr`: [`register`](Self::register) through a
    /// registration attribute naming the memory's interface, which must be
    /// [`HmemIface::System`] (host memory, what `M` is).
    ///
    /// # Errors
    /// [`Error::Unsupported`] for another interface (the memory is
    /// dropped); as [`register`](Self::register), with `fi_mr_regattr` as
    /// the call.
    #[doc(alias = "fi_mr_regattr")]
    pub fn register_attr(
        domain: &Domain<T>,
        memory: M,
        access: MrAccess,
        iface: HmemIface,
    ) -> Result<Self> {
        if iface != HmemIface::System {
            return Err(Error::Unsupported {
                call: "fi_mr_regattr",
                reason: "device memory interfaces (FI_HMEM_CUDA, ...): the memory a region owns \
                       is host memory (FI_HMEM_SYSTEM)",
            });
        }
        Self::new(domain, memory, access, Call::RegAttr, None)
    }
}

impl<M: RegionMemory, T: ThreadModel> MemoryRegion<M, T> {
    fn new(
        domain: &Domain<T>,
        mut memory: M,
        access: MrAccess,
        call: Call,
        counter: Option<(&Counter<T>, MrCntrBind)>,
    ) -> Result<Self> {
        domain.inner.run_deferred();
        if let Some((counter, events)) = counter {
            check_counted(domain, access, counter, events)?;
        }
        check_uncached(domain.inner.info.provider())?;
        let iov = memory.iovecs().into_boxed_slice();
        let len = iov
            .iter()
            .try_fold(0usize, |total, &(_, len)| total.checked_add(len))
            .ok_or(Error::TooLarge {
                what: "bytes of a memory region",
                limit: usize::MAX,
                given: usize::MAX,
            })?;
        // Atomics land at offsets of the part peers address (the first
        // iovec); the initiator checks an offset's alignment only, and in
        // offset mode (no FI_MR_VIRT_ADDR) the target's provider adds the
        // region's address to it (`ofi_mr_map_verify`,
        // `prov/util/src/util_mr_map.c` 141-145 in 1.22) and operates on
        // the sum with `__atomic` builtins of the type's size: a first
        // byte at an address not aligned to the largest type (8 bytes)
        // would give it misaligned operands.
        if access.intersects(MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE)
            && iov
                .first()
                .is_some_and(|&(base, _)| base as usize % ATOMIC_ALIGN != 0)
        {
            return Err(Error::InvalidArgument(
                format!(
                    "a memory region peers reach (REMOTE_READ or REMOTE_WRITE) must start at                      an address aligned to {ATOMIC_ALIGN} bytes (atomics land at its offsets)"
                )
                .into(),
            ));
        }
        // SAFETY: `memory` is moved into the region below and stays there
        // (its iovecs at the same addresses, RegionMemory's contract) until
        // the MR is closed and, after that, until no RMA that passed the
        // key check can still reach it: into_inner gives it back only when
        // no endpoint of the domain is open, Drop parks it in the domain
        // until the endpoints open at the close have closed (see
        // domain::Retired). M is owned ('static), so nothing else can end
        // its life meanwhile. If registration fails, M is dropped
        // unregistered.
        let reg = unsafe {
            register_iov(
                &domain.inner,
                &iov,
                access,
                call,
                counter.map(|(c, events)| (&*c.inner, events)),
            )?
        };
        Ok(MemoryRegion {
            reg,
            cntr: counter.map(|(c, _)| c.inner.clone()),
            iov,
            len,
            access,
            domain: domain.inner.clone(),
            memory: ManuallyDrop::new(memory),
            _model: std::marker::PhantomData,
        })
    }

    /// The iovec and offset in it of byte `offset` of the region, and the
    /// bytes from there to the iovec's end; `offset < len`.
    fn locate(&self, mut offset: usize) -> (*mut u8, usize) {
        for &(base, len) in self.iov.iter() {
            if offset < len {
                // SAFETY: offset < len of this iovec: within its bytes.
                return (unsafe { base.add(offset) }, len - offset);
            }
            offset -= len;
        }
        (ptr::null_mut(), 0)
    }

    /// Calls `f` with each (pointer, length) piece of `offset..offset +
    /// len`, which is within the region (checked by the caller).
    fn pieces(&self, mut offset: usize, mut len: usize, mut f: impl FnMut(*mut u8, usize, usize)) {
        let mut done = 0;
        while len > 0 {
            let (at, room) = self.locate(offset);
            let n = room.min(len);
            if n == 0 {
                return;
            }
            f(at, n, done);
            offset += n;
            done += n;
            len -= n;
        }
    }

    /// The counter bound to the region
    /// ([`register_counted`](Self::register_counted)), if any.
    #[must_use]
    pub fn counter(&self) -> Option<Counter<T>> {
        self.cntr
            .as_ref()
            .map(|inner| Counter::from_inner(inner.clone()))
    }

    /// The local descriptor (`fi_mr_desc`; may be NULL).
    #[must_use]
    pub fn desc(&self) -> *mut c_void {
        self.reg.desc
    }

    /// The key peers address the region with (`fi_mr_key`).
    #[must_use]
    pub fn key(&self) -> u64 {
        self.reg.key
    }

    /// Bytes registered.
    #[allow(clippy::len_without_is_empty)]
    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The access it was registered for.
    #[must_use]
    pub fn access(&self) -> MrAccess {
        self.access
    }

    /// The domain it is registered with.
    #[must_use]
    pub fn domain(&self) -> Domain<T> {
        Domain {
            _model: std::marker::PhantomData,
            inner: self.domain.clone(),
        }
    }

    /// The region as a peer addresses it: to send to the peer that will
    /// read or write it. For a region of several iovecs, its first iovec
    /// only: the providers translate and check a remote address against
    /// the first iovec of a region (`ofi_mr_map_verify`,
    /// `prov/util/src/util_mr_map.c` 141-153 in 1.22, used by tcp, rxm,
    /// rxd, shm and sockets), so the rest is not reachable remotely.
    #[must_use]
    pub fn remote(&self) -> RemoteRegion {
        RemoteRegion {
            addr: self.reg.remote_base,
            len: self.remote_len() as u64,
            key: self.reg.key,
        }
    }

    /// Bytes peers can address: the first iovec.
    fn remote_len(&self) -> usize {
        self.iov[0].1
    }

    /// Bytes `range` of the region, as a peer addresses them: a peer
    /// given it cannot (through this crate) reach the rest.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a range not within what
    /// [`remote`](Self::remote) covers.
    pub fn remote_range(&self, range: Range<usize>) -> Result<RemoteRegion> {
        if range.start > range.end || range.end > self.remote_len() {
            return Err(Error::InvalidArgument(
                format!(
                    "range {range:?} is not within the {} bytes of the memory region peers \
                     address",
                    self.remote_len()
                )
                .into(),
            ));
        }
        Ok(RemoteRegion {
            // Within len <= isize::MAX of an allocation whose remote base
            // is at most its address: no overflow.
            addr: self.reg.remote_base + range.start as u64,
            len: (range.end - range.start) as u64,
            key: self.reg.key,
        })
    }

    /// Checks `offset..offset + len` against the region.
    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            end => Err(Error::TooLarge {
                what: "offset + length in the memory region",
                limit: self.len,
                given: end.unwrap_or(usize::MAX),
            }),
        }
    }

    /// Copies `dst.len()` bytes from `offset` of the region into `dst`.
    /// Bytes a peer writes meanwhile may be seen in part.
    ///
    /// # Errors
    /// [`Error::TooLarge`] when `offset + dst.len()` is past the region.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check_range(offset, dst.len())?;
        self.pieces(offset, dst.len(), |at, n, done| {
            for (i, d) in dst[done..done + n].iter_mut().enumerate() {
                // SAFETY: `at` has n bytes left in its iovec (pieces), within
                // M's bytes, which the region owns. A volatile read of a
                // byte forms no reference to memory that the provider may
                // write at the same time for a peer's RMA (REMOTE_WRITE); a
                // local writer needs &mut self.
                *d = unsafe { ptr::read_volatile(at.add(i)) };
            }
        });
        Ok(())
    }

    /// Copies `src` into the region at `offset`. A peer reading meanwhile
    /// may see it in part.
    ///
    /// # Errors
    /// [`Error::TooLarge`] when `offset + src.len()` is past the region.
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        self.check_range(offset, src.len())?;
        self.pieces(offset, src.len(), |at, n, done| {
            for (i, s) in src[done..done + n].iter().enumerate() {
                // SAFETY: as in read_at; &mut self excludes every other
                // local access, and the write forms no reference that the
                // provider's own accesses for peers would alias.
                unsafe { ptr::write_volatile(at.add(i), *s) };
            }
        });
        Ok(())
    }

    /// The memory as a slice, for a region peers cannot write (registered
    /// without [`MrAccess::REMOTE_WRITE`]): then only this process writes
    /// it, and only through `&mut self`.
    ///
    /// # Errors
    /// [`Error::State`] for a region registered with `REMOTE_WRITE`, or of
    /// several iovecs (use [`read_at`](Self::read_at)).
    pub fn as_slice(&self) -> Result<&[u8]> {
        self.one_iovec("MemoryRegion::as_slice")?;
        if self.access.contains(MrAccess::REMOTE_WRITE) {
            return Err(Error::State {
                call: "MemoryRegion::as_slice",
                reason: "peers may write the region (REMOTE_WRITE): read it with read_at",
            });
        }
        // SAFETY: M's bytes, owned by the region; no peer writes them (the
        // providers verify a remote write's key and access against the
        // region's: `ofi_mr_map_verify`, `prov/util/src/util_mr_map.c`
        // 186-189 in 1.17, used by tcp, rxm (through tcp), rxd, shm and
        // sockets), and local writes need &mut self.
        Ok(unsafe { std::slice::from_raw_parts(self.iov[0].0, self.len) })
    }

    /// The memory as a mutable slice, for a region without remote access
    /// (neither [`MrAccess::REMOTE_READ`] nor `REMOTE_WRITE`).
    ///
    /// # Errors
    /// [`Error::State`] for a region with remote access, or of several
    /// iovecs (use [`write_at`](Self::write_at)).
    pub fn as_mut_slice(&mut self) -> Result<&mut [u8]> {
        self.one_iovec("MemoryRegion::as_mut_slice")?;
        if self
            .access
            .intersects(MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE)
        {
            return Err(Error::State {
                call: "MemoryRegion::as_mut_slice",
                reason: "peers may reach the region (REMOTE_READ or REMOTE_WRITE): write it \
                         with write_at",
            });
        }
        // SAFETY: as in as_slice; &mut self makes this process's access
        // unique. (A peer may read it on rxm, see the module docs: a read
        // changes nothing this process sees.)
        Ok(unsafe { std::slice::from_raw_parts_mut(self.iov[0].0, self.len) })
    }

    fn one_iovec(&self, call: &'static str) -> Result<()> {
        if self.iov.len() != 1 {
            return Err(Error::State {
                call,
                reason: "the region covers several iovecs: copy with read_at / write_at",
            });
        }
        Ok(())
    }

    /// The number of iovecs it covers (`fi_mr_regv`'s count).
    #[must_use]
    pub fn iov_count(&self) -> usize {
        self.iov.len()
    }

    /// Deregisters the region (`fi_close`) and gives the memory back, when
    /// no endpoint of its domain is open.
    ///
    /// An RMA that passed the key check before the close may go on copying
    /// into or out of the memory afterwards, carried by an endpoint of the
    /// domain that was open at the close (see the module documentation);
    /// with none open, none is under way, and the memory is the caller's
    /// again. Its key is not requested again in this domain (without
    /// `FI_MR_PROV_KEY`), so a peer that still holds its [`RemoteRegion`]
    /// gets an error completion, and reaches nothing. (Dropping the region
    /// instead frees the memory once those endpoints have closed.)
    ///
    /// # Errors
    /// Each with the region handed back, still registered:
    /// [`Error::State`] while an endpoint of the domain is open (close
    /// the domain's endpoints first, or drop the region);
    /// [`Error::Call`] when `fi_close` fails.
    // The region itself comes back on failure (still registered, it must
    // not be lost): a large error variant, on a cold path.
    #[allow(clippy::result_large_err)]
    pub fn into_inner(self) -> std::result::Result<M, (Self, Error)> {
        let mut this = ManuallyDrop::new(self);
        let domain = this.domain.clone();
        // Held across the close: no endpoint opens meanwhile (each is
        // counted under this lock before its fi_endpoint).
        let retired = domain.retired();
        if retired.open_endpoints() != 0 {
            drop(retired);
            return Err((
                ManuallyDrop::into_inner(this),
                Error::State {
                    call: "MemoryRegion::into_inner",
                    reason: "endpoints of the region's domain are open, and an RMA that passed \
                             the key check before the close may still copy into or out of the \
                             memory: close them first, or drop the region (its memory is \
                             freed once they have closed)",
                },
            ));
        }
        if let Err(e) = this.reg.mr.close() {
            drop(retired);
            return Err((ManuallyDrop::into_inner(this), e));
        }
        drop(retired);
        // SAFETY: the MR is closed, with no endpoint of the domain open
        // from before the close until now: no RMA reaches the memory. Every
        // field that owns something is moved out once (the others are
        // Copy) and `this` is never dropped (ManuallyDrop), so nothing is
        // dropped twice or leaked. The closed OwnedFid's drop does nothing.
        unsafe {
            let MemoryRegion {
                reg,
                cntr,
                iov,
                len: _,
                access: _,
                domain,
                memory,
                _model: _,
            } = &mut *this;
            drop(ptr::read(reg));
            drop(ptr::read(cntr));
            drop(ptr::read(iov));
            drop(ptr::read(domain));
            Ok(ManuallyDrop::take(memory))
        }
    }

    /// Deregisters the region now (`fi_close`); its memory is dropped as
    /// by dropping the region (once the endpoints of the domain open now
    /// have closed).
    ///
    /// # Errors
    /// [`Error::Call`] when `fi_close` fails: the region comes back with
    /// the error, still registered.
    #[allow(clippy::result_large_err)]
    pub fn close(self) -> crate::error::Handback<Self> {
        let mut this = ManuallyDrop::new(self);
        match this.retire() {
            Ok(()) => {
                // SAFETY: retired: the MR is closed and the memory moved
                // out; the remaining owning fields are dropped once here
                // and `this` never again (ManuallyDrop).
                unsafe {
                    drop(ptr::read(&this.reg));
                    drop(ptr::read(&this.cntr));
                    drop(ptr::read(&this.iov));
                    drop(ptr::read(&this.domain));
                }
                Ok(())
            }
            Err(e) => Err((ManuallyDrop::into_inner(this), e)),
        }
    }

    /// Closes the MR and moves the memory, with the counter bound to the
    /// region, into the domain's retired list (or drops them when no
    /// endpoint of the domain is open). On success `self.memory` has been
    /// taken: the caller must not touch it again.
    ///
    /// The counter waits with the memory: sockets looks a completed
    /// remote write's region up by key and increments its counter after
    /// the lookup (`sock_pe_report_mr_completion`,
    /// `prov/sockets/src/sock_progress.c` 315-335 in 1.22), on its
    /// progress thread, for writes carried by the domain's open endpoints.
    ///
    /// On sockets the MR itself waits too, still open, until no endpoint
    /// of the domain is open at all: that lookup takes the region's record
    /// under the domain lock but reads its counter after releasing it,
    /// while `sock_mr_close` frees the record under the same lock
    /// (`prov/sockets/src/sock_mr.c` 46-63), so a close then raced the
    /// progress thread into freed memory. While the domain has no endpoint,
    /// its progress thread carries no RMA.
    fn retire(&mut self) -> Result<()> {
        let mut retired = self.domain.retired();
        let cntr = self.cntr.take();
        let keep_open = crate::quirks::frees_regions_under_progress(self.domain.info.provider())
            && retired.open_endpoints() != 0;
        if keep_open {
            // The MR is dropped (closed) with the memory and counter once
            // the domain is idle; the tuple drops it first.
            let mr = self.reg.mr.take_open();
            // SAFETY: taken once: the callers (close, Drop) never use
            // `self.memory` after a successful retire.
            let kept: Box<dyn Send> =
                Box::new((mr, unsafe { ManuallyDrop::take(&mut self.memory) }, cntr));
            retired.park_until_idle(kept);
            return Ok(());
        }
        if let Err(e) = self.reg.mr.close() {
            self.cntr = cntr;
            return Err(e);
        }
        // SAFETY: taken once: the callers (close, Drop) never use
        // `self.memory` after a successful retire.
        let memory: Box<dyn Send> =
            Box::new((unsafe { ManuallyDrop::take(&mut self.memory) }, cntr));
        let now = retired.park(memory);
        drop(retired);
        // No endpoint was open: nothing reaches the memory.
        drop(now);
        Ok(())
    }
}

impl<M: RegionMemory, T: ThreadModel> Drop for MemoryRegion<M, T> {
    fn drop(&mut self) {
        // On failure the MR is still registered: peers may still reach the
        // memory, which is leaked rather than freed (it is owned, so
        // nothing else frees it), and may still count on the counter bound
        // to it, which is leaked too (kept open).
        if self.retire().is_err() {
            std::mem::forget(self.cntr.take());
        }
    }
}

impl<M: RegionMemory, T: ThreadModel> fmt::Debug for MemoryRegion<M, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("len", &self.len)
            .field("key", &self.reg.key)
            .field("access", &self.access)
            .finish()
    }
}

/// A memory region as a peer reaches it with RMA: what a peer advertises
/// (from [`MemoryRegion::remote`]), received as bytes
/// ([`from_bytes`](Self::from_bytes)).
///
/// The RMA calls of [`Endpoint`](crate::Endpoint) take an offset into it
/// and a length, and refuse any that is not within `len` bytes. That is
/// all the local side can know: whether the peer's region really is that
/// long, and the key valid, the peer's provider checks.
///
/// The providers' check does not guard against an address that wraps past
/// 2^64 (`ofi_mr_map_verify`, `prov/util/src/util_mr_map.c` 141-145 in
/// 1.22): the RMA calls refuse a range whose end overflows 64 bits, and,
/// where regions are addressed by offset, an end past `isize::MAX` (the
/// target adds its region's address to it). A peer that does not go
/// through this crate can still send such an address; no check on this
/// side protects a target from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteRegion {
    /// The address of its first byte, as the peer's domain addresses it
    /// (a virtual address under `FI_MR_VIRT_ADDR`, else an offset).
    pub addr: u64,
    /// Its length in bytes.
    pub len: u64,
    /// Its key.
    pub key: u64,
}

impl RemoteRegion {
    /// Bytes in [`to_bytes`](Self::to_bytes)' form.
    pub const BYTES: usize = 24;

    /// `addr`, `len` and `key`, each 8 bytes little-endian.
    #[must_use]
    pub fn to_bytes(&self) -> [u8; 24] {
        let mut out = [0u8; 24];
        out[..8].copy_from_slice(&self.addr.to_le_bytes());
        out[8..16].copy_from_slice(&self.len.to_le_bytes());
        out[16..].copy_from_slice(&self.key.to_le_bytes());
        out
    }

    /// Decodes [`to_bytes`](Self::to_bytes)' form.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `bytes` is 24 bytes long, or when
    /// the region's end (`addr + len`) overflows 64 bits.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let Ok(bytes) = <&[u8; 24]>::try_from(bytes) else {
            return Err(Error::InvalidArgument(
                format!(
                    "a remote region is 24 bytes, not {} (RemoteRegion::to_bytes)",
                    bytes.len()
                )
                .into(),
            ));
        };
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        let region = RemoteRegion {
            addr: word(0),
            len: word(1),
            key: word(2),
        };
        if region.addr.checked_add(region.len).is_none() {
            return Err(Error::InvalidArgument(
                "a remote region's address + length overflows 64 bits".into(),
            ));
        }
        Ok(region)
    }

    /// The remote address of `len` bytes at `offset`, checked to be within
    /// the region, and their end not to pass 2^64.
    ///
    /// # Errors
    /// [`Error::TooLarge`] when `offset + len` is past the region;
    /// [`Error::InvalidArgument`] when `addr + offset + len` overflows
    /// 64 bits.
    #[inline]
    pub fn address_of(&self, offset: u64, len: usize) -> Result<u64> {
        self.range(offset, len)
            .map(|(addr, _)| addr)
            .map_err(|fault| fault.error(self))
    }

    /// [`address_of`](Self::address_of)'s checks: the address and the
    /// end's (`addr + offset + len`), or the fault as a [`RemoteFault`].
    #[inline(always)]
    fn range(&self, offset: u64, len: usize) -> std::result::Result<(u64, u64), RemoteFault> {
        let end = match offset.checked_add(len as u64) {
            Some(end) if end <= self.len => end,
            end => return Err(RemoteFault::PastTheEnd(end)),
        };
        // addr + offset + len is addr + end: when that fits, so does
        // addr + offset.
        match self.addr.checked_add(end) {
            Some(end_addr) => Ok((self.addr + offset, end_addr)),
            None => Err(RemoteFault::Overflow),
        }
    }

    /// [`address_of`](Self::address_of) for an RMA or atomic of a domain
    /// of `mr_mode`: without `FI_MR_VIRT_ADDR` the address is an offset
    /// into the target's region, whose bytes number at most `isize::MAX`,
    /// so an end past that is refused. The target's provider adds the
    /// region's address to it and checks the sum against the region
    /// without guarding against wrap-around (`ofi_mr_map_verify`,
    /// `prov/util/src/util_mr_map.c` 141-145 in 1.22): an offset near
    /// 2^64 would wrap to an address outside the region and pass.
    #[inline]
    pub(crate) fn target_address(&self, offset: u64, len: usize, mr_mode: i32) -> Result<u64> {
        self.target_range(offset, len, max_target_end(mr_mode))
            .map_err(|fault| fault.error(self))
    }

    /// [`target_address`](Self::target_address)'s checks, with the end
    /// allowed ([`max_target_end`]) worked out beforehand; the fault told
    /// as a [`RemoteFault`] (for [`RemoteFault::error`] to explain out of
    /// line).
    #[inline(always)]
    pub(crate) fn target_range(
        &self,
        offset: u64,
        len: usize,
        max_end: u64,
    ) -> std::result::Result<u64, RemoteFault> {
        let (addr, end_addr) = self.range(offset, len)?;
        if end_addr > max_end {
            return Err(RemoteFault::PastAnyOffsetRegion);
        }
        Ok(addr)
    }
}

/// The highest end (`addr + offset + len`) a remote range may have in a
/// domain of `mr_mode`: `isize::MAX` where regions are addressed by offset
/// (no `FI_MR_VIRT_ADDR`, see [`RemoteRegion::target_address`]), else any.
#[must_use]
pub(crate) fn max_target_end(mr_mode: i32) -> u64 {
    if mr_mode & sys::FI_MR_VIRT_ADDR == 0 {
        isize::MAX as u64
    } else {
        u64::MAX
    }
}

/// Why a range of a [`RemoteRegion`] is refused, as its checks find it;
/// [`error`](Self::error) says it as an [`Error`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum RemoteFault {
    /// `offset + len` (`None`: past 2^64) is past the region's length.
    PastTheEnd(Option<u64>),
    /// `addr + offset + len` overflows 64 bits.
    Overflow,
    /// The end is past `isize::MAX` in a domain that addresses regions by
    /// offset.
    PastAnyOffsetRegion,
}

impl RemoteFault {
    /// The error of this fault in `region`.
    #[cold]
    #[inline(never)]
    pub(crate) fn error(self, region: &RemoteRegion) -> Error {
        match self {
            RemoteFault::PastTheEnd(end) => Error::TooLarge {
                what: "offset + length in the remote region",
                limit: usize::try_from(region.len).unwrap_or(usize::MAX),
                given: end.map_or(usize::MAX, |e| usize::try_from(e).unwrap_or(usize::MAX)),
            },
            RemoteFault::Overflow => address_overflow(),
            RemoteFault::PastAnyOffsetRegion => past_any_offset_region(),
        }
    }
}

#[cold]
fn address_overflow() -> Error {
    Error::InvalidArgument("the remote region's address + offset + length overflows 64 bits".into())
}

#[cold]
fn past_any_offset_region() -> Error {
    Error::InvalidArgument(
        "the remote region's offset + length is past isize::MAX, beyond any region of a domain \
         that addresses regions by offset (no FI_MR_VIRT_ADDR)"
            .into(),
    )
}

/// Refuses to register the application's memory where the provider's
/// registration cache would register it for peers' writes and keep it
/// registered after `fi_close` (see `quirks::caches_registrations`): the
/// memory of [`MemoryRegion`]s and of buffer pools alike.
pub(crate) fn check_uncached(provider: &str) -> Result<()> {
    if crate::quirks::caches_registrations(provider) {
        return Err(Error::Unsupported {
            call: "fi_mr_reg",
            reason: "the provider's registration cache registers every region for remote read, write and atomics and keeps it after fi_close (verbs): start the program with FI_MR_CACHE_MAX_COUNT=0 to register the application's memory",
        });
    }
    Ok(())
}
