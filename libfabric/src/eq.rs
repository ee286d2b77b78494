//! Event queues, per fi_eq(3): connection management and asynchronous
//! control events.
//!
//! ```
//! use libfabric::{info::{getinfo, Hints}, eq::{EqAttr, Event, EventBuf, EqRead}, wait::WaitObj, EventQueue, Fabric};
//! use std::time::Duration;
//! let list = getinfo(&Hints::new().provider("tcp").node("127.0.0.1"))?;
//! let fabric = Fabric::open(list.first().unwrap())?;
//! let eq = EventQueue::open(&fabric, &EqAttr::new().size(64).wait(WaitObj::Fd).write(true))?;
//! eq.write_notify(eq.fid(), 0x1234, 42)?;
//! let mut buf = EventBuf::new();
//! match eq.sread(&mut buf, Some(Duration::from_secs(1)))? {
//!     EqRead::Event(Event::Notify(entry)) => assert_eq!((entry.context, entry.data), (0x1234, 42)),
//!     other => panic!("unexpected {other:?}"),
//! }
//! # Ok::<(), libfabric::Error>(())
//! ```

use crate::connreq::{ConnRequest, RequestSource};
use crate::error::{
    check_len, check_queue_size, classify, is_again, is_avail, is_interrupted, provider_errno,
    try_zeroed, Errno, Error, Handback, ObjectKind, ObjectScope, Result,
};
use crate::fabric::{Fabric, FabricInner};
use crate::fid::{close_last, OwnedFid};
use crate::info::Info;
use crate::pep::PepCore;
use crate::progress::{ProgressLock, ProgressRead};
use crate::wait::{
    beyond_one_wait, open_with_default_wait, provider_timeout_ms, query_wait_obj,
    resolved_wait_obj, sealed, unspec_is_yield, Deadline, Started, WaitObj, WaitSet, WaitSetInner,
    Waitable,
};
use libfabric_sys::fabric as sys;
use std::ffi::c_void;
use std::fmt;
use std::mem::size_of;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// The identity of a libfabric object (the address of its `struct fid`), as
/// events and completions name it. Compare with the `fid()` of objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(transparent)]
pub struct Fid(pub(crate) usize);

impl Fid {
    pub(crate) fn from_raw(raw: *mut sys::fid) -> Self {
        Fid(raw as usize)
    }

    /// The address, for logging.
    #[must_use]
    pub fn addr(self) -> usize {
        self.0
    }
}

/// Attributes of an event queue (`struct fi_eq_attr`).
#[derive(Debug, Clone)]
pub struct EqAttr {
    size: usize,
    flags: u64,
    wait_obj: Option<WaitObj>,
    signaling_vector: i32,
    wait_set: Option<WaitSet>,
}

impl Default for EqAttr {
    fn default() -> Self {
        Self::new()
    }
}

impl EqAttr {
    /// Provider default size, the default wait object (the first of
    /// `FI_WAIT_FD`, `FI_WAIT_UNSPEC` and `FI_WAIT_NONE` the provider
    /// opens), no flags.
    #[must_use]
    pub fn new() -> Self {
        EqAttr {
            size: 0,
            flags: 0,
            wait_obj: None,
            signaling_vector: 0,
            wait_set: None,
        }
    }

    /// Minimum number of entries (0: provider default).
    #[must_use]
    pub fn size(mut self, size: usize) -> Self {
        self.size = size;
        self
    }

    /// `FI_WRITE`: the application inserts its own events with
    /// [`EventQueue::write_entry`] or [`EventQueue::write_notify`]. Without
    /// it, writes are refused.
    #[must_use]
    pub fn write(mut self, enable: bool) -> Self {
        if enable {
            self.flags |= sys::FI_WRITE;
        } else {
            self.flags &= !sys::FI_WRITE;
        }
        self
    }

    /// The wait object (default: see [`WaitObj`'s provider table](crate::wait::WaitObj#default-wait-objects)). A raw value given as
    /// [`WaitObj::Other`] is taken as the variant libfabric names it by
    /// (`Other(0)` is `None`); one libfabric does not name is refused when
    /// the queue is opened.
    #[must_use]
    pub fn wait(mut self, wait_obj: WaitObj) -> Self {
        self.wait_obj = Some(wait_obj.normalized());
        self
    }

    /// Signal this wait set (`FI_WAIT_SET`). Not on tcp or sockets, where
    /// the open refuses it (see [`EventQueue::open`]).
    #[must_use]
    pub fn wait_set(mut self, set: &WaitSet) -> Self {
        self.wait_obj = Some(WaitObj::Set);
        self.wait_set = Some(set.clone());
        self
    }

    /// `FI_AFFINITY` with this signaling vector (a CPU core).
    #[must_use]
    pub fn signaling_vector(mut self, vector: i32) -> Self {
        self.flags |= sys::FI_AFFINITY;
        self.signaling_vector = vector;
        self
    }
}

/// Objects bound to a queue, to resolve the fid of an event.
pub(crate) struct Registry {
    entries: Mutex<RegistryEntries>,
}

#[derive(Default)]
struct RegistryEntries {
    live: Vec<(Fid, RegisteredObject)>,
    /// Addresses of objects that were registered and have closed.
    retired: std::collections::HashSet<Fid>,
    /// Addresses at which an object was registered after an earlier one
    /// there had closed: an event naming such an address may be the earlier
    /// object's, still queued.
    reused: std::collections::HashSet<Fid>,
}

#[derive(Clone)]
pub(crate) enum RegisteredObject {
    Endpoint(Weak<crate::ep::EpInner>),
    Passive(Weak<crate::pep::PepInner>),
    /// An endpoint of a serialized domain (see `EpInner::conn_events`):
    /// only its event record, so that no other thread holds the endpoint.
    Serialized(Arc<std::sync::atomic::AtomicU32>),
}

impl RegisteredObject {
    fn is_alive(&self) -> bool {
        match self {
            RegisteredObject::Endpoint(w) => w.strong_count() > 0,
            RegisteredObject::Passive(w) => w.strong_count() > 0,
            // The endpoint holds the record's other handle.
            RegisteredObject::Serialized(events) => Arc::strong_count(events) > 1,
        }
    }
}

impl Registry {
    pub(crate) fn insert(&self, fid: Fid, obj: RegisteredObject) {
        let mut guard = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let e = &mut *guard;
        let retired = &mut e.retired;
        e.live.retain(|(f, o)| {
            let alive = o.is_alive();
            if !alive {
                retired.insert(*f);
            }
            alive
        });
        if e.retired.contains(&fid) {
            e.reused.insert(fid);
        }
        e.live.push((fid, obj));
    }

    /// The object registered at `fid`, and whether an earlier object was
    /// registered at the same address.
    fn find(&self, fid: Fid) -> Option<(RegisteredObject, bool)> {
        let e = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let obj = e.live.iter().rev().find(|(f, _)| *f == fid)?.1.clone();
        if !obj.is_alive() {
            return None;
        }
        Some((obj, e.reused.contains(&fid)))
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            entries: Mutex::new(RegistryEntries::default()),
        }
    }
}

pub(crate) struct EqInner {
    pub(crate) fid: OwnedFid<sys::fid_eq>,
    /// The tokio readers of the queue waiting for its fd, through any of
    /// its wrappers (each registers its own dup of the fd; see
    /// `tokio::wait_ready`).
    #[cfg(feature = "tokio")]
    pub(crate) tokio_readers: tokio::sync::Notify,
    pub(crate) fabric: Arc<FabricInner>,
    _wait_set: Option<Arc<WaitSetInner>>,
    wait_obj: WaitObj,
    /// `wait_obj` can block an `sread` (`WaitObj::can_sread`), worked out
    /// once: one test per `sread`.
    blocks: bool,
    /// Largest connection data any endpoint bound to the queue may carry
    /// (see [`admit_cm_data`](Self::admit_cm_data)).
    pub(crate) max_cm_data: AtomicUsize,
    /// Held shared by the reads into a buffer of less than
    /// [`DEFAULT_CM_DATA_CAPACITY`], exclusively by a raise of
    /// `max_cm_data` (see [`small_read`](Self::small_read)).
    small_reads: ProgressLock,
    /// Held across every read call of the queue on a provider whose reads
    /// race each other ([`crate::quirks::reads_its_eq_unlocked`]).
    serial_reads: Option<Mutex<()>>,
    pub(crate) registry: Registry,
    /// Every passive endpoint bound to the queue, closed just before it
    /// (see the `pep` module: the provider may still deliver requests to
    /// them).
    peps: Mutex<Vec<Arc<PepCore>>>,
}

impl EqInner {
    /// Held across one read call of the queue where the provider's reads
    /// race each other (`serial_reads`); `None` elsewhere.
    fn serial_read(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        self.serial_reads
            .as_ref()
            .map(|m| m.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Whether a wait on the queue looks at it once more before blocking
    /// (see [`crate::wait::eq_second_look_needed`]). Not where reads are
    /// serialized:
    /// that look would be a read outside the lock, and sockets, the
    /// provider concerned, keeps its fd raised while the queue holds
    /// events (see `wait::eq_has_entries`).
    pub(crate) fn second_look(&self) -> bool {
        self.serial_reads.is_none() && crate::wait::eq_second_look_needed()
    }

    /// Before a read into a buffer of connection data capacity `capacity`,
    /// smaller than [`DEFAULT_CM_DATA_CAPACITY`]: checks it against the
    /// largest connection data of the queue's endpoints, and returns the
    /// guard to hold over the read.
    ///
    /// A provider writes as much of an event as fits in the buffer it is
    /// given and drops the rest (`ofi_eq_read`,
    /// `prov/util/src/util_eq.c` 122-123 in 1.22: `MIN(len, entry->size)`),
    /// so a read's buffer must hold the connection data of every event it
    /// may take. Two kinds of reads keep that true:
    /// - a buffer of at least [`DEFAULT_CM_DATA_CAPACITY`] holds any event:
    ///   no endpoint that may carry more is admitted
    ///   ([`admit_cm_data`](Self::admit_cm_data)), so these reads check
    ///   nothing (what [`EventBuf::new`] gives);
    /// - a smaller buffer is checked here, and the read holds `small_reads`
    ///   shared while it runs, which a raise of the size takes exclusively
    ///   before the endpoint it admits can listen or connect: a read that
    ///   checked the size before the raise has ended before an event of
    ///   the new size can be queued, and one that comes later sees the
    ///   raise. The lock prefers the raise, so that a stream of such reads
    ///   cannot hold it off. A read holding it never blocks in the
    ///   provider: `sread` waits with `FI_PEEK` first.
    fn small_read(&self, capacity: usize) -> Result<ProgressRead<'_>> {
        let reading = self.small_reads.read();
        let needed = self.max_cm_data.load(Ordering::Relaxed);
        if capacity < needed {
            return Err(buf_too_small(needed, capacity));
        }
        Ok(reading)
    }

    /// Admits an endpoint whose events carry up to `size` bytes of
    /// connection data (`FI_OPT_CM_DATA_SIZE`; `None`: none) into this
    /// queue, before its events can be queued (its bind, listen, connect
    /// or accept): refuses more than [`DEFAULT_CM_DATA_CAPACITY`], and
    /// raises the queue's largest connection data, waiting for the reads
    /// of smaller buffers under way (see [`small_read`](Self::small_read);
    /// each is one non-blocking `fi_eq_read`).
    ///
    /// # Errors
    /// [`Error::TooLarge`] over [`DEFAULT_CM_DATA_CAPACITY`].
    pub(crate) fn admit_cm_data(&self, size: Option<usize>) -> Result<()> {
        let Some(size) = size else {
            return Ok(());
        };
        check_cm_data_size(size)?;
        self.raise_cm_data(size);
        Ok(())
    }

    /// The raise of [`admit_cm_data`](Self::admit_cm_data), for a size
    /// [`check_cm_data_size`] accepted.
    pub(crate) fn raise_cm_data(&self, size: usize) {
        if self.max_cm_data.fetch_max(size, Ordering::Relaxed) < size {
            // Taken after the raise and released: the reads that may
            // have checked the old size have ended, and the later ones
            // see the new size (the lock's release and acquire).
            drop(self.small_reads.write());
        }
    }

    pub(crate) fn keep_passive(&self, pep: Arc<PepCore>) {
        self.peps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(pep);
    }

    /// Tells the endpoint an `FI_CONNECTED` (`connected`) or `FI_SHUTDOWN`
    /// names that the provider has set up, or ended, its connection: sends
    /// wait for the first (tcp's transmit path calls a header hook it sets
    /// only when the connection response arrives,
    /// `prov/tcp/src/tcpx_conn_mgr.c` 351, before it queues `FI_CONNECTED`
    /// at 297). Read or peeked, the event means the same.
    fn connection_event(&self, fid: Fid, connected: bool) {
        match self.registry.find(fid) {
            Some((RegisteredObject::Endpoint(weak), _)) => {
                if let Some(ep) = weak.upgrade() {
                    ep.connection_event(connected);
                }
            }
            Some((RegisteredObject::Serialized(events), _)) => {
                crate::ep::record_connection_event(&events, connected);
            }
            _ => {}
        }
    }

    fn find_passive(&self, fid: Fid) -> Option<Arc<PepCore>> {
        self.peps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|p| Fid::from_raw(p.fid.fid()) == fid)
            .cloned()
    }

    /// Empties the queue before it closes: connection requests still queued
    /// are rejected and their `fi_info` freed (libfabric's util EQ frees
    /// neither at close: `util_eq_close` only frees the list entries), and
    /// error entries are read. Then the passive endpoints bound to it close.
    fn drain(&mut self) {
        if !self.fid.is_open() {
            return;
        }
        let cm = self.max_cm_data.load(Ordering::Relaxed);
        let Ok(mut buf) = EventBuf::with_cm_data_capacity(cm.max(DEFAULT_CM_DATA_CAPACITY)) else {
            return;
        };
        let mut errbuf = ErrDataBuf::new();
        for _ in 0..(1 << 20) {
            let mut event = 0u32;
            // SAFETY: as in EventQueue::read_unchecked: buf's words are
            // writable for their size (EventBuf::len), which covers the
            // largest connection data bound.
            let ret = unsafe {
                sys::fi_eq_read(
                    self.fid.as_ptr(),
                    &mut event,
                    buf.words.as_mut_ptr().cast(),
                    buf.len(),
                    0,
                )
            };
            if classify(ret) == Err(Errno::AVAIL) {
                if !matches!(read_err(self, &mut errbuf.data), Ok(Some(_))) {
                    break;
                }
                continue;
            }
            if ret < 0 {
                break;
            }
            if event == sys::FI_CONNREQ
                && classify(ret).is_ok_and(|len| len >= size_of::<sys::fi_eq_cm_entry>())
            {
                // A full fi_eq_cm_entry was written (ret).
                let e = buf.view().cm_entry();
                if let Some(info) = Info::from_raw(e.info) {
                    if let Some(pep) = self.find_passive(Fid::from_raw(e.fid)) {
                        let _ = crate::connreq::reject_raw(&pep, &info, &[]);
                    }
                }
            }
        }
        self.peps
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

impl Drop for EqInner {
    fn drop(&mut self) {
        self.drain();
    }
}

/// An open event queue. Cloning gives another handle; endpoints bound to it
/// hold one too, so it stays open while they exist.
#[derive(Clone)]
pub struct EventQueue {
    pub(crate) inner: Arc<EqInner>,
    hot: HotFacts,
}

/// What every read or write of a queue looks at and nothing changes after
/// the open, copied into each handle: a loop over a `&EventQueue` keeps
/// them in registers, where those behind the `Arc` are loaded again after
/// every call into the provider.
#[derive(Clone, Copy)]
struct HotFacts {
    /// `inner.fid`'s object.
    raw: NonNull<sys::fid_eq>,
    /// The connection data capacity from which a read goes straight to the
    /// provider: [`DEFAULT_CM_DATA_CAPACITY`], or none (`usize::MAX`) when
    /// reads are serialized (`EqInner::serial_reads`).
    unchecked_from: usize,
    /// Opened with `FI_WRITE`.
    writable: bool,
}

// SAFETY: an address and two values that never change. The object it
// points to is used only through calls `EqInner`'s fid allows from any
// thread (see `OwnedFid`'s Send and Sync), and stays open while the handle
// holding this lives: the handle holds the `Arc<EqInner>` whose fid closes
// it, so only the end of the last handle closes it, by value: its close
// (`EventQueue::close`, `fid::close_last`; one refused hands back the same
// open queue) or its drop.
unsafe impl Send for HotFacts {}
// SAFETY: as above.
unsafe impl Sync for HotFacts {}

/// A caller-owned buffer for one event, reused across reads so that reading
/// allocates nothing. It must hold the connection data of any event it may
/// take, because a provider writes as much of an event as fits and drops
/// the rest. [`EventBuf::new`]'s holds [`DEFAULT_CM_DATA_CAPACITY`] bytes,
/// more than any endpoint a queue admits carries, so reads into it check
/// nothing; a smaller one is refused while an endpoint bound to the queue
/// carries more than it holds ([`Error::BufferTooSmall`]), also when that
/// endpoint is bound while the read is under way (a blocking read then
/// waits without taking the event, and looks again).
pub struct EventBuf {
    words: Box<[u64]>,
    /// The size of `words` less the fixed part of an `fi_eq_cm_entry`: the most
    /// connection data an entry read into it can carry, which bounds the
    /// length a read returned in one compare (`decode`). Set with `words`.
    data_room: usize,
    cm_capacity: usize,
    /// Where the `err_data` of an error entry that a read hands back is
    /// copied.
    err: ErrDataBuf,
}

/// Connection data capacity of [`EventBuf::new`]: more than any libfabric
/// 1.x provider allows (`FI_OPT_CM_DATA_SIZE` is at most a few hundred bytes).
pub const DEFAULT_CM_DATA_CAPACITY: usize = 1024;

/// Room for `err_data` in an [`EventBuf`] whose connection data capacity is
/// smaller.
const ERR_DATA_MIN: usize = 256;

/// The largest connection data capacity an [`EventBuf`] may have (1 MiB):
/// far above what any provider carries, and far below an overflow.
pub const MAX_CM_DATA_CAPACITY: usize = 1 << 20;

impl Default for EventBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for EventBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventBuf")
            .field("cm_data_capacity", &self.cm_capacity)
            .finish_non_exhaustive()
    }
}

impl EventBuf {
    /// Room for any event with up to [`DEFAULT_CM_DATA_CAPACITY`] bytes of
    /// connection data.
    ///
    /// # Panics
    /// Only when the allocator cannot give the buffer's 2 KiB or so (the
    /// default capacity is under [`MAX_CM_DATA_CAPACITY`], so it is never
    /// refused as too large).
    #[must_use]
    pub fn new() -> Self {
        Self::with_cm_data_capacity(DEFAULT_CM_DATA_CAPACITY)
            .expect("an EventBuf of the default capacity is a few hundred bytes")
    }

    /// Room for any event with up to `bytes` of connection data.
    ///
    /// # Errors
    /// [`Error::TooLarge`] over [`MAX_CM_DATA_CAPACITY`];
    /// [`Error::OutOfMemory`] when the buffer cannot be allocated.
    pub fn with_cm_data_capacity(bytes: usize) -> Result<Self> {
        if bytes > MAX_CM_DATA_CAPACITY {
            return Err(Error::TooLarge {
                what: "EventBuf connection data capacity",
                limit: MAX_CM_DATA_CAPACITY,
                given: bytes,
            });
        }
        let len = (size_of::<sys::fi_eq_cm_entry>() + bytes).max(size_of::<sys::fi_eq_entry>());
        let words: Box<[u64]> = try_zeroed("EventBuf", len.div_ceil(8))?;
        let buffer_len = words.len() * 8;
        Ok(EventBuf {
            // At least 0: len holds an fi_eq_cm_entry.
            data_room: buffer_len - size_of::<sys::fi_eq_cm_entry>(),
            words,
            cm_capacity: bytes,
            // A rejected connection's error entry carries the rejecting
            // side's connection data.
            err: ErrDataBuf::with_capacity(bytes.max(ERR_DATA_MIN))?,
        })
    }

    /// Bytes of connection data an event read into it may carry.
    #[must_use]
    pub fn cm_data_capacity(&self) -> usize {
        self.cm_capacity
    }

    /// Its length in bytes: at least an `fi_eq_cm_entry` and an
    /// `fi_eq_entry` (`with_cm_data_capacity`).
    #[inline(always)]
    fn len(&self) -> usize {
        size_of_val(&*self.words)
    }

    /// The `fi_eq_entry` at the buffer's start: what an event of that
    /// length (`FI_NOTIFY`, `FI_MR_COMPLETE`, ...) was read as.
    #[inline(always)]
    fn entry(&self) -> &Entry {
        self.view().entry()
    }

    /// The buffer's bytes.
    #[inline(always)]
    fn as_bytes(&self) -> &[u8] {
        self.view().bytes()
    }

    /// Its words and its error data, borrowed apart, for a function out of
    /// line (see `Words`).
    #[inline(always)]
    fn parts(&mut self) -> (Words<'_>, &mut [u8]) {
        // SAFETY: this buffer's words.
        (unsafe { Words::new(&self.words) }, &mut self.err.data)
    }

    /// Its words, to read entries of.
    #[inline(always)]
    fn view(&self) -> Words<'_> {
        // SAFETY: this buffer's words.
        unsafe { Words::new(&self.words) }
    }
}

// `read` and `peek` take an EventBuf apart: what they hand to a function
// out of line is its words and its error data, on the heap, not the
// EventBuf itself. Its fields then stay where the caller's loop keeps
// them (in registers) across the provider's calls, which could otherwise
// change them for all the compiler knows. (The blocking reads, which wait
// in the provider anyway, hand out the whole buffer.)

/// An [`EventBuf`]'s words, borrowed apart from it (`EventBuf::parts`).
/// Made of an `EventBuf`'s words only (`new`'s contract), so they are at least an
/// `fi_eq_cm_entry` and an `fi_eq_entry` long (`with_cm_data_capacity`),
/// u64-aligned, and every byte of them is initialised (zeroed when
/// allocated, then written by the provider): what its methods read by.
#[derive(Clone, Copy)]
struct Words<'b>(&'b [u64]);

impl<'b> Words<'b> {
    /// The words `words`.
    ///
    /// # Safety
    /// `words` are an [`EventBuf`]'s (or as long, aligned and
    /// initialised): its methods read by that without checking.
    #[inline(always)]
    unsafe fn new(words: &'b [u64]) -> Self {
        debug_assert!(size_of_val(words) >= size_of::<sys::fi_eq_cm_entry>());
        debug_assert!(size_of_val(words) >= size_of::<sys::fi_eq_entry>());
        Words(words)
    }

    /// The `fi_eq_entry` at their start.
    #[inline(always)]
    fn entry(self) -> &'b Entry {
        // SAFETY: the words hold at least an fi_eq_entry (`Words`); u64
        // words are aligned for its pointers and u64; every byte is
        // initialised (`Words`). Entry has fi_eq_entry's layout
        // (`repr(C)`, asserted below), and any bits are valid for its
        // integer fields. Borrowed from the words, it lives no longer.
        unsafe { &*self.0.as_ptr().cast::<Entry>() }
    }

    /// The `fi_eq_cm_entry` at their start.
    #[inline(always)]
    fn cm_entry(self) -> &'b sys::fi_eq_cm_entry {
        // SAFETY: as `entry`: the words hold at least an fi_eq_cm_entry
        // (`Words`), aligned, initialised; its fields are integers and
        // pointers, valid for any bits (the pointers are only compared
        // and handed on, never followed here).
        unsafe { &*self.0.as_ptr().cast::<sys::fi_eq_cm_entry>() }
    }

    /// The bytes they are made of.
    #[inline(always)]
    fn bytes(self) -> &'b [u8] {
        // SAFETY: the same memory as u8, which has no alignment and for
        // which any initialised bits are valid (every byte is: `Words`);
        // size_of_val is its size.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast(), size_of_val(self.0)) }
    }

    /// The bytes of an entry of `len` bytes, up to their end.
    fn entry_bytes(self, len: usize) -> &'b [u8] {
        let all = self.bytes();
        &all[..len.min(all.len())]
    }
}

/// A caller-owned buffer that error entries copy their provider-specific
/// `err_data` into, so that the data stays valid as long as the caller
/// wants (fi_eq(3)/fi_cq(3): since API 1.5 a non-zero `err_data_size`
/// makes the provider copy into the application's buffer).
pub struct ErrDataBuf {
    data: Box<[u8]>,
}

impl Default for ErrDataBuf {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ErrDataBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ErrDataBuf")
            .field("capacity", &self.data.len())
            .finish_non_exhaustive()
    }
}

impl ErrDataBuf {
    /// 4 KiB.
    ///
    /// # Panics
    /// Only when the allocator cannot give 4 KiB.
    #[must_use]
    pub fn new() -> Self {
        Self::with_capacity(4096).expect("4 KiB")
    }

    /// `bytes` of room (at least 1).
    ///
    /// # Errors
    /// [`Error::OutOfMemory`] when the buffer cannot be allocated.
    pub fn with_capacity(bytes: usize) -> Result<Self> {
        Ok(ErrDataBuf {
            data: try_zeroed("ErrDataBuf", bytes.max(1))?,
        })
    }

    /// [`read_err_data`] with this buffer's data.
    pub(crate) fn read_into<E>(
        &mut self,
        call: &'static str,
        readerr: impl FnOnce(*mut c_void, usize) -> (isize, (*mut c_void, usize), E),
    ) -> Result<Option<(E, &[u8])>> {
        read_err_data(&mut self.data, call, readerr)
    }
}

/// One `fi_eq_readerr` / `fi_cq_readerr` with `data` for the
/// `err_data`: `readerr` gets the `err_data` pointer and size to put in
/// its entry, and returns the call's return value, the entry's `err_data`
/// and `err_data_size` after the call, and the entry. `None` when there
/// was no error entry (`-FI_EAGAIN`); otherwise the entry and its
/// `err_data`, copied into `data` if the provider handed out its own
/// pointer instead.
fn read_err_data<'d, E>(
    data: &'d mut [u8],
    call: &'static str,
    readerr: impl FnOnce(*mut c_void, usize) -> (isize, (*mut c_void, usize), E),
) -> Result<Option<(E, &'d [u8])>> {
    let ours = data.as_mut_ptr().cast::<c_void>();
    let (ret, (err_data, size), entry) = readerr(ours, data.len());
    if classify(ret) == Err(Errno::AGAIN) {
        return Ok(None);
    }
    check_len(call, ret)?;
    if err_data.is_null() || size == 0 {
        return Ok(Some((entry, &[])));
    }
    let n = size.min(data.len());
    if err_data != ours {
        // SAFETY: the provider's err_data is valid for size bytes until
        // the next read of the queue; copy it now.
        unsafe { ptr::copy_nonoverlapping(err_data.cast::<u8>(), data.as_mut_ptr(), n) };
    }
    Ok(Some((entry, &data[..n])))
}

/// A plain event entry (`struct fi_eq_entry`): read in place from the
/// [`EventBuf`] it was read into (copy it to keep it past the next read), or
/// written as it is ([`EventQueue::write_entry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[repr(C)]
pub struct Entry {
    /// The object the event is about.
    pub fid: Fid,
    /// The context the object was opened or the operation posted with.
    pub context: usize,
    /// Event data.
    pub data: u64,
}

impl Entry {
    /// An entry of these fields, for [`EventQueue::write_entry`].
    #[must_use]
    pub fn new(fid: Fid, context: usize, data: u64) -> Self {
        Entry { fid, context, data }
    }
}

// An Entry is an fi_eq_entry read in place (`EventBuf::entry`) and written
// as it is (`EventQueue::write_entry`): the same size and fields at the
// same offsets, each of the same size.
const _: () = {
    use std::mem::offset_of;
    assert!(size_of::<Entry>() == size_of::<sys::fi_eq_entry>());
    assert!(std::mem::align_of::<Entry>() <= std::mem::align_of::<u64>());
    assert!(offset_of!(Entry, fid) == offset_of!(sys::fi_eq_entry, fid));
    assert!(offset_of!(Entry, context) == offset_of!(sys::fi_eq_entry, context));
    assert!(offset_of!(Entry, data) == offset_of!(sys::fi_eq_entry, data));
    assert!(size_of::<Fid>() == size_of::<*mut sys::fid>());
    assert!(size_of::<usize>() == size_of::<*mut c_void>());
    // An UnownedConnReq reads its fid at the entry's start and its data
    // right after the fixed part of an fi_eq_cm_entry.
    assert!(offset_of!(sys::fi_eq_cm_entry, fid) == 0);
    assert!(offset_of!(sys::fi_eq_cm_entry, data) == size_of::<sys::fi_eq_cm_entry>());
};

/// A connection request (`FI_CONNREQ`) for a passive endpoint, read from
/// the queue: its [`ConnRequest`] is the application's to answer.
#[non_exhaustive]
pub struct ConnReq<'b> {
    /// The passive endpoint that received it.
    pub fid: Fid,
    /// The request, to accept with
    /// [`Endpoint::from_request`](crate::Endpoint::from_request) or to
    /// [`reject`](ConnRequest::reject); dropped unanswered, it is rejected.
    pub request: ConnRequest,
    /// The connection data the peer sent (length from the read's return value).
    pub data: &'b [u8],
}

/// A connection request with no request to answer: one seen by
/// [`EventQueue::peek`] (the request still belongs to the queue, and the
/// next read hands it out as [`Event::ConnReq`]), or an `FI_CONNREQ` entry
/// the application wrote itself with no `fi_info` in it.
///
/// Read in place from the [`EventBuf`], as an [`Entry`] is: its fields are
/// taken from the entry when asked for, so that a read that finds one
/// hands back no more than where the entry is and how long it is.
pub struct UnownedConnReq<'b> {
    /// The entry's bytes in the buffer: the fixed part of an
    /// `fi_eq_cm_entry` (at least), then the connection data, up to the
    /// length the read returned. Starts at the buffer's start (u64-aligned).
    entry: &'b [u8],
}

impl<'b> UnownedConnReq<'b> {
    /// The request of the entry `entry`.
    ///
    /// # Safety
    /// `entry` is at least an `fi_eq_cm_entry` long (the readers check the
    /// length the read returned first): `fid` and `data` read it without
    /// checking.
    #[inline(always)]
    unsafe fn new(entry: &'b [u8]) -> Self {
        debug_assert!(entry.len() >= size_of::<sys::fi_eq_cm_entry>());
        UnownedConnReq { entry }
    }

    /// The passive endpoint that received it.
    #[must_use]
    #[inline]
    pub fn fid(&self) -> Fid {
        // SAFETY: entry holds at least an fi_eq_cm_entry (`new`), whose
        // first field (asserted below) is the fid: pointer-sized, read
        // unaligned, every byte initialised (the buffer is zeroed when
        // made, then written by the provider); any bits are a valid Fid,
        // which is never dereferenced.
        Fid(unsafe { self.entry.as_ptr().cast::<usize>().read_unaligned() })
    }

    /// The connection data the peer sent.
    #[must_use]
    #[inline]
    pub fn data(&self) -> &'b [u8] {
        // SAFETY: entry is at least an fi_eq_cm_entry long (`new`), so the
        // data after its fixed part is in bounds (and may be empty).
        unsafe { self.entry.get_unchecked(size_of::<sys::fi_eq_cm_entry>()..) }
    }
}

impl fmt::Debug for UnownedConnReq<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnownedConnReq")
            .field("fid", &self.fid())
            .field("data", &self.data())
            .finish()
    }
}

/// `FI_CONNECTED` or `FI_SHUTDOWN`.
#[derive(Debug)]
#[non_exhaustive]
pub struct CmEntry<'b> {
    /// The endpoint.
    pub fid: Fid,
    /// Connection data (the accepting side's, on the active side).
    pub data: &'b [u8],
}

/// One event read from an event queue.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'b> {
    /// `FI_NOTIFY`: an event written by the application or a provider
    /// notice. The entry is read in place from the [`EventBuf`].
    Notify(&'b Entry),
    /// `FI_MR_COMPLETE`: an asynchronous memory registration finished.
    MrComplete(&'b Entry),
    /// `FI_AV_COMPLETE`: an asynchronous address vector insert finished.
    AvComplete(&'b Entry),
    /// `FI_JOIN_COMPLETE`: a multicast join finished.
    JoinComplete(&'b Entry),
    /// `FI_CONNREQ`, read.
    ConnReq(ConnReq<'b>),
    /// `FI_CONNREQ`, peeked, or written with no `fi_info`.
    UnownedConnReq(UnownedConnReq<'b>),
    /// `FI_CONNECTED`
    Connected(CmEntry<'b>),
    /// `FI_SHUTDOWN`
    Shutdown(CmEntry<'b>),
    /// An event type this crate does not name, with its raw bytes.
    Unknown {
        /// The event number.
        event: u32,
        /// The entry as the provider wrote it.
        bytes: &'b [u8],
    },
}

impl Event<'_> {
    /// The fid the event names.
    #[must_use]
    pub fn fid(&self) -> Option<Fid> {
        match self {
            Event::Notify(e)
            | Event::MrComplete(e)
            | Event::AvComplete(e)
            | Event::JoinComplete(e) => Some(e.fid),
            Event::ConnReq(c) => Some(c.fid),
            Event::UnownedConnReq(c) => Some(c.fid()),
            Event::Connected(c) | Event::Shutdown(c) => Some(c.fid),
            Event::Unknown { .. } => None,
        }
    }
}

impl fmt::Debug for ConnReq<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnReq")
            .field("fid", &self.fid)
            .field("request", &self.request)
            .field("data_len", &self.data.len())
            .finish()
    }
}

/// What a read of an event queue found.
#[derive(Debug)]
#[must_use]
pub enum EqRead<'b> {
    /// An event.
    Event(Event<'b>),
    /// An error entry (`-FI_EAVAIL`, then `fi_eq_readerr`), its `err_data`
    /// copied into the [`EventBuf`]: for example a connection the peer
    /// rejected ([`Errno::CONNREFUSED`](crate::Errno)).
    Error(EqError<'b>),
    /// Nothing to read (`-FI_EAGAIN`).
    Empty,
    /// The timeout of a blocking read passed.
    TimedOut,
    /// Only from [`EventQueue::peek`] and [`EventQueue::speek`]: an error
    /// entry is next (`-FI_EAVAIL`), still in the queue. Read it with
    /// [`EventQueue::read`] or [`EventQueue::read_err`].
    ErrorPending,
}

/// An error entry (`struct fi_eq_err_entry`), its `err_data` copied into the
/// caller's [`ErrDataBuf`].
#[derive(Debug)]
#[non_exhaustive]
pub struct EqError<'b> {
    /// The object the error is about.
    pub fid: Fid,
    /// Its context.
    pub context: usize,
    /// Event data (for example the event type).
    pub data: u64,
    /// The error.
    pub err: Errno,
    /// The provider's own error number (see [`EventQueue::strerror`]).
    pub prov_errno: i32,
    /// Provider-specific error data ([`err_data`](Self::err_data)):
    /// private, as it is what [`EventQueue::strerror`] hands back to the
    /// provider.
    err_data: &'b [u8],
}

impl<'b> EqError<'b> {
    /// Provider-specific error data; for a rejected connection, the
    /// rejecting side's connection data.
    #[must_use]
    pub fn err_data(&self) -> &'b [u8] {
        self.err_data
    }
}

/// The object an event's fid names, from [`EventQueue::resolve`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum EventSource {
    /// An endpoint bound to the queue.
    Endpoint(crate::Endpoint),
    /// A passive endpoint bound to the queue.
    Passive(crate::PassiveEndpoint),
}

impl EventQueue {
    /// `fi_eq_open`.
    ///
    /// # Errors
    /// [`Error::TooLarge`] for a size over
    /// [`MAX_QUEUE_SIZE`](crate::error::MAX_QUEUE_SIZE);
    /// [`Error::UnsupportedWait`] for a wait object libfabric does not name,
    /// `FI_WAIT_YIELD` (also `FI_WAIT_UNSPEC` on shm, which opens it as
    /// that), `FI_WAIT_SET` without a wait set (or on tcp or sockets), or
    /// one the provider refuses (tcp refuses `FI_WAIT_MUTEX_COND`);
    /// [`Error::ForeignObject`]
    /// for a wait set of another fabric; [`Error::Call`] when `fi_eq_open`
    /// fails.
    #[doc(alias = "fi_eq_open")]
    pub fn open(fabric: &Fabric, attr: &EqAttr) -> Result<Self> {
        check_queue_size("event queue size", attr.size)?;
        // Normalised again (the builder did already) and refused when
        // unknown or FI_WAIT_YIELD: every check below and the C call see the
        // same named wait object.
        let Some(wait_obj) = attr.wait_obj else {
            return open_with_default_wait(None, |wait| {
                Self::open(fabric, &attr.clone().wait(wait))
            });
        };
        let wait_obj = wait_obj.checked("event queue")?;
        if wait_obj == WaitObj::Unspec
            && crate::quirks::opens_unspec_waits_as_yield(&fabric.inner.provider)
        {
            return Err(unspec_is_yield("event queue"));
        }
        if let Some(set) = &attr.wait_set {
            if !set.belongs_to(&fabric.inner) {
                return Err(Error::ForeignObject {
                    call: "fi_eq_open",
                    what: "wait set",
                    scope: ObjectScope::Fabric,
                });
            }
            let provider = fabric.inner.provider.as_str();
            if wait_obj == WaitObj::Set {
                if crate::quirks::eq_cannot_share_a_wait_set(provider) {
                    return Err(Error::UnsupportedWait {
                        queue: "event queue",
                        requested: WaitObj::Set,
                        reason: "tcp's event queues cannot share a wait set: 1.17 handles the connection requests of all the queues on it in a read of any (also those of a passive endpoint that closed: freed memory), later versions leave a closed queue's fd in it (lost wake-ups)",
                    });
                }
                crate::wait::refuse_a_filling_set("event queue", provider)?;
            }
        }
        let mut raw_attr = sys::fi_eq_attr {
            size: attr.size,
            flags: attr.flags,
            wait_obj: wait_obj.raw(),
            signaling_vector: attr.signaling_vector,
            wait_set: attr
                .wait_set
                .as_ref()
                .map_or(ptr::null_mut(), |s| s.inner.fid.as_ptr()),
        };
        if wait_obj == WaitObj::Set && attr.wait_set.is_none() {
            return Err(Error::UnsupportedWait {
                queue: "event queue",
                requested: WaitObj::Set,
                reason: "FI_WAIT_SET needs a wait set: use EqAttr::wait_set",
            });
        }
        let mut raw = ptr::null_mut();
        // SAFETY: fi_eq_open(3) reads attr and opens an EQ on the open
        // fabric; OwnedFid closes it before the fabric handle is released.
        let ret = unsafe {
            sys::fi_eq_open(
                fabric.inner.fid.as_ptr(),
                &mut raw_attr,
                &mut raw,
                ptr::null_mut(),
            )
        };
        if wait_obj != WaitObj::None
            && attr.flags & sys::FI_AFFINITY == 0
            && matches!(classify(ret), Err(Errno::INVAL | Errno::NOSYS))
        {
            return Err(Error::UnsupportedWait {
                queue: "event queue",
                requested: wait_obj,
                reason: "the provider refused it (fi_eq_open returned -FI_EINVAL or -FI_ENOSYS)",
            });
        }
        let fid = OwnedFid::opened("fi_eq_open", ret, raw)?;
        let wait_obj = resolved_wait_obj("event queue", wait_obj, raw_attr.wait_obj)?;
        // Refused when the provider says it waits by yielding.
        let wait_obj = resolved_wait_obj(
            "event queue",
            wait_obj,
            query_wait_obj(fid.fid(), wait_obj).raw(),
        )?;
        let serial_reads = crate::quirks::reads_its_eq_unlocked(&fabric.inner.provider);
        let hot = HotFacts {
            raw: fid.as_non_null(),
            unchecked_from: if serial_reads {
                usize::MAX
            } else {
                DEFAULT_CM_DATA_CAPACITY
            },
            writable: attr.flags & sys::FI_WRITE != 0,
        };
        Ok(EventQueue {
            inner: Arc::new(EqInner {
                fid,
                fabric: fabric.inner.clone(),
                _wait_set: attr.wait_set.as_ref().map(|s| s.inner.clone()),
                wait_obj,
                blocks: wait_obj.can_sread(),
                max_cm_data: AtomicUsize::new(0),
                small_reads: ProgressLock::default(),
                serial_reads: serial_reads.then(|| Mutex::new(())),
                registry: Registry::default(),
                peps: Mutex::new(Vec::new()),
                #[cfg(feature = "tokio")]
                tokio_readers: tokio::sync::Notify::new(),
            }),
            hot,
        })
    }

    /// The queue's own fid.
    #[must_use]
    pub fn fid(&self) -> Fid {
        Fid::from_raw(self.inner.fid.fid())
    }

    /// The raw `fid_eq` (the handle's copy: `HotFacts`).
    #[must_use]
    #[inline(always)]
    pub fn as_raw(&self) -> *mut sys::fid_eq {
        self.hot.raw.as_ptr()
    }

    /// `fi_eq_read`: the next event, without blocking.
    ///
    /// # Errors
    /// [`Error::BufferTooSmall`] when `buf` has less room for connection
    /// data than an endpoint of the queue may carry; [`Error::Call`] when
    /// `fi_eq_read` or `fi_eq_readerr` fails (`FI_EIO` for an entry shorter
    /// than its type). An error entry is no error: it is [`EqRead::Error`].
    #[doc(alias = "fi_eq_read")]
    #[inline]
    pub fn read<'b>(&self, buf: &'b mut EventBuf) -> Result<EqRead<'b>> {
        self.read_flags(buf, 0)
    }

    /// `fi_eq_read` with `FI_PEEK`: the next event, left in the queue. A
    /// peeked connection request carries no `info` (it still belongs to the
    /// queue until read).
    ///
    /// # Errors
    /// As [`read`](Self::read), with `fi_eq_read(FI_PEEK)` as the call; an
    /// error entry is [`EqRead::ErrorPending`].
    #[doc(alias = "FI_PEEK")]
    pub fn peek<'b>(&self, buf: &'b mut EventBuf) -> Result<EqRead<'b>> {
        self.read_flags(buf, sys::FI_PEEK)
    }

    #[inline(always)]
    fn read_flags<'b>(&self, buf: &'b mut EventBuf, flags: u64) -> Result<EqRead<'b>> {
        let (ret, event) = self.read_raw(buf, flags)?;
        decode(&self.inner, ret, event, buf, ReadCall::new(false, flags))
    }

    /// One `fi_eq_read`, undecoded: (return value, event type).
    #[inline]
    pub(crate) fn read_raw(&self, buf: &mut EventBuf, flags: u64) -> Result<(isize, u32)> {
        if buf.cm_capacity < self.hot.unchecked_from {
            return self.read_checked(buf.cm_capacity, &mut buf.words, flags);
        }
        Ok(self.read_unchecked(&mut buf.words, flags))
    }

    /// `read_raw` into a buffer smaller than the default, under the
    /// small-read lock (see `small_read`), or on a queue whose reads are
    /// serialized, under that lock.
    #[cold]
    #[inline(never)]
    fn read_checked(&self, capacity: usize, words: &mut [u64], flags: u64) -> Result<(isize, u32)> {
        let _serial = self.inner.serial_read();
        let _reading = if capacity < DEFAULT_CM_DATA_CAPACITY {
            Some(self.inner.small_read(capacity)?)
        } else {
            None
        };
        Ok(self.read_unchecked(words, flags))
    }

    /// The `fi_eq_read` of `read_raw` into an [`EventBuf`]'s words, whose
    /// caller made sure that they hold the connection data of every event
    /// it may read (see `small_read`).
    #[inline(always)]
    fn read_unchecked(&self, words: &mut [u64], flags: u64) -> (isize, u32) {
        let mut event = 0u32;
        // SAFETY: fi_eq_read(3): words are writable for their size in
        // bytes, aligned for any entry type (u64); event receives the type.
        let ret = unsafe {
            sys::fi_eq_read(
                self.as_raw(),
                &mut event,
                words.as_mut_ptr().cast(),
                size_of_val(words),
                flags,
            )
        };
        (ret, event)
    }

    /// `fi_eq_sread`: the next event, blocking up to `timeout` (`None`:
    /// forever). Needs a queue opened with a wait object other than
    /// `FI_WAIT_NONE` and `FI_WAIT_SET`.
    ///
    /// # Errors
    /// [`Error::WrongWaitMode`] on a queue whose wait object cannot block;
    /// otherwise as [`read`](Self::read), with `fi_eq_sread` as the call.
    /// The timeout is [`EqRead::TimedOut`], no error.
    #[doc(alias = "fi_eq_sread")]
    #[inline]
    pub fn sread<'b>(
        &self,
        buf: &'b mut EventBuf,
        timeout: Option<Duration>,
    ) -> Result<EqRead<'b>> {
        self.sread_flags(buf, timeout, 0)
    }

    /// Reads the queue, blocking up to `timeout` in all, until `outcome`
    /// makes something of an event; [`Error::TimedOut`] (as the error of
    /// `call`) once the timeout passed.
    pub(crate) fn sread_until<T>(
        &self,
        timeout: Option<Duration>,
        call: &'static str,
        mut outcome: impl FnMut(EqRead<'_>) -> Option<Result<T>>,
    ) -> Result<T> {
        let mut buf = EventBuf::new();
        let deadline = Deadline::after(timeout);
        loop {
            if let Some(done) = outcome(self.sread(&mut buf, deadline.left())?) {
                return done;
            }
            deadline.check(call)?;
        }
    }

    /// `fi_eq_sread` with `FI_PEEK`.
    ///
    /// # Errors
    /// As [`sread`](Self::sread); an error entry is
    /// [`EqRead::ErrorPending`].
    pub fn speek<'b>(
        &self,
        buf: &'b mut EventBuf,
        timeout: Option<Duration>,
    ) -> Result<EqRead<'b>> {
        self.sread_flags(buf, timeout, sys::FI_PEEK)
    }

    /// Inlined into `sread` and `speek`, as `read_flags` is: the event is
    /// decoded into the caller's result, not copied out of a frame.
    #[inline(always)]
    fn sread_flags<'b>(
        &self,
        buf: &'b mut EventBuf,
        timeout: Option<Duration>,
        flags: u64,
    ) -> Result<EqRead<'b>> {
        if !self.inner.blocks {
            return Err(Error::WrongWaitMode {
                call: "fi_eq_sread",
                needed: "FI_WAIT_FD, FI_WAIT_UNSPEC, FI_WAIT_MUTEX_COND or FI_WAIT_POLLFD",
                actual: self.inner.wait_obj,
            });
        }
        if buf.cm_data_capacity() < self.hot.unchecked_from {
            return self.sread_checked(buf, timeout, flags);
        }
        // Only a timed wait reads the clock: for the time left after an
        // interruption.
        let started = Started::now(timeout);
        let (ret, event) = self.sread_call(buf, timeout, flags);
        // Nothing within the timeout: -FI_EAGAIN.
        if is_again(ret) {
            if beyond_one_wait(timeout) {
                // Only the longest wait one call takes passed.
                return self.sread_checked(buf, started.left(timeout), flags);
            }
            return Ok(EqRead::TimedOut);
        }
        // A signal, not a failure (see `is_interrupted`); or an error entry,
        // which another reader may take before this one reads it: neither
        // is the timeout. Waited on for the time left.
        if is_interrupted(ret) || (is_avail(ret) && flags & sys::FI_PEEK == 0) {
            return self.sread_checked(buf, started.left(timeout), flags);
        }
        // Neither -FI_EAGAIN nor an error entry to read: never empty.
        decode(&self.inner, ret, event, buf, ReadCall::new(true, flags))
    }

    /// One `fi_eq_sread`: (return value, event type). With a buffer
    /// smaller than the default, only with `FI_PEEK` (see `sread_checked`).
    #[inline(always)]
    fn sread_call(
        &self,
        buf: &mut EventBuf,
        timeout: Option<Duration>,
        flags: u64,
    ) -> (isize, u32) {
        let mut event = 0u32;
        // SAFETY: as in read_unchecked (the caller made sure that buf
        // holds every event it may take, or peeks); sread blocks at most
        // timeout ms.
        let ret = unsafe {
            sys::fi_eq_sread(
                self.as_raw(),
                &mut event,
                buf.words.as_mut_ptr().cast(),
                buf.len(),
                provider_timeout_ms(timeout),
                flags,
            )
        };
        (ret, event)
    }

    /// `sread_flags` into a buffer smaller than the default: waits for an
    /// event with `FI_PEEK`, which leaves it queued (a copy cut short
    /// there is not looked at), then reads it as `read` does, under the
    /// small-read lock (see `small_read`: a bind that raises the queue's
    /// connection data size does not wait for the blocked part). On a
    /// queue whose reads are serialized, also `sread` into a default
    /// buffer, the wait held under that lock a slice at a time. Again
    /// while another reader took the event first and time is left.
    #[cold]
    #[inline(never)]
    fn sread_checked<'b>(
        &self,
        buf: &'b mut EventBuf,
        timeout: Option<Duration>,
        flags: u64,
    ) -> Result<EqRead<'b>> {
        if buf.cm_data_capacity() < DEFAULT_CM_DATA_CAPACITY {
            // Refused at once when too small already (it is checked again,
            // under the lock, before the event is read).
            drop(self.inner.small_read(buf.cm_capacity)?);
        }
        let deadline = Deadline::after(timeout);
        let how = ReadCall::new(true, flags);
        let serial = self.inner.serial_reads.is_some();
        loop {
            // Serialized reads wait under the lock, a slice at a time, so
            // that other readers wait at most one slice.
            let wait = if serial {
                Some(deadline.slice(SERIAL_SREAD_SLICE))
            } else {
                deadline.left()
            };
            let (ret, event) = {
                let _serial = self.inner.serial_read();
                self.sread_call(buf, wait, sys::FI_PEEK)
            };
            // The end of a slice, of the longest wait one call takes, or of
            // a wait a signal cut short (see `is_interrupted`): on for the
            // time left. Only the deadline says the timeout passed.
            if is_again(ret) || is_interrupted(ret) {
                if !deadline.passed() {
                    continue;
                }
                return Ok(EqRead::TimedOut);
            }
            // A failure of the wait itself, as the one blocking call
            // reports it; an event, an error entry or one too large for
            // the buffer (sockets: -FI_ETOOSMALL) is read below.
            if ret < 0 && !matches!(classify(ret), Err(Errno::AVAIL | Errno::TOOSMALL)) {
                return decode(&self.inner, ret, event, buf, how);
            }
            let (ret, event) = self.read_checked(buf.cm_capacity, &mut buf.words, flags)?;
            if is_avail(ret) && !how.peek() {
                // The error entry; none when another reader took it first,
                // and this one waits on.
                if let Some(read) = buf.read_error(&self.inner)? {
                    return Ok(buf.error(read));
                }
            } else if !is_again(ret) {
                // Neither -FI_EAGAIN nor an error entry: never empty.
                return decode(&self.inner, ret, event, buf, how);
            }
            if deadline.passed() {
                return Ok(EqRead::TimedOut);
            }
        }
    }

    /// `fi_eq_readerr`: the next error entry, its `err_data` copied into
    /// `buf`; `None` when there is none. [`read`](Self::read) and
    /// [`sread`](Self::sread) hand error entries back themselves
    /// ([`EqRead::Error`]); this reads one after a peek, into a buffer of
    /// its own.
    ///
    /// # Errors
    /// [`Error::Call`] when `fi_eq_readerr` fails (other than with
    /// `FI_EAGAIN`, which is `None`).
    #[doc(alias = "fi_eq_readerr")]
    pub fn read_err<'b>(&self, buf: &'b mut ErrDataBuf) -> Result<Option<EqError<'b>>> {
        read_err(&self.inner, &mut buf.data)
    }

    /// `fi_eq_write` of an `FI_NOTIFY` event (a `struct fi_eq_entry`) of
    /// these fields: [`write_entry`](Self::write_entry) of
    /// `Entry::new(fid, context, data)`. Needs a queue opened with
    /// [`EqAttr::write`].
    ///
    /// # Errors
    /// As [`write_entry`](Self::write_entry).
    #[doc(alias = "fi_eq_write")]
    #[inline]
    pub fn write_notify(&self, fid: Fid, context: usize, data: u64) -> Result<()> {
        self.write_entry(&Entry::new(fid, context, data))
    }

    /// `fi_eq_write` of an `FI_NOTIFY` event: `entry` as it is, which a
    /// read hands back as [`Event::Notify`]. Needs a queue opened with
    /// [`EqAttr::write`]. An entry kept across writes, of which only a field
    /// changes, is written as C writes its `struct fi_eq_entry`; an entry a
    /// read of another queue handed out may be passed on as it is.
    ///
    /// ```
    /// use libfabric::{info::{getinfo, Hints}, eq::{EqAttr, Entry, Event, EventBuf, EqRead}, EventQueue, Fabric};
    /// let list = getinfo(&Hints::new().provider("tcp").node("127.0.0.1"))?;
    /// let fabric = Fabric::open(list.first().unwrap())?;
    /// let eq = EventQueue::open(&fabric, &EqAttr::new().write(true))?;
    /// let mut buf = EventBuf::new();
    /// let mut entry = Entry::new(eq.fid(), 7, 0);
    /// for i in 0..3 {
    ///     entry.data = i;
    ///     eq.write_entry(&entry)?;
    ///     match eq.read(&mut buf)? {
    ///         EqRead::Event(Event::Notify(got)) => assert_eq!(*got, entry),
    ///         other => panic!("unexpected {other:?}"),
    ///     }
    /// }
    /// # Ok::<(), libfabric::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] on a queue opened without
    /// [`EqAttr::write`]; [`Error::Call`] when `fi_eq_write` fails, or with
    /// `FI_EIO` when it wrote less than the whole entry.
    #[doc(alias = "fi_eq_write")]
    #[inline]
    pub fn write_entry(&self, entry: &Entry) -> Result<()> {
        if !self.hot.writable {
            return Err(not_writable());
        }
        // SAFETY: fi_eq_write(3) copies len bytes of the entry into the
        // queue: an Entry is a whole fi_eq_entry (its layout, asserted
        // below Entry). The fid is only data to the provider for an
        // application's event.
        let ret = unsafe {
            sys::fi_eq_write(
                self.as_raw(),
                sys::FI_NOTIFY,
                (entry as *const Entry).cast(),
                size_of::<sys::fi_eq_entry>(),
                0,
            )
        };
        // The whole entry written: one comparison.
        if ret == size_of::<sys::fi_eq_entry>() as isize {
            return Ok(());
        }
        Err(short_write(ret))
    }

    /// `fi_eq_strerror`: the provider's text for an error entry.
    #[doc(alias = "fi_eq_strerror")]
    #[must_use]
    pub fn strerror(&self, err: &EqError<'_>) -> String {
        crate::error::provider_text(|buf, len| {
            // SAFETY: fi_eq_strerror(3) on the open queue; it writes at most len bytes
            // into buf; err_data is passed back as the error entry gave it
            // (a private field), NULL for none (an empty slice's pointer
            // dangles); the error number is one the provider can negate
            // (provider_errno).
            unsafe {
                sys::fi_eq_strerror(
                    self.as_raw(),
                    provider_errno(err.prov_errno),
                    if err.err_data.is_empty() {
                        ptr::null()
                    } else {
                        err.err_data.as_ptr().cast()
                    },
                    buf,
                    len,
                )
            }
        })
    }

    /// The endpoint or passive endpoint bound to this queue that `fid`
    /// names, if it is still open. An endpoint of a `FI_THREAD_DOMAIN` or
    /// `FI_THREAD_COMPLETION` domain is not handed out (`None`): its handles
    /// stay on its domain's thread (compare the event's fid with
    /// [`Endpoint::fid`](crate::Endpoint::fid) there).
    ///
    /// An event names its object by address, and a closed endpoint's
    /// address may be reused by a newer one. The tcp and verbs providers
    /// remove a closed endpoint's events from its queue
    /// (`ofi_eq_remove_fid_events`, `prov/tcp/src/tcpx_ep.c` 626;
    /// `vrb_eq_remove_events`, `prov/verbs/src/verbs_ep.c` 546, in 1.17), so
    /// there an event read now names the object now at that address. On
    /// other providers an address used by an earlier endpoint of this queue
    /// resolves to `None` rather than to the wrong object.
    #[must_use]
    pub fn resolve(&self, fid: Fid) -> Option<EventSource> {
        let (obj, reused) = self.inner.registry.find(fid)?;
        if reused && !matches!(self.inner.fabric.provider.as_str(), "tcp" | "verbs") {
            return None;
        }
        match obj {
            RegisteredObject::Endpoint(w) => w
                .upgrade()
                .map(|inner| EventSource::Endpoint(crate::Endpoint::from_inner(inner))),
            RegisteredObject::Passive(w) => w
                .upgrade()
                .map(|inner| EventSource::Passive(crate::PassiveEndpoint { inner })),
            // Its handles stay on its domain's thread.
            RegisteredObject::Serialized(_) => None,
        }
    }

    /// Closes the queue now (`fi_close`). Connection requests still queued
    /// are rejected first, and passive endpoints bound to it close with it.
    ///
    /// # Errors
    /// [`Error::InUse`] while endpoints bound to it or other handles exist;
    /// [`Error::Call`] when `fi_close` fails. The queue comes back with the
    /// error, still open.
    pub fn close(self) -> Handback<Self> {
        let hot = self.hot;
        close_last(
            self.inner,
            ObjectKind::EventQueue,
            |inner| EventQueue { inner, hot },
            |i| {
                i.drain();
                i.fid.close()
            },
        )
    }
}

#[cold]
fn buf_too_small(needed: usize, given: usize) -> Error {
    Error::BufferTooSmall {
        what: "EventBuf connection data capacity",
        needed,
        given,
    }
}

/// How long a serialized blocking read waits at a time (see
/// `EqInner::serial_reads`).
const SERIAL_SREAD_SLICE: Duration = Duration::from_millis(100);

/// Refuses an endpoint whose connection data an [`EventBuf::new`] could
/// not hold (no libfabric provider has one: tcp and sockets carry 256
/// bytes, verbs 56).
///
/// # Errors
/// [`Error::TooLarge`] over [`DEFAULT_CM_DATA_CAPACITY`].
pub(crate) fn check_cm_data_size(size: usize) -> Result<()> {
    if size > DEFAULT_CM_DATA_CAPACITY {
        return Err(Error::TooLarge {
            what: "connection data of an endpoint bound to an event queue (FI_OPT_CM_DATA_SIZE)",
            limit: DEFAULT_CM_DATA_CAPACITY,
            given: size,
        });
    }
    Ok(())
}

#[cold]
fn not_writable() -> Error {
    Error::InvalidArgument(
        "fi_eq_write needs an event queue opened with FI_WRITE (EqAttr::write(true))".into(),
    )
}

/// Which call a decoded event came from: the name its errors carry, and
/// whether it was a peek (which leaves a request's `fi_info` and an error
/// entry in the queue). One byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadCall {
    /// `fi_eq_read`
    Read,
    /// `fi_eq_read` with `FI_PEEK`
    Peek,
    /// `fi_eq_sread`
    Sread,
    /// `fi_eq_sread` with `FI_PEEK`
    Speek,
}

impl ReadCall {
    #[inline(always)]
    fn new(sread: bool, flags: u64) -> Self {
        match (sread, flags & sys::FI_PEEK != 0) {
            (false, false) => ReadCall::Read,
            (false, true) => ReadCall::Peek,
            (true, false) => ReadCall::Sread,
            (true, true) => ReadCall::Speek,
        }
    }

    fn peek(self) -> bool {
        matches!(self, ReadCall::Peek | ReadCall::Speek)
    }

    fn name(self) -> &'static str {
        match self {
            ReadCall::Read => "fi_eq_read",
            ReadCall::Peek => "fi_eq_read(FI_PEEK)",
            ReadCall::Sread | ReadCall::Speek => "fi_eq_sread",
        }
    }
}

/// What one `fi_eq_read` returned, as an [`EqRead`]. The outcomes that
/// need nothing but the buffer are decided inline, each behind tests of
/// the event type and of the length: an `FI_NOTIFY` entry, an empty queue,
/// and a request without an `fi_info` to hand out (one the application
/// wrote, or a peeked one) that fits the buffer. Everything else is
/// [`decode_slow`]'s, out of line.
#[inline(always)]
pub(crate) fn decode<'b>(
    eq: &Arc<EqInner>,
    ret: isize,
    event: u32,
    buf: &'b mut EventBuf,
    how: ReadCall,
) -> Result<EqRead<'b>> {
    if event == sys::FI_NOTIFY {
        // Compared signed: a negative code is below any length.
        if ret >= ENTRY_LEN {
            // The provider wrote at least a full fi_eq_entry (ret).
            let buf: &'b EventBuf = buf;
            return Ok(EqRead::Event(Event::Notify(buf.entry())));
        }
    } else if request_fits(ret, buf.data_room) && event == sys::FI_CONNREQ {
        // The provider wrote ret bytes, at least the fixed part of an
        // fi_eq_cm_entry and no more than the buffer holds (request_fits).
        let e = buf.view().cm_entry();
        // A read hands the fi_info to the application, which must free it
        // (fi_eq(3)) and answer the request (decode_slow); a peek leaves
        // both with the queue. Providers always give a request one: a NULL
        // one was written by the application.
        if e.info.is_null() || how.peek() {
            let buf: &'b EventBuf = buf;
            // SAFETY: ret is at least the fixed part of an
            // fi_eq_cm_entry and at most the buffer's length
            // (request_fits), so the slice is in bounds and long enough
            // for an UnownedConnReq.
            let request =
                unsafe { UnownedConnReq::new(buf.as_bytes().get_unchecked(..ret as usize)) };
            return Ok(EqRead::Event(Event::UnownedConnReq(request)));
        }
    }
    if is_again(ret) {
        return Ok(EqRead::Empty);
    }
    let (words, err) = buf.parts();
    decode_slow(eq, ret, event, words, err, how)
}

/// `fi_eq_readerr` with `data` for the `err_data`.
fn read_err<'b>(eq: &EqInner, data: &'b mut [u8]) -> Result<Option<EqError<'b>>> {
    Ok(read_err_entry(eq, data)?.map(|read| eq_error(read.entry, &data[..read.len])))
}

/// An error entry [`EventBuf::read_error`] read: the entry, and the length
/// of its `err_data`, at the start of the buffer's error data.
pub(crate) struct ReadError {
    entry: sys::fi_eq_err_entry,
    len: usize,
}

impl EventBuf {
    /// `fi_eq_readerr` into the buffer's error data; `None` when there is
    /// no error entry (another reader took the one a read announced with
    /// `-FI_EAVAIL`). The result borrows nothing, so that a caller that
    /// finds none may wait and read again.
    pub(crate) fn read_error(&mut self, eq: &EqInner) -> Result<Option<ReadError>> {
        read_err_entry(eq, &mut self.err.data)
    }

    /// The error entry [`read_error`](Self::read_error) read.
    pub(crate) fn error(&self, read: ReadError) -> EqRead<'_> {
        EqRead::Error(eq_error(read.entry, &self.err.data[..read.len]))
    }
}

/// An error entry as [`EqError`], its `err_data` the `err_data` given.
fn eq_error(entry: sys::fi_eq_err_entry, err_data: &[u8]) -> EqError<'_> {
    EqError {
        fid: Fid::from_raw(entry.fid),
        context: entry.context as usize,
        data: entry.data,
        err: Errno::from_raw_os_error(entry.err),
        prov_errno: entry.prov_errno,
        err_data,
    }
}

/// `fi_eq_readerr` with `data` for the `err_data`: the entry, and the
/// length of its `err_data`, copied to the start of `data`; `None` when
/// there is none.
/// Borrows nothing, so that a caller that finds none may read again.
fn read_err_entry(eq: &EqInner, data: &mut [u8]) -> Result<Option<ReadError>> {
    let serial = eq.serial_read();
    let read = read_err_data(data, "fi_eq_readerr", |err_data, err_data_size| {
        let mut entry = sys::fi_eq_err_entry {
            err_data,
            err_data_size,
            ..Default::default()
        };
        // SAFETY: fi_eq_readerr(3): entry is a full fi_eq_err_entry; with
        // err_data_size non-zero the provider copies err_data into our
        // buffer (API >= 1.5, which getinfo requests).
        let ret = unsafe { sys::fi_eq_readerr(eq.fid.as_ptr(), &mut entry, 0) };
        (ret, (entry.err_data, entry.err_data_size), entry)
    })?;
    drop(serial);
    Ok(read.map(|(entry, err_data)| ReadError {
        entry,
        len: err_data.len(),
    }))
}

/// The error of an `fi_eq_write` that did not write the whole entry: the
/// call's error, or a short write.
#[cold]
#[inline(never)]
fn short_write(ret: isize) -> Error {
    match check_len("fi_eq_write", ret) {
        Err(e) => e,
        Ok(_) => Error::call("fi_eq_write", Errno::IO),
    }
}

/// Whether a read's return value `ret` is an `fi_eq_cm_entry` (its fixed
/// part at least) that a buffer whose room for connection data is `room`
/// holds: one unsigned compare bounds it on both sides, as `ret` under the
/// fixed part, and any negative code, wraps past any room a buffer has.
#[inline(always)]
fn request_fits(ret: isize, room: usize) -> bool {
    (ret as usize).wrapping_sub(size_of::<sys::fi_eq_cm_entry>()) <= room
}

/// Sizes an event's return value is compared with (signed: a negative
/// code is below any length).
const ENTRY_LEN: isize = size_of::<sys::fi_eq_entry>() as isize;
const CM_ENTRY_LEN: isize = size_of::<sys::fi_eq_cm_entry>() as isize;

/// What [`decode`] does not decide inline: a negative code (an error
/// entry announced, `-FI_EAVAIL`, or the call's error), an entry shorter
/// than its type (`FI_EIO`), the other entry types, a request read with
/// its `fi_info`, an `FI_CONNECTED` or `FI_SHUTDOWN` (which tell the
/// queue's objects something: the request's passive endpoint, the
/// connection's endpoint), and an event type this crate does not name.
#[inline(never)]
fn decode_slow<'b>(
    eq: &Arc<EqInner>,
    ret: isize,
    event: u32,
    words: Words<'b>,
    err: &'b mut [u8],
    how: ReadCall,
) -> Result<EqRead<'b>> {
    let len = match classify(ret) {
        Ok(len) => len,
        Err(Errno::AGAIN) => return Ok(EqRead::Empty),
        Err(Errno::AVAIL) if how.peek() => return Ok(EqRead::ErrorPending),
        Err(Errno::AVAIL) => return decode_error(eq, err),
        Err(errno) => return Err(Error::call(how.name(), errno)),
    };
    let needed = match event {
        sys::FI_NOTIFY | sys::FI_MR_COMPLETE | sys::FI_AV_COMPLETE | sys::FI_JOIN_COMPLETE => {
            ENTRY_LEN
        }
        sys::FI_CONNREQ | sys::FI_CONNECTED | sys::FI_SHUTDOWN => CM_ENTRY_LEN,
        _ => 0,
    };
    if ret < needed {
        return Err(Error::call(how.name(), Errno::IO));
    }
    if needed == ENTRY_LEN {
        // The provider wrote at least a full fi_eq_entry (ret).
        let entry = words.entry();
        return Ok(EqRead::Event(match event {
            sys::FI_NOTIFY => Event::Notify(entry),
            sys::FI_MR_COMPLETE => Event::MrComplete(entry),
            sys::FI_AV_COMPLETE => Event::AvComplete(entry),
            _ => Event::JoinComplete(entry),
        }));
    }
    if needed == 0 {
        return Ok(EqRead::Event(Event::Unknown {
            event,
            bytes: words.entry_bytes(len),
        }));
    }
    // The provider wrote at least the fixed part of an fi_eq_cm_entry
    // (ret, above).
    let e = words.cm_entry();
    let (fid, info) = (Fid::from_raw(e.fid), e.info);
    // At least the fixed part of an fi_eq_cm_entry: ret (needed, above)
    // and the words (`Words`) are.
    let entry = words.entry_bytes(len);
    let data = &entry[size_of::<sys::fi_eq_cm_entry>()..];
    Ok(EqRead::Event(match event {
        // A peek leaves the fi_info with the queue: no Info is made of it.
        sys::FI_CONNREQ => match (!how.peek()).then(|| Info::from_raw(info)).flatten() {
            Some(info) => return Ok(owned_request(eq, fid, info, data)),
            // SAFETY: entry is at least the fixed part of an
            // fi_eq_cm_entry long (above).
            None => Event::UnownedConnReq(unsafe { UnownedConnReq::new(entry) }),
        },
        sys::FI_CONNECTED => {
            if !how.peek() {
                // Not expected for CONNECTED, but an fi_info handed to the
                // application is its to free.
                drop(Info::from_raw(info));
            }
            eq.connection_event(fid, true);
            Event::Connected(CmEntry { fid, data })
        }
        _ => {
            eq.connection_event(fid, false);
            Event::Shutdown(CmEntry { fid, data })
        }
    }))
}

/// An error entry announced by a read (`-FI_EAVAIL`), read. Another reader
/// may have taken the entry meanwhile: then the queue is empty as far as
/// this read knows.
fn decode_error<'b>(eq: &EqInner, err: &'b mut [u8]) -> Result<EqRead<'b>> {
    Ok(match read_err(eq, err)? {
        Some(e) => EqRead::Error(e),
        None => EqRead::Empty,
    })
}

/// A connection request read with its `fi_info`, now the application's:
/// the request to answer, from the passive endpoint of this queue it
/// names. (One without an `fi_info`, written by the application, or
/// peeked, is unowned: `decode`.)
fn owned_request<'b>(eq: &Arc<EqInner>, fid: Fid, info: Info, data: &'b [u8]) -> EqRead<'b> {
    let source = eq.find_passive(fid).map(|pep| RequestSource {
        pep,
        _eq: eq.clone(),
    });
    complete_names(&info, &eq.fabric);
    let request = ConnRequest::new(info, source);
    EqRead::Event(Event::ConnReq(ConnReq { fid, request, data }))
}

/// Names the fabric a connection request arrived on in its `fi_info`: the
/// provider and fabric names, which providers fill in their own way
/// (sockets leaves the provider out and names the fabric differently from
/// `fi_getinfo`), so that the domain and endpoint opened from it pass the
/// same-fabric checks. The request certainly belongs to this fabric: it
/// came from a passive endpoint of it.
fn complete_names(info: &Info, fabric: &FabricInner) {
    // SAFETY: the fi_info is owned by the caller (just read from the queue);
    // fi_freeinfo frees these strings with free(), so they come from strdup.
    unsafe {
        let attr = (*info.ptr.as_ptr()).fabric_attr;
        if attr.is_null() {
            return;
        }
        for (field, value) in [
            (&mut (*attr).prov_name, &fabric.provider),
            (&mut (*attr).name, &fabric.name),
        ] {
            if let Ok(c) = std::ffi::CString::new(value.as_str()) {
                let copy = libc::strdup(c.as_ptr());
                if !copy.is_null() {
                    libc::free((*field).cast());
                    *field = copy;
                }
            }
        }
    }
}

impl sealed::Sealed for EventQueue {}

impl Waitable for EventQueue {
    fn wait_fid(&self) -> *mut sys::fid {
        self.inner.fid.fid()
    }
    fn fabric_ptr(&self) -> *const () {
        Arc::as_ptr(&self.inner.fabric).cast()
    }
    fn fabric(&self) -> Fabric {
        Fabric {
            inner: self.inner.fabric.clone(),
        }
    }
    fn wait_obj(&self) -> WaitObj {
        self.inner.wait_obj
    }
    fn event_queue(&self) -> Option<*mut sys::fid_eq> {
        // Only where a wait looks at the queue once more (see
        // EqInner::second_look).
        self.inner.second_look().then(|| self.inner.fid.as_ptr())
    }
}

impl fmt::Debug for EventQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventQueue")
            .field("fid", &self.fid())
            .field("wait_obj", &self.inner.wait_obj)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::info::{getinfo, Hints};
    use std::time::Instant;

    /// A guard of the reads' speed, not of their correctness: a read's
    /// result is no larger than its largest event, the error entry and the
    /// error fitting beside it under the event's own tag, so that a read
    /// that finds an event stores one tag where it stored two. (A larger
    /// `EqError` or `Error` would add a tag of its own, and an instruction
    /// to every read.) Enum layout is the compiler's choice: this holds
    /// for the compilers and 64-bit targets the crate is measured on.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_read_result_is_its_largest_event_under_one_tag() {
        assert_eq!(size_of::<EqRead<'static>>(), size_of::<Event<'static>>());
        assert_eq!(
            size_of::<Result<EqRead<'static>>>(),
            size_of::<Event<'static>>()
        );
    }

    /// A raise of the queue's connection data size waits for a read of a
    /// small buffer that checked the old size and has not called the
    /// provider yet (held here between the two), and the reads after it
    /// see the new size.
    #[test]
    fn a_raise_of_the_connection_data_size_waits_for_the_small_reads_under_way() {
        let list = getinfo(&Hints::new().provider("tcp").node("127.0.0.1"))
            .expect("the tcp provider on 127.0.0.1");
        let fabric = Fabric::open(list.first().expect("an fi_info")).unwrap();
        let eq = EventQueue::open(&fabric, &EqAttr::new()).unwrap();
        let small = EventBuf::with_cm_data_capacity(8).unwrap();
        let reading = eq
            .inner
            .small_read(small.cm_capacity)
            .expect("nothing bound yet");
        let inner = eq.inner.clone();
        let raise = std::thread::spawn(move || {
            inner.raise_cm_data(256);
            Instant::now()
        });
        std::thread::sleep(Duration::from_millis(200));
        assert!(!raise.is_finished(), "the raise waits for the read");
        let released = Instant::now();
        drop(reading);
        assert!(raise.join().unwrap() >= released);
        assert!(matches!(
            eq.inner.small_read(small.cm_capacity),
            Err(Error::BufferTooSmall {
                needed: 256,
                given: 8,
                ..
            })
        ));
    }

    /// A request's length fits between the fixed part of an
    /// `fi_eq_cm_entry` and the buffer's end, both included; below, above,
    /// and every negative code do not.
    #[test]
    fn a_request_fits_from_its_fixed_part_to_the_buffer_end() {
        let fixed = size_of::<sys::fi_eq_cm_entry>() as isize;
        for room in [0, 8, 1024, MAX_CM_DATA_CAPACITY] {
            let end = fixed + room as isize;
            for (ret, fits) in [
                (fixed, true),
                (end, true),
                (fixed + room as isize / 2, true),
                (fixed - 1, false),
                (0, false),
                (end + 1, false),
                (isize::MAX, false),
                (-1, false),
                (Errno::AGAIN.to_ret(), false),
                (isize::MIN, false),
            ] {
                assert_eq!(request_fits(ret, room), fits, "ret {ret}, room {room}");
            }
        }
    }

    #[test]
    fn endpoints_with_more_connection_data_than_a_default_buffer_holds_are_refused() {
        assert!(check_cm_data_size(DEFAULT_CM_DATA_CAPACITY).is_ok());
        assert!(matches!(
            check_cm_data_size(DEFAULT_CM_DATA_CAPACITY + 1),
            Err(Error::TooLarge {
                limit: DEFAULT_CM_DATA_CAPACITY,
                ..
            })
        ));
    }
}
