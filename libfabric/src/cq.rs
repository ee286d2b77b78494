//! Completion queues, per fi_cq(3).
//!
//! The entry format is a type parameter ([`Context`], [`Msg`], [`Data`],
//! [`Tagged`], [`Unspec`]), so [`CompletionQueue::read`] fills the caller's
//! slice of the right entry type and allocates nothing.
//!
//! ```
//! use libfabric::{info::{getinfo, Hints}, cq::{CqAttr, Msg, MsgEntry, CqRead}, Domain, Fabric, CompletionQueue};
//! let list = getinfo(&Hints::new().provider("tcp").node("127.0.0.1"))?;
//! let info = list.first().unwrap();
//! let fabric = Fabric::open(info)?;
//! let domain = Domain::open(&fabric, info)?;
//! let cq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new().size(128))?;
//! let mut entries: [MsgEntry; 16] = Default::default();
//! assert!(matches!(cq.read(&mut entries)?, CqRead::Empty));
//! # Ok::<(), libfabric::Error>(())
//! ```

use crate::buffer::{Buffer, BufferPool, Message};
use crate::domain::{Domain, DomainInner};
use crate::epochs::{Entered, Epochs};
use crate::eq::{ErrDataBuf, Fid};
use crate::error::{
    check, check_queue_size, classify, is_again, is_avail, provider_errno, Errno, Error, Handback,
    ObjectKind, ObjectScope, Result,
};
use crate::fabric::Fabric;
use crate::fid::{close_last, OwnedFid};
use crate::progress::{Noted, ProgressLock, ProgressRead};
use crate::threading::{ThreadModel, ThreadSafe};
use crate::wait::{
    open_with_default_wait, provider_timeout_ms, query_wait_obj, refuse_poisoned, refused_progress,
    resolved_wait_obj, sealed, trywait_raw, Deadline, TryWait, WaitObj, WaitSet, WaitSetInner,
    Waitable,
};
use bitflags::bitflags;
use libfabric_sys::fabric as sys;
use std::borrow::Cow;
use std::ffi::c_void;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The longest an `sread` blocks at once: an endpoint of the queue being
/// enabled or closed on another thread waits at most this long for it.
const SREAD_SLICE: Duration = Duration::from_millis(100);

bitflags! {
    /// Completion flags (`fi_cq_*_entry::flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct CompletionFlags: u64 {
        /// `FI_SEND`
        const SEND = sys::FI_SEND;
        /// `FI_RECV`
        const RECV = sys::FI_RECV;
        /// `FI_MSG`
        const MSG = sys::FI_MSG;
        /// `FI_RMA`
        const RMA = sys::FI_RMA;
        /// `FI_TAGGED`
        const TAGGED = sys::FI_TAGGED;
        /// `FI_ATOMIC`
        const ATOMIC = sys::FI_ATOMIC;
        /// `FI_READ`
        const READ = sys::FI_READ;
        /// `FI_WRITE`
        const WRITE = sys::FI_WRITE;
        /// `FI_REMOTE_READ`
        const REMOTE_READ = sys::FI_REMOTE_READ;
        /// `FI_REMOTE_WRITE`
        const REMOTE_WRITE = sys::FI_REMOTE_WRITE;
        /// `FI_REMOTE_CQ_DATA`: the entry's `data` holds remote CQ data.
        const REMOTE_CQ_DATA = sys::FI_REMOTE_CQ_DATA;
        /// `FI_MULTI_RECV`: a multi-receive buffer was released.
        const MULTI_RECV = sys::FI_MULTI_RECV;
        /// `FI_MORE`
        const MORE = sys::FI_MORE;
        /// `FI_CLAIM`
        const CLAIM = sys::FI_CLAIM;
        /// Bits this crate does not name.
        const _ = !0;
    }
}

/// A completion entry type. Sealed: implemented by this crate's entry types.
///
/// Entries are read in place and reached through a [`Completions`] guard as
/// shared references: a completion cannot be moved out of the batch it was
/// read in, which is what lets the crate know when no completion naming a
/// buffer can still be handled (see [`BufferPool::reclaim`]).
///
/// [`BufferPool::reclaim`]: crate::BufferPool::reclaim
pub trait CompletionEntry: sealed::Sealed + Default + Send + 'static {
    /// The operation's context, as posted.
    fn context(&self) -> usize;
    /// Takes the context, leaving 0: used to hand a buffer back exactly
    /// once. Only the crate can call it (the token): a context taken from
    /// outside would leave its buffer neither reclaimed nor handed back.
    #[doc(hidden)]
    fn take_context(&self, token: sealed::Token) -> *mut c_void;
    /// The members a [`Completion`] copies: flags, length, remote CQ data
    /// and tag, 0 where the format has none.
    #[doc(hidden)]
    fn members(&self, token: sealed::Token) -> Members;
}

/// What [`CompletionEntry::members`] copies out of an entry.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Members {
    flags: u64,
    len: usize,
    data: u64,
    tag: u64,
    buf: usize,
}

impl Members {
    /// What a multi-receive needs of the completion.
    pub(crate) fn outcome(&self) -> crate::buffer::Outcome {
        crate::buffer::Outcome {
            flags: self.flags,
            buf: self.buf,
            len: self.len,
            failed: false,
        }
    }
}

/// A CQ format: the entry type and its `enum fi_cq_format`. Sealed.
pub trait Format: sealed::Sealed + Send + Sync + 'static {
    /// The `fi_cq_format` value.
    const FORMAT: sys::fi_cq_format;
    /// Most entries one read may return (1 for [`Unspec`]).
    const MAX_BATCH: usize;
    /// The entry type.
    type Entry: CompletionEntry;
}

macro_rules! entry_type {
    ($(#[$doc:meta])* $name:ident($raw:ident), $format:ident, $fmt:ident, |$r:ident| $members:expr) => {
        $(#[$doc])*
        ///
        /// Not `Clone`, and reached only by shared reference once read: each
        /// completion exists once, in the batch it was read in, so that the
        /// buffer it returns can be reclaimed exactly once. Not `Sync`:
        /// reclaiming takes the context through a shared reference.
        #[repr(transparent)]
        pub struct $name(std::cell::UnsafeCell<sys::$raw>);

        impl Default for $name {
            fn default() -> Self {
                $name(std::cell::UnsafeCell::new(sys::$raw::default()))
            }
        }

        impl $name {
            /// The C entry. Only copies of its members leave this module,
            /// and the context is only written by `take_context`, on the
            /// entry's one thread (the type is not `Sync`).
            #[inline(always)]
            fn raw(&self) -> &sys::$raw {
                // SAFETY: no reference to the entry's contents outlives the
                // accessor that made it, so none is alive while
                // take_context writes op_context.
                unsafe { &*self.0.get() }
            }
        }

        // SAFETY: the entry is plain data; its pointers are opaque values
        // this crate never dereferences through the entry.
        unsafe impl Send for $name {}

        impl sealed::Sealed for $name {}

        impl Drop for $name {
            /// A completion that was not reclaimed hands its buffer back
            /// to its pool here: one null check when it was.
            #[inline]
            fn drop(&mut self) {
                if !self.0.get_mut().op_context.is_null() {
                    let outcome = self.members(sealed::Token(())).outcome();
                    crate::buffer::release_unreclaimed(self.0.get_mut().op_context, outcome);
                }
            }
        }

        impl CompletionEntry for $name {
            #[inline]
            fn context(&self) -> usize {
                self.raw().op_context as usize
            }
            #[inline]
            fn take_context(&self, _: sealed::Token) -> *mut c_void {
                // SAFETY: the type is not Sync, so this is the only access
                // to the entry on any thread, and no reference into it is
                // alive (see raw).
                unsafe { ptr::replace(&raw mut (*self.0.get()).op_context, ptr::null_mut()) }
            }
            #[inline]
            fn members(&self, _: sealed::Token) -> Members {
                let $r = self.raw();
                $members
            }
        }

        /// The format whose entries are
        #[doc = concat!("[`", stringify!($name), "`].")]
        #[derive(Debug, Clone, Copy)]
        pub struct $format;

        impl sealed::Sealed for $format {}

        impl Format for $format {
            const FORMAT: sys::fi_cq_format = sys::$fmt;
            const MAX_BATCH: usize = usize::MAX;
            type Entry = $name;
        }
    };
}

entry_type!(
    /// `struct fi_cq_entry` (`FI_CQ_FORMAT_CONTEXT`): the context only.
    ContextEntry(fi_cq_entry), Context, FI_CQ_FORMAT_CONTEXT,
    |_r| Members::default()
);
entry_type!(
    /// `struct fi_cq_msg_entry` (`FI_CQ_FORMAT_MSG`).
    MsgEntry(fi_cq_msg_entry), Msg, FI_CQ_FORMAT_MSG,
    |r| Members { flags: r.flags, len: r.len, ..Members::default() }
);
entry_type!(
    /// `struct fi_cq_data_entry` (`FI_CQ_FORMAT_DATA`).
    DataEntry(fi_cq_data_entry), Data, FI_CQ_FORMAT_DATA,
    |r| Members { flags: r.flags, len: r.len, data: r.data, tag: 0, buf: r.buf as usize }
);
entry_type!(
    /// `struct fi_cq_tagged_entry` (`FI_CQ_FORMAT_TAGGED`).
    TaggedEntry(fi_cq_tagged_entry), Tagged, FI_CQ_FORMAT_TAGGED,
    |r| Members { flags: r.flags, len: r.len, data: r.data, tag: r.tag, buf: r.buf as usize }
);

/// Accessors of the members every format but CONTEXT has.
macro_rules! msg_accessors {
    ($($name:ident),*) => {$(
        impl $name {
            /// Completion flags.
            pub fn flags(&self) -> CompletionFlags {
                CompletionFlags::from_bits_retain(self.raw().flags)
            }
            /// Bytes received (receives) or sent.
            pub fn len(&self) -> usize {
                self.raw().len
            }
            /// Whether `len` is 0.
            pub fn is_empty(&self) -> bool {
                self.raw().len == 0
            }
        }
    )*};
}

/// Accessors of the members the DATA and TAGGED formats add.
macro_rules! data_accessors {
    ($($name:ident),*) => {$(
        impl $name {
            /// Start of the received data (multi-receive), as an address.
            pub fn buf_addr(&self) -> usize {
                self.raw().buf as usize
            }
            /// Remote CQ data, valid when `flags()` has `REMOTE_CQ_DATA`.
            pub fn data(&self) -> u64 {
                self.raw().data
            }
        }
    )*};
}

msg_accessors!(MsgEntry, DataEntry, TaggedEntry);
data_accessors!(DataEntry, TaggedEntry);

impl TaggedEntry {
    /// The message tag.
    pub fn tag(&self) -> u64 {
        self.raw().tag
    }
}

macro_rules! entry_debug {
    ($($name:ident { $($field:ident),* })*) => {$(
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("context", &format_args!("{:#x}", self.context()))
                    $(.field(stringify!($field), &self.$field()))*
                    .finish()
            }
        }
    )*};
}

entry_debug! {
    ContextEntry {}
    MsgEntry { flags, len }
    DataEntry { flags, len, data }
    TaggedEntry { flags, len, data, tag }
}

/// An entry of an `FI_CQ_FORMAT_UNSPEC` queue: the provider picks the
/// format, so only the context (the first member of every format) is
/// known, and reads return one entry at a time into room for the largest
/// format.
#[derive(Default)]
#[repr(transparent)]
pub struct UnspecEntry(TaggedEntry);

impl sealed::Sealed for UnspecEntry {}

impl CompletionEntry for UnspecEntry {
    fn context(&self) -> usize {
        self.0.context()
    }
    fn take_context(&self, token: sealed::Token) -> *mut c_void {
        self.0.take_context(token)
    }
    /// Only the context is known (the provider picked the format).
    fn members(&self, _: sealed::Token) -> Members {
        Members::default()
    }
}

impl fmt::Debug for UnspecEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnspecEntry")
            .field("context", &format_args!("{:#x}", self.context()))
            .finish()
    }
}

/// `FI_CQ_FORMAT_UNSPEC`: see [`UnspecEntry`].
#[derive(Debug, Clone, Copy)]
pub struct Unspec;

impl sealed::Sealed for Unspec {}

impl Format for Unspec {
    const FORMAT: sys::fi_cq_format = sys::FI_CQ_FORMAT_UNSPEC;
    const MAX_BATCH: usize = 1;
    type Entry = UnspecEntry;
}

/// An address in an address vector (`fi_addr_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Addr(pub u64);

impl Addr {
    /// `FI_ADDR_UNSPEC`: no address.
    pub const UNSPEC: Addr = Addr(sys::FI_ADDR_UNSPEC);
    /// `FI_ADDR_NOTAVAIL`: the source is not in the address vector.
    pub const NOTAVAIL: Addr = Addr(sys::FI_ADDR_NOTAVAIL);
}

impl Default for Addr {
    fn default() -> Self {
        Addr::UNSPEC
    }
}

/// One completion, read on its own with its buffer taken back from its
/// pool: what [`CompletionQueue::wait_one`] and
/// [`AsyncCompletionQueue::next`](crate::tokio::AsyncCompletionQueue::next)
/// return. The members the queue's format lacks are 0.
#[derive(Debug)]
#[non_exhaustive]
pub struct Completion {
    /// The operation's buffer, back from its pool: `None` for an operation
    /// posted from another pool, and for a message of a multi-receive
    /// until the provider released its buffer and no message of it is
    /// held (see [`Message`]).
    pub buffer: Option<Buffer>,
    /// A message received into a multi-receive buffer
    /// ([`Endpoint::recv_multi`](crate::Endpoint::recv_multi)).
    pub message: Option<Message>,
    /// Completion flags.
    pub flags: CompletionFlags,
    /// Bytes received (receives) or sent.
    pub len: usize,
    /// Remote CQ data, valid when `flags` has `REMOTE_CQ_DATA`.
    pub data: u64,
    /// The tag of a tagged receive.
    pub tag: u64,
}

impl Completion {
    /// The entry's members, and its buffer from `pool`.
    pub(crate) fn take<E: CompletionEntry>(entry: &E, pool: &BufferPool) -> Self {
        let m = entry.members(sealed::Token(()));
        let back = pool.reclaim_received(entry);
        Completion {
            buffer: back.buffer,
            message: back.message,
            flags: CompletionFlags::from_bits_retain(m.flags),
            len: m.len,
            data: m.data,
            tag: m.tag,
        }
    }

    /// The received bytes: the message of a multi-receive, else the
    /// first `len` bytes of the buffer (empty without either).
    #[must_use]
    pub fn bytes(&self) -> &[u8] {
        if let Some(message) = &self.message {
            return message;
        }
        self.buffer
            .as_deref()
            .map_or(&[], |b| &b[..self.len.min(b.len())])
    }
}

/// Attributes of a completion queue (`struct fi_cq_attr`); the format is the
/// queue's type parameter.
#[derive(Debug, Clone)]
pub struct CqAttr {
    size: usize,
    flags: u64,
    wait_obj: Option<WaitObj>,
    signaling_vector: i32,
    threshold: bool,
    wait_set: Option<WaitSet>,
}

impl Default for CqAttr {
    fn default() -> Self {
        Self::new()
    }
}

impl CqAttr {
    /// Provider default size, the default wait object (the first of
    /// `FI_WAIT_FD`, `FI_WAIT_UNSPEC` and `FI_WAIT_NONE` the provider
    /// opens).
    #[must_use]
    pub fn new() -> Self {
        CqAttr {
            size: 0,
            flags: 0,
            wait_obj: None,
            signaling_vector: 0,
            threshold: false,
            wait_set: None,
        }
    }

    /// Minimum number of entries (0: provider default).
    #[must_use]
    pub fn size(mut self, size: usize) -> Self {
        self.size = size;
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

    /// Signal this wait set (`FI_WAIT_SET`). Not on rxm, rxd, shm or
    /// sockets, where the open refuses it (see [`CompletionQueue::open`]).
    #[must_use]
    pub fn wait_set(mut self, set: &WaitSet) -> Self {
        self.wait_obj = Some(WaitObj::Set);
        self.wait_set = Some(set.clone());
        self
    }

    /// `FI_CQ_COND_THRESHOLD`: enables [`CompletionQueue::sread_threshold`].
    #[must_use]
    pub fn threshold_condition(mut self, enable: bool) -> Self {
        self.threshold = enable;
        self
    }

    /// `FI_AFFINITY` with this signaling vector.
    #[must_use]
    pub fn signaling_vector(mut self, vector: i32) -> Self {
        self.flags |= sys::FI_AFFINITY;
        self.signaling_vector = vector;
        self
    }
}

/// What a read of a completion queue found.
#[derive(Debug)]
#[must_use]
pub enum CqRead<'b, T: CompletionEntry> {
    /// Completions, at the start of the caller's slice, in a guard that
    /// hands back the buffers of those not reclaimed when it is dropped.
    Completions(Completions<'b, T>),
    /// An error completion (`-FI_EAVAIL`, then `fi_cq_readerr`), its
    /// `err_data` copied into memory of its own. Its buffer is taken with
    /// [`BufferPool::reclaim_err`](crate::BufferPool::reclaim_err), or goes
    /// back to its pool when the entry is dropped. Boxed: the rare case
    /// does not make every read's result larger.
    Error(Box<CqError<'static>>),
    /// Nothing to read (`-FI_EAGAIN`).
    Empty,
    /// The timeout of a blocking read passed.
    TimedOut,
    /// A blocking read was woken by [`CompletionQueue::signal`], or a signal
    /// sent before it began was still unreported (libfabric reports both like
    /// a timeout; this crate tells them apart).
    Signaled,
}

/// What `CompletionQueue::read_returned` found, out of line: neither the
/// empty read (told inline) nor a batch (made inline). Two words, returned
/// in registers: returned through memory (a `Result<CqRead>`), the read's
/// result had its address taken, and every batch a caller matched was
/// then stored, loaded back and tested again where it was dropped (9 to
/// 10 instructions a batch). The error is boxed on this rare path only.
enum Returned {
    Empty,
    Entry(Box<CqError<'static>>),
    Failed(Box<Error>),
}

impl<T: CompletionEntry> CqRead<'_, T> {
    /// How many completions were read (an error entry is not counted).
    #[must_use]
    pub fn count(&self) -> usize {
        match self {
            CqRead::Completions(c) => c.len(),
            _ => 0,
        }
    }
}

/// A read decoded, before an error entry it announced is read.
pub(crate) enum Decoded<'b, T: CompletionEntry> {
    Read(CqRead<'b, T>),
    ErrorPending,
}

/// The completions one read wrote, at the start of the caller's slice: a
/// `&[T]` (through `Deref`) that knows which entries the read filled.
///
/// Entries are handled in place: read with their accessors, and their
/// buffers taken with [`BufferPool::reclaim`]. They cannot be moved out
/// (there is no `&mut` access), so that each completion is released with
/// the batch it was read in. Dropping the guard hands back to their pools
/// the buffers of the completions it still holds that were not reclaimed
/// (say, after a panic while they were handled), and leaves those entries
/// empty. So a read never overwrites a completion that still names a
/// buffer, and costs the same whatever the length of the slice, as
/// `fi_cq_read` does: only the entries a read filled are looked at, once,
/// when they are released.
///
/// A guard leaked with [`std::mem::forget`] leaks its buffers, as
/// `mem::forget` does, and holds back for good the reuse of operation
/// contexts taken back from endpoints that close later while bound to its
/// queue (their slots then rest until their pool is dropped, and once the
/// queue closes, their contexts' memory is kept for the life of the
/// process, so that the leaked entries can name no later pool's); nothing
/// is handed out twice.
///
/// [`BufferPool::reclaim`]: crate::BufferPool::reclaim
#[must_use]
pub struct Completions<'b, T: CompletionEntry> {
    /// Never empty (`of_batch`).
    entries: &'b mut [T],
    batch: Entered<'b>,
}

impl<'b, T: CompletionEntry> Completions<'b, T> {
    /// The batch of a read that returned `n` entries into `buf` (at most
    /// its length: no entry past those the read could fill), counted as
    /// `batch`. A read returns a batch only when it read at least one
    /// entry into a buffer of at least one.
    #[inline(always)]
    fn of_batch(n: usize, buf: &'b mut [T], batch: Entered<'b>) -> Self {
        let n = n.min(buf.len());
        // The guard's invariant, which its drop relies on. Already known
        // where a read made the batch: a read's count is at least one
        // entry, and so is a batch's return.
        assert!(n != 0, "a batch of no completions");
        Completions {
            entries: &mut buf[..n],
            batch,
        }
    }
}

impl<T: CompletionEntry> std::ops::Deref for Completions<'_, T> {
    type Target = [T];
    #[inline]
    fn deref(&self) -> &[T] {
        self.entries
    }
}

impl<'a, T: CompletionEntry> IntoIterator for &'a Completions<'_, T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    #[inline]
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter()
    }
}

impl<T: CompletionEntry> Drop for Completions<'_, T> {
    /// Hands back the buffers of the filled entries not reclaimed: one
    /// null check per filled entry when all were. Then the batch is
    /// released (see the `epochs` module).
    ///
    /// Inline, and nothing it calls can unwind: the hand-back and the
    /// epoch's settling, out of line, are `extern "C"`, out of which a
    /// panic aborts. A call that may unwind kept in memory, for its
    /// unwinding path, whatever the caller holds across the drop (say, the
    /// buffer it has just reclaimed): its stores and loads cost every read
    /// of a completion 5 instructions (`tcp;ofi_rxm`, `fi_write` and its
    /// completion).
    #[inline(always)]
    fn drop(&mut self) {
        // SAFETY: a batch is never empty (the field's invariant, asserted
        // by `of_batch`): the first entry is there, and the scan below,
        // which tests for the end after an entry (an iterator's loop
        // tested before the first too, 4 instructions more for a batch of
        // one), indexes with no bound check.
        unsafe { std::hint::assert_unchecked(!self.entries.is_empty()) };
        let entries = &*self.entries;
        let mut i = 0;
        let unreclaimed = loop {
            if entries[i].context() != 0 {
                break true;
            }
            i += 1;
            if i == entries.len() {
                break false;
            }
        };
        if unreclaimed {
            release_unreclaimed_entries(entries);
        }
        // SAFETY: the batch is moved out once, as its guard is dropped
        // (`drop` runs once), and is not used after: `Entered` has no
        // drop of its own, so nothing else reads or drops it.
        unsafe { std::ptr::read(&self.batch) }.leave();
    }
}

/// Hands back the buffers of the entries whose contexts were not
/// reclaimed, and clears those contexts. `extern "C"` so that it cannot
/// unwind (see `Completions::drop`); called from Rust only, which passes
/// the slice as it does to any function.
#[cold]
#[inline(never)]
#[allow(improper_ctypes_definitions)]
extern "C" fn release_unreclaimed_entries<T: CompletionEntry>(entries: &[T]) {
    for entry in entries {
        if entry.context() != 0 {
            let outcome = entry.members(sealed::Token(())).outcome();
            crate::buffer::release_unreclaimed(entry.take_context(sealed::Token(())), outcome);
        }
    }
}

impl<T: CompletionEntry + fmt::Debug> fmt::Debug for Completions<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.entries, f)
    }
}

/// An error completion (`struct fi_cq_err_entry`), its `err_data` copied into
/// the caller's [`ErrDataBuf`].
pub struct CqError<'b> {
    op_context: UnreclaimedContext,
    /// Completion flags of the failed operation.
    pub flags: CompletionFlags,
    /// Bytes transferred before the error.
    pub len: usize,
    /// Remote CQ data.
    pub data: u64,
    /// Tag.
    pub tag: u64,
    /// Bytes that did not fit (truncation, `FI_ETRUNC`).
    pub olen: usize,
    /// The error.
    pub err: Errno,
    /// The provider's own error number (see [`CompletionQueue::strerror`]).
    pub prov_errno: i32,
    /// Provider-specific error data ([`err_data`](Self::err_data)):
    /// private, as it is what [`CompletionQueue::strerror`] hands back to
    /// the provider.
    err_data: Cow<'b, [u8]>,
}

/// The context of a failed operation. Like a completion entry, an error
/// entry that was not reclaimed hands its buffer back when dropped, and is
/// then released as a batch of its queue (see the `epochs` module); the
/// drop lives in this field (which borrows nothing) so that an error entry
/// may still be dropped after the [`ErrDataBuf`] it borrows.
struct UnreclaimedContext(
    *mut c_void,
    Option<(Arc<Epochs>, usize)>,
    crate::buffer::Outcome,
);

impl Drop for UnreclaimedContext {
    fn drop(&mut self) {
        crate::buffer::release_unreclaimed(self.0, self.2);
        if let Some((epochs, parity)) = &self.1 {
            // SAFETY: the count the error entry's read made (`read_err`
            // kept only its parity); this field is neither Clone nor
            // Copy, and its drop runs once: it is left once, here.
            unsafe { epochs.entered(*parity) }.leave();
        }
    }
}

// SAFETY: op_context is an opaque value this crate only compares, or hands
// to the pool it belongs to.
unsafe impl Send for CqError<'_> {}
// SAFETY: as above.
unsafe impl Sync for CqError<'_> {}

impl sealed::Sealed for CqError<'_> {}

impl CqError<'_> {
    /// Provider-specific error data.
    #[must_use]
    pub fn err_data(&self) -> &[u8] {
        &self.err_data
    }

    /// The entry with its `err_data` in memory of its own, no longer
    /// borrowing the [`ErrDataBuf`] it was read into.
    #[must_use]
    pub fn into_owned(self) -> CqError<'static> {
        CqError {
            op_context: self.op_context,
            flags: self.flags,
            len: self.len,
            data: self.data,
            tag: self.tag,
            olen: self.olen,
            err: self.err,
            prov_errno: self.prov_errno,
            err_data: Cow::Owned(self.err_data.into_owned()),
        }
    }

    /// The failed operation's context.
    #[must_use]
    pub fn context(&self) -> usize {
        self.op_context.0 as usize
    }

    /// What a multi-receive needs of the failed completion.
    pub(crate) fn outcome(&self) -> crate::buffer::Outcome {
        self.op_context.2
    }

    /// Takes the context, leaving 0 (hands a buffer back exactly once).
    pub(crate) fn take_context(&mut self) -> *mut c_void {
        std::mem::replace(&mut self.op_context.0, ptr::null_mut())
    }
}

impl fmt::Debug for CqError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CqError")
            .field("context", &format_args!("{:#x}", self.context()))
            .field("flags", &self.flags)
            .field("len", &self.len)
            .field("olen", &self.olen)
            .field("err", &self.err)
            .field("prov_errno", &self.prov_errno)
            .field("err_data_len", &self.err_data.len())
            .finish()
    }
}

/// Closing a CQ first drains it: completions of operations whose buffers
/// were never reclaimed (for example receives flushed when their endpoint
/// closed) hand those buffers back to their pools.
impl Drop for CqInner {
    fn drop(&mut self) {
        self.drain();
        self.epochs.queue_closed(&self.progress);
    }
}

impl CqInner {
    /// Hands back the buffers of every completion still queued. Only while
    /// the queue is open.
    fn drain(&mut self) {
        if !self.fid.is_open() {
            return;
        }
        // Room for one entry of any format; op_context is the first member
        // of every one (fi_cq(3)).
        let mut entry = [0u64; 8];
        let mut errbuf = ErrDataBuf::new();
        for _ in 0..(1 << 20) {
            // SAFETY: fi_cq_read(3) writes at most one entry (<= 64 bytes,
            // the tagged format's 48 being the largest) into entry.
            let ret = unsafe { sys::fi_cq_read(self.fid.as_ptr(), entry.as_mut_ptr().cast(), 1) };
            // The entries' other members are not looked at: the endpoints
            // bound to the queue are closed, and a multi-receive of theirs
            // came back when they closed.
            if ret > 0 {
                crate::buffer::release_unreclaimed(entry[0] as *mut c_void, Default::default());
            } else if classify(ret) == Err(Errno::AVAIL) {
                match self.readerr_raw(&mut errbuf) {
                    Ok(Some((err, _))) => {
                        crate::buffer::release_unreclaimed(err.op_context, Default::default())
                    }
                    _ => break,
                }
            } else {
                break;
            }
        }
    }
}

pub(crate) struct CqInner {
    pub(crate) fid: OwnedFid<sys::fid_cq>,
    /// The tokio readers of the queue waiting for its fd, through any of
    /// its wrappers (each registers its own dup of the fd; see
    /// `tokio::wait_ready`).
    #[cfg(feature = "tokio")]
    pub(crate) tokio_readers: tokio::sync::Notify,
    pub(crate) domain: Arc<DomainInner>,
    _wait_set: Option<Arc<WaitSetInner>>,
    pub(crate) wait_obj: WaitObj,
    threshold: bool,
    signals: AtomicU64,
    signals_reported: AtomicU64,
    /// The context the queue was opened with.
    pub(crate) id: u64,
    /// The queue's progress lock (see [`lifecycle`](Self::lifecycle)):
    /// here rather than in `epochs`, one load nearer to every read.
    progress: ProgressLock,
    /// The batches read from this queue still held, and the stale marks of
    /// endpoint closes waiting on them.
    pub(crate) epochs: Arc<Epochs>,
}

impl crate::wait::ProgressMember for CqInner {
    fn lifecycle(&self) -> &ProgressLock {
        CqInner::lifecycle(self)
    }
    fn progress_refused(&self) -> bool {
        self.lifecycle().is_refused()
    }
    fn member_fid(&self) -> *mut sys::fid {
        self.fid.fid()
    }
    fn member_id(&self) -> u64 {
        self.id
    }
    fn member_domain(&self) -> &Arc<DomainInner> {
        &self.domain
    }
}

impl CqInner {
    /// The queue's progress lock.
    ///
    /// Shared by every call that runs the provider's progress on this
    /// queue (reads, `sread`, `fi_trywait`, `fi_poll`); exclusive while an
    /// endpoint bound to it is bound and enabled, or closed. The util
    /// providers walk the queue's endpoints in its progress and read state
    /// that only exists between an endpoint's `fi_enable` and its
    /// `fi_close`: rxm reads the endpoint's `msg_cq` (`prov/rxm/src/rxm_cq.c`
    /// 1929), opened only at enable (`rxm_ep.c` 1343) and closed in
    /// `rxm_ep_close`; shm reads `ep->region` (`prov/shm/src/smr_progress.c`
    /// 1156), created at enable (`smr_ep.c` 1684); rxd's enable and close
    /// raced its progress too (line numbers of 1.17). A read on another
    /// thread during either crashed, and so did a read with a bound, never
    /// enabled endpoint: endpoints give their queues to the provider only
    /// in `enable` (`Endpoint::bind_cq` records them).
    #[inline(always)]
    pub(crate) fn lifecycle(&self) -> &ProgressLock {
        &self.progress
    }

    /// Held while the provider's progress may run on this queue.
    #[inline]
    pub(crate) fn progress_guard(&self) -> ProgressRead<'_> {
        self.lifecycle().read()
    }

    /// One `fi_cq_readerr` into `buf`: the entry and its `err_data`, or
    /// `None` when there is no error entry. The caller holds the progress
    /// guard where the queue may be in use.
    fn readerr_raw<'b>(
        &self,
        buf: &'b mut ErrDataBuf,
    ) -> Result<Option<(sys::fi_cq_err_entry, &'b [u8])>> {
        buf.read_into("fi_cq_readerr", |err_data, err_data_size| {
            let mut entry = sys::fi_cq_err_entry {
                err_data,
                err_data_size,
                ..Default::default()
            };
            // SAFETY: fi_cq_readerr(3): entry is a full fi_cq_err_entry; a
            // non-zero err_data_size asks the provider to copy err_data
            // into our buffer (API >= 1.5).
            let ret = unsafe { sys::fi_cq_readerr(self.fid.as_ptr(), &mut entry, 0) };
            (ret, (entry.err_data, entry.err_data_size), entry)
        })
    }
}

/// A read call's result, as `CqInner::counted_read` counted it: the
/// call's return and, for a batch of completions (a positive return), the
/// batch counted in its epoch (none otherwise: no epoch is looked at for
/// the empty read a polling loop sees most). Two words, so that it is
/// returned and passed on in registers (from a serialized read's
/// out-of-line count, to the out-of-line decode of
/// `CompletionQueue::read`). Moved, not copied: its batch is left once.
#[derive(Debug)]
pub(crate) struct CountedRead<'a> {
    ret: isize,
    /// Some exactly when `ret` is positive.
    batch: Option<Entered<'a>>,
}

impl<'a> CountedRead<'a> {
    /// A read refused before its call (see `CqInner::read_behind_gate`):
    /// a return no call makes, which [`decode`] turns into the refusal.
    pub(crate) const REFUSED: CountedRead<'static> = CountedRead {
        ret: isize::MIN,
        batch: None,
    };

    /// A return that entered no epoch: zero or a negated errno.
    #[inline(always)]
    pub(crate) fn other(ret: isize) -> Self {
        CountedRead { ret, batch: None }
    }

    /// The call's return code.
    #[inline(always)]
    pub(crate) fn ret(&self) -> isize {
        self.ret
    }

    /// The call's return code and the batch it returned, counted.
    #[inline(always)]
    pub(crate) fn parts(self) -> (isize, Option<Entered<'a>>) {
        (self.ret, self.batch)
    }
}

impl CqInner {
    /// Runs one read call of the provider's under the progress guard, and
    /// counts the batch it returned (see the `epochs` module); an empty
    /// result may settle the stale marks of endpoints closed before it.
    /// Returns the call's result and the batch's epoch.
    ///
    /// `guarded` is the model's `T::LOCKED`, a constant once inlined: under
    /// the serialized threading models every handle of the domain is on
    /// the calling thread, so no endpoint bound to the queue is being
    /// enabled or closed meanwhile, which is all the guard excludes, and it
    /// is left out.
    #[inline(always)]
    pub(crate) fn counted_read(
        &self,
        guarded: bool,
        read: impl FnOnce() -> Result<isize>,
    ) -> Result<CountedRead<'_>> {
        let (progress, noted) = if guarded {
            let progress = self.progress_guard();
            let noted = progress.noted();
            (Some(progress), noted)
        } else {
            (None, self.lifecycle().noted())
        };
        // The lock word says whether anything needs looking at: one test.
        if !noted.is_clear() {
            // Refused: no call, and the refusal is decoded with the call's
            // name (a read's result then has no error made out of line).
            let Some(awaiting) = self.noted(noted) else {
                return Ok(CountedRead::REFUSED);
            };
            let ret = read()?;
            return Ok(self.count_noted(ret, progress, awaiting));
        }
        let ret = read()?;
        Ok(self.count(ret, progress))
    }

    /// `CompletionQueue::read_raw` under a serialized model whose gate was
    /// closed: `counted_read` without the lock, its refusal as
    /// [`CountedRead::REFUSED`]. Out of line and returning in registers, so
    /// that the open gate's path keeps the pointer it loaded for its call.
    #[cold]
    #[inline(never)]
    fn read_behind_gate(&self, entries: *mut c_void, count: usize) -> CountedRead<'_> {
        // The read call cannot fail: the only error is the refusal.
        self.counted_read(false, || {
            // SAFETY: the queue's own fid; the caller's buffer has room for
            // count entries (read_raw); the serialized model keeps enables
            // and closes off this read's thread.
            Ok(unsafe { read_call(self.fid.as_ptr(), entries, count) })
        })
        .unwrap_or(CountedRead::REFUSED)
    }

    /// The read's batch counted (see `counted_read`), then the progress
    /// guard released. The empty read, what a polling loop sees most, is
    /// told first and inline. Any other return of a guarded read is
    /// counted inline too, before its guard is released. A serialized
    /// read's (no guard) is counted out of line: inline, the compiler
    /// tested for a batch before testing for the empty read.
    #[inline(always)]
    fn count(&self, ret: isize, progress: Option<ProgressRead<'_>>) -> CountedRead<'_> {
        if is_again(ret) {
            drop(progress);
            return CountedRead::other(ret);
        }
        match progress {
            Some(_) => self.count_returned(ret, progress),
            None => self.count_unguarded(ret),
        }
    }

    /// `count_returned` of a read without a guard (a serialized model's).
    #[inline(never)]
    fn count_unguarded(&self, ret: isize) -> CountedRead<'_> {
        self.count_returned(ret, None)
    }

    /// `count` of any return but the empty read's: a batch of completions
    /// (a positive return) is counted in the current epoch, under the
    /// guard if there is one, which is then released; any other return
    /// enters none.
    #[inline(always)]
    fn count_returned(&self, ret: isize, progress: Option<ProgressRead<'_>>) -> CountedRead<'_> {
        // The guard released on each path: released where the two joined,
        // the caller tested the return again after the release.
        if ret > 0 {
            let batch = self.epochs.enter();
            drop(progress);
            CountedRead {
                ret,
                batch: Some(batch),
            }
        } else {
            drop(progress);
            CountedRead { ret, batch: None }
        }
    }

    /// Before a read whose progress lock noted something: `None` (the
    /// read refused) while an endpoint that failed to enable is open, else
    /// the marks an empty result may settle (see the epochs module), loaded
    /// before the call (only marks added before the read began may be
    /// settled by its empty result).
    #[cold]
    #[inline(never)]
    fn noted(&self, noted: Noted) -> Option<u64> {
        // The word may have been loaded relaxed (`ProgressLock::noted`):
        // the notice's release happens before the marks are loaded.
        std::sync::atomic::fence(Ordering::Acquire);
        if noted.refused() {
            return None;
        }
        Some(if noted.notice() {
            self.epochs.awaiting()
        } else {
            0
        })
    }

    /// `count` after a read whose progress lock noted something: when
    /// endpoint closes wait on an empty read of this queue and this one
    /// was empty, settles them.
    #[cold]
    #[inline(never)]
    fn count_noted(
        &self,
        ret: isize,
        progress: Option<ProgressRead<'_>>,
        awaiting: u64,
    ) -> CountedRead<'_> {
        let counted = self.count(ret, progress);
        if awaiting != 0 && is_again(ret) {
            self.epochs.read_empty(awaiting, &self.progress);
        }
        counted
    }
}

/// An open completion queue of format `F`, of a domain of threading model
/// `T` (see [`Domain`]). Cloning gives another handle; endpoints bound to
/// it hold one, so it stays open while they exist.
pub struct CompletionQueue<F: Format, T: ThreadModel = ThreadSafe> {
    pub(crate) inner: Arc<CqInner>,
    pub(crate) raw: RawCq,
    _format: PhantomData<(F, T)>,
}

impl<F: Format, T: ThreadModel> Clone for CompletionQueue<F, T> {
    fn clone(&self) -> Self {
        CompletionQueue {
            inner: self.inner.clone(),
            raw: self.raw,
            _format: PhantomData,
        }
    }
}

impl<F: Format, T: ThreadModel> CompletionQueue<F, T> {
    /// A handle of the queue `inner`.
    fn of(inner: Arc<CqInner>) -> Self {
        CompletionQueue {
            raw: RawCq(inner.fid.as_non_null()),
            inner,
            _format: PhantomData,
        }
    }
}

/// Sets the source addresses a `fi_cq_readfrom` or `fi_cq_sreadfrom` of
/// `addrs.len()` entries may fill to `Addr::NOTAVAIL` before the call:
/// libfabric's util queues write them only with `FI_SOURCE`
/// (`prov/util/src/util_cq.c` 243, 259, 630-631 in 1.17), and the slice
/// would otherwise keep what the caller's array held, possibly addresses
/// of an earlier read.
fn unknown_sources(addrs: &mut [Addr]) {
    addrs.fill(Addr::NOTAVAIL);
}

/// `inner.fid`'s object, copied into each handle, which nothing changes
/// after the open: a loop over a `&CompletionQueue` keeps it where it keeps
/// what does not change (a register, or its stack: one load either way),
/// where the one behind the `Arc` is loaded again, through the queue's
/// address, after the progress lock's atomics.
#[derive(Clone, Copy)]
pub(crate) struct RawCq(NonNull<sys::fid_cq>);

// SAFETY: an address that never changes. The object it points to is used
// only through calls `CqInner`'s fid allows from any thread (see
// `OwnedFid`'s Send and Sync), and stays open while the handle holding
// this lives: the handle holds the `Arc<CqInner>` whose fid closes it.
unsafe impl Send for RawCq {}
// SAFETY: as above.
unsafe impl Sync for RawCq {}

impl<F: Format, T: ThreadModel> CompletionQueue<F, T> {
    /// `fi_cq_open` with format `F`.
    ///
    /// # Errors
    /// [`Error::TooLarge`] for a size over
    /// [`MAX_QUEUE_SIZE`](crate::error::MAX_QUEUE_SIZE);
    /// [`Error::UnsupportedWait`] for a wait object libfabric does not name,
    /// `FI_WAIT_YIELD`, `FI_WAIT_SET` without a wait set (or on rxm, rxd,
    /// shm or sockets), or one the provider refuses; [`Error::ForeignObject`] for a wait
    /// set of another fabric; [`Error::Call`] when `fi_cq_open` fails.
    #[doc(alias = "fi_cq_open")]
    pub fn open(domain: &Domain<T>, attr: &CqAttr) -> Result<Self> {
        check_queue_size("completion queue size", attr.size)?;
        domain.inner.run_deferred();
        // Normalised again (the builder did already) and refused when
        // unknown or FI_WAIT_YIELD: every check below and the C call see the
        // same named wait object.
        let Some(wait_obj) = attr.wait_obj else {
            return open_with_default_wait(
                crate::quirks::limits_fd_waits_per_domain(domain.info().provider())
                    .then_some(&domain.inner.fd_cqs),
                |wait| Self::open(domain, &attr.clone().wait(wait)),
            );
        };
        let wait_obj = wait_obj.checked("completion queue")?;
        if let Some(set) = &attr.wait_set {
            if !T::LOCKED {
                // A wait set is Send and Sync, and its fi_wait runs the
                // progress of its queues on whatever thread calls it.
                return Err(Error::InvalidArgument(
                    "a completion queue of a FI_THREAD_DOMAIN or FI_THREAD_COMPLETION domain \
                     cannot join a wait set (which any thread may wait on)"
                        .into(),
                ));
            }
            if !set.belongs_to(&domain.inner.fabric) {
                return Err(Error::ForeignObject {
                    call: "fi_cq_open",
                    what: "wait set",
                    scope: ObjectScope::Fabric,
                });
            }
        }
        if wait_obj == WaitObj::Set && attr.wait_set.is_none() {
            return Err(Error::UnsupportedWait {
                queue: "completion queue",
                requested: WaitObj::Set,
                reason: "FI_WAIT_SET needs a wait set: use CqAttr::wait_set",
            });
        }
        if wait_obj == WaitObj::Set {
            crate::wait::refuse_a_filling_set("completion queue", domain.inner.info.provider())?;
        }
        if wait_obj == WaitObj::Set
            && crate::quirks::keeps_closed_endpoints_in_waits(domain.inner.info.provider())
        {
            // A wait on the set after an endpoint closed would call into
            // freed memory, and the set is shared with other queues (their
            // waits cannot be refused the way this queue's are).
            return Err(Error::UnsupportedWait {
                queue: "completion queue",
                requested: WaitObj::Set,
                reason: "rxm, rxd and shm leave a closed endpoint's callbacks in a wait set (a wait then reads freed memory)",
            });
        }
        let mut raw_attr = sys::fi_cq_attr {
            size: attr.size,
            flags: attr.flags,
            format: F::FORMAT,
            wait_obj: wait_obj.raw(),
            signaling_vector: attr.signaling_vector,
            wait_cond: if attr.threshold {
                sys::FI_CQ_COND_THRESHOLD
            } else {
                sys::FI_CQ_COND_NONE
            },
            wait_set: attr
                .wait_set
                .as_ref()
                .map_or(ptr::null_mut(), |s| s.inner.fid.as_ptr()),
        };
        let mut raw = ptr::null_mut();
        // The context is a process-unique id: poll sets report it
        // (fi_poll(3)), and PollSet maps it back to the queue.
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        // SAFETY: fi_cq_open(3) reads attr and opens a CQ on the open
        // domain; OwnedFid closes it before the domain handle is released.
        // The context is an opaque value to the provider.
        let ret = unsafe {
            sys::fi_cq_open(
                domain.inner.fid.as_ptr(),
                &mut raw_attr,
                &mut raw,
                id as usize as *mut c_void,
            )
        };
        if wait_obj != WaitObj::None
            && attr.flags & sys::FI_AFFINITY == 0
            && matches!(classify(ret), Err(Errno::INVAL | Errno::NOSYS))
        {
            return Err(Error::UnsupportedWait {
                queue: "completion queue",
                requested: wait_obj,
                reason: "the provider refused it (fi_cq_open returned -FI_EINVAL or -FI_ENOSYS)",
            });
        }
        let fid = OwnedFid::opened("fi_cq_open", ret, raw)?;
        let wait_obj = resolved_wait_obj("completion queue", wait_obj, raw_attr.wait_obj)?;
        let wait_obj = query_wait_obj(fid.fid(), wait_obj);
        // Only serialized reads look at the gate.
        let progress = if T::LOCKED {
            ProgressLock::default()
        } else {
            ProgressLock::with_gate(fid.as_non_null().cast())
        };
        let cq = Self::of(Arc::new(CqInner {
            fid,
            domain: domain.inner.clone(),
            _wait_set: attr.wait_set.as_ref().map(|s| s.inner.clone()),
            wait_obj,
            threshold: attr.threshold,
            signals: AtomicU64::new(0),
            signals_reported: AtomicU64::new(0),
            id,
            progress,
            epochs: Arc::default(),
            #[cfg(feature = "tokio")]
            tokio_readers: tokio::sync::Notify::new(),
        }));
        if let Some(set) = &cq.inner._wait_set {
            let member: Arc<dyn crate::wait::ProgressMember> = cq.inner.clone();
            set.add_member(Arc::downgrade(&member));
        }
        Ok(cq)
    }

    /// The queue's fid.
    #[must_use]
    pub fn fid(&self) -> Fid {
        Fid::from_raw(self.inner.fid.fid())
    }

    /// The raw `fid_cq`.
    #[must_use]
    pub fn as_raw(&self) -> *mut sys::fid_cq {
        self.inner.fid.as_ptr()
    }

    /// `fi_cq_read`: up to `buf.len()` completions, without blocking. An
    /// empty `buf` reads nothing and gives [`CqRead::Empty`].
    ///
    /// # Errors
    /// [`Error::State`] while an endpoint bound to the queue that failed to
    /// enable is open; [`Error::Call`] when `fi_cq_read` or `fi_cq_readerr`
    /// fails. An error completion is no error: it is [`CqRead::Error`].
    #[doc(alias = "fi_cq_read")]
    #[inline(always)]
    pub fn read<'b>(&'b self, buf: &'b mut [F::Entry]) -> Result<CqRead<'b, F::Entry>> {
        // The queue's address loaded once, for the read and the batch's
        // epochs: loaded again through `self`, after the read's atomics,
        // it cost two loads more per batch.
        let inner: &'b CqInner = &self.inner;
        match Self::read_raw(inner, self.raw, buf)? {
            // The empty queue first: what a polling loop sees most.
            read if is_again(read.ret()) => Ok(CqRead::Empty),
            // Then a batch (counted by read_raw), inline: out of line, it
            // cost a call and a frame, and came back through memory.
            CountedRead {
                ret,
                batch: Some(batch),
            } => Ok(CqRead::Completions(Completions::of_batch(
                ret.unsigned_abs(),
                buf,
                batch,
            ))),
            read => match self.read_returned(read.ret(), buf) {
                Returned::Empty => Ok(CqRead::Empty),
                Returned::Entry(entry) => Ok(CqRead::Error(entry)),
                Returned::Failed(e) => Err(*e),
            },
        }
    }

    /// `finish_read` of `fi_cq_read` for what is neither the empty read nor
    /// a batch (a return of 0, an error entry, an error, the refusal), out
    /// of line (see `CqInner::count`), with its arguments and its result in
    /// registers.
    #[inline(never)]
    fn read_returned(&self, ret: isize, buf: &mut [F::Entry]) -> Returned {
        // A return without a batch decodes to the empty read or an error
        // entry, or fails.
        match self.finish_read(CountedRead::other(ret), buf, "fi_cq_read") {
            Ok(CqRead::Error(entry)) => Returned::Entry(entry),
            Ok(_) => Returned::Empty,
            Err(e) => Returned::Failed(Box::new(e)),
        }
    }

    /// A counted read of `call` decoded, its error entry read: the reads'
    /// result once the queue was not found empty. Inline, so that
    /// `read_returned` of every format is one call.
    #[inline(always)]
    fn finish_read<'b>(
        &'b self,
        read: CountedRead<'b>,
        buf: &'b mut [F::Entry],
        call: &'static str,
    ) -> Result<CqRead<'b, F::Entry>> {
        self.finish(decode(read.parts(), buf, call)?)
    }

    /// The next completion, its buffer taken back from `pool`: blocks in
    /// `fi_cq_sread` up to `timeout` (`None`: for ever) on a queue with a
    /// wait object, and reads in a loop on one without. An error completion
    /// is [`Error::Completion`] (its buffer goes back to its pool); the
    /// timeout is [`Error::TimedOut`].
    ///
    /// A convenience for simple programs: it reads one completion per call.
    /// Loops that must keep up with a NIC read batches with
    /// [`read`](Self::read).
    ///
    /// # Errors
    /// [`Error::Completion`], [`Error::TimedOut`], and the errors of
    /// [`read`](Self::read) and [`sread`](Self::sread).
    pub fn wait_one(&self, pool: &BufferPool, timeout: Option<Duration>) -> Result<Completion> {
        let deadline = Deadline::after(timeout);
        let mut entry = [F::Entry::default()];
        let blocks = self.inner.wait_obj.can_sread();
        loop {
            let read = if blocks {
                self.sread(&mut entry, deadline.left())?
            } else {
                self.read(&mut entry)?
            };
            match read {
                CqRead::Completions(c) => return Ok(Completion::take(&c[0], pool)),
                CqRead::Error(e) => return Err(Error::completion(&e)),
                CqRead::Empty | CqRead::TimedOut | CqRead::Signaled => {}
            }
            deadline.check(if blocks { "fi_cq_sread" } else { "fi_cq_read" })?;
            if !blocks {
                std::thread::yield_now();
            }
        }
    }

    /// One `fi_cq_read` of the queue `inner` (the caller's, loaded once),
    /// whose fid is `raw` (the same handle's), through
    /// [`CqInner::counted_read`], undecoded.
    #[inline(always)]
    pub(crate) fn read_raw<'a>(
        inner: &'a CqInner,
        raw: RawCq,
        buf: &mut [F::Entry],
    ) -> Result<CountedRead<'a>> {
        let count = buf.len().min(F::MAX_BATCH);
        if count == 0 {
            return Ok(CountedRead::other(Errno::AGAIN.to_ret()));
        }
        let entries = buf.as_mut_ptr().cast::<c_void>();
        if T::LOCKED {
            // The call after the lock's atomic takes the handle's copy of
            // the fid: loaded through `inner` after the atomic, it needed
            // the queue's address kept for it.
            return inner.counted_read(true, || {
                // SAFETY: the queue's own fid (raw: a handle's copy of
                // inner's), buf's room for count entries of its format
                // (F::Entry), under the progress guard.
                Ok(unsafe { read_call(raw.0.as_ptr(), entries, count) })
            });
        }
        // Under a serialized model the gate says that nothing is noted,
        // and is the queue's fid then (ProgressLock::gate).
        let gate = inner.lifecycle().gate().cast::<sys::fid_cq>();
        if gate.is_null() {
            return Ok(inner.read_behind_gate(entries, count));
        }
        // SAFETY: the open gate is the queue's own fid; buf's room for
        // count entries of its format; the serialized model keeps enables
        // and closes off this read's thread.
        Ok(inner.count(unsafe { read_call(gate, entries, count) }, None))
    }

    /// `fi_cq_readfrom`: like [`read`](Self::read), with each completion's
    /// source address in `addrs` (needs `FI_SOURCE`; `Addr::NOTAVAIL` when
    /// unknown).
    ///
    /// # Errors
    /// As [`read`](Self::read), with `fi_cq_readfrom` as the call.
    #[doc(alias = "fi_cq_readfrom")]
    pub fn read_from<'b>(
        &'b self,
        buf: &'b mut [F::Entry],
        addrs: &mut [Addr],
    ) -> Result<CqRead<'b, F::Entry>> {
        let count = buf.len().min(addrs.len()).min(F::MAX_BATCH);
        if count == 0 {
            return Ok(CqRead::Empty);
        }
        unknown_sources(&mut addrs[..count]);
        let read = || {
            // SAFETY: as read; src_addr receives count fi_addr_t values
            // (Addr is a transparent u64).
            Ok(unsafe {
                sys::fi_cq_readfrom(
                    self.inner.fid.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    count,
                    addrs.as_mut_ptr().cast(),
                )
            })
        };
        let read = self.inner.counted_read(T::LOCKED, read)?;
        self.finish_read(read, buf, "fi_cq_readfrom")
    }

    fn check_sread(&self, call: &'static str) -> Result<()> {
        if !self.inner.wait_obj.can_sread() {
            return Err(Error::WrongWaitMode {
                call,
                needed: "FI_WAIT_FD, FI_WAIT_UNSPEC, FI_WAIT_MUTEX_COND or FI_WAIT_POLLFD",
                actual: self.inner.wait_obj,
            });
        }
        Ok(())
    }

    /// `fi_cq_sread`: blocks until at least one completion, an error entry, a
    /// [`signal`](Self::signal), or the timeout (`None`: forever).
    ///
    /// # Errors
    /// [`Error::WrongWaitMode`] on a queue whose wait object cannot block;
    /// [`Error::InvalidArgument`] for an empty `buf`; [`Error::State`] as
    /// [`read`](Self::read), or on rxm, rxd or shm once an endpoint bound to
    /// the queue closed; [`Error::Call`] when `fi_cq_sread`, `fi_trywait` or
    /// `fi_cq_readerr` fails. The timeout is [`CqRead::TimedOut`], no error.
    #[doc(alias = "fi_cq_sread")]
    pub fn sread<'b>(
        &'b self,
        buf: &'b mut [F::Entry],
        timeout: Option<Duration>,
    ) -> Result<CqRead<'b, F::Entry>> {
        self.sread_inner(buf, None, ptr::null(), timeout, "fi_cq_sread")
    }

    /// `fi_cq_sread` with the `FI_CQ_COND_THRESHOLD` condition: asks the
    /// provider to wait for `threshold` completions (1 up to the room in
    /// `buf`). fi_cq(3) makes the condition a hint, and libfabric 1.17's
    /// util CQ (tcp, rxm, rxd, shm) ignores it (`ofi_cq_sreadfrom`,
    /// `prov/util/src/util_cq.c` 348-381): the call returns at the first
    /// completion, as `sread` does. Needs [`CqAttr::threshold_condition`].
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] on a queue opened without the threshold
    /// condition, or for a `threshold` of 0 or over the room in `buf`; as
    /// [`sread`](Self::sread).
    pub fn sread_threshold<'b>(
        &'b self,
        buf: &'b mut [F::Entry],
        threshold: usize,
        timeout: Option<Duration>,
    ) -> Result<CqRead<'b, F::Entry>> {
        if !self.inner.threshold {
            return Err(Error::InvalidArgument(
                "sread_threshold needs a queue opened with CqAttr::threshold_condition(true)"
                    .into(),
            ));
        }
        let room = buf.len().min(F::MAX_BATCH);
        if threshold == 0 || threshold > room {
            return Err(Error::InvalidArgument(
                format!(
                    "sread_threshold: a threshold of {threshold} needs 1..={room} \
                     (the entries room)"
                )
                .into(),
            ));
        }
        // The threshold is passed as the value of `cond` itself: sockets
        // reads `MIN((uintptr_t) cond, count)` (`prov/sockets/src/sock_cq.c`
        // 347-348 in 1.17), verbs `MIN((ssize_t) cond, count)`
        // (`prov/verbs/src/verbs_cq.c` 218-219); a pointer to it read as a
        // number was a threshold of the whole slice.
        self.sread_inner(
            buf,
            None,
            threshold as *const c_void,
            timeout,
            "fi_cq_sread",
        )
    }

    /// `fi_cq_sreadfrom`: [`sread`](Self::sread) with source addresses.
    ///
    /// # Errors
    /// As [`sread`](Self::sread) (an empty `buf` or `addrs` is
    /// [`Error::InvalidArgument`]), with `fi_cq_sreadfrom` as the call.
    #[doc(alias = "fi_cq_sreadfrom")]
    pub fn sread_from<'b>(
        &'b self,
        buf: &'b mut [F::Entry],
        addrs: &mut [Addr],
        timeout: Option<Duration>,
    ) -> Result<CqRead<'b, F::Entry>> {
        self.sread_inner(buf, Some(addrs), ptr::null(), timeout, "fi_cq_sreadfrom")
    }

    fn sread_inner<'b>(
        &'b self,
        buf: &'b mut [F::Entry],
        mut addrs: Option<&mut [Addr]>,
        cond: *const c_void,
        timeout: Option<Duration>,
        call: &'static str,
    ) -> Result<CqRead<'b, F::Entry>> {
        self.check_sread(call)?;
        let count = match &addrs {
            None => buf.len(),
            Some(a) => buf.len().min(a.len()),
        }
        .min(F::MAX_BATCH);
        if count == 0 {
            return Err(Error::InvalidArgument(
                format!("{call}: no room for a completion (an empty slice)").into(),
            ));
        }
        let deadline = Deadline::after(timeout);
        let read = loop {
            // Blocks in slices, so that an endpoint of this queue can be
            // enabled or closed meanwhile (each waits for the progress
            // guard that a blocked sread holds).
            let slice = deadline.slice(SREAD_SLICE);
            let read = self.sread_once(buf, addrs.as_deref_mut(), count, cond, Some(slice))?;
            if is_avail(read.ret()) {
                // The error completion; none when another reader took it
                // first, and this one waits on for the time left.
                if let Some(e) = self.read_err_owned()? {
                    return Ok(CqRead::Error(Box::new(e)));
                }
                if deadline.passed() {
                    return Ok(CqRead::TimedOut);
                }
                continue;
            }
            // fi_cq(3): a timeout or a wake-up by fi_cq_signal returns
            // -FI_EAGAIN (tcp), -FI_ECANCELED (sockets, on signal) or
            // -FI_ETIMEDOUT (rxd, on timeout); a signal handled on this
            // thread, -FI_EINTR (see `is_interrupted`): the wait ended
            // early, and goes on for the time left.
            if !matches!(
                classify(read.ret()),
                Err(Errno::AGAIN | Errno::CANCELED | Errno::TIMEDOUT | Errno::INTR)
            ) {
                break read;
            }
            // libfabric returns -FI_EAGAIN both for a timeout and for a
            // wake-up by fi_cq_signal (fi_cq(3) allows either). Signals are
            // counted: one sent and not yet reported makes this a signal
            // wake-up, including one sent before the call began.
            let sent = self.inner.signals.load(Ordering::Acquire);
            let reported = self.inner.signals_reported.swap(sent, Ordering::AcqRel);
            if sent != reported {
                return Ok(CqRead::Signaled);
            }
            // Not a signal of ours: a timeout, or the wake-up of a signal
            // already reported (an sread that returned at once leaves the
            // wait object signaled). Before the deadline, reset the wait
            // object (fi_trywait, fi_poll(3)) and block again for the rest.
            if deadline.passed() {
                return Ok(CqRead::TimedOut);
            }
            let mut fids = [self.inner.fid.fid()];
            let progress = self.inner.progress_guard();
            refuse_poisoned("fi_trywait", std::iter::once(Some(self.inner.lifecycle())))?;
            let pending = trywait_raw(self.inner.domain.fabric.fid.as_ptr(), &mut fids)?;
            drop(progress);
            if pending == TryWait::EventsPending {
                continue;
            }
        };
        self.finish_read(read, buf, call)
    }

    /// One `fi_cq_sread` / `fi_cq_sreadfrom` of `count` entries, counted.
    fn sread_once(
        &self,
        buf: &mut [F::Entry],
        addrs: Option<&mut [Addr]>,
        count: usize,
        cond: *const c_void,
        timeout: Option<Duration>,
    ) -> Result<CountedRead<'_>> {
        let ms = provider_timeout_ms(timeout);
        // Blocking: under the progress guard in every model.
        self.inner.counted_read(true, || {
            refuse_poisoned("fi_cq_sread", std::iter::once(Some(self.inner.lifecycle())))?;
            Ok(match addrs {
                // SAFETY: as read: at most count entries of the queue's format
                // are written into buf; cond is NULL or, for
                // FI_CQ_COND_THRESHOLD queues, the threshold itself (no
                // larger than count) carried as the pointer's value, which is
                // how fi_cq(3) says it is read (providers cast it to size_t;
                // nothing is dereferenced).
                None => unsafe {
                    sys::fi_cq_sread(
                        self.inner.fid.as_ptr(),
                        buf.as_mut_ptr().cast(),
                        count,
                        cond,
                        ms,
                    )
                },
                Some(addrs) => {
                    unknown_sources(&mut addrs[..count]);
                    // SAFETY: as read_from, count <= addrs.len().
                    unsafe {
                        sys::fi_cq_sreadfrom(
                            self.inner.fid.as_ptr(),
                            buf.as_mut_ptr().cast(),
                            count,
                            addrs.as_mut_ptr().cast(),
                            cond,
                            ms,
                        )
                    }
                }
            })
        })
    }

    /// `fi_cq_readerr`: the next error completion, its `err_data` copied
    /// into `buf`; `None` when there is none. The reads hand error
    /// completions back themselves ([`CqRead::Error`], its `err_data`
    /// copied into memory of its own); this reads one into a buffer of the
    /// caller's, allocating nothing.
    ///
    /// # Errors
    /// [`Error::Call`] when `fi_cq_readerr` fails (other than with
    /// `FI_EAGAIN`, which is `None`).
    #[doc(alias = "fi_cq_readerr")]
    pub fn read_err<'b>(&self, buf: &'b mut ErrDataBuf) -> Result<Option<CqError<'b>>> {
        let progress = self.inner.progress_guard();
        let read = self.inner.readerr_raw(buf)?;
        // An error entry naming a context is a batch of its own (see the
        // epochs module), counted under the progress guard. Only its
        // parity is kept: `UnreclaimedContext`'s drop leaves the count.
        let ticket = read.as_ref().and_then(|(entry, _)| {
            (!entry.op_context.is_null()).then(|| {
                (
                    self.inner.epochs.clone(),
                    self.inner.epochs.enter().parity(),
                )
            })
        });
        drop(progress);
        Ok(read.map(|(entry, err_data)| CqError {
            op_context: UnreclaimedContext(
                entry.op_context,
                ticket,
                crate::buffer::Outcome {
                    flags: entry.flags,
                    buf: entry.buf as usize,
                    len: entry.len,
                    failed: true,
                },
            ),
            flags: CompletionFlags::from_bits_retain(entry.flags),
            len: entry.len,
            data: entry.data,
            tag: entry.tag,
            olen: entry.olen,
            // fi_cq(3) gives a positive errno; shm writes it negated
            // (`smr_write_err_comp` is called with `-FI_ETRUNC`,
            // `prov/shm/src/smr_comp.c` 62-75, `smr_progress.c` 154 in
            // 1.17), which read as is was an unknown code.
            err: Errno::from_raw_os_error(entry.err.wrapping_abs()),
            prov_errno: entry.prov_errno,
            err_data: Cow::Borrowed(err_data),
        }))
    }

    /// The next error completion with its `err_data` copied into memory of
    /// its own: what the reads hand back for `-FI_EAVAIL` (error entries
    /// are rare, so their allocation is off the data path).
    #[cold]
    pub(crate) fn read_err_owned(&self) -> Result<Option<CqError<'static>>> {
        let mut buf = ErrDataBuf::new();
        Ok(self.read_err(&mut buf)?.map(CqError::into_owned))
    }

    /// A decoded read, with an error entry read and handed back.
    #[inline(always)]
    pub(crate) fn finish<'b>(&self, read: Decoded<'b, F::Entry>) -> Result<CqRead<'b, F::Entry>> {
        match read {
            Decoded::Read(read) => Ok(read),
            Decoded::ErrorPending => Ok(match self.read_err_owned()? {
                Some(e) => CqRead::Error(Box::new(e)),
                // Another reader took it meanwhile.
                None => CqRead::Empty,
            }),
        }
    }

    /// `fi_cq_signal`: wakes a thread blocked in `sread`, which then returns
    /// [`CqRead::Signaled`].
    ///
    /// # Errors
    /// [`Error::WrongWaitMode`] on a queue without a wait object (the util
    /// providers signal the wait object they assume: `ofi_cq_signal`,
    /// `prov/util/src/util_cq.c` 384-392 in 1.17, follows a NULL `wait` on
    /// rxm, rxd and shm); [`Error::Call`] when `fi_cq_signal` fails.
    #[doc(alias = "fi_cq_signal")]
    pub fn signal(&self) -> Result<()> {
        if matches!(self.inner.wait_obj, WaitObj::None | WaitObj::Other(_)) {
            return Err(Error::WrongWaitMode {
                call: "fi_cq_signal",
                needed: "a wait object",
                actual: self.inner.wait_obj,
            });
        }
        self.inner.signals.fetch_add(1, Ordering::AcqRel);
        // SAFETY: fi_cq_signal(3) on an open CQ with a wait object (checked
        // above: the util providers dereference it).
        check("fi_cq_signal", unsafe {
            sys::fi_cq_signal(self.inner.fid.as_ptr())
        })
    }

    /// `fi_cq_strerror`: the provider's text for an error completion. On
    /// `ofi_rxm` and `ofi_rxd`, whose `fi_cq_strerror` asks the queue's
    /// first endpoint without looking whether there is one, the text of
    /// the error number as libfabric's `fi_strerror` gives it (what their
    /// tcp and udp cores answer).
    #[doc(alias = "fi_cq_strerror")]
    #[must_use]
    pub fn strerror(&self, err: &CqError<'_>) -> String {
        if crate::quirks::cq_strerror_asks_its_first_endpoint(self.inner.domain.info.provider()) {
            return Errno::from_raw_os_error(err.prov_errno).text().into_owned();
        }
        crate::error::provider_text(|buf, len| {
            // SAFETY: fi_cq_strerror(3) on the open queue, of a provider
            // that answers with no endpoint bound (above); it writes at
            // most len bytes into buf; err_data is passed back as the
            // error entry gave it, NULL for none (an empty slice's pointer
            // dangles); the error number is one the provider can negate
            // (provider_errno).
            unsafe {
                sys::fi_cq_strerror(
                    self.raw.0.as_ptr(),
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

    /// Closes the queue now (`fi_close`).
    ///
    /// # Errors
    /// [`Error::InUse`] while endpoints bound to it or other handles exist;
    /// [`Error::Call`] when `fi_close` fails. The queue comes back with the
    /// error, still open.
    pub fn close(self) -> Handback<Self> {
        close_last(self.inner, ObjectKind::CompletionQueue, Self::of, |i| {
            i.drain();
            i.fid.close()
        })
    }
}

#[inline]
pub(crate) fn decode<'b, T: CompletionEntry>(
    (ret, batch): (isize, Option<Entered<'b>>),
    buf: &'b mut [T],
    call: &'static str,
) -> Result<Decoded<'b, T>> {
    if let Some(batch) = batch {
        return Ok(Decoded::Read(CqRead::Completions(Completions::of_batch(
            ret.unsigned_abs(),
            buf,
            batch,
        ))));
    }
    if is_again(ret) || ret == 0 {
        return Ok(Decoded::Read(CqRead::Empty));
    }
    if classify(ret) == Err(Errno::AVAIL) {
        return Ok(Decoded::ErrorPending);
    }
    if ret == CountedRead::REFUSED.ret {
        return Err(refused_progress(call));
    }
    Err(Error::from_ret(call, ret))
}

/// One `fi_cq_read` of up to `count` entries into `entries`, on `fid`.
///
/// # Safety
/// `fid` is the fid of an open queue, and `entries` has room for `count`
/// entries of the queue's format; the caller holds the queue's progress
/// lock, or reads under a serialized threading model (every handle of the
/// domain on its thread, where no enable or close is running).
#[inline(always)]
unsafe fn read_call(fid: *mut sys::fid_cq, entries: *mut c_void, count: usize) -> isize {
    // SAFETY: fi_cq_read(3) on an open queue writes at most count entries
    // of its format into entries, which the caller gives room for; no
    // endpoint bound to the queue is being enabled or closed meanwhile (the
    // caller's progress lock or threading model, above).
    unsafe { sys::fi_cq_read(fid, entries, count) }
}

impl<F: Format, T: ThreadModel> sealed::Sealed for CompletionQueue<F, T> {}

impl<F: Format, T: ThreadModel> Waitable for CompletionQueue<F, T> {
    fn wait_fid(&self) -> *mut sys::fid {
        self.inner.fid.fid()
    }
    fn fabric_ptr(&self) -> *const () {
        Arc::as_ptr(&self.inner.domain.fabric).cast()
    }
    fn fabric(&self) -> Fabric {
        Fabric {
            inner: self.inner.domain.fabric.clone(),
        }
    }
    fn wait_obj(&self) -> WaitObj {
        self.inner.wait_obj
    }
    fn progress_lock(&self, _: sealed::Token) -> Option<&ProgressLock> {
        Some(self.inner.lifecycle())
    }
    fn thread_safe(&self, _: sealed::Token) -> bool {
        T::LOCKED
    }
}

impl<F: Format, T: ThreadModel> fmt::Debug for CompletionQueue<F, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("fid", &self.fid())
            .field("format", &F::FORMAT)
            .field("wait_obj", &self.inner.wait_obj)
            .field("threading", &T::THREADING)
            .finish()
    }
}
