//! Every interleaving of a few readers, writers and flag changes on the
//! lock's protocol, explored exhaustively.
//!
//! The threads below are a step-by-step transcription of `read`,
//! `read_for_wait`, `read_contended`, `leave`, `write`,
//! `wait_for_readers`, the write guard's drop, `set_notice`, `set_broken`
//! and `set_poisoned`
//! (under the lock held exclusively, as an endpoint's close sets it): one
//! step per atomic
//! operation on the lock word and per mutex or condition variable
//! operation, the word's operations taken as sequentially consistent.
//! Every change of the word is a read-modify-write, so each release heads
//! a release sequence that every later change continues; the plain loads
//! (`read_contended`'s, the writer's polling) may read an older value than
//! the newest, which is the same as that load scheduled earlier, and each
//! reads at least its own thread's last change. Keep them in step with the
//! code above.
//!
//! Checked in every reachable state: no writer beside a reader or another
//! writer; the reader count in the word equals the threads counted in it;
//! the word's sign says exactly whether a writer or a flag is in it; a
//! reader's fast path enters only where neither is;
//! a reader in the lock noted what its entry looks at and nothing else (a
//! wait's reader the poison exactly as the word holds it, which only a
//! writer changes; a plain reader never the poison);
//! from every state, every thread can still finish (no lost wake-up, no
//! state from which the threads can only wait); without spurious wake-ups,
//! no schedule runs for ever (the state graph has no cycle: a writer's
//! polling is bound to find the readers gone, no reader spins); and where
//! no step is
//! possible, every thread finished and the word holds no reader, writer or
//! writer-parked bit, and its flags as the flag thread and the poisoning
//! writers left them.

use super::{
    needs_attention, readers, with_attention, Noted, ATTENTION, BROKEN, BROKEN_ONE, NOTED, NOTICE,
    POISONED, READER, READERS_PARKED, WRITER,
};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The explored states' index. Its hash is a multiply and rotate per field
/// (as rustc's own FxHash): the states are small and not chosen by anyone,
/// and SipHash took about 40% of a run.
type Index = HashMap<State, usize, BuildHasherDefault<StateHasher>>;

#[derive(Default)]
struct StateHasher(u64);

impl Hasher for StateHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b.into());
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(n.into());
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Kind {
    /// `read`: looks at `NOTED`.
    Reader,
    /// `read_for_wait`: looks at `NOTED | POISONED`.
    WaitReader,
    Writer,
    /// A writer that sets the poison in its first round, holding the lock
    /// (as an endpoint's close and a failed enable do).
    PoisoningWriter,
    /// Sets the notice and the broken count and takes them back, without
    /// the lock (as `Epochs::publish` and an endpoint's drop do).
    Flags,
}

impl Kind {
    /// The steps the thread runs: a reader's or a writer's (or the flag
    /// thread's).
    fn steps(self) -> Kind {
        match self {
            Kind::WaitReader => Kind::Reader,
            Kind::PoisoningWriter => Kind::Writer,
            k => k,
        }
    }

    /// What the reader's entry looks at (`enter`'s `LOOKS`).
    fn looks(self) -> u64 {
        match self {
            Kind::WaitReader => NOTED | POISONED,
            _ => NOTED,
        }
    }
}

// Reader steps.
const R_ADD: u8 = 0; // read: fetch_add(READER), its sign tested
const R_CONT: u8 = 1; // read_contended: load, test WRITER
const R_BACK: u8 = 2; // leave (backing off): fetch_sub(READER)
const R_PARK_LOCK: u8 = 4; // lock parked
const R_PARK_OR: u8 = 5; // fetch_or(READERS_PARKED); wait while WRITER
const R_PARK_WAIT: u8 = 6; // in Condvar::wait, then relock parked
const R_PARK_UNLOCK: u8 = 7; // drop(parked)
const R_READD: u8 = 8; // fetch_add(READER) again
const R_CS: u8 = 9; // holds the lock shared
const R_LEAVE: u8 = 10; // guard drop: fetch_sub(READER)

// Writer steps.
const W_MUTEX: u8 = 20; // lock writers
const W_OR: u8 = 21; // fetch_or(WRITER | ATTENTION)
const W_WAIT: u8 = 22; // wait_for_readers: load until no reader is counted
const W_CS: u8 = 26; // holds the lock exclusively
const W_DROP: u8 = 27; // guard drop: clear WRITER | READERS_PARKED, recompute the sign
const W_DROP_NOTIFY: u8 = 28; // lock parked, notify_all, unlock
const W_UNMUTEX: u8 = 29; // unlock writers

const DONE: u8 = 255;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
struct Thread {
    pc: u8,
    /// Rounds left, or for the flag thread the next change.
    left: u8,
    /// What a reader's entry returned (`Noted`), once in the lock.
    noted: u64,
}

/// The most threads a model runs.
const MAX_THREADS: usize = 5;

/// The threads of a state, in place (a state is copied at every step).
/// The slots past `n` stay at their default, so the derived comparison
/// and hash see only the threads.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Threads {
    n: usize,
    t: [Thread; MAX_THREADS],
}

impl std::ops::Deref for Threads {
    type Target = [Thread];

    fn deref(&self) -> &[Thread] {
        &self.t[..self.n]
    }
}

impl std::ops::DerefMut for Threads {
    fn deref_mut(&mut self) -> &mut [Thread] {
        &mut self.t[..self.n]
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct State {
    word: u64,
    /// Owners, as thread index + 1 (0: free).
    writers: u8,
    parked: u8,
    /// Threads in `Condvar::wait` not yet woken.
    waiting: u8,
    threads: Threads,
}

fn set_broken(s: u64, broken: bool) -> u64 {
    match (broken, s & BROKEN) {
        (_, BROKEN) => s,
        (true, _) => s + BROKEN_ONE,
        (false, 0) => s,
        (false, _) => s - BROKEN_ONE,
    }
}

/// The flag thread's changes, in order.
const FLAG_CHANGES: u8 = 4;

struct Model<'a> {
    kinds: &'a [Kind],
    /// Rounds each reader and writer runs.
    rounds: u8,
    spurious: bool,
    /// A deliberate fault, to show that the exploration finds it.
    fault: Option<Fault>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    /// A writer sets its bit without the sign: readers enter beside it.
    WriterWithoutAttention,
    /// The reader's fast path tests the writer's bit, not the sign: it
    /// enters past the notice and the broken count.
    FastPathWriterOnly,
    /// A reader that finds a writer leaves and enters again at once, never
    /// parking: it spins against the writer's polling.
    BackOffWithoutParking,
    /// The write guard's drop never wakes the parked readers.
    DropWithoutWake,
    /// A reader that finds a writer waits for it still counted.
    WaitCounted,
    /// `read_contended` notes `NOTED` whatever its entry looks at: a wait
    /// that took the slow path misses the poison.
    ContendedLooksAtNoted,
    /// The poison set before the lock is taken exclusively: a wait in the
    /// lock has not seen it.
    PoisonBeforeTheLock,
    /// The write guard's drop clears the poison with its own bits.
    DropClearsPoison,
}

impl Model<'_> {
    fn initial(&self, rounds: u8) -> State {
        State {
            word: 0,
            writers: 0,
            parked: 0,
            waiting: 0,
            threads: {
                assert!(
                    self.kinds.len() <= MAX_THREADS,
                    "at most {MAX_THREADS} threads"
                );
                let mut threads = Threads {
                    n: self.kinds.len(),
                    t: [Thread::default(); MAX_THREADS],
                };
                for (t, k) in threads.iter_mut().zip(self.kinds) {
                    *t = Thread {
                        pc: match k.steps() {
                            Kind::Reader => R_ADD,
                            Kind::Flags => 0,
                            _ => W_MUTEX,
                        },
                        left: if *k == Kind::Flags { 0 } else { rounds },
                        noted: 0,
                    };
                }
                threads
            },
        }
    }

    /// The states thread `i` can step to (none: blocked or finished).
    fn steps(&self, s: &State, i: usize, out: &mut Vec<State>) {
        let me = i as u8 + 1;
        let bit = 1u8 << i;
        let t = s.threads[i];
        let mut n = *s;
        let go = |n: &mut State, pc: u8| n.threads[i].pc = pc;
        let kind = self.kinds[i];
        match (kind.steps(), t.pc) {
            (_, DONE) => return,
            (Kind::Flags, k) => {
                if k >= FLAG_CHANGES {
                    return;
                }
                n.word = with_attention(match k {
                    0 => n.word | NOTICE,
                    1 => set_broken(n.word, true),
                    2 => n.word & !NOTICE,
                    _ => set_broken(n.word, false),
                });
                go(&mut n, if k + 1 == FLAG_CHANGES { DONE } else { k + 1 });
            }
            (Kind::Reader, R_ADD) => {
                let was = n.word;
                n.word += READER;
                let slow = if self.fault == Some(Fault::FastPathWriterOnly) {
                    was & WRITER != 0
                } else {
                    needs_attention(n.word)
                };
                if slow {
                    go(&mut n, R_CONT);
                } else {
                    assert_eq!(
                        was & (WRITER | NOTED),
                        0,
                        "a fast path entered beside a writer or a flag: {s:?}"
                    );
                    // A wait's fast path notes the poison of the word its
                    // increment returned.
                    n.threads[i].noted = noted_bits(was, kind.looks() & POISONED);
                    go(&mut n, R_CS);
                }
            }
            (Kind::Reader, R_CONT) => {
                // The word loaded again, as `read_contended` does.
                let now = n.word;
                if now & WRITER != 0 && self.fault == Some(Fault::WaitCounted) {
                    // Waits (spinning on the word) without leaving: as
                    // blocked until the writer leaves, then loads again.
                    return;
                } else if now & WRITER != 0 {
                    go(&mut n, R_BACK);
                } else {
                    let looks = if self.fault == Some(Fault::ContendedLooksAtNoted) {
                        NOTED
                    } else {
                        kind.looks()
                    };
                    n.threads[i].noted = noted_bits(now, looks);
                    go(&mut n, R_CS);
                }
            }
            (Kind::Reader, R_BACK) => {
                n.word -= READER;
                if self.fault == Some(Fault::BackOffWithoutParking) {
                    go(&mut n, R_READD);
                } else {
                    go(&mut n, R_PARK_LOCK);
                }
            }
            (Kind::Reader, R_PARK_LOCK) => {
                if n.parked != 0 {
                    return;
                }
                n.parked = me;
                go(&mut n, R_PARK_OR);
            }
            (Kind::Reader, R_PARK_OR) => {
                let was = n.word;
                n.word |= READERS_PARKED;
                if was & WRITER != 0 {
                    n.parked = 0;
                    n.waiting |= bit;
                    go(&mut n, R_PARK_WAIT);
                } else {
                    go(&mut n, R_PARK_UNLOCK);
                }
            }
            (Kind::Reader, R_PARK_WAIT) => {
                if n.waiting & bit != 0 {
                    if !self.spurious {
                        return;
                    }
                    n.waiting &= !bit;
                }
                if n.parked != 0 {
                    return;
                }
                n.parked = me;
                go(&mut n, R_PARK_OR);
            }
            (Kind::Reader, R_PARK_UNLOCK) => {
                assert_eq!(n.parked, me);
                n.parked = 0;
                go(&mut n, R_READD);
            }
            (Kind::Reader, R_READD) => {
                n.word += READER;
                go(&mut n, R_CONT);
            }
            (Kind::Reader, R_CS) => go(&mut n, R_LEAVE),
            (Kind::Reader, R_LEAVE) => {
                n.word -= READER;
                n.threads[i].noted = 0;
                let next = self.next_round(&mut n, i);
                go(&mut n, next);
            }
            (Kind::Writer, W_MUTEX) => {
                if n.writers != 0 {
                    return;
                }
                n.writers = me;
                if self.poisons(i, &n) && self.fault == Some(Fault::PoisonBeforeTheLock) {
                    n.word |= POISONED;
                }
                go(&mut n, W_OR);
            }
            (Kind::Writer, W_OR) => {
                let was = n.word;
                n.word |= if self.fault == Some(Fault::WriterWithoutAttention) {
                    WRITER
                } else {
                    WRITER | ATTENTION
                };
                go(&mut n, if readers(was) != 0 { W_WAIT } else { W_CS });
            }
            (Kind::Writer, W_WAIT) => {
                // Its loads change nothing: the step is the one that finds
                // no reader (a load that finds one leaves the state as it
                // is).
                if readers(n.word) != 0 {
                    return;
                }
                go(&mut n, W_CS);
            }
            (Kind::Writer, W_CS) => {
                // set_poisoned, holding the lock exclusively.
                if self.poisons(i, &n) {
                    n.word |= POISONED;
                }
                go(&mut n, W_DROP);
            }
            (Kind::Writer, W_DROP) => {
                let was = n.word;
                let mut word = n.word & !(WRITER | READERS_PARKED);
                if self.fault == Some(Fault::DropClearsPoison) {
                    word &= !POISONED;
                }
                n.word = with_attention(word);
                go(
                    &mut n,
                    if was & READERS_PARKED != 0 && self.fault != Some(Fault::DropWithoutWake) {
                        W_DROP_NOTIFY
                    } else {
                        W_UNMUTEX
                    },
                );
            }
            (Kind::Writer, W_DROP_NOTIFY) => {
                if n.parked != 0 {
                    return;
                }
                self.notify_all(&mut n);
                go(&mut n, W_UNMUTEX);
            }
            (Kind::Writer, W_UNMUTEX) => {
                assert_eq!(n.writers, me);
                n.writers = 0;
                let next = self.next_round(&mut n, i);
                go(&mut n, next);
            }
            (k, pc) => unreachable!("{k:?} at {pc}"),
        }
        out.push(n);
    }

    fn notify_all(&self, n: &mut State) {
        n.waiting = 0;
    }

    /// Whether writer `i` sets the poison in the round it is in: a
    /// poisoning writer, in its first.
    fn poisons(&self, i: usize, n: &State) -> bool {
        self.kinds[i] == Kind::PoisoningWriter && n.threads[i].left == self.rounds
    }

    fn next_round(&self, n: &mut State, i: usize) -> u8 {
        n.threads[i].left -= 1;
        match (n.threads[i].left, self.kinds[i].steps()) {
            (0, _) => DONE,
            (_, Kind::Reader) => R_ADD,
            _ => W_MUTEX,
        }
    }

    fn check(&self, s: &State) {
        let readers_in = s
            .threads
            .iter()
            .filter(|t| matches!(t.pc, R_CS | R_LEAVE))
            .count();
        let writers_in = s
            .threads
            .iter()
            .filter(|t| matches!(t.pc, W_CS | W_DROP))
            .count();
        assert!(writers_in <= 1, "two writers in: {s:?}");
        assert!(
            writers_in == 0 || readers_in == 0,
            "a writer beside a reader: {s:?}"
        );
        if self.fault != Some(Fault::WriterWithoutAttention) {
            assert_eq!(
                s.word,
                with_attention(s.word),
                "the sign does not say what needs attention: {s:?}"
            );
        }
        let counted = s
            .threads
            .iter()
            .zip(self.kinds)
            .filter(|(t, k)| {
                k.steps() == Kind::Reader && matches!(t.pc, R_CONT | R_BACK | R_CS | R_LEAVE)
            })
            .count() as u64;
        assert_eq!(readers(s.word), counted, "reader count: {s:?}");
        for (t, k) in s.threads.iter().zip(self.kinds) {
            if k.steps() != Kind::Reader || !matches!(t.pc, R_CS | R_LEAVE) {
                continue;
            }
            assert_eq!(
                t.noted & !k.looks(),
                0,
                "noted beyond what it looks at: {s:?}"
            );
            if *k == Kind::WaitReader {
                // The poison changes only under the lock held exclusively:
                // a wait in the lock knows it as it is.
                assert_eq!(
                    t.noted & POISONED,
                    s.word & POISONED,
                    "a wait in the lock noted the poison wrong: {s:?}"
                );
            }
        }
    }

    /// Explores every interleaving; returns the number of states.
    fn explore(&self) -> usize {
        let init = self.initial(self.rounds);
        let mut index = Index::default();
        let mut states: Vec<State> = Vec::new();
        let mut preds: Vec<Vec<usize>> = Vec::new();
        let mut stack = vec![0usize];
        index.insert(init, 0);
        states.push(init);
        preds.push(Vec::new());
        let mut finals = Vec::new();
        let mut next = Vec::new();
        while let Some(at) = stack.pop() {
            let s = states[at];
            self.check(&s);
            next.clear();
            for i in 0..self.kinds.len() {
                self.steps(&s, i, &mut next);
            }
            if next.is_empty() {
                assert!(
                    s.threads.iter().all(|t| t.pc == DONE),
                    "stuck (a lost wake-up or a deadlock): {s:?}"
                );
                let mut flags = if self.kinds.contains(&Kind::Flags) {
                    set_broken(set_broken(0, true), false)
                } else {
                    0
                };
                if self.kinds.contains(&Kind::PoisoningWriter) {
                    // For good: no writer or flag change takes it back.
                    flags |= POISONED;
                }
                assert_eq!(
                    s.word & !READERS_PARKED,
                    with_attention(flags),
                    "left over: {s:?}"
                );
                assert_eq!((s.writers, s.parked, s.waiting), (0, 0, 0));
                finals.push(at);
                continue;
            }
            for n in next.drain(..) {
                let id = match index.get(&n) {
                    Some(&id) => id,
                    None => {
                        let id = states.len();
                        index.insert(n, id);
                        states.push(n);
                        preds.push(Vec::new());
                        stack.push(id);
                        id
                    }
                };
                preds[id].push(at);
            }
        }
        // Without spurious wake-ups, no schedule runs for ever: the graph
        // has no cycle (every state is taken off once all its successors
        // are).
        if !self.spurious {
            let mut successors = vec![0usize; states.len()];
            for p in &preds {
                for &q in p {
                    successors[q] += 1;
                }
            }
            let mut work: Vec<usize> = (0..states.len()).filter(|&i| successors[i] == 0).collect();
            let mut taken = 0;
            while let Some(at) = work.pop() {
                taken += 1;
                for &p in &preds[at] {
                    successors[p] -= 1;
                    if successors[p] == 0 {
                        work.push(p);
                    }
                }
            }
            assert_eq!(
                taken,
                states.len(),
                "a cycle: some schedule runs for ever (a livelock)"
            );
        }
        // Every state can still reach the end.
        let mut reaches = vec![false; states.len()];
        let mut work = finals;
        for &f in &work {
            reaches[f] = true;
        }
        while let Some(at) = work.pop() {
            for &p in &preds[at] {
                if !reaches[p] {
                    reaches[p] = true;
                    work.push(p);
                }
            }
        }
        if let Some(stuck) = reaches.iter().position(|r| !r) {
            panic!(
                "a state from which the threads never finish: {:?}",
                states[stuck]
            );
        }
        states.len()
    }
}

/// What a reader notes of `word` (`Noted::of`, as the code computes it),
/// as the word's bits.
fn noted_bits(word: u64, looks: u64) -> u64 {
    u64::from(Noted::of(word, looks).0) << 32
}

fn run(kinds: &[Kind], rounds: u8) {
    for spurious in [false, true] {
        let model = Model {
            kinds,
            rounds,
            spurious,
            fault: None,
        };
        let n = model.explore();
        println!("{kinds:?} x{rounds}, spurious wake-ups {spurious}: {n} states");
        assert!(n > 100);
    }
}

#[test]
fn one_reader_and_two_writers_three_rounds_with_flags() {
    use Kind::*;
    run(&[Reader, Writer, Writer, Flags], 3);
}

#[test]
fn two_readers_and_two_writers_two_rounds() {
    use Kind::*;
    run(&[Reader, Reader, Writer, Writer], 2);
}

#[test]
fn two_readers_one_writer_and_flag_changes_two_rounds() {
    use Kind::*;
    run(&[Reader, Reader, Writer, Flags], 2);
}

#[test]
fn three_readers_and_two_writers() {
    use Kind::*;
    run(&[Reader, Reader, Reader, Writer, Writer], 1);
}

/// A wait and a read beside a writer that poisons the queue under the
/// lock: the wait notes the poison exactly when the word holds it, the
/// read never, and it outlives the writer's later rounds.
#[test]
fn a_wait_and_a_read_beside_a_poisoning_writer_two_rounds() {
    use Kind::*;
    run(&[WaitReader, Reader, PoisoningWriter], 2);
}

/// And beside a writer that does not poison.
#[test]
fn a_wait_and_a_read_beside_a_poisoning_writer_and_another_two_rounds() {
    use Kind::*;
    run(&[WaitReader, Reader, PoisoningWriter, Writer], 2);
}

/// The poison beside the notice and the broken count, which change
/// without the lock meanwhile.
#[test]
fn a_wait_beside_a_poisoning_writer_and_flag_changes_three_rounds() {
    use Kind::*;
    run(&[WaitReader, PoisoningWriter, Flags], 3);
}

/// The most threads: a wait and a read beside two writers (one
/// poisoning) and the flag changes, two rounds each.
#[test]
fn a_wait_a_read_two_writers_and_flag_changes_two_rounds() {
    use Kind::*;
    run(&[WaitReader, Reader, Writer, PoisoningWriter, Flags], 2);
}

/// What the exploration of `kinds` (two rounds each) with `fault` put in
/// reports: the message of the check it fails. Panics when none fails.
fn found_with(fault: Fault, kinds: &[Kind]) -> String {
    let found = std::panic::catch_unwind(|| {
        Model {
            kinds,
            rounds: 2,
            spurious: false,
            fault: Some(fault),
        }
        .explore()
    });
    let Err(e) = found else {
        panic!("{fault:?} went unnoticed");
    };
    e.downcast_ref::<String>().cloned().unwrap_or_default()
}

/// The exploration finds what it is for: each fault, put in on purpose,
/// leaves some interleaving stuck.
#[test]
fn the_model_finds_lost_wake_ups_and_deadlocks() {
    use Kind::*;
    for fault in [Fault::DropWithoutWake, Fault::WaitCounted] {
        let what = found_with(fault, &[Reader, Reader, Writer]);
        assert!(
            what.contains("stuck") || what.contains("never finish"),
            "{fault:?}: {what}"
        );
    }
}

/// A writer whose bit does not set the word's sign, a fast path that
/// looks at the writer's bit only, and a reader that spins against a
/// writer instead of parking: each is found.
#[test]
fn the_model_finds_a_fast_path_that_misses_the_sign_and_a_spinning_reader() {
    use Kind::*;
    for (fault, kinds, expected) in [
        (
            Fault::WriterWithoutAttention,
            &[Reader, Writer][..],
            "a fast path entered beside",
        ),
        (
            Fault::FastPathWriterOnly,
            &[Reader, Writer, Flags][..],
            "a fast path entered beside",
        ),
        (
            Fault::BackOffWithoutParking,
            &[Reader, Writer][..],
            "a cycle",
        ),
    ] {
        let what = found_with(fault, kinds);
        assert!(what.contains(expected), "{fault:?}: {what}");
    }
}

/// And each fault of the poison: a wait that misses it, or a poison that
/// does not last.
#[test]
fn the_model_finds_a_poison_missed_or_lost() {
    use Kind::*;
    for (fault, expected) in [
        (Fault::ContendedLooksAtNoted, "noted the poison wrong"),
        (Fault::PoisonBeforeTheLock, "noted the poison wrong"),
        (Fault::DropClearsPoison, "left over"),
    ] {
        let what = found_with(fault, &[WaitReader, PoisoningWriter]);
        assert!(what.contains(expected), "{fault:?}: {what}");
    }
}
