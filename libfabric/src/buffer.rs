//! Registered memory (`fi_mr_reg`) handed to the provider by ownership.
//!
//! A [`BufferPool`] allocates and registers one region cut into slots.
//! A [`Buffer`] is one slot, owned by the application: it can be read and
//! written like a `[u8]`. Posting it (`Endpoint::send`, `recv`, ...) moves it
//! into the provider, so no safe code can touch or free it while the
//! operation is in flight; the completion hands it back through
//! [`BufferPool::reclaim`], exactly once. A completion dropped without
//! being reclaimed (say, by a panic while it was handled) frees its slot
//! when dropped.

use crate::cq::{CompletionEntry, CqError};
use crate::domain::{Domain, DomainInner};
use crate::error::{Error, Result};
use crate::fid::OwnedFid;
use libfabric_sys::fabric as sys;
use std::alloc::{self, Layout};
use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};

const FREE: u8 = 0;
const OWNED: u8 = 1;
const IN_FLIGHT: u8 = 2;

/// The per-operation context libfabric gets: room for `FI_CONTEXT2`, which
/// providers that ask for it use as scratch space while the operation runs.
#[repr(C, align(16))]
struct SlotContext(UnsafeCell<sys::fi_context2>);

pub(crate) struct PoolInner {
    mr: OwnedFid<sys::fid_mr>,
    desc: *mut c_void,
    memory: *mut u8,
    layout: Layout,
    slot_size: usize,
    contexts: Box<[SlotContext]>,
    states: Box<[AtomicU8]>,
    free: Mutex<Vec<u32>>,
    domain: Arc<DomainInner>,
}

// SAFETY: the memory is only reached through Buffers, each of which owns one
// slot exclusively (slot states are atomics); the MR and domain are
// FI_THREAD_SAFE objects; the contexts are only touched by the provider while
// the slot is in flight.
unsafe impl Send for PoolInner {}
// SAFETY: as above.
unsafe impl Sync for PoolInner {}

/// `count` elements made by `make`, or [`Error::OutOfMemory`] instead of
/// aborting when they cannot be allocated.
fn try_collect<T>(
    what: &'static str,
    count: usize,
    make: impl FnMut(usize) -> T,
) -> Result<Box<[T]>> {
    let mut v = Vec::new();
    v.try_reserve_exact(count).map_err(|_| Error::OutOfMemory {
        what,
        bytes: count.saturating_mul(std::mem::size_of::<T>()),
    })?;
    v.extend((0..count).map(make));
    Ok(v.into_boxed_slice())
}

/// Every open pool, by the address range of its operation contexts, so that
/// a completion dropped without being reclaimed can still find its pool and
/// hand the buffer back ([`release_unreclaimed`]).
type Registry = BTreeMap<usize, (usize, Weak<PoolInner>)>;
static POOLS: Mutex<Registry> = Mutex::new(BTreeMap::new());

fn pools() -> std::sync::MutexGuard<'static, Registry> {
    POOLS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Called when a completion entry that still names an operation context is
/// dropped (for example while a panic unwinds through the code that read
/// it): the operation is over, so the buffer of the pool the context
/// belongs to is handed back and its slot freed. Contexts of no open pool
/// are ignored.
#[inline]
pub(crate) fn release_unreclaimed(context: *mut c_void) {
    if !context.is_null() {
        release_slow(context);
    }
}

#[cold]
fn release_slow(context: *mut c_void) {
    let addr = context as usize;
    // Look up under the lock, reclaim after releasing it: dropping the last
    // handle of the pool takes the lock again in PoolInner's Drop.
    let inner = match pools().range(..=addr).next_back() {
        Some((_, (end, weak))) if addr < *end => weak.upgrade(),
        _ => None,
    };
    if let Some(inner) = inner {
        drop(BufferPool { inner }.reclaim_context(context));
    }
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        pools().remove(&(self.contexts.as_ptr() as usize));
        // Deregister before freeing the memory it covers. Only reached when
        // no Buffer exists and no operation is in flight (each holds an Arc).
        let _ = self.mr.close();
        // SAFETY: allocated in BufferPool::new with this layout, freed once.
        unsafe { alloc::dealloc(self.memory, self.layout) };
    }
}

/// A registered memory region cut into equal slots. Cloning gives another
/// handle to the same pool.
///
/// ```
/// use libfabric::{info::{getinfo, Hints}, BufferPool, Domain, Fabric};
/// let list = getinfo(&Hints::new()?.provider("tcp")?.node("127.0.0.1")?)?;
/// let info = list.first().unwrap();
/// let domain = Domain::open(&Fabric::open(info)?, info)?;
/// let pool = BufferPool::new(&domain, 4, 4096)?;
/// let mut buf = pool.take().unwrap();
/// buf[..5].copy_from_slice(b"hello");
/// assert_eq!(buf.len(), 4096);
/// # Ok::<(), libfabric::Error>(())
/// ```
#[derive(Clone)]
pub struct BufferPool {
    pub(crate) inner: Arc<PoolInner>,
}

impl BufferPool {
    /// Allocates `count` slots of `slot_size` bytes (zeroed, page aligned)
    /// and registers them with `domain` (`fi_mr_reg`, local and remote
    /// access).
    #[doc(alias = "fi_mr_reg")]
    pub fn new(domain: &Domain, count: usize, slot_size: usize) -> Result<Self> {
        if count == 0 || slot_size == 0 || count > u32::MAX as usize {
            return Err(Error::InvalidArgument(format!(
                "a buffer pool needs 1..=2^32-1 slots of at least one byte (asked {count} x {slot_size})"
            )));
        }
        // The bookkeeping first, so that a failure leaves nothing to undo.
        let contexts = try_collect("buffer pool contexts", count, |_| {
            SlotContext(UnsafeCell::new(sys::fi_context2::default()))
        })?;
        let states = try_collect("buffer pool states", count, |_| AtomicU8::new(FREE))?;
        let free = try_collect("buffer pool free list", count, |i| (count - 1 - i) as u32)?;
        let too_large = |given| Error::TooLarge {
            what: "buffer pool bytes (slots x slot size, rounded up to 64)",
            limit: isize::MAX as usize - 4095,
            given,
        };
        let stride = slot_size
            .checked_next_multiple_of(64)
            .ok_or_else(|| too_large(usize::MAX))?;
        let total = stride
            .checked_mul(count)
            .ok_or_else(|| too_large(usize::MAX))?;
        // Layout refuses sizes that round up past isize::MAX.
        let layout = Layout::from_size_align(total, 4096).map_err(|_| too_large(total))?;
        // SAFETY: layout has a non-zero size (count and slot_size are at
        // least 1, so total >= 64).
        let memory = unsafe { alloc::alloc_zeroed(layout) };
        if memory.is_null() {
            return Err(Error::OutOfMemory {
                what: "buffer pool",
                bytes: total,
            });
        }
        let access = sys::FI_SEND
            | sys::FI_RECV
            | sys::FI_READ
            | sys::FI_WRITE
            | sys::FI_REMOTE_READ
            | sys::FI_REMOTE_WRITE;
        // Without FI_MR_PROV_KEY the application chooses the keys, and they
        // must be unique within the domain (fi_mr(3)).
        static NEXT_KEY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let requested_key = if domain.info().mr_mode() & sys::FI_MR_PROV_KEY != 0 {
            0
        } else {
            NEXT_KEY.fetch_add(1, Ordering::Relaxed)
        };
        let mut mr = ptr::null_mut();
        // SAFETY: fi_mr_reg(3): memory is valid for total bytes until the MR
        // is closed, which PoolInner's Drop does before freeing it.
        let ret = unsafe {
            sys::fi_mr_reg(
                domain.inner.fid.as_ptr(),
                memory.cast(),
                total,
                access,
                0,
                requested_key,
                0,
                &mut mr,
                ptr::null_mut(),
            )
        };
        let mr = match OwnedFid::opened("fi_mr_reg", ret, mr) {
            Ok(mr) => mr,
            Err(e) => {
                // SAFETY: allocated above with this layout, not registered.
                unsafe { alloc::dealloc(memory, layout) };
                return Err(e);
            }
        };
        // SAFETY: fi_mr_desc(3) on an open MR returns its local descriptor
        // (may be NULL), valid while the MR is open.
        let desc = unsafe { sys::fi_mr_desc(mr.as_ptr()) };
        let inner = Arc::new(PoolInner {
            mr,
            desc,
            memory,
            layout,
            slot_size: stride,
            contexts,
            states,
            free: Mutex::new(free.into_vec()),
            domain: domain.inner.clone(),
        });
        let base = inner.contexts.as_ptr() as usize;
        let end = base + count * std::mem::size_of::<SlotContext>();
        pools().insert(base, (end, Arc::downgrade(&inner)));
        Ok(BufferPool { inner })
    }

    /// A free slot, or `None` when all are taken or in flight.
    pub fn take(&self) -> Option<Buffer> {
        let slot = self
            .inner
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()?;
        self.inner.states[slot as usize].store(OWNED, Ordering::Relaxed);
        Some(Buffer {
            pool: self.inner.clone(),
            slot,
        })
    }

    /// Bytes per slot (the size asked for, rounded up to 64).
    pub fn slot_size(&self) -> usize {
        self.inner.slot_size
    }

    /// The memory region's key (`fi_mr_key`), for remote access.
    pub fn key(&self) -> u64 {
        // SAFETY: fi_mr_key(3) on an open MR.
        unsafe { sys::fi_mr_key(self.inner.mr.as_ptr()) }
    }

    fn slot_of(&self, context: *mut c_void) -> Option<usize> {
        let base = self.inner.contexts.as_ptr() as usize;
        let size = std::mem::size_of::<SlotContext>();
        let addr = context as usize;
        if addr < base || (addr - base) % size != 0 {
            return None;
        }
        let slot = (addr - base) / size;
        (slot < self.inner.contexts.len()).then_some(slot)
    }

    fn reclaim_context(&self, context: *mut c_void) -> Option<Buffer> {
        let slot = self.slot_of(context)?;
        self.inner.states[slot]
            .compare_exchange(IN_FLIGHT, OWNED, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        // SAFETY: posting leaked exactly one strong count of this pool's Arc
        // (the Buffer was forgotten); this takes it back, once, guarded by
        // the IN_FLIGHT -> OWNED transition above.
        let pool = unsafe { Arc::from_raw(Arc::as_ptr(&self.inner)) };
        Some(Buffer {
            pool,
            slot: slot as u32,
        })
    }

    /// The buffer a completion belongs to, handed back to the application.
    /// Takes the entry's context, so a second call returns `None`; entries
    /// of other pools or of operations without a buffer give `None`.
    pub fn reclaim<E: CompletionEntry>(&self, entry: &mut E) -> Option<Buffer> {
        let context = entry.context() as *mut c_void;
        self.slot_of(context)?;
        self.reclaim_context(entry.take_context())
    }

    /// [`reclaim`](Self::reclaim) for an error completion (for example a
    /// receive cancelled by a shutdown).
    pub fn reclaim_err(&self, err: &mut CqError<'_>) -> Option<Buffer> {
        let context = err.context() as *mut c_void;
        self.slot_of(context)?;
        self.reclaim_context(err.take_context())
    }
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("slots", &self.inner.contexts.len())
            .field("slot_size", &self.inner.slot_size)
            .finish()
    }
}

/// One slot of a [`BufferPool`], owned by the application until posted.
/// Dropping it returns the slot to the pool.
pub struct Buffer {
    pool: Arc<PoolInner>,
    slot: u32,
}

/// What the provider needs to post a buffer.
pub(crate) struct PostParts {
    pub(crate) addr: *mut c_void,
    pub(crate) desc: *mut c_void,
    pub(crate) context: *mut c_void,
}

impl Buffer {
    /// The slot's capacity.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.pool.slot_size
    }

    #[inline]
    fn base(&self) -> *mut u8 {
        // SAFETY: slot < count, so the offset stays inside the allocation.
        unsafe {
            self.pool
                .memory
                .add(self.slot as usize * self.pool.slot_size)
        }
    }

    /// Whether the buffer's memory is registered with this domain: its
    /// descriptor means nothing to another (verbs reads it as its own
    /// `struct vrb_mem_desc`).
    #[inline(always)]
    pub(crate) fn of_domain(&self, domain: &Arc<DomainInner>) -> bool {
        Arc::ptr_eq(&self.pool.domain, domain)
    }

    #[inline]
    pub(crate) fn post_parts(&self) -> PostParts {
        PostParts {
            addr: self.base().cast(),
            desc: self.pool.desc,
            context: self.pool.contexts[self.slot as usize].0.get().cast(),
        }
    }

    /// Called just before the operation is posted: from here the buffer
    /// belongs to the provider until its completion is reclaimed. It must
    /// be in flight before the post returns, because another thread may
    /// read the completion, and reclaim the buffer, before that.
    #[inline]
    pub(crate) fn into_flight(self) -> Posted {
        self.pool.states[self.slot as usize].store(IN_FLIGHT, Ordering::Release);
        let posted = Posted {
            pool: Arc::as_ptr(&self.pool),
            slot: self.slot,
        };
        // Keep the pool's strong count: the memory must outlive the
        // operation. BufferPool::reclaim takes it back.
        std::mem::forget(self);
        posted
    }
}

/// A buffer handed to the provider by [`Buffer::into_flight`], while the
/// post call that uses it runs.
pub(crate) struct Posted {
    pool: *const PoolInner,
    slot: u32,
}

impl Posted {
    /// The provider refused the operation: no completion will come, so the
    /// buffer is the caller's again.
    #[inline]
    pub(crate) fn refused(self) -> Buffer {
        // SAFETY: into_flight leaked one strong count of this pool's Arc;
        // a refused operation never completes, so no reclaim took it back.
        let pool = unsafe { Arc::from_raw(self.pool) };
        pool.states[self.slot as usize].store(OWNED, Ordering::Relaxed);
        Buffer {
            pool,
            slot: self.slot,
        }
    }
}

impl Deref for Buffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: this Buffer owns the slot exclusively while it exists (the
        // provider only has it between into_flight and reclaim).
        unsafe { std::slice::from_raw_parts(self.base(), self.pool.slot_size) }
    }
}

impl DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.base(), self.pool.slot_size) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        self.pool.states[self.slot as usize].store(FREE, Ordering::Relaxed);
        self.pool
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(self.slot);
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buffer")
            .field("slot", &self.slot)
            .field("len", &self.len())
            .finish()
    }
}
