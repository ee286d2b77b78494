//! The lock that keeps a queue's or counter's progress apart from the
//! enables and closes of the endpoints bound to it.
//!
//! Every call that may run the provider's progress on the queue (reads,
//! blocking reads, `fi_trywait`, `fi_poll`, waits) holds it shared; an
//! endpoint's enable and close hold it exclusively (see
//! `CqInner`'s and `CntrInner`'s docs for what the providers read there).
//! It is a reader-writer lock in one word, so that the shared side costs
//! one atomic increment before the call and one decrement after, and so
//! that the increment's own sign flag tells a reader whether anything
//! else needs its attention before it calls the provider:
//! - a writer in, or waiting for the readers in it to leave;
//! - how many endpoints bound to the queue failed to enable and are still
//!   open (the provider runs them in the queue's progress, which is then
//!   refused: [`ProgressLock::set_broken`]);
//! - a notice its owner sets (for a completion queue: endpoint closes wait
//!   on an empty read, see the `epochs` module);
//! - for waits only, that waiting on the queue became unsafe for good
//!   ([`ProgressLock::set_poisoned`]), which reads do not look at.
//!
//! The word's top bit is set exactly while one of the first three is:
//! every change of them recomputes it in the same atomic operation. The
//! poison is not among them (reads do not look at it, and a queue keeps
//! it for good): a wait tests it in the word its increment returned. So a
//! reader enters with `lock add` and one jump on the sign of its result,
//! and leaves with `lock sub` and nothing else: a writer does not sleep
//! until the last reader wakes it, it waits for the readers to leave by
//! looking at the count, backing off (a spin, then yields, then sleeps of
//! up to a millisecond). Writers are endpoints' enables and closes, rare
//! beside the reads, and the readers they wait for are reads
//! (microseconds) and blocking waits, which the crate cuts into slices of
//! at most 100 ms.
//!
//! An event queue holds one more, with nothing noted: its reads into small
//! buffers hold it shared, and a raise of its connection data size takes
//! it exclusively (`EqInner::small_read`).
//!
//! Writers are preferred: a reader that finds a writer in or waiting backs
//! off and waits for it, so a stream of readers cannot starve an endpoint's
//! close. As with `std::sync::RwLock`, a thread that holds the lock shared
//! must not take it again (a writer may be waiting in between); the
//! callers take several locks once each, in address order
//! (`wait::with_progress_guards`, `ep::write_all`).

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// The lock word. Readers count in its low half, so that entering and
/// leaving add and subtract an immediate.
const READER: u64 = 1;
/// A writer holds the lock, or waits for the readers in it to leave.
const WRITER: u64 = 1 << 32;
/// Readers sleep until the writer leaves (possibly stale: a reader that
/// found the writer gone after setting it leaves it set).
const READERS_PARKED: u64 = 1 << 33;
/// Set by the owner (see [`ProgressLock::set_notice`]).
const NOTICE: u64 = 1 << 34;
/// Waiting on the queue became unsafe, for good (see
/// [`ProgressLock::set_poisoned`]). Only waits look at it
/// ([`ProgressLock::read_for_wait`]): reads still work.
const POISONED: u64 = 1 << 35;
/// Endpoints that failed to enable, still open, counted in bits 40..63.
/// The count saturates: once at its maximum it stays there, refusing
/// progress for good rather than ever under-counting.
const BROKEN_ONE: u64 = 1 << 40;
const BROKEN: u64 = 0x7fff_ff00_0000_0000;
/// What a reader looks at before its call.
const NOTED: u64 = NOTICE | BROKEN;
/// The sign bit: set exactly while any of these is.
const ATTENTION: u64 = 1 << 63;
const NEEDS_ATTENTION: u64 = WRITER | NOTED;

const _: () = assert!(readers(NEEDS_ATTENTION | READERS_PARKED | ATTENTION) == 0);
const _: () = assert!(BROKEN & (ATTENTION | WRITER | READERS_PARKED | NOTICE | POISONED) == 0);

/// The readers counted in a lock word.
#[inline(always)]
const fn readers(word: u64) -> u64 {
    word & 0xffff_ffff
}

/// `word` with its top bit recomputed from the bits it summarizes.
#[inline(always)]
const fn with_attention(word: u64) -> u64 {
    if word & NEEDS_ATTENTION != 0 {
        word | ATTENTION
    } else {
        word & !ATTENTION
    }
}

/// Whether a word (the result of a reader's increment, or one loaded)
/// needs a look beyond the fast path: its sign.
#[inline(always)]
const fn needs_attention(word: u64) -> bool {
    (word as i64) < 0
}

/// A queue's or counter's progress lock (see the module docs). Public in a
/// private module: [`Waitable`](crate::wait::Waitable) names it in a
/// method only the crate can call.
#[derive(Default)]
pub struct ProgressLock {
    state: AtomicU64,
    /// Writers, one at a time.
    writers: Mutex<()>,
    /// Where readers sleep until the writer leaves.
    parked: Mutex<()>,
    wake: Condvar,
    /// The gate of a completion queue's reads under the serialized
    /// threading models (see [`gate`](Self::gate)): `open`'s pointer while
    /// no flag of `NOTED` is set in the word, null while one is; always
    /// null on the other objects' locks.
    gate: AtomicPtr<c_void>,
    open: Option<GateOpen>,
    /// Held while `gate` is brought in line with the word, so that the
    /// last to do so saw every change before it.
    gate_refresh: Mutex<()>,
}

/// What a lock's gate holds while open.
struct GateOpen(NonNull<c_void>);

// SAFETY: the gate hands the address back as it was given; it is never
// dereferenced here.
unsafe impl Send for GateOpen {}
// SAFETY: as for Send: the address is only copied.
unsafe impl Sync for GateOpen {}

/// What a reader found in the lock word when it entered, beyond the lock:
/// the flags it looks at, shifted down from the word's high half. The fast
/// path never makes one but the clear one: the increment's sign said there
/// was nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Noted(u32);

impl Noted {
    /// The flags of `word` that `looks` selects.
    #[inline(always)]
    const fn of(word: u64, looks: u64) -> Noted {
        Noted(((word & looks) >> 32) as u32)
    }

    /// Nothing: the usual case.
    #[inline(always)]
    pub(crate) fn is_clear(self) -> bool {
        self.0 == 0
    }

    /// An endpoint bound to the queue failed to enable and is still open:
    /// the provider's progress must not run.
    #[inline(always)]
    pub(crate) fn refused(self) -> bool {
        self.0 & (BROKEN >> 32) as u32 != 0
    }

    /// The owner's notice was set.
    #[inline(always)]
    pub(crate) fn notice(self) -> bool {
        self.0 & (NOTICE >> 32) as u32 != 0
    }

    /// Waiting on the queue became unsafe (only seen by
    /// [`ProgressLock::read_for_wait`]).
    #[inline(always)]
    pub(crate) fn poisoned(self) -> bool {
        self.0 & (POISONED >> 32) as u32 != 0
    }
}

/// The lock held shared.
#[must_use]
pub(crate) struct ProgressRead<'a> {
    lock: &'a ProgressLock,
    noted: Noted,
}

impl ProgressRead<'_> {
    /// What the lock word said when the lock was taken.
    #[inline(always)]
    pub(crate) fn noted(&self) -> Noted {
        self.noted
    }
}

/// The lock held exclusively.
#[must_use]
pub(crate) struct ProgressWrite<'a> {
    lock: &'a ProgressLock,
    _writers: MutexGuard<'a, ()>,
}

fn relock<T>(r: Result<T, PoisonError<T>>) -> T {
    // Nothing panics while these mutexes are held; and what they guard is
    // the unit value.
    r.unwrap_or_else(PoisonError::into_inner)
}

impl ProgressLock {
    /// A lock whose gate is `open` while nothing is noted (see
    /// [`gate`](Self::gate)).
    pub(crate) fn with_gate(open: NonNull<c_void>) -> Self {
        ProgressLock {
            gate: AtomicPtr::new(open.as_ptr()),
            open: Some(GateOpen(open)),
            ..Self::default()
        }
    }

    /// For the reads of the serialized threading models, which take no
    /// lock: the gate's pointer (the completion queue's fid) while no flag
    /// a reader looks at is set, null while one is (then
    /// [`noted`](Self::noted) says which). One relaxed load, whose value
    /// the read then calls with: the pointer it needs anyway also says
    /// that nothing needs a look.
    ///
    /// The gate follows every change of those flags, under its own mutex
    /// and from the word as it is after the change, so that the last to
    /// move it saw every change before it. Under the serialized models,
    /// its only readers, both flags change on the reader's own thread (the
    /// endpoints and queues are neither `Send` nor `Sync`): the failed-
    /// enable count at an endpoint's enable and close, the notice when a
    /// close or a read of the queue publishes marks (`Epochs::publish`),
    /// each before its call returns. The relaxed load sees them in program
    /// order. Null on a lock without a gate (every lock but a serialized
    /// completion queue's).
    #[inline(always)]
    pub(crate) fn gate(&self) -> *mut c_void {
        self.gate.load(Ordering::Relaxed)
    }

    /// Brings the gate in line with the word, after a change of its flags
    /// (`change_flags`; the poison, which it does not follow, is set
    /// apart).
    fn refresh_gate(&self) {
        let Some(open) = &self.open else {
            return;
        };
        let _refresh = relock(self.gate_refresh.lock());
        let word = self.state.load(Ordering::Acquire);
        let now = if word & NOTED == 0 {
            open.0.as_ptr()
        } else {
            std::ptr::null_mut()
        };
        self.gate.store(now, Ordering::Release);
    }

    /// Takes the lock shared: one atomic increment and one jump when
    /// nothing needs attention.
    #[inline(always)]
    pub(crate) fn read(&self) -> ProgressRead<'_> {
        self.enter::<NOTED>()
    }

    /// Takes the lock shared for a wait, which also needs to know whether
    /// the queue is poisoned ([`Noted::poisoned`]): tested in the word the
    /// increment returned (the poison changes only under the lock held
    /// exclusively), beside the sign.
    #[inline(always)]
    pub(crate) fn read_for_wait(&self) -> ProgressRead<'_> {
        self.enter::<{ NOTED | POISONED }>()
    }

    /// Takes the lock shared, noting the flags of `LOOKS`.
    #[inline(always)]
    fn enter<const LOOKS: u64>(&self) -> ProgressRead<'_> {
        let entered = self.state.fetch_add(READER, Ordering::Acquire);
        // The sign of the word before the increment (the same as after:
        // the count never reaches the top bit), used for nothing else: x86
        // takes it from the `lock add`'s own flags (the word before it was
        // negative exactly when the word after is at most zero), with no
        // register loaded and nothing tested.
        debug_assert!(
            readers(entered) < readers(u64::MAX),
            "reader count overflow"
        );
        let noted = if needs_attention(entered) {
            self.read_contended(LOOKS)
        } else if LOOKS & POISONED != 0 {
            // A wait's entry only: a read's leaves `entered` to the sign.
            Noted::of(entered, POISONED)
        } else {
            Noted(0)
        };
        ProgressRead { lock: self, noted }
    }

    /// What a reader would find, read without taking the lock: for the
    /// serialized threading models, under which no enable or close runs
    /// beside the caller, and for callers that hold the lock.
    ///
    /// A relaxed load. Ordering matters only for a flag set on another
    /// thread, which under the serialized models none is (see
    /// [`gate`](Self::gate)); a caller under the lock may see the notice
    /// set by a close or read of the queue on another thread
    /// (`Epochs::publish`), and issues `fence(Acquire)` before it acts on
    /// it, which synchronizes with the release that set it
    /// (`CqInner::noted`). The failed-enable count is changed by an
    /// endpoint's enable and close, on the caller's thread under the
    /// serialized models and under the lock otherwise; a clear word
    /// publishes nothing. (An acquire load here made the compiler load the
    /// queue's handle again after it, on every read.)
    #[inline(always)]
    pub(crate) fn noted(&self) -> Noted {
        let word = self.state.load(Ordering::Relaxed);
        if needs_attention(word) {
            Noted::of(word, NOTED)
        } else {
            Noted(0)
        }
    }

    /// A reader whose increment found something needing attention: waits
    /// until no writer is in or waiting, holding the lock shared when it
    /// returns, and notes what `looks` selects of the word it then finds.
    ///
    /// The word is loaded again rather than taken from the increment (so
    /// that the fast path's comparison is the increment's only use): it is
    /// as good. Loaded after the increment, it shows any writer that came
    /// before it, and a writer that comes after waits for this reader; the
    /// poison changes only under the lock held exclusively.
    #[cold]
    #[inline(never)]
    fn read_contended(&self, looks: u64) -> Noted {
        loop {
            let now = self.state.load(Ordering::Acquire);
            if now & WRITER == 0 {
                return Noted::of(now, looks);
            }
            // Back off, so that the writer waits for no reader that waits
            // for it.
            self.leave();
            let mut parked = relock(self.parked.lock());
            while self.state.fetch_or(READERS_PARKED, Ordering::Relaxed) & WRITER != 0 {
                parked = relock(self.wake.wait(parked));
            }
            drop(parked);
            self.state.fetch_add(READER, Ordering::Acquire);
        }
    }

    /// A reader leaves: one atomic decrement, which the writer waiting for
    /// the count to reach zero sees (see the module docs).
    #[inline(always)]
    fn leave(&self) {
        self.state.fetch_sub(READER, Ordering::Release);
    }

    /// Takes the lock exclusively: waits for the writer before it, then for
    /// the readers in the lock (readers that come meanwhile back off).
    pub(crate) fn write(&self) -> ProgressWrite<'_> {
        let writers = relock(self.writers.lock());
        let was = self.state.fetch_or(WRITER | ATTENTION, Ordering::Acquire);
        if readers(was) != 0 {
            self.wait_for_readers();
        }
        ProgressWrite {
            lock: self,
            _writers: writers,
        }
    }

    /// Waits until the readers in the lock left, a writer being in: the
    /// load that finds none synchronizes with the last one's decrement.
    /// Spins first (a read takes microseconds), then yields, then sleeps
    /// for doubling times of at most a millisecond (a blocking wait takes
    /// up to its slice).
    #[cold]
    #[inline(never)]
    fn wait_for_readers(&self) {
        const SPINS: u32 = 64;
        const YIELDS: u32 = 64;
        let mut round = 0u32;
        while readers(self.state.load(Ordering::Acquire)) != 0 {
            if round < SPINS {
                std::hint::spin_loop();
            } else if round < SPINS + YIELDS {
                std::thread::yield_now();
            } else {
                let doublings = (round - SPINS - YIELDS).min(10);
                std::thread::sleep(Duration::from_micros(1 << doublings));
            }
            round = round.saturating_add(1);
        }
    }

    /// Changes the flags of the word as `change` says, recomputing its
    /// sign in the same atomic operation, then the gate; returns the word
    /// before.
    fn change_flags(&self, order: Ordering, change: impl Fn(u64) -> Option<u64>) -> u64 {
        let was = match self
            .state
            .fetch_update(order, Ordering::Relaxed, |s| change(s).map(with_attention))
        {
            Ok(was) | Err(was) => was,
        };
        self.refresh_gate();
        was
    }

    /// Sets or clears the owner's notice, which every reader sees from its
    /// next entry on. The owner serializes its calls.
    pub(crate) fn set_notice(&self, on: bool) {
        self.change_flags(Ordering::Release, |s| {
            Some(if on { s | NOTICE } else { s & !NOTICE })
        });
    }

    /// Counts an endpoint bound to the queue that failed to enable
    /// (`broken`), or one such that was closed; progress is refused while
    /// any is counted ([`Noted::refused`]).
    pub(crate) fn set_broken(&self, broken: bool) {
        self.change_flags(Ordering::AcqRel, |s| {
            let count = s & BROKEN;
            match (broken, count) {
                // Saturated: stays refused.
                (_, BROKEN) => None,
                (true, _) => Some(s + BROKEN_ONE),
                (false, 0) => None,
                (false, _) => Some(s - BROKEN_ONE),
            }
        });
    }

    /// Whether progress is refused now ([`Noted::refused`]).
    pub(crate) fn is_refused(&self) -> bool {
        self.noted().refused()
    }

    /// Refuses the waits on the queue from now on, for good: an endpoint
    /// bound to it closed (or failed to enable) on a provider that keeps a
    /// callback into it in the queue's wait object
    /// ([`crate::quirks::keeps_closed_endpoints_in_waits`]), so that
    /// `fi_trywait`, `fi_cq_sread`, `fi_cntr_wait` and `fi_wait` on the
    /// queue would call into freed memory. Set holding the lock
    /// exclusively; waits test it under the lock held shared
    /// ([`read_for_wait`](Self::read_for_wait), [`is_poisoned`](Self::is_poisoned)).
    pub(crate) fn set_poisoned(&self) {
        self.state.fetch_or(POISONED, Ordering::Release);
    }

    /// Whether waits on the queue are refused ([`set_poisoned`](Self::set_poisoned)),
    /// for a caller that holds the lock shared.
    pub(crate) fn is_poisoned(&self) -> bool {
        self.state.load(Ordering::Acquire) & POISONED != 0
    }
}

impl Drop for ProgressRead<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.lock.leave();
    }
}

impl Drop for ProgressWrite<'_> {
    fn drop(&mut self) {
        let was = self
            .lock
            .change_flags(Ordering::Release, |s| Some(s & !(WRITER | READERS_PARKED)));
        if was & READERS_PARKED != 0 {
            let _parked = relock(self.lock.parked.lock());
            self.lock.wake.notify_all();
        }
    }
}

#[cfg(test)]
mod model;

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn readers_share_and_a_writer_excludes_them() {
        let lock = ProgressLock::default();
        let a = lock.read();
        let b = lock.read();
        assert!(a.noted().is_clear() && b.noted().is_clear());
        assert_eq!(readers(lock.state.load(Ordering::Relaxed)), 2);
        drop((a, b));
        let w = lock.write();
        assert_eq!(lock.state.load(Ordering::Relaxed) & WRITER, WRITER);
        drop(w);
        assert_eq!(lock.state.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn notice_and_broken_are_seen_by_readers_and_broken_saturates() {
        let lock = ProgressLock::default();
        lock.set_notice(true);
        let r = lock.read();
        assert!(r.noted().notice() && !r.noted().refused());
        drop(r);
        lock.set_notice(false);
        lock.set_broken(true);
        lock.set_broken(true);
        lock.set_broken(false);
        assert!(lock.read().noted().refused());
        lock.set_broken(false);
        lock.set_broken(false);
        assert!(lock.read().noted().is_clear());
        assert!(lock.noted().is_clear());
        // Saturated: never comes back down, never carries into the readers.
        lock.state.fetch_or(BROKEN | ATTENTION, Ordering::Relaxed);
        lock.set_broken(true);
        lock.set_broken(false);
        assert!(lock.is_refused());
        assert_eq!(readers(lock.state.load(Ordering::Relaxed)), 0);
    }

    #[test]
    fn the_gate_is_open_exactly_while_nothing_is_noted() {
        let mut target = 0u8;
        let open = NonNull::from(&mut target).cast::<c_void>();
        let lock = ProgressLock::with_gate(open);
        assert_eq!(lock.gate(), open.as_ptr());
        lock.set_notice(true);
        assert!(lock.gate().is_null());
        lock.set_broken(true);
        lock.set_notice(false);
        assert!(lock.gate().is_null(), "still refused");
        lock.set_broken(false);
        assert_eq!(lock.gate(), open.as_ptr());
        // Writers and the poison are none of the serialized reads' business.
        let w = lock.write();
        lock.set_poisoned();
        drop(w);
        assert_eq!(lock.gate(), open.as_ptr());
        // Saturated: refused for good, the gate shut for good.
        lock.state.fetch_or(BROKEN | ATTENTION, Ordering::Relaxed);
        lock.set_broken(true);
        assert!(lock.gate().is_null());
        lock.set_broken(false);
        assert!(lock.gate().is_null());
        // Changes from many threads at once leave it as the word says.
        let lock = ProgressLock::with_gate(open);
        std::thread::scope(|s| {
            for t in 0..4 {
                let lock = &lock;
                s.spawn(move || {
                    for i in 0..2000 {
                        if t % 2 == 0 {
                            lock.set_notice(i % 2 == 0);
                        } else {
                            lock.set_broken(i % 2 == 0);
                        }
                    }
                });
            }
        });
        let noted = lock.state.load(Ordering::Relaxed) & NOTED != 0;
        assert_eq!(lock.gate().is_null(), noted);
        // A lock without a gate keeps it shut.
        assert!(ProgressLock::default().gate().is_null());
    }

    #[test]
    fn poison_is_seen_by_waits_only_and_outlives_writers() {
        let lock = ProgressLock::default();
        assert!(!lock.read_for_wait().noted().poisoned());
        let w = lock.write();
        lock.set_poisoned();
        drop(w);
        // Waits see it, on the fast path's one test; reads do not.
        assert!(lock.read_for_wait().noted().poisoned());
        assert!(lock.is_poisoned());
        let r = lock.read();
        assert!(r.noted().is_clear());
        drop(r);
        // Beside the other flags, and after writers come and go.
        lock.set_notice(true);
        lock.set_broken(true);
        drop(lock.write());
        let noted = lock.read_for_wait().noted();
        assert!(noted.poisoned() && noted.refused() && noted.notice());
        let noted = lock.read().noted();
        assert!(!noted.poisoned() && noted.refused() && noted.notice());
        lock.set_broken(false);
        lock.set_notice(false);
        assert!(lock.read_for_wait().noted().poisoned());
        assert_eq!(readers(lock.state.load(Ordering::Relaxed)), 0);
    }

    #[test]
    fn a_writer_waits_for_a_reader_and_readers_wait_for_the_writer() {
        let lock = Arc::new(ProgressLock::default());
        let held = lock.read();
        let writer = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                let _w = lock.write();
                std::thread::sleep(Duration::from_millis(50));
                Instant::now()
            })
        };
        // The writer is in (waiting for `held`) once WRITER is set.
        while lock.state.load(Ordering::Acquire) & WRITER == 0 {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            !writer.is_finished(),
            "the writer did not wait for the reader"
        );
        drop(held);
        let late = lock.read();
        let entered = Instant::now();
        let left = writer.join().unwrap();
        assert!(
            entered >= left,
            "a reader entered while the writer held the lock"
        );
        drop(late);
        assert_eq!(lock.state.load(Ordering::Relaxed) & !READERS_PARKED, 0);
    }

    #[test]
    fn readers_and_writers_on_many_threads_never_overlap() {
        let lock = Arc::new(ProgressLock::default());
        let inside = Arc::new(AtomicUsize::new(0));
        const WRITING: usize = 1 << 20;
        let deadline = Instant::now() + Duration::from_millis(300);
        let rounds: Vec<_> = (0..6)
            .map(|i| {
                let (lock, inside) = (lock.clone(), inside.clone());
                std::thread::spawn(move || {
                    let mut rounds = 0u64;
                    while Instant::now() < deadline || rounds < 100 {
                        if i % 3 == 0 {
                            let _w = lock.write();
                            let was = inside.fetch_add(WRITING, Ordering::SeqCst);
                            assert_eq!(was, 0, "a writer entered beside others");
                            std::hint::spin_loop();
                            inside.fetch_sub(WRITING, Ordering::SeqCst);
                        } else {
                            let _r = lock.read();
                            let was = inside.fetch_add(1, Ordering::SeqCst);
                            assert!(was < WRITING, "a reader entered beside a writer");
                            inside.fetch_sub(1, Ordering::SeqCst);
                        }
                        rounds += 1;
                    }
                    rounds
                })
            })
            .collect();
        for t in rounds {
            assert!(t.join().unwrap() >= 100);
        }
        assert_eq!(lock.state.load(Ordering::Relaxed) & !READERS_PARKED, 0);
    }
}
