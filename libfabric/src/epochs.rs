//! When a completion queue can no longer hand out a stale completion.
//!
//! A buffer in flight on an endpoint that closes comes back to its pool at
//! the close, and its operation context is marked stale: a completion
//! naming it may still be queued (written before the close, or flushed by
//! it), or already read and still held by the application. The context is
//! not posted with again until no such completion can surface: when each
//! queue the endpoint was bound to
//! 1. was read empty after the close (every completion queued at the close
//!    was read by then), and
//! 2. every batch of completions read before that empty read was released
//!    (the [`Completions`](crate::cq::Completions) guard dropped, the
//!    [`CqError`](crate::cq::CqError) dropped).
//!
//! Batches are counted in two epochs, as a read-copy-update grace period
//! is: a read counts its batch in the current epoch under the queue's
//! progress lock (shared), an empty read advances the epoch under the same
//! lock held exclusively (so no read is between its call and its count;
//! taking it waits for the reads and blocking waits under way, at most
//! 100 ms, once per close whose marks wait),
//! and the marks of closes seen before that empty read are settled once
//! the older epoch's batches are all released. A read costs nothing beyond
//! its progress lock when nothing is waiting, and a batch one increment
//! and one decrement.
//!
//! A release and the settling meet on the counter alone (see
//! `Entered::leave`); the `model` tests explore every interleaving of that
//! handshake.
//!
//! A batch whose guard is leaked (`std::mem::forget`) is never released:
//! the marks of that queue then stay, and their slots rest until their
//! pool is dropped. Its entries still name their contexts, and hand them
//! back when dropped, even after the queue closed: the marks' slot tables
//! are then kept for the life of the process, so that no later pool is
//! given those addresses. Nothing is handed out twice.

use crate::buffer::StaleMarks;
use crate::progress::ProgressLock;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A queue's epochs of read batches, and the stale marks waiting on them.
///
/// `repr(C)`, `live` first and 16-byte aligned: a counter's address says
/// which counter it is and where its epochs are (see [`Entered`]).
#[repr(C, align(16))]
pub(crate) struct Epochs {
    /// Batches not yet released, by epoch parity, each counter plus one
    /// while it is biased (`Waiting::biased`). Only the newest epoch of
    /// each parity has any: the epoch advances only when the counter it
    /// moves to has none.
    live: [AtomicUsize; 2],
    epoch: AtomicU64,
    /// The sequence number of the newest marks waiting for an empty read;
    /// 0 when none are.
    awaiting: AtomicU64,
    waiting: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    next_seq: u64,
    /// The queue is closed: nothing more can be read from it.
    closed: bool,
    /// Marks waiting for an empty read that began after they were added.
    empty: Vec<(u64, Arc<StaleMarks>)>,
    /// Marks waiting for the batches of an epoch (and older) to be released.
    drain: Vec<(u64, Arc<StaleMarks>)>,
    /// Whether each counter of `live` is one more than its batches: while
    /// no marks wait for batches to be released. A counter then never
    /// drops to zero, and only when it does (no bias, no batch) does the
    /// release of a batch settle marks (`leave`): one test per batch.
    biased: bool,
}

impl Default for Epochs {
    fn default() -> Self {
        Epochs {
            epoch: AtomicU64::new(0),
            live: [AtomicUsize::new(1), AtomicUsize::new(1)],
            awaiting: AtomicU64::new(0),
            waiting: Mutex::new(Waiting {
                biased: true,
                ..Waiting::default()
            }),
        }
    }
}

impl Epochs {
    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Before a read whose lock said [`notice`](crate::progress::Noted::notice),
    /// under the progress lock: the marks an empty result of this read may
    /// settle (0: none).
    #[inline]
    pub(crate) fn awaiting(&self) -> u64 {
        self.awaiting.load(Ordering::Acquire)
    }

    /// Stores `awaiting` from the marks waiting for an empty read, and the
    /// notice of the queue's progress lock with it (the notice says that
    /// marks wait: `awaiting` is not 0); under the `waiting` lock.
    fn publish(&self, waiting: &Waiting, progress: &ProgressLock) {
        let seq = if waiting.closed {
            0
        } else {
            waiting.empty.iter().map(|(seq, _)| *seq).max().unwrap_or(0)
        };
        self.awaiting.store(seq, Ordering::Release);
        progress.set_notice(seq != 0);
    }

    /// After a read that returned completions, under the progress lock:
    /// counts the batch in the current epoch.
    #[inline(always)]
    pub(crate) fn enter(&self) -> Entered<'_> {
        let epoch = self.epoch.load(Ordering::Relaxed);
        // SAFETY: the count is made here, and the one `Entered` returned.
        let batch = unsafe { self.entered((epoch & 1) as usize) };
        batch.counter().fetch_add(1, Ordering::Relaxed);
        batch
    }

    /// A batch of an epoch of `parity` (0 or 1), counted before: what
    /// [`Entered::parity`] gave.
    ///
    /// # Safety
    /// Not memory safety: the count's. The caller owns a count of `parity`
    /// that [`enter`](Self::enter) made and that no other `Entered` still
    /// stands for (its `Entered` was dropped unleft, keeping only its
    /// parity), and leaves it once through the one returned. Each extra
    /// `Entered` could leave the count again and settle marks of a batch
    /// still held.
    pub(crate) unsafe fn entered(&self, parity: usize) -> Entered<'_> {
        let counter = NonNull::from(self).cast::<AtomicUsize>();
        Entered {
            // SAFETY: `live` is the first field (repr(C)), so `counter`
            // is `live[0]` and `parity & 1` stays within the array. The
            // pointer is derived from the whole `self`, so that
            // `Entered::epochs` may take it back to it.
            counter: unsafe { counter.add(parity & 1) },
            _epochs: PhantomData,
        }
    }

    /// The batches of `epoch`'s parity not yet released; under the
    /// `waiting` lock, which says whether the counter is biased.
    fn batches(&self, waiting: &Waiting, epoch: u64) -> usize {
        // Wrapping: the counter is at least its bias (each release follows
        // its count); were it not, a huge count only holds settling off.
        self.live[(epoch & 1) as usize]
            .load(Ordering::Acquire)
            .wrapping_sub(usize::from(waiting.biased))
    }

    /// Puts the bias of both counters on or takes it off; under the
    /// `waiting` lock.
    fn set_biased(&self, waiting: &mut Waiting, biased: bool) {
        if waiting.biased == biased {
            return;
        }
        for counter in &self.live {
            if biased {
                counter.fetch_add(1, Ordering::AcqRel);
            } else {
                counter.fetch_sub(1, Ordering::AcqRel);
            }
        }
        waiting.biased = biased;
    }

    /// A read that began after `seen` was returned found the queue empty
    /// (`seen` is not 0). Called with the queue's progress lock released;
    /// takes it exclusively, which waits for the reads, waits and polls under way
    /// on other threads (a blocking one holds it at most 100 ms at a
    /// time). Only when the epoch can advance: while a batch of the
    /// epoch before is still held, a later empty read does this.
    #[cold]
    pub(crate) fn read_empty(&self, seen: u64, progress: &ProgressLock) {
        // A first look under the `waiting` lock alone, which says whether
        // the counters are biased: the exclusive progress lock, which waits
        // for the reads and waits under way, is taken only when the epoch
        // can advance. (Without the lock, a count of one could be the bias
        // or a batch still held: taken for free, every empty read waited
        // for the other threads' waits while a batch was held.)
        let next_free = || {
            let waiting = self.waiting();
            self.batches(&waiting, self.epoch.load(Ordering::Relaxed) + 1) == 0
        };
        if !next_free() {
            return;
        }
        let _exclusive = progress.write();
        let mut waiting = self.waiting();
        let epoch = self.epoch.load(Ordering::Relaxed);
        // The counter the next epoch uses must be free of older batches.
        if self.batches(&waiting, epoch + 1) != 0 {
            return;
        }
        // No read is between its call and its count (the lock is held
        // exclusively): every batch that may hold a completion queued at
        // the closes up to `seen` is counted in `epoch` or before.
        self.epoch.store(epoch + 1, Ordering::Relaxed);
        let (ready, later): (Vec<_>, Vec<_>) = std::mem::take(&mut waiting.empty)
            .into_iter()
            .partition(|(seq, _)| *seq <= seen);
        waiting.empty = later;
        self.publish(&waiting, progress);
        waiting
            .drain
            .extend(ready.into_iter().map(|(_, marks)| (epoch, marks)));
        self.settle_locked(&mut waiting);
    }

    /// Marks to settle once this queue can no longer hand out a completion
    /// they name (see the module docs); `progress` is the queue's lock.
    pub(crate) fn await_empty_read(&self, marks: Arc<StaleMarks>, progress: &ProgressLock) {
        let mut waiting = self.waiting();
        if waiting.closed {
            drop(waiting);
            marks.settle();
            return;
        }
        waiting.next_seq += 1;
        let seq = waiting.next_seq;
        waiting.empty.push((seq, marks));
        self.publish(&waiting, progress);
    }

    /// The queue was closed after handing back what it held: nothing more
    /// can be read from it; `progress` is its lock.
    pub(crate) fn queue_closed(&self, progress: &ProgressLock) {
        let mut waiting = self.waiting();
        waiting.closed = true;
        self.publish(&waiting, progress);
        self.settle_locked(&mut waiting);
    }

    /// `Entered::leave`'s settling, out of line. `extern "C"` so that it cannot
    /// unwind: a batch's drop calls nothing that can
    /// (`cq::Completions`'s `Drop`).
    #[cold]
    #[inline(never)]
    extern "C" fn settle(&self) {
        let mut waiting = self.waiting();
        self.settle_locked(&mut waiting);
    }

    fn settle_locked(&self, waiting: &mut Waiting) {
        // Unbiased before the counters are looked at (see `Entered::leave`): a batch
        // released after the look settles what this leaves waiting.
        if !waiting.drain.is_empty() || waiting.closed {
            self.set_biased(waiting, false);
        }
        let live = [self.batches(waiting, 0), self.batches(waiting, 1)];
        let live = |epoch: u64| live[(epoch & 1) as usize];
        let now = self.epoch.load(Ordering::Relaxed);
        let none_live = live(0) == 0 && live(1) == 0;
        let mut done = Vec::new();
        if waiting.closed {
            if none_live {
                done.extend(waiting.empty.drain(..).map(|(_, m)| m));
                done.extend(waiting.drain.drain(..).map(|(_, m)| m));
            }
        } else {
            // Epoch `t` is drained once a newer one began and the counter of
            // its parity is zero, or was zero when a still newer one began.
            waiting.drain.retain(|(t, marks)| {
                let drained = now > *t && (now >= t + 2 || live(*t) == 0);
                if drained {
                    done.push(marks.clone());
                }
                !drained
            });
        }
        let draining = !waiting.drain.is_empty() || (waiting.closed && !waiting.empty.is_empty());
        self.set_biased(waiting, !draining);
        for marks in done {
            marks.settle();
        }
    }
}

// `Entered::epochs` takes a counter back to its epochs by its address:
// `live` starts them, aligned to two counters at least.
const COUNTER: usize = std::mem::size_of::<AtomicUsize>();
const _: () = assert!(std::mem::offset_of!(Epochs, live) == 0);
const _: () = assert!(std::mem::align_of::<Epochs>() >= 2 * COUNTER);
// `Completions::drop` moves its `Entered` out of `&mut self`: it has
// nothing to drop, so nothing reads it after the move.
const _: () = assert!(!std::mem::needs_drop::<Entered<'static>>());
// `Entered` stands for a shared reference to its epochs, sent and shared
// across threads (its `unsafe impl`s).
const _: () = {
    const fn shared<T: Sync>() {}
    shared::<Epochs>();
};

/// A batch counted in an epoch of a queue's [`Epochs`]
/// ([`Epochs::enter`]): the counter of the epoch's parity, which its
/// release decrements. One pointer, where the epochs and the epoch were
/// two words: a batch's guard is stored, and its release loads, one word
/// less. Neither `Copy` nor `Clone`: [`leave`](Entered::leave) takes it,
/// so a count is left at most once.
#[derive(Debug)]
pub(crate) struct Entered<'a> {
    /// `live[0]` or `live[1]` of an `Epochs` that lives for 'a, derived
    /// from a pointer to the whole (`Epochs::entered`).
    counter: NonNull<AtomicUsize>,
    _epochs: PhantomData<&'a Epochs>,
}

// SAFETY: it stands for a shared reference to an `Epochs`, which is Sync.
unsafe impl Send for Entered<'_> {}
// SAFETY: as above.
unsafe impl Sync for Entered<'_> {}

impl<'a> Entered<'a> {
    #[inline(always)]
    fn counter(&self) -> &'a AtomicUsize {
        // SAFETY: a counter of an `Epochs` that lives for 'a (the field's
        // invariant).
        unsafe { self.counter.as_ref() }
    }

    /// The parity of the batch's epoch: its counter's index, which its
    /// address tells (`live` starts the epochs, aligned to two counters
    /// at least).
    pub(crate) fn parity(&self) -> usize {
        (self.counter.as_ptr() as usize / COUNTER) & 1
    }

    /// The epochs of the counter (the settling's only use).
    fn epochs(&self) -> &'a Epochs {
        // SAFETY: the counter is `live[parity]` of an `Epochs` that lives
        // for 'a (the field's invariant), at `parity` counters from its
        // start (`live` is the first field, see the assertions above);
        // the pointer was derived from one to the whole `Epochs`.
        unsafe { self.counter.sub(self.parity()).cast::<Epochs>().as_ref() }
    }

    /// The batch was released: each of its completions was reclaimed or
    /// handed back before this.
    ///
    /// The counter drops to zero only unbiased, when marks may wait for
    /// this batch. `settle_locked` takes the bias off with a
    /// read-modify-write of the same counter before it loads it, so either
    /// this decrement comes after that one and finds the counter at zero,
    /// or that load sees this batch released. The release ordering makes
    /// the batch's reclaims visible to the settling that follows.
    #[inline(always)]
    pub(crate) fn leave(self) {
        if self.counter().fetch_sub(1, Ordering::AcqRel) == 1 {
            self.epochs().settle();
        }
    }
}

#[cfg(test)]
mod model;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_counted_on_its_epochs_counter_and_leads_back_to_them() {
        // On the heap, as a queue holds them, and on the stack.
        let held = Arc::new(Epochs::default());
        let local = Epochs::default();
        for epochs in [&*held, &local] {
            for parity in 0..2 {
                // SAFETY: the count is never left (only looked at).
                let batch = unsafe { epochs.entered(parity) };
                assert_eq!(batch.parity(), parity);
                assert!(std::ptr::eq(batch.epochs(), epochs));
                assert!(std::ptr::eq(batch.counter(), &epochs.live[parity]));
            }
            let counts = || epochs.live.each_ref().map(|c| c.load(Ordering::Relaxed));
            // Biased by one each while nothing drains.
            assert_eq!(counts(), [1, 1]);
            let batch = epochs.enter();
            assert_eq!(batch.parity(), 0);
            assert_eq!(counts(), [2, 1]);
            epochs.epoch.store(1, Ordering::Relaxed);
            let later = epochs.enter();
            assert_eq!(later.parity(), 1);
            assert_eq!(counts(), [2, 2]);
            batch.leave();
            later.leave();
            assert_eq!(counts(), [1, 1]);
        }
    }
}
