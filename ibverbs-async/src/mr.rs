//! Memory regions that own their memory: `ibv_reg_mr(3)` /
//! `ibv_dereg_mr(3)`.
//!
//! The device reads and writes registered memory on its own, at any time
//! while a work request that names it is outstanding (and, with remote
//! access, whenever a peer chooses). So the memory of an [`Mr`] is allocated
//! and freed by the MR itself, never lent out as `&[u8]`/`&mut [u8]`, and is
//! accessed only by copying in and out through raw pointers. The memory is
//! freed only after `ibv_dereg_mr` succeeded, and a queue pair or SRQ that
//! was given work on an MR keeps it registered until the queue is destroyed.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::fmt;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;

use bitflags::bitflags;
use libibverbs_sys as sys;

use crate::error::{check_ptr, check_rc, Error, ObjectKind, Result};
use crate::pd::{Pd, PdInner};
use crate::registry::{handle, Describe, Destroy, ObjectId};

bitflags! {
    /// Access rights of a memory region or queue pair
    /// (`enum ibv_access_flags`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct AccessFlags: u32 {
        /// The local device may write (needed to receive into the region).
        const LOCAL_WRITE = sys::IBV_ACCESS_LOCAL_WRITE;
        /// Peers may RDMA-write into the region (needs `LOCAL_WRITE`).
        const REMOTE_WRITE = sys::IBV_ACCESS_REMOTE_WRITE;
        /// Peers may RDMA-read the region.
        const REMOTE_READ = sys::IBV_ACCESS_REMOTE_READ;
        /// Peers may run atomics on the region (needs `LOCAL_WRITE`).
        const REMOTE_ATOMIC = sys::IBV_ACCESS_REMOTE_ATOMIC;
        /// Relaxed PCI ordering, where the device supports it.
        const RELAXED_ORDERING = sys::IBV_ACCESS_RELAXED_ORDERING;
    }
}

/// Alignment of the memory of every region: a page, so that two regions
/// never share one.
const ALIGN: usize = 4096;

pub(crate) struct MrInner {
    raw: NonNull<sys::ibv_mr>,
    id: ObjectId,
    buf: NonNull<u8>,
    layout: Layout,
    len: usize,
    registered: bool,
    pub(crate) pd: Arc<PdInner>,
}

// SAFETY: the ibv_mr is only passed to thread-safe verbs (ibv_alloc_td(3)),
// and the buffer is reached only through the copy methods of Mr, whose
// receivers (&self for reads, &mut self for writes) exclude data races
// between Rust threads.
unsafe impl Send for MrInner {}
// SAFETY: as for Send.
unsafe impl Sync for MrInner {}

impl MrInner {
    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: the ibv_mr stays valid while registered; lkey is written
        // once by ibv_reg_mr.
        unsafe { (*self.raw.as_ptr()).lkey }
    }

    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: as for lkey.
        unsafe { (*self.raw.as_ptr()).rkey }
    }

    pub(crate) fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// The scatter/gather entry for `range`, checked against the region.
    pub(crate) fn sge(&self, range: &Range<usize>) -> Result<sys::ibv_sge> {
        let len = range_len(range, self.len)?;
        let length = u32::try_from(len).map_err(|_| Error::TooLarge {
            what: "bytes of one work request",
            limit: u32::MAX as usize,
            given: len,
        })?;
        Ok(sys::ibv_sge {
            addr: self.addr() + range.start as u64,
            length,
            lkey: self.lkey(),
        })
    }

    fn dereg(&mut self) -> Result<()> {
        // SAFETY: the MR was registered by ibv_reg_mr and is deregistered
        // once; queues that used it hold an Arc of this value, so none is
        // left to access it.
        check_rc("ibv_dereg_mr", unsafe {
            sys::ibv_dereg_mr(self.raw.as_ptr())
        })?;
        self.registered = false;
        Ok(())
    }
}

impl Drop for MrInner {
    fn drop(&mut self) {
        if self.registered && self.dereg().is_err() {
            // The device may still reach the memory: leak it rather than
            // hand it back to the allocator, and keep the PD it is
            // registered with.
            std::mem::forget(Arc::clone(&self.pd));
            return;
        }
        // SAFETY: allocated in Pd::reg_mr with this layout, and no longer
        // registered, so the device no longer accesses it.
        unsafe { dealloc(self.buf.as_ptr(), self.layout) };
    }
}

impl Destroy for MrInner {
    const KIND: ObjectKind = ObjectKind::MemoryRegion;

    fn destroy_now(&mut self) -> Result<()> {
        self.dereg()
        // Drop then frees the memory.
    }
}

/// The access flags of a region as `ibv_reg_mr` takes them: flags this
/// crate names only, and remote write or atomics only with local write
/// (`ibv_reg_mr(3)`: "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC
/// is set, then IBV_ACCESS_LOCAL_WRITE must be set too").
fn mr_access(access: AccessFlags) -> Result<libc::c_int> {
    let access = AccessFlags::from_bits(access.bits()).ok_or(Error::invalid(
        "access flags this crate does not name (AccessFlags::from_bits_retain)",
    ))?;
    if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
        && !access.contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(Error::invalid(
            "remote write and remote atomic access need LOCAL_WRITE too",
        ));
    }
    libc::c_int::try_from(access.bits()).map_err(|_| Error::invalid("access flags out of range"))
}

/// The length of `range` once it is known to lie within `size` bytes.
fn range_len(range: &Range<usize>, size: usize) -> Result<usize> {
    let len = range
        .end
        .checked_sub(range.start)
        .ok_or(Error::OutOfBounds {
            what: "memory region",
            offset: range.start,
            len: 0,
            size,
        })?;
    check_range("memory region", range.start, len, size)?;
    Ok(len)
}

fn check_range(what: &'static str, offset: usize, len: usize, size: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(Error::OutOfBounds {
            what,
            offset,
            len,
            size,
        }),
    }
}

/// The error for a region no allocation can have (`Layout` takes at most
/// `isize::MAX` bytes, rounded up to the alignment).
fn too_large(len: usize) -> Error {
    Error::TooLarge {
        what: "bytes of a memory region",
        limit: isize::MAX as usize - (ALIGN - 1),
        given: len,
    }
}

/// `len` zeroed, page-aligned bytes (rounded up to a page) for a region,
/// or an error instead of aborting the process when they cannot be had.
fn alloc_region(len: usize) -> Result<(NonNull<u8>, Layout)> {
    if len == 0 {
        return Err(Error::invalid("a memory region needs at least one byte"));
    }
    let size = len.checked_next_multiple_of(ALIGN).ok_or(too_large(len))?;
    let layout = Layout::from_size_align(size, ALIGN).map_err(|_| too_large(len))?;
    // SAFETY: the layout has a non-zero size (len >= 1).
    let buf = unsafe { alloc_zeroed(layout) };
    let buf = NonNull::new(buf).ok_or(Error::OutOfMemory {
        what: "memory region",
        bytes: size,
    })?;
    Ok((buf, layout))
}

/// A memory region that owns its zero-initialised, page-aligned memory:
/// `ibv_reg_mr()`.
///
/// Its bytes are reached by copying ([`write`](Mr::write),
/// [`read`](Mr::read)), never by reference, because the device may write
/// them at any time. Reading while the device writes gives unspecified
/// bytes (not undefined behaviour); read after the completion that says the
/// data arrived.
///
/// Not `Clone`: `write` takes `&mut self`, so Rust threads cannot race on
/// the contents. Queues that were given work on the region hold it
/// registered until they are destroyed, even after this handle is dropped.
///
/// ```no_run
/// # fn main() -> ibverbs_async::Result<()> {
/// use ibverbs_async::{AccessFlags, Context};
/// let ctx = Context::open("rxe0")?;
/// let pd = ctx.alloc_pd()?;
/// let mut mr = pd.reg_mr(4096, AccessFlags::LOCAL_WRITE)?;
/// mr.write(0, b"hello")?;
/// let mut out = [0u8; 5];
/// mr.read(0, &mut out)?;
/// assert_eq!(&out, b"hello");
/// # Ok(()) }
/// ```
// Send + Sync through Arc<MrInner>: see the `unsafe impl`s on MrInner
// for why the C object may be used and dropped from any thread.
pub struct Mr {
    pub(crate) inner: Arc<MrInner>,
}

impl Pd {
    /// Allocates `len` zeroed bytes and registers them with `access`
    /// (`ibv_reg_mr()`).
    ///
    /// # Errors
    /// [`Error::TooLarge`] for a length no allocation can have;
    /// [`Error::InvalidArgument`] for `len == 0`, for
    /// [`AccessFlags::REMOTE_WRITE`] or
    /// [`AccessFlags::REMOTE_ATOMIC`] without [`AccessFlags::LOCAL_WRITE`]
    /// (`ibv_reg_mr(3)`), or for flags this crate does not name;
    /// [`Error::OutOfMemory`] when the memory cannot be
    /// allocated (the process is not aborted); [`Error::Call`] when the
    /// registration fails.
    #[doc(alias = "ibv_reg_mr")]
    pub fn reg_mr(&self, len: usize, access: AccessFlags) -> Result<Mr> {
        let access = mr_access(access)?;
        let (buf, layout) = alloc_region(len)?;
        // SAFETY: the buffer is `len` (<= size) bytes of live memory owned by
        // the MrInner built below, which frees it only after ibv_dereg_mr;
        // ibv_reg_mr(3) returns NULL with errno set on failure.
        let raw = unsafe { sys::ibv_reg_mr(self.inner.raw(), buf.as_ptr().cast(), len, access) };
        let raw = match check_ptr("ibv_reg_mr", raw) {
            Ok(raw) => raw,
            Err(e) => {
                // SAFETY: allocated above with this layout, never registered.
                unsafe { dealloc(buf.as_ptr(), layout) };
                return Err(e);
            }
        };
        Ok(Mr {
            inner: Arc::new(MrInner {
                raw,
                id: ObjectId::next(),
                buf,
                layout,
                len,
                registered: true,
                pd: Arc::clone(&self.inner),
            }),
        })
    }
}

impl Mr {
    /// Length in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the region is empty (never: regions have at least one byte).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// Local key, used in scatter/gather entries.
    #[must_use]
    pub fn lkey(&self) -> u32 {
        self.inner.lkey()
    }

    /// Remote key, for peers' RDMA reads and writes.
    #[must_use]
    pub fn rkey(&self) -> u32 {
        self.inner.rkey()
    }

    /// The address and key a peer uses to reach byte `offset` of this
    /// region with RDMA read or write.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for an offset past the end of the region.
    pub fn remote(&self, offset: usize) -> Result<RemoteAddr> {
        check_range("memory region", offset, 0, self.inner.len)?;
        Ok(RemoteAddr {
            addr: self.inner.addr() + offset as u64,
            rkey: self.inner.rkey(),
        })
    }

    /// Copies `data` into the region at `offset`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] if the range does not fit.
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        check_range("memory region", offset, data.len(), self.inner.len)?;
        // SAFETY: offset..offset+len is inside the allocation (checked);
        // `data` is a distinct Rust borrow, so they do not overlap; no Rust
        // reference to the region exists (&mut self excludes other copies).
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.inner.buf.as_ptr().add(offset),
                data.len(),
            );
        }
        Ok(())
    }

    /// Copies bytes from the region at `offset` into `out`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] if the range does not fit.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        check_range("memory region", offset, out.len(), self.inner.len)?;
        // SAFETY: in bounds (checked); `out` is a distinct exclusive borrow;
        // Rust-side writers need &mut self, so none runs concurrently. The
        // device may write concurrently, which can only give stale bytes:
        // the copy goes through raw pointers, never a reference.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.inner.buf.as_ptr().add(offset),
                out.as_mut_ptr(),
                out.len(),
            );
        }
        Ok(())
    }

    /// Copies `range` out of the region into a new vector.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] if the range does not fit (or ends before it
    /// starts), checked before anything is allocated;
    /// [`Error::OutOfMemory`] when the copy cannot be allocated.
    pub fn to_vec(&self, range: Range<usize>) -> Result<Vec<u8>> {
        let len = range_len(&range, self.inner.len)?;
        let mut v = Vec::new();
        v.try_reserve_exact(len).map_err(|_| Error::OutOfMemory {
            what: "copy of a memory region",
            bytes: len,
        })?;
        v.resize(len, 0);
        self.read(range.start, &mut v)?;
        Ok(v)
    }

    /// Sets every byte of the region to `byte`.
    pub fn fill(&mut self, byte: u8) {
        // SAFETY: the whole allocation's first `len` bytes; &mut self
        // excludes Rust-side readers.
        unsafe { std::ptr::write_bytes(self.inner.buf.as_ptr(), byte, self.inner.len) };
    }

    /// The protection domain of the region.
    #[must_use]
    pub fn pd(&self) -> Pd {
        Pd {
            inner: Arc::clone(&self.inner.pd),
        }
    }
}

handle! {
    Mr(MrInner), what = "memory region",
    /// Deregisters the region now (`ibv_dereg_mr()`) and frees its memory.
    /// Fails while a queue pair or SRQ that was given work on it is alive.
    fn dereg = "ibv_dereg_mr"
}

impl Describe for MrInner {
    fn describe(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("len", &self.len)
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey());
    }
}

/// Where a peer's memory is: a virtual address and the remote key of the
/// region around it, as exchanged out of band for RDMA read and write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct RemoteAddr {
    /// Virtual address in the peer's region.
    pub addr: u64,
    /// The region's remote key.
    pub rkey: u32,
}

impl RemoteAddr {
    /// A peer's address and remote key, as exchanged out of band.
    #[must_use]
    pub fn new(addr: u64, rkey: u32) -> RemoteAddr {
        RemoteAddr { addr, rkey }
    }
}

/// The memory regions a QP or SRQ was given work on, kept registered until
/// the queue is destroyed: the device may use them until then.
pub(crate) struct HeldMrs {
    mrs: std::sync::Mutex<std::collections::HashMap<ObjectId, Arc<MrInner>>>,
    /// The id of the region held last: posting on it again, the steady state
    /// of a data path, takes no lock.
    last: std::sync::atomic::AtomicU64,
}

impl HeldMrs {
    pub(crate) fn new() -> Self {
        HeldMrs {
            mrs: std::sync::Mutex::new(std::collections::HashMap::new()),
            last: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Records that the queue was given work on `mr`.
    #[inline]
    pub(crate) fn hold(&self, mr: &Arc<MrInner>) {
        use std::sync::atomic::Ordering;
        let id = mr.id;
        // `last` is set only after the insert below, so a match means the
        // region is already held.
        if self.last.load(Ordering::Acquire) == id.get() {
            return;
        }
        self.mrs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(id)
            .or_insert_with(|| Arc::clone(mr));
        self.last.store(id.get(), Ordering::Release);
    }

    /// The queue could not be destroyed, so the device may still use these
    /// regions: keep them registered forever rather than free memory it can
    /// write.
    pub(crate) fn leak(&mut self) {
        let mrs = std::mem::take(self.mrs.get_mut().unwrap_or_else(|e| e.into_inner()));
        std::mem::forget(mrs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_region_no_allocation_can_hold_is_an_error_not_an_abort() {
        // Under isize::MAX, so Layout takes it; no allocator can give it.
        let huge = (isize::MAX as usize) / 2;
        assert!(matches!(
            alloc_region(huge),
            Err(Error::OutOfMemory { bytes, .. }) if bytes >= huge
        ));
        assert!(matches!(
            alloc_region(usize::MAX),
            Err(Error::TooLarge {
                given: usize::MAX,
                ..
            })
        ));
        assert!(matches!(alloc_region(0), Err(Error::InvalidArgument(_))));
        let (buf, layout) = alloc_region(1).unwrap();
        assert_eq!(layout.size(), ALIGN);
        // SAFETY: allocated just above with this layout.
        unsafe { dealloc(buf.as_ptr(), layout) };
    }

    #[test]
    fn access_flags_are_checked_before_registering() {
        use AccessFlags as A;
        for ok in [
            A::empty(),
            A::LOCAL_WRITE,
            A::REMOTE_READ,
            A::LOCAL_WRITE | A::REMOTE_WRITE,
            A::LOCAL_WRITE | A::REMOTE_ATOMIC | A::RELAXED_ORDERING,
            A::all(),
        ] {
            assert_eq!(mr_access(ok).unwrap(), ok.bits() as libc::c_int, "{ok:?}");
        }
        for bad in [
            A::REMOTE_WRITE,
            A::REMOTE_ATOMIC,
            A::REMOTE_READ | A::REMOTE_WRITE,
            A::from_bits_retain(1 << 30),
            A::from_bits_retain(u32::MAX),
        ] {
            assert!(
                matches!(mr_access(bad), Err(Error::InvalidArgument(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn ranges_are_checked_before_anything_is_allocated() {
        assert_eq!(range_len(&(0..4096), 4096).unwrap(), 4096);
        assert_eq!(range_len(&(10..10), 4096).unwrap(), 0);
        // A range that ends before it starts, as a caller may compute one.
        let (start, end) = (std::hint::black_box(20), std::hint::black_box(10));
        for bad in [0..usize::MAX, 4000..5000, 5000..5001, start..end] {
            assert!(
                matches!(range_len(&bad, 4096), Err(Error::OutOfBounds { .. })),
                "{bad:?}"
            );
        }
    }
}
