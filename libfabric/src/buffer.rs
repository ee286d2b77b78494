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
//!
//! # Multi-receive
//! A buffer posted with [`Endpoint::recv_multi`](crate::Endpoint::recv_multi)
//! receives several messages. Each completion hands out a [`Message`]: a
//! read-only view of the bytes the provider reported for it, checked to lie
//! in the buffer, which keeps the pool's memory alive. The provider writes
//! the rest of the buffer meanwhile, so the `Buffer` itself comes back only
//! once the provider released it (see `MultiState`) and no `Message` of it
//! is held.
//!
//! # Buffers of a closed endpoint
//! Once an endpoint is closed its provider writes neither its posted
//! buffers nor completions for them any more, but several providers
//! (sockets, `tcp;ofi_rxm`, `udp;ofi_rxd`) drop what was posted without a
//! completion. So when an endpoint closes, every buffer still in flight on
//! it is handed back to its pool. A completion of such an operation may
//! still be queued (written before the close, or flushed by it), or read
//! and still held: each slot has two operation contexts, a slot handed
//! back this way is posted next with its other one, and a completion
//! naming the context it was taken back from is recognised as stale and
//! hands nothing out. The stale context is posted with again once no
//! completion naming it can surface any more: when each queue of the
//! endpoint was read empty after the close and the completions read
//! before that were released (see the `epochs` module). A slot whose two
//! contexts are both stale rests until then. Posting and completing stay
//! one atomic operation on the slot.
//!
//! The exception is a transfer the *peer* carries out: shm copies a send
//! or RMA write over its inject size, and an RMA read, from the peer's
//! process straight out of or into the initiator's buffer, whenever the
//! peer progresses, and the initiator's close does not stop it. On an
//! endpoint that may have posted to another process, the buffers of its
//! transmits (sends, RMA, atomics: a post does not tell those apart, so
//! that posting costs nothing more on any provider) in flight when it
//! closes are not handed back: each comes back with a completion written
//! before the close, or never (its pool's memory then stays allocated for
//! the life of the process). Its receives come back as on any endpoint:
//! only its own progress writes into them.

use crate::cq::{CompletionEntry, CqError};
use crate::domain::{Domain, DomainInner};
use crate::error::{Error, Result};
use crate::fid::OwnedFid;
use crate::mr::MrAccess;
use crate::threading::ThreadModel;
use libfabric_sys::fabric as sys;
use std::alloc::{self, Layout};
use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

// A slot's state word: its kind, the context of its last post, which
// contexts may still be named by a stale completion, and the endpoint its
// operation was posted on.
const KIND: u64 = 0b11;
/// In the pool's free list.
const FREE: u64 = 0;
/// Held by a `Buffer`.
const OWNED: u64 = 1;
/// Posted; the provider has it until its completion is reclaimed.
const IN_FLIGHT: u64 = 2;
/// Taken back from a closed endpoint while both of its contexts may still
/// be named by a stale completion: out of the free list until one of them
/// is settled (`StaleMarks::settle`).
const RESTING: u64 = 3;
/// The context (0 or 1) of the last post.
const PARITY: u64 = 1 << 2;
/// Context 0 (shifted by the parity: context 1) may still be named by a
/// completion of an operation taken back from a closed endpoint.
const STALE0: u64 = 1 << 3;
const STALE: u64 = STALE0 | (STALE0 << 1);
/// The operation in flight is a receive (else a send): its completion can
/// only come from the endpoint's receive queue.
const RECEIVE: u64 = 1 << 5;
/// The operation in flight is a multi-receive (`FI_MULTI_RECV`): its
/// completions hand out [`Message`]s, and the buffer comes back once the
/// provider released it and no message is held (see [`MultiState`]).
const MULTI: u64 = 1 << 6;
/// The endpoint id of an operation in flight, from this bit up.
const EP_SHIFT: u32 = 8;
/// Operation contexts per slot.
const CONTEXTS_PER_SLOT: usize = 2;

#[inline(always)]
fn parity(state: u64) -> usize {
    ((state & PARITY) >> 2) as usize
}

#[inline(always)]
fn stale_bit(parity: usize) -> u64 {
    STALE0 << parity
}

/// The per-operation context libfabric gets: room for `FI_CONTEXT2`, which
/// providers that ask for it use as scratch space while the operation runs.
#[repr(C, align(16))]
struct SlotContext(UnsafeCell<sys::fi_context2>);

/// The operation contexts and states of a pool's slots. While a stale
/// completion naming these contexts may be read, the [`StaleMarks`] of the
/// close keep them allocated, so that no newer pool is given their
/// addresses.
pub(crate) struct SlotTable {
    /// `CONTEXTS_PER_SLOT` per slot: slot `i` posts with context
    /// `2 * i + parity`.
    contexts: Box<[SlotContext]>,
    states: Box<[AtomicU64]>,
}

// SAFETY: the contexts are only touched by the provider while their slot
// is in flight; the states are atomics.
unsafe impl Send for SlotTable {}
// SAFETY: as above.
unsafe impl Sync for SlotTable {}

pub(crate) struct PoolInner {
    /// Taken by `Drop` (into a [`PoolRelease`]).
    mr: std::mem::ManuallyDrop<OwnedFid<sys::fid_mr>>,
    desc: *mut c_void,
    key: u64,
    memory: *mut u8,
    layout: Layout,
    slot_size: usize,
    table: Arc<SlotTable>,
    /// `table`'s slot states and contexts, where they lie: every post and
    /// completion reaches them from here, one load nearer than through
    /// `table` (see `states` and `contexts`).
    table_view: TableView,
    free: Mutex<Vec<u32>>,
    /// Per slot: the progress of a multi-receive posted with it.
    multi: Box<[Mutex<MultiState>]>,
    domain: Arc<DomainInner>,
}

/// What the completions of a multi-receive buffer reported so far. Every
/// change of a slot posted for multi-receive, and of its state word while
/// it is, is made under this lock.
///
/// The buffer comes back once the provider released it (a completion with
/// `FI_MULTI_RECV`, or a failed one) *and* every message it placed in the
/// buffer has completed. The release alone does not say so: rxm sets
/// `FI_MULTI_RECV` on the last message it *matched* (`rxm_finish_recv`,
/// `prov/rxm/src/rxm_cq.c` 159-183, the flag left only on the last entry
/// by `rxm_adjust_multi_recv`, 689-719 in 1.17), and writes a release of
/// its own, with no message, as soon as unexpected messages used the
/// buffer up when it was posted (`rxm_post_mrecv`,
/// `prov/rxm/src/rxm_msg.c` 99-150), while a rendezvous or segmented
/// message among them is still copied in; its completion comes later.
///
/// So the messages completed are counted: providers place each message
/// right after the one before, from the buffer's start (rxm 702-704 and
/// `rxm_msg.c` 130-131; sockets at its `used` mark, `sock_progress.c`
/// 1395-1421), and only while at least `min_free` bytes are left (the
/// remaining entry stays posted only then: rxm 697-700 and `rxm_msg.c`
/// 140, sockets 1284-1286, 1439-1441), so every message starts at most
/// `size - min_free` bytes in. When the completed messages fill
/// `[0, end)` exactly (`filled == end`) and `end > size - min_free`, no
/// message can be left: one still being written would start inside
/// `[0, end)` (filled by others) or past it (too far in). The endpoint's
/// minimum is fixed by its first multi-receive, so it cannot be lowered
/// under a buffer posted. A completion whose range is not inside the
/// buffer, or a failure that does not say where it landed, marks it
/// `broken`: it then comes back only when its endpoint closes.
#[derive(Default)]
struct MultiState {
    /// [`Message`]s alive.
    views: usize,
    /// The provider released the buffer.
    released: bool,
    /// A completion could not be placed in the buffer.
    broken: bool,
    /// Bytes of the completed messages.
    filled: usize,
    /// The furthest end of a completed message, from the buffer's start.
    end: usize,
    /// `FI_OPT_MIN_MULTI_RECV` of the endpoint it is posted on.
    min_free: usize,
    /// The provider is done with the buffer (`released`, and the messages
    /// tile it, or its endpoint closed): the slot is `OWNED` by its
    /// messages.
    done: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where a [`SlotTable`]'s arrays lie: the addresses and lengths of its
/// boxed slices, which never move or change length while the table lives.
#[derive(Clone, Copy)]
struct TableView {
    // Not null (as the slices' are): the compiler then knows a state
    // reached through it is not, and tests no `Option` of it.
    contexts: NonNull<SlotContext>,
    states: NonNull<AtomicU64>,
    slots: usize,
}

impl TableView {
    fn of(table: &SlotTable) -> Self {
        TableView {
            contexts: NonNull::from(&*table.contexts).cast(),
            states: NonNull::from(&*table.states).cast(),
            slots: table.states.len(),
        }
    }
}

impl PoolInner {
    /// The slots' state words (`table.states`).
    #[inline(always)]
    fn states(&self) -> &[AtomicU64] {
        // SAFETY: the view is of `self.table`'s boxed slice (`TableView::of`
        // in `BufferPool::new`), which `self` keeps alive and which never
        // moves or changes length; shared, as the slice is.
        unsafe {
            std::slice::from_raw_parts(self.table_view.states.as_ptr(), self.table_view.slots)
        }
    }

    /// The slots' operation contexts, `CONTEXTS_PER_SLOT` a slot
    /// (`table.contexts`).
    #[inline(always)]
    fn contexts(&self) -> &[SlotContext] {
        // SAFETY: as in `states`; there are CONTEXTS_PER_SLOT contexts a
        // slot (`BufferPool::new`).
        unsafe {
            std::slice::from_raw_parts(
                self.table_view.contexts.as_ptr(),
                self.table_view.slots * CONTEXTS_PER_SLOT,
            )
        }
    }
}

// SAFETY: the memory is only reached through Buffers, each of which owns one
// slot exclusively (slot states are atomics); the only provider call made
// through a pool after it is opened is the MR's fi_close in Drop, which
// for a domain of a serialized threading model is done on the domain's
// thread (`DomainInner::close_on_owner`), and is thread safe otherwise
// (FI_THREAD_SAFE); the contexts are only touched by the provider while
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
pub(crate) fn release_unreclaimed(context: *mut c_void, outcome: Outcome) {
    if !context.is_null() {
        release_slow(context, outcome);
    }
}

/// What [`BufferPool::complete_single`] found of a completion.
enum Completed {
    /// The buffer of the operation, handed back.
    Buffer(Buffer),
    /// Nothing to hand out (see `complete_single`).
    Nothing,
    /// The operation is a multi-receive: for `complete_multi`.
    Multi,
}

/// What a completion says of its operation, as a multi-receive needs it:
/// its flags, where its data landed, and whether it failed. A completion
/// whose members are unknown (a drained queue's) is the default: it places
/// nothing, so a multi-receive it names stays until its endpoint closes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Outcome {
    pub(crate) flags: u64,
    pub(crate) buf: usize,
    pub(crate) len: usize,
    pub(crate) failed: bool,
}

#[cold]
fn release_slow(context: *mut c_void, outcome: Outcome) {
    let addr = context as usize;
    // Look up under the lock, reclaim after releasing it: dropping the last
    // handle of the pool takes the lock again in PoolInner's Drop.
    let inner = match pools().range(..=addr).next_back() {
        Some((_, (end, weak))) if addr < *end => weak.upgrade(),
        _ => None,
    };
    if let Some(inner) = inner {
        drop(BufferPool { inner }.complete(context, outcome));
    }
}

/// Hands back to their pools the buffers still in flight on an endpoint
/// of `domain` that has just been closed (`fi_close` succeeded), and
/// returns the stale marks of their contexts, sends' and receives', for
/// the endpoint's transmit and receive queues to settle once neither can
/// hand out a completion naming one (`Epochs::await_empty_read`).
///
/// The provider writes none of these buffers once the endpoint is closed:
/// tcp halts and flushes it (`prov/tcp/src/tcpx_ep.c` 616-633 in 1.17),
/// sockets takes its contexts off its progress engine under the engine's
/// lock and frees them (`prov/sockets/src/sock_ep.c` 704-716,
/// `sock_progress.c` 2369-2374), rxm closes its connections' endpoints
/// before freeing its queues (`prov/rxm/src/rxm_ep.c` 1005-1010), rxd
/// closes its datagram endpoint first (`prov/rxd/src/rxd_ep.c` 675), shm
/// leaves its CQs' progress and unmaps its region before flushing its
/// receives (`prov/shm/src/smr_ep.c` 950-956), verbs destroys the QP
/// (`prov/verbs/src/verbs_ep.c` 552, 566).
///
/// All but shm's peers: a shm transfer over its inject size (and an RMA
/// read) is carried out by the peer, which copies into or out of the
/// buffer from its own process whenever it progresses, whether or not
/// this endpoint is still open (see `quirks::peers_copy_from_their_side`).
/// With `keep_transmits` (the endpoint may have posted to a peer of another
/// process) its transmits are left in flight, whatever their length (a
/// post does not record it): their buffers come back only with a
/// completion written before the close (the peer was done), or never,
/// keeping their pools' memory allocated and out of the application's
/// hands for the life of the process.
///
/// Cold: one pass over the slots of the domain's pools.
pub(crate) fn reclaim_closed_endpoint(
    domain: &Arc<DomainInner>,
    ep: u64,
    keep_transmits: bool,
) -> [Option<Arc<StaleMarks>>; 2] {
    let live = live_pools_of(domain);
    // The registry's lock is released: dropping the last handle of a pool
    // below takes it again.
    let mut pools = [Vec::new(), Vec::new()];
    for pool in live {
        let marked = (BufferPool {
            inner: pool.clone(),
        })
        .reclaim_of_endpoint(ep, keep_transmits);
        for (direction, marks) in marked.into_iter().enumerate() {
            if !marks.is_empty() {
                pools[direction].push(PoolMarks {
                    pool: Arc::downgrade(&pool),
                    table: pool.table.clone(),
                    marks,
                });
            }
        }
    }
    pools.map(|pools| {
        (!pools.is_empty()).then(|| {
            Arc::new(StaleMarks {
                pools,
                settled: AtomicBool::new(false),
            })
        })
    })
}

/// The contexts an endpoint close took back in one direction, stale until
/// the endpoint's queue of that direction is done with them (see
/// [`reclaim_closed_endpoint`]).
/// Holds their slot tables, so that no newer pool is given the contexts'
/// addresses while a completion naming one may be read, or held: marks
/// dropped unsettled leak their tables for good (see `Drop`).
pub(crate) struct StaleMarks {
    pools: Vec<PoolMarks>,
    /// `settle` ran: no completion naming these contexts can surface.
    settled: AtomicBool,
}

/// The marks of one pool: the pool (if still open), its table, and the
/// marked (slot, context parity) pairs.
struct PoolMarks {
    pool: Weak<PoolInner>,
    table: Arc<SlotTable>,
    marks: Vec<(u32, u8)>,
}

impl StaleMarks {
    /// The queue can no longer hand out a completion naming these
    /// contexts: they are posted with again, and slots resting on them go
    /// back to their pools. Each mark is cleared once, whoever calls.
    pub(crate) fn settle(&self) {
        self.settled.store(true, Ordering::Release);
        for PoolMarks { pool, table, marks } in &self.pools {
            let pool = pool.upgrade();
            for &(slot, parity) in marks {
                let state = &table.states[slot as usize];
                let bit = stale_bit(parity as usize);
                let Ok(before) = state.fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                    if s & bit == 0 {
                        return None;
                    }
                    let s = s & !bit;
                    Some(if s & KIND == RESTING { s & !KIND } else { s })
                }) else {
                    continue;
                };
                if before & KIND == RESTING {
                    if let Some(pool) = &pool {
                        pool.free
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(slot);
                    }
                }
            }
        }
    }
}

/// Marks dropped unsettled belong to a queue that closed while a batch it
/// read was still held: a [`Completions`](crate::cq::Completions) guard
/// leaked with `std::mem::forget`, whose entries still name these
/// contexts and hand them back when they are dropped
/// ([`release_unreclaimed`] finds a pool by the address of its contexts).
/// Their tables are kept for the life of the process ([`RETAINED`]), so
/// that no later pool is given those addresses and such an entry finds no
/// pool: what a leaked guard named stays leaked, and nothing is handed out
/// twice.
impl Drop for StaleMarks {
    fn drop(&mut self) {
        if !*self.settled.get_mut() {
            let mut retained = RETAINED.lock().unwrap_or_else(|e| e.into_inner());
            retained.extend(self.pools.iter().map(|marks| marks.table.clone()));
        }
    }
}

/// The slot tables of marks dropped unsettled (see `StaleMarks`' `Drop`),
/// never freed.
static RETAINED: Mutex<Vec<Arc<SlotTable>>> = Mutex::new(Vec::new());

/// The live pools of `domain`. The registry's lock is held only while the
/// pools are upgraded: a pool of another domain whose last handle another
/// thread dropped meanwhile is dropped here, after the lock is released
/// (its `Drop` takes the lock again).
fn live_pools_of(domain: &Arc<DomainInner>) -> Vec<Arc<PoolInner>> {
    let all: Vec<Arc<PoolInner>> = pools()
        .values()
        .filter_map(|(_, weak)| weak.upgrade())
        .collect();
    all.into_iter()
        .filter(|pool| Arc::ptr_eq(&pool.domain, domain))
        .collect()
}

/// The operation contexts of the buffers in flight on endpoint `ep` of
/// `domain`, for `fi_cancel` before the endpoint closes. Cold.
pub(crate) fn contexts_in_flight(domain: &Arc<DomainInner>, ep: u64) -> Vec<*mut c_void> {
    let live = live_pools_of(domain);
    let mut contexts = Vec::new();
    for pool in &live {
        for (slot, state) in pool.states().iter().enumerate() {
            let s = state.load(Ordering::Acquire);
            if s & KIND == IN_FLIGHT && s >> EP_SHIFT == ep {
                let index = slot * CONTEXTS_PER_SLOT + parity(s);
                contexts.push(pool.contexts()[index].0.get().cast());
            }
        }
    }
    contexts
}

impl Drop for PoolInner {
    fn drop(&mut self) {
        pools().remove(&(self.contexts().as_ptr() as usize));
        // Only reached when no Buffer exists and no operation is in flight
        // (each holds an Arc). The last handle may go on any thread (a
        // Buffer is Send, and the registry lends pools to other threads
        // for a moment): for a serialized domain the close is parked for
        // the domain's thread unless this is it.
        let release = PoolRelease {
            // SAFETY: taken once, here; the field is not used again.
            mr: unsafe { std::mem::ManuallyDrop::take(&mut self.mr) },
            memory: Some(PoolMemory {
                memory: self.memory,
                layout: self.layout,
            }),
        };
        self.domain
            .close_on_owner(move |domain| release.release(domain));
    }
}

/// What a pool gives up when its last handle goes: its MR, closed before
/// the memory it covers is freed.
struct PoolRelease {
    mr: OwnedFid<sys::fid_mr>,
    /// Taken by `release`.
    memory: Option<PoolMemory>,
}

impl PoolRelease {
    /// Closes the MR, then frees the memory; memory that peers may read
    /// is parked in `domain` until the endpoints open now have closed (a
    /// read that passed the key check before the close may still be
    /// answered from it: `quirks::lends_sent_memory_to_peers`). A failed
    /// close leaves the MR registered: the memory is leaked rather than
    /// freed under it.
    fn release(mut self, domain: &DomainInner) {
        let Some(memory) = self.memory.take() else {
            return;
        };
        if self.mr.close().is_err() {
            std::mem::forget(memory);
            return;
        }
        if !crate::quirks::lends_sent_memory_to_peers(domain.info.provider()) {
            drop(memory);
            return;
        }
        let mut retired = domain.retired();
        let now = retired.park(Box::new(memory));
        drop(retired);
        // No endpoint of the domain was open: nothing reaches the memory.
        drop(now);
    }
}

impl Drop for PoolRelease {
    /// Only reached without `release` if a parked close is dropped unrun
    /// (a panic in another parked close): the MR closes with its field,
    /// but a peer's read may still reach the memory, so it is leaked.
    fn drop(&mut self) {
        if let Some(memory) = self.memory.take() {
            std::mem::forget(memory);
        }
    }
}

/// A pool's memory, freed when dropped: only once its MR is closed, and
/// no peer's read can still reach it.
struct PoolMemory {
    memory: *mut u8,
    layout: Layout,
}

// SAFETY: it owns the allocation (nothing else reaches it any more): any
// thread may free it.
unsafe impl Send for PoolMemory {}

impl Drop for PoolMemory {
    fn drop(&mut self) {
        // SAFETY: allocated in BufferPool::new with this layout, freed
        // once (the value is dropped once).
        unsafe { alloc::dealloc(self.memory, self.layout) };
    }
}

/// A registered memory region cut into equal slots. Cloning gives another
/// handle to the same pool.
///
/// ```
/// use libfabric::{info::{getinfo, Hints}, BufferPool, Domain, Fabric};
/// let list = getinfo(&Hints::new().provider("tcp").node("127.0.0.1"))?;
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
    /// and registers them with `domain` (`fi_mr_reg`) for local use only
    /// ([`MrAccess::LOCAL`]: sends, receives, and the local side of RMA
    /// reads and writes). Peers cannot write a pool's memory with RMA
    /// ([`with_access`](Self::with_access) takes local access flags only):
    /// where a provider would register it for peers' writes whatever is
    /// asked, the crate refuses (verbs with its registration cache on;
    /// rxm with its write rendezvous, see
    /// [`Domain::open_model`](crate::Domain::open_model)). rxm's default
    /// read rendezvous registers memory given for sends for peers' reads,
    /// so on rxm a peer that knows the pool's key can read its memory (see
    /// the [`mr`](crate::mr) module); there, a pool keeps its memory after
    /// its last handle goes until every endpoint of
    /// the domain open then has closed, since a read that passed the key
    /// check may still be answered from it
    /// ([`Domain::retained_regions`](crate::Domain::retained_regions)
    /// counts it).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no slots, more than 2^32-1, or a
    /// `slot_size` of 0; [`Error::TooLarge`] when the pool's bytes overflow;
    /// [`Error::OutOfMemory`] when an allocation fails;
    /// [`Error::Unsupported`] on verbs with its registration cache on (as
    /// [`MemoryRegion::register`](crate::mr::MemoryRegion::register)); the
    /// errors of `MemoryRegion::register` when the registration fails.
    #[doc(alias = "fi_mr_reg")]
    pub fn new<T: ThreadModel>(domain: &Domain<T>, count: usize, slot_size: usize) -> Result<Self> {
        Self::with_access(domain, count, slot_size, MrAccess::LOCAL)
    }

    /// [`new`](Self::new) registering the pool for `access`, a subset of
    /// [`MrAccess::LOCAL`] (for example `MrAccess::SEND` only).
    ///
    /// Remote access is refused: a pool's buffers are lent as `&[u8]` and
    /// `&mut [u8]`, which a peer's RMA would race with, and its memory is
    /// freed when the pool drops, while an RMA that passed the key check
    /// may still be copying (see the [`mr`](crate::mr) module). Memory
    /// peers reach is a [`MemoryRegion`](crate::mr::MemoryRegion).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `access` with
    /// [`MrAccess::REMOTE_READ`] or [`MrAccess::REMOTE_WRITE`]; as
    /// [`new`](Self::new).
    pub fn with_access<T: ThreadModel>(
        domain: &Domain<T>,
        count: usize,
        slot_size: usize,
        access: MrAccess,
    ) -> Result<Self> {
        if !MrAccess::LOCAL.contains(access) {
            return Err(Error::InvalidArgument(
                "a buffer pool is registered for local access only (MrAccess::LOCAL): peers' \
                 RMA would race with the buffers it lends as slices; register memory peers \
                 reach as a MemoryRegion"
                    .into(),
            ));
        }
        crate::mr::check_uncached(domain.inner.info.provider())?;
        if count == 0 || slot_size == 0 || count > u32::MAX as usize {
            return Err(Error::InvalidArgument(
                format!(
                    "a buffer pool needs 1..=2^32-1 slots of at least one byte \
                     (asked {count} x {slot_size})"
                )
                .into(),
            ));
        }
        domain.inner.run_deferred();
        // The bookkeeping first, so that a failure leaves nothing to undo.
        let contexts = try_collect("buffer pool contexts", count * CONTEXTS_PER_SLOT, |_| {
            SlotContext(UnsafeCell::new(sys::fi_context2::default()))
        })?;
        let states = try_collect("buffer pool states", count, |_| AtomicU64::new(FREE))?;
        let free = try_collect("buffer pool free list", count, |i| (count - 1 - i) as u32)?;
        let multi = try_collect("buffer pool multi-receive states", count, |_| {
            Mutex::new(MultiState::default())
        })?;
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
        // SAFETY: memory is valid for total bytes until the MR is closed,
        // which PoolInner's Drop does before freeing it.
        let reg = match unsafe { crate::mr::register(&domain.inner, memory, total, access) } {
            Ok(reg) => reg,
            Err(e) => {
                // SAFETY: allocated above with this layout, not registered.
                unsafe { alloc::dealloc(memory, layout) };
                return Err(e);
            }
        };
        let (mr, desc, key) = (reg.mr, reg.desc, reg.key);
        let table = Arc::new(SlotTable { contexts, states });
        let inner = Arc::new(PoolInner {
            mr: std::mem::ManuallyDrop::new(mr),
            desc,
            key,
            memory,
            layout,
            slot_size: stride,
            table_view: TableView::of(&table),
            table,
            free: Mutex::new(free.into_vec()),
            multi,
            domain: domain.inner.clone(),
        });
        let base = inner.contexts().as_ptr() as usize;
        let end = base + std::mem::size_of_val(inner.contexts());
        pools().insert(base, (end, Arc::downgrade(&inner)));
        Ok(BufferPool { inner })
    }

    /// A free slot, or `None` when all are taken or in flight.
    #[must_use]
    pub fn take(&self) -> Option<Buffer> {
        let slot = self
            .inner
            .free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()?;
        // FREE is 0: this sets the kind and keeps the other bits.
        self.inner.states()[slot as usize].fetch_or(OWNED, Ordering::Relaxed);
        Some(Buffer {
            pool: self.inner.clone(),
            slot,
        })
    }

    /// Bytes per slot (the size asked for, rounded up to 64).
    #[must_use]
    pub fn slot_size(&self) -> usize {
        self.inner.slot_size
    }

    /// The memory region's key (`fi_mr_key`), for remote access.
    #[must_use]
    pub fn key(&self) -> u64 {
        self.inner.key
    }

    /// The slot and context parity an operation context names, if it is
    /// one of the pool's contexts.
    ///
    /// One comparison checks the range and the alignment. The offset of
    /// the context from the first one (wrapping: an address below it gives
    /// a large offset) is rotated right by k bits, where 2^k is the
    /// contexts' size (64 bytes on 64-bit targets):
    /// - for a multiple of 2^k, the result is the offset divided by 2^k,
    ///   below `contexts.len()` exactly when the offset is that of one of
    ///   the pool's contexts;
    /// - otherwise its low bits, rotated in at the top, make it at least
    ///   2^(N-k) on an N-bit target, and its slot (half of it) at least
    ///   2^(N-k-1). The contexts' memory, 2^(k+1) bytes a state, fits in
    ///   `isize`, so there are fewer states than that.
    ///
    /// There are exactly `CONTEXTS_PER_SLOT` contexts per state, so the
    /// slot is below the count of states only for one of the pool's
    /// contexts, and indexing the states with it needs no second check.
    #[inline(always)]
    fn slot_of(&self, context: *mut c_void) -> Option<(usize, usize)> {
        const SIZE: usize = std::mem::size_of::<SlotContext>();
        const { assert!(SIZE.is_power_of_two() && CONTEXTS_PER_SLOT == 2) };
        let index = (context as usize)
            .wrapping_sub(self.inner.contexts().as_ptr() as usize)
            .rotate_right(SIZE.trailing_zeros());
        let slot = index / CONTEXTS_PER_SLOT;
        (slot < self.inner.states().len()).then_some((slot, index % CONTEXTS_PER_SLOT))
    }

    #[inline]
    fn base_of(&self, slot: usize) -> *mut u8 {
        // SAFETY: slot < count, so the offset stays inside the allocation.
        unsafe { self.inner.memory.add(slot * self.inner.slot_size) }
    }

    /// What the completion of the operation posted with `context` hands
    /// back: the buffer of a receive or send, the message of a
    /// multi-receive (and its buffer, when the provider is done with it
    /// and no message is held).
    fn complete(&self, context: *mut c_void, outcome: Outcome) -> Reclaimed {
        let Some((slot, parity)) = self.slot_of(context) else {
            return Reclaimed::default();
        };
        self.complete_slot(&self.inner.states()[slot], slot, parity, || outcome)
    }

    /// [`complete`](Self::complete) of the operation posted on `slot`
    /// (checked: `slot_of`), whose state word is `state`, with context
    /// `parity`; `outcome` is asked for only by a multi-receive's.
    #[inline(always)]
    fn complete_slot(
        &self,
        state: &AtomicU64,
        slot: usize,
        parity: usize,
        outcome: impl FnOnce() -> Outcome,
    ) -> Reclaimed {
        match self.complete_single(state, slot, parity) {
            Completed::Buffer(buffer) => Reclaimed {
                message: None,
                buffer: Some(buffer),
            },
            Completed::Nothing => Reclaimed::default(),
            Completed::Multi => self.complete_multi(slot, parity, outcome()),
        }
    }

    /// The completion of the operation posted on `slot` with context
    /// `parity` (see [`complete_slot`](Self::complete_slot)), as far as
    /// it concerns a single buffer: the buffer back, nothing, or that it
    /// is a multi-receive's (for `complete_multi`).
    #[inline(always)]
    fn complete_single(&self, state: &AtomicU64, slot: usize, parity: usize) -> Completed {
        // In flight, posted with this context: kind and parity at once.
        let posted = IN_FLIGHT | ((parity as u64) << 2);
        let mut current = state.load(Ordering::Acquire);
        loop {
            // A single buffer's, posted with this context: one test, the
            // others only when it fails.
            if current & (KIND | PARITY | MULTI) != posted {
                if current & (KIND | PARITY) != posted {
                    // Reclaimed already, never posted with this context,
                    // or a completion of an operation already taken back
                    // from its closed endpoint (the context is stale):
                    // nothing to hand out. A stale context is posted with
                    // again only once no completion naming it can surface
                    // (StaleMarks).
                    return Completed::Nothing;
                }
                return Completed::Multi;
            }
            // The operation posted with this context: its buffer.
            let owned = (current & !KIND) | OWNED;
            match state.compare_exchange_weak(current, owned, Ordering::Acquire, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(now) => current = now,
            }
        }
        // SAFETY: posting leaked exactly one strong count of this pool's Arc
        // (the Buffer was forgotten); this takes it back, once, guarded by
        // the IN_FLIGHT -> OWNED transition above.
        let pool = unsafe { Arc::from_raw(Arc::as_ptr(&self.inner)) };
        Completed::Buffer(Buffer {
            pool,
            slot: slot as u32,
        })
    }

    /// The slot (its state word, index and context parity) a completion
    /// entry names, its context taken; `None` for an entry of no slot of
    /// this pool, whose context is left.
    #[inline(always)]
    fn take_slot<E: CompletionEntry>(&self, entry: &E) -> Option<(&AtomicU64, usize, usize)> {
        let (slot, parity) = self.slot_of(entry.context() as *mut c_void)?;
        // Indexed before the context is taken: the store to the entry
        // would otherwise have the states' length loaded again.
        let state = &self.inner.states()[slot];
        entry.take_context(crate::wait::sealed::Token(()));
        Some((state, slot, parity))
    }

    /// A completion of the multi-receive posted on `slot` with context
    /// `parity` (see [`MultiState`]). Out of line: the common completion,
    /// of a single buffer, then saves no registers for it.
    #[inline(never)]
    fn complete_multi(&self, slot: usize, parity: usize, o: Outcome) -> Reclaimed {
        let mut m = lock(&self.inner.multi[slot]);
        let state = &self.inner.states()[slot];
        let s = state.load(Ordering::Acquire);
        // Again under the lock: its endpoint may have closed meanwhile.
        if s & (KIND | MULTI) != IN_FLIGHT | MULTI || self::parity(s) != parity {
            return Reclaimed::default();
        }
        let size = self.inner.slot_size;
        // Where the provider says the message landed, as an offset into
        // the buffer, never trusted: it must lie inside the buffer.
        let offset = o
            .buf
            .checked_sub(self.base_of(slot) as usize)
            .filter(|&off| o.buf != 0 && off <= size);
        let mut message = None;
        if o.failed {
            // A failed multi-receive is over for the provider: cancelled
            // (its endpoint closing), or truncated, which only the last
            // message can be (rxm: `rxm_finish_recv` releases the entry
            // after `rxm_cq_write_error_trunc`, `rxm_cq.c` 159-166, 180;
            // sockets sets `FI_MULTI_RECV` on it, `sock_progress.c`
            // 1439-1450). At most the rest of the buffer was written.
            m.released = true;
            match offset {
                Some(off) => {
                    m.filled = m.filled.saturating_add(size - off);
                    m.end = size;
                }
                None => m.broken = true,
            }
        } else if o.flags & sys::FI_RECV == 0 {
            // A release of its own, no message (fi_cq(3): a completion
            // with FI_MULTI_RECV and no FI_RECV); rxm writes one with no
            // buf and no len (`rxm_msg.c` 141-144).
        } else {
            // An empty message touches no byte, wherever it says it
            // landed (sockets leaves `buf` NULL for one: it is set at the
            // first byte copied, `prov/sockets/src/sock_progress.c`
            // 1416-1417 in 1.17).
            let range = if o.len == 0 {
                let off = offset.unwrap_or(0);
                Some((off, off))
            } else {
                offset.and_then(|off| Some((off, off.checked_add(o.len)?)))
            };
            match range {
                Some((off, end)) if end <= size => {
                    m.filled = m.filled.saturating_add(o.len);
                    if o.len > 0 {
                        // An empty message's place says nothing.
                        m.end = m.end.max(end);
                    }
                    m.views += 1;
                    message = Some(Message {
                        pool: self.inner.clone(),
                        slot: slot as u32,
                        offset: off,
                        len: o.len,
                    });
                }
                _ => m.broken = true,
            }
        }
        if !o.failed && o.flags & sys::FI_MULTI_RECV != 0 {
            m.released = true;
        }
        let mut buffer = None;
        // `size > min_free` (checked at the post), so `size - min_free`
        // does not wrap.
        if m.released && !m.broken && m.filled == m.end && m.end > size - m.min_free {
            // The provider is done with the buffer: its messages own it.
            m.done = true;
            let _ = state.fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                Some((s & (STALE | PARITY)) | OWNED)
            });
            // SAFETY: posting leaked one strong count of this pool's Arc;
            // the IN_FLIGHT -> OWNED transition above, under the slot's
            // lock, takes it back once.
            let pool = unsafe { Arc::from_raw(Arc::as_ptr(&self.inner)) };
            if m.views == 0 {
                m.done = false;
                buffer = Some(Buffer {
                    pool,
                    slot: slot as u32,
                });
            }
        }
        Reclaimed { message, buffer }
    }

    /// Takes back every slot in flight on the closed endpoint `ep`
    /// (see [`reclaim_closed_endpoint`]); returns the (slot, context
    /// parity) pairs it marked stale, sends' then receives'.
    /// With `keep_transmits`, its transmits (every operation but
    /// receives) are left in flight: their buffers (and so the pool) come
    /// back only with a completion written before the close, or never.
    #[cold]
    fn reclaim_of_endpoint(&self, ep: u64, keep_transmits: bool) -> [Vec<(u32, u8)>; 2] {
        let mut marked = [Vec::new(), Vec::new()];
        for (slot, state) in self.inner.states().iter().enumerate() {
            let of_ep = |s: u64| {
                s & KIND == IN_FLIGHT
                    && s >> EP_SHIFT == ep
                    && !(keep_transmits && s & RECEIVE == 0)
            };
            if !of_ep(state.load(Ordering::Acquire)) {
                continue;
            }
            // The messages of a multi-receive still held keep its slot.
            let mut multi = lock(&self.inner.multi[slot]);
            let views = multi.views;
            // Its context may still be named by a completion written
            // before the close: mark it, and post next with the other one;
            // rest the slot if that one is marked too.
            let Ok(before) = state.fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                if !of_ep(s) {
                    return None;
                }
                let s = s | stale_bit(parity(s));
                let kind = if views > 0 {
                    OWNED
                } else if s & STALE == STALE {
                    RESTING
                } else {
                    FREE
                };
                Some((s & !KIND & !RECEIVE & !MULTI & ((1 << EP_SHIFT) - 1)) | kind)
            }) else {
                continue;
            };
            marked[usize::from(before & RECEIVE != 0)].push((slot as u32, parity(before) as u8));
            if views > 0 {
                // Handed back when its last message drops.
                multi.done = true;
            } else if before & stale_bit(1 - parity(before)) == 0 {
                self.inner
                    .free
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(slot as u32);
            }
            // SAFETY: posting leaked one strong count of this pool's Arc
            // for this operation; the IN_FLIGHT -> FREE/RESTING transition
            // above gives it back once (no completion can take it now), and
            // `self` holds another count, so the pool is not freed here.
            unsafe { Arc::decrement_strong_count(Arc::as_ptr(&self.inner)) };
        }
        marked
    }

    /// The buffer a completion belongs to, handed back to the application.
    /// Takes the entry's context, so a second call returns `None`; entries
    /// of other pools or of operations without a buffer give `None`.
    ///
    /// A completion of a multi-receive ([`Endpoint::recv_multi`]) hands
    /// out a [`Message`], which this drops: take it with
    /// [`reclaim_received`](Self::reclaim_received). This returns the
    /// buffer when that completion gives it back.
    ///
    /// [`Endpoint::recv_multi`]: crate::Endpoint::recv_multi
    #[inline(always)]
    pub fn reclaim<E: CompletionEntry>(&self, entry: &E) -> Option<Buffer> {
        let (state, slot, parity) = self.take_slot(entry)?;
        match self.complete_single(state, slot, parity) {
            Completed::Buffer(buffer) => Some(buffer),
            Completed::Nothing => None,
            Completed::Multi => {
                let outcome = entry.members(crate::wait::sealed::Token(())).outcome();
                self.complete_multi(slot, parity, outcome).buffer
            }
        }
    }

    /// What a completion hands back: the buffer of a send or receive; the
    /// [`Message`] of a multi-receive, and its buffer once the provider
    /// released it and no message of it is held. Takes the entry's
    /// context, so a second call returns nothing; entries of other pools
    /// or of operations without a buffer give nothing.
    ///
    /// ```
    /// # use libfabric::{cq::{Data, DataEntry}, BufferPool};
    /// fn each(pool: &BufferPool, entry: &DataEntry) {
    ///     let back = pool.reclaim_received(entry);
    ///     if let Some(message) = &back.message {
    ///         println!("{} bytes at offset {}", message.len(), message.offset());
    ///     }
    ///     if let Some(buffer) = back.buffer {
    ///         drop(buffer); // or post it again
    ///     }
    /// }
    /// ```
    #[inline]
    pub fn reclaim_received<E: CompletionEntry>(&self, entry: &E) -> Reclaimed {
        let Some((state, slot, parity)) = self.take_slot(entry) else {
            return Reclaimed::default();
        };
        self.complete_slot(state, slot, parity, || {
            entry.members(crate::wait::sealed::Token(())).outcome()
        })
    }

    /// [`reclaim`](Self::reclaim) for an error completion (for example a
    /// receive cancelled by a shutdown). An error completion of a
    /// multi-receive ends it: its buffer comes back once no message of it
    /// is held.
    pub fn reclaim_err(&self, err: &mut CqError<'_>) -> Option<Buffer> {
        let (slot, parity) = self.slot_of(err.context() as *mut c_void)?;
        let state = &self.inner.states()[slot];
        err.take_context();
        let outcome = err.outcome();
        self.complete_slot(state, slot, parity, || outcome).buffer
    }
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("slots", &self.inner.states().len())
            .field("slot_size", &self.inner.slot_size)
            .finish()
    }
}

/// One slot of a [`BufferPool`], owned by the application until posted.
/// Dropping it returns the slot to the pool.
pub struct Buffer {
    pool: Arc<PoolInner>,
    /// Below the pool's slot count, `pool.states().len()`: a buffer is
    /// made only of a slot the free list held (`BufferPool::take`, which
    /// holds `0..count`) or a completion named (checked by `slot_of`), or
    /// of another buffer's or message's slot. `base` and
    /// `into_flight_as` rely on it.
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
    #[must_use]
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

    /// Called just before the operation is posted on endpoint `ep`: from
    /// here the buffer belongs to the provider until its completion is
    /// reclaimed, or the endpoint closes. It must be in flight before the
    /// post returns, because another thread may read the completion, and
    /// reclaim the buffer, before that. The context is one not awaiting a
    /// stale completion (a `Buffer` exists only for a slot with one).
    #[inline]
    pub(crate) fn into_flight(self, ep: u64, receive: bool) -> (Posted, PostParts) {
        self.into_flight_as(ep, if receive { RECEIVE } else { 0 })
    }

    /// [`into_flight`](Self::into_flight) of a multi-receive: its
    /// completions are counted afresh (see [`MultiState`]).
    pub(crate) fn into_flight_multi(self, ep: u64, min_free: usize) -> (Posted, PostParts) {
        let pool = self.pool.clone();
        let mut multi = lock(&pool.multi[self.slot as usize]);
        // A Buffer exists only when no message of the slot is held.
        *multi = MultiState {
            min_free,
            ..MultiState::default()
        };
        self.into_flight_as(ep, RECEIVE | MULTI)
    }

    #[inline(always)]
    fn into_flight_as(self, ep: u64, direction: u64) -> (Posted, PostParts) {
        // Never dropped from here: posting keeps the pool's strong count
        // (the memory must outlive the operation; BufferPool::reclaim
        // takes it back). A buffer that a panic could still drop was kept
        // in memory for that unwinding path: two stores and two loads on
        // every post.
        let this = std::mem::ManuallyDrop::new(self);
        let slot = this.slot as usize;
        // SAFETY: slot < states.len() (the field's invariant). Unchecked:
        // the bound check was three instructions on every post.
        let state = unsafe { this.pool.states().get_unchecked(slot) };
        // While a Buffer owns the slot, its word changes only by a stale
        // mark cleared (`StaleMarks::settle`; marks are set only on slots
        // in flight): every other bit read here is still there at the
        // write. So one exclusive-or turns those bits into the post's and
        // leaves the marks as they are then, with no loop (a compare and
        // exchange loop cost 3 instructions more on every post).
        let current = state.load(Ordering::Relaxed);
        // The context not marked stale: a Buffer exists only for a slot
        // with one, and a mark cleared meanwhile leaves both free.
        let parity = usize::from(current & STALE0 != 0);
        let next = IN_FLIGHT | direction | ((parity as u64) << 2) | (ep << EP_SHIFT);
        state.fetch_xor((current ^ next) & !STALE, Ordering::Release);
        // SAFETY: slot < states.len() and parity < CONTEXTS_PER_SLOT, so
        // the index is below contexts.len(), CONTEXTS_PER_SLOT times
        // states.len() (BufferPool::new).
        let context = unsafe {
            this.pool
                .contexts()
                .get_unchecked(slot * CONTEXTS_PER_SLOT + parity)
        };
        let parts = PostParts {
            addr: this.base().cast(),
            desc: this.pool.desc,
            context: context.0.get().cast(),
        };
        let posted = Posted {
            pool: Arc::as_ptr(&this.pool),
            slot: this.slot,
        };
        (posted, parts)
    }
}

/// A buffer handed to the provider by [`Buffer::into_flight`], while the
/// post call that uses it runs. What the provider is given comes apart
/// ([`PostParts`]): this is only what takes the buffer back, two words.
pub(crate) struct Posted {
    pool: *const PoolInner,
    slot: u32,
}

impl Posted {
    /// A multi-receive post failed after the provider may have taken part
    /// of the buffer (see `quirks::multi_recv_fails_after_taking_part`):
    /// it stays in flight, marked broken, and comes back only with its
    /// endpoint's close. Completions of the parts taken are read as
    /// usual.
    pub(crate) fn kept_broken(self) {
        // SAFETY: into_flight leaked one strong count of this pool's Arc,
        // which stays leaked: the endpoint's close takes it back with the
        // slot, as for any buffer in flight. The pointer is only borrowed.
        let pool = unsafe { &*self.pool };
        lock(&pool.multi[self.slot as usize]).broken = true;
    }

    /// The provider refused the operation: no completion will come, so the
    /// buffer is the caller's again.
    #[inline]
    pub(crate) fn refused(self) -> Buffer {
        // SAFETY: into_flight leaked one strong count of this pool's Arc;
        // a refused operation never completes, so no reclaim took it back.
        let pool = unsafe { Arc::from_raw(self.pool) };
        // IN_FLIGHT -> OWNED, keeping the other bits but MULTI (a stale
        // completion may clear a mark meanwhile).
        let _ = pool.states()[self.slot as usize].fetch_update(
            Ordering::Relaxed,
            Ordering::Relaxed,
            |s| Some((s & !KIND & !MULTI) | OWNED),
        );
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
        // OWNED -> FREE, keeping the marks of stale contexts.
        self.pool.states()[self.slot as usize].fetch_and(!KIND, Ordering::Relaxed);
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

/// What a completion hands back ([`BufferPool::reclaim_received`]).
#[derive(Debug, Default)]
#[non_exhaustive]
#[must_use]
pub struct Reclaimed {
    /// A message received into a multi-receive buffer.
    pub message: Option<Message>,
    /// The operation's buffer, back from the provider: a send's or a
    /// receive's; a multi-receive's once the provider released it and no
    /// [`Message`] of it is held.
    pub buffer: Option<Buffer>,
}

/// One message received into a multi-receive buffer
/// ([`Endpoint::recv_multi`](crate::Endpoint::recv_multi)): the bytes the
/// provider reported as written for it, read-only.
///
/// The provider keeps writing later messages into the rest of the buffer
/// while this is held; a `Message` covers only its own completed range,
/// checked to lie inside the buffer, and gives no `&mut`. It keeps the
/// pool's memory alive, and its buffer is not handed back while it lives:
/// the buffer comes back with the completion that ends the multi-receive
/// if no message is held then, else from the last message dropped (to its
/// pool) or taken back with [`try_into_buffer`](Self::try_into_buffer).
pub struct Message {
    pool: Arc<PoolInner>,
    slot: u32,
    offset: usize,
    len: usize,
}

impl Message {
    /// Where the message starts in its buffer.
    #[must_use]
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The buffer, if this is the last message of a multi-receive the
    /// provider is done with; else the message back.
    ///
    /// # Errors
    /// The message itself, while other messages of the buffer are held or
    /// the provider still has the buffer (or its operation contexts both
    /// wait for stale completions to drain: it then goes back to its pool
    /// once they have).
    pub fn try_into_buffer(self) -> std::result::Result<Buffer, Message> {
        let slot = self.slot as usize;
        {
            let mut m = lock(&self.pool.multi[slot]);
            let s = self.pool.states()[slot].load(Ordering::Acquire);
            if m.views != 1 || !m.done || s & STALE == STALE {
                drop(m);
                return Err(self);
            }
            m.views = 0;
            m.done = false;
        }
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again: its Arc is moved
        // into the Buffer, which owns the slot from here (the last message
        // of a multi-receive the provider is done with, state OWNED).
        let pool = unsafe { std::ptr::read(&this.pool) };
        Ok(Buffer {
            pool,
            slot: this.slot,
        })
    }
}

impl Deref for Message {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: offset + len <= slot_size (checked in complete_multi
        // against the slot's bounds before the Message was made), so the
        // range lies in the pool's allocation, which `self.pool` keeps
        // alive. It is the range the provider reported for this message
        // (`buf`, `len`): rxm reports the base of the message's own receive
        // entry and the message size (`rxm_finish_recv`,
        // `prov/rxm/src/rxm_cq.c` 168-176 in 1.17), the entry cut from
        // the front of what was left (`rxm_adjust_multi_recv`, 697-716,
        // the rest re-posted after it); sockets the address of the first
        // byte it copied and the data length (`sock_progress.c`
        // 1399-1421, `sock_cq.c` 244-262), copying at the buffer's `used`
        // mark, which only grows. The provider wrote these bytes before it
        // reported the message and writes only other messages' bytes
        // afterwards. No `Buffer` of the slot, and so no `&mut`, exists
        // while a Message does (the buffer comes back only with no
        // message held).
        unsafe {
            std::slice::from_raw_parts(
                self.pool
                    .memory
                    .add(self.slot as usize * self.pool.slot_size + self.offset),
                self.len,
            )
        }
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        let slot = self.slot as usize;
        let mut m = lock(&self.pool.multi[slot]);
        m.views = m.views.saturating_sub(1);
        if m.views > 0 || !m.done {
            return;
        }
        m.done = false;
        let state = &self.pool.states()[slot];
        // The last message of a buffer the provider is done with: the slot
        // goes back to the pool, or rests while both of its contexts wait
        // for stale completions to drain (StaleMarks::settle frees it).
        let rested = state.fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
            (s & STALE == STALE).then_some((s & !KIND) | RESTING)
        });
        if rested.is_err() {
            drop(Buffer {
                pool: self.pool.clone(),
                slot: self.slot,
            });
        }
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Message")
            .field("slot", &self.slot)
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}
