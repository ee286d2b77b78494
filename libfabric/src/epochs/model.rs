//! Every interleaving of batch releases and a settling, on the counter of
//! one epoch, explored exhaustively.
//!
//! The threads are a step-by-step transcription of `Entered::leave` and of
//! `settle_locked` under the `waiting` lock (as `read_empty` runs it when
//! marks start to wait for the epoch's batches, and as `settle` runs it
//! when a release finds the counter at zero): one step per
//! read-modify-write or load of the counter and per lock operation. The
//! counter's changes are all read-modify-writes, so they are totally
//! ordered; the settling's load reads at least its own last change. Keep
//! them in step with the code above.
//!
//! Checked in every reachable state: the counter is the batches held plus
//! the bias; and where no step is possible, every thread finished and,
//! once marks waited and every batch was released, they were settled (no
//! release is missed, and none settles them while a batch is held).

use std::collections::HashSet;

/// A deliberate fault, to show that the exploration finds it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    /// The settling looks at the counter without taking the bias off
    /// first (and takes it off only after the look).
    LookBeforeUnbias,
    /// The settling puts the bias back while marks still wait.
    RebiasWhileDraining,
    /// A release settles only when the counter was at zero before it
    /// (not when it drops to zero).
    LeaveTestsZero,
}

/// Where a thread is.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Pc {
    /// A releaser about to decrement; the drainer about to lock.
    Start,
    /// Waiting for the `waiting` lock, to settle.
    Lock,
    /// Holding the lock: the drainer adds its marks; a releaser goes on.
    AddMarks,
    /// `set_biased(false)` when marks wait.
    Unbias,
    /// The look at the counter, and the settling it allows.
    Look,
    /// `set_biased(!draining)` after the look.
    Rebias,
    /// The lock released.
    Unlock,
    Done,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct State {
    /// The epoch's counter: batches held plus the bias.
    counter: i64,
    /// Under the lock: whether the counters carry the bias.
    biased: bool,
    /// Who holds the `waiting` lock.
    owner: Option<usize>,
    /// Marks wait for this epoch's batches (`waiting.drain` not empty).
    waiting: bool,
    /// The marks were settled.
    settled: bool,
    /// Whether the marks were settled while a batch was still held.
    early: bool,
    /// Each thread's place; thread 0 is the drainer, the others each
    /// release one batch.
    pc: Vec<Pc>,
}

fn explore(releasers: usize, fault: Option<Fault>) -> Result<usize, String> {
    let start = State {
        counter: releasers as i64 + 1,
        biased: true,
        owner: None,
        waiting: false,
        settled: false,
        early: false,
        pc: vec![Pc::Start; releasers + 1],
    };
    let mut seen = HashSet::new();
    let mut stack = vec![start];
    while let Some(s) = stack.pop() {
        if !seen.insert(s.clone()) {
            continue;
        }
        let held = (1..s.pc.len()).filter(|&t| s.pc[t] == Pc::Start).count() as i64;
        if s.counter != held + i64::from(s.biased) {
            return Err(format!("a counter that is not batches plus bias: {s:?}"));
        }
        if s.early {
            return Err(format!("marks settled while a batch was held: {s:?}"));
        }
        let mut moved = false;
        for t in 0..s.pc.len() {
            if let Some(next) = step(&s, t, fault) {
                moved = true;
                stack.push(next);
            }
        }
        if !moved {
            if s.pc.iter().any(|&p| p != Pc::Done) {
                return Err(format!("threads that can no longer move: {s:?}"));
            }
            if s.waiting && !s.settled {
                return Err(format!(
                    "a release was missed: the marks wait for ever: {s:?}"
                ));
            }
        }
    }
    Ok(seen.len())
}

/// The step that follows `pc` in `settle_locked` (from taking the lock
/// to putting the bias back): the unbias, then the look, or under
/// `Fault::LookBeforeUnbias` the other way round.
fn after(pc: Pc, fault: Option<Fault>) -> Pc {
    let order = if fault == Some(Fault::LookBeforeUnbias) {
        [Pc::AddMarks, Pc::Look, Pc::Unbias, Pc::Rebias]
    } else {
        [Pc::AddMarks, Pc::Unbias, Pc::Look, Pc::Rebias]
    };
    let i = order
        .iter()
        .position(|&p| p == pc)
        .expect("a step of settle_locked");
    order[i + 1]
}

/// Thread `t`'s next step from `s`, if it can take one.
fn step(s: &State, t: usize, fault: Option<Fault>) -> Option<State> {
    let mut n = s.clone();
    let drainer = t == 0;
    match s.pc[t] {
        Pc::Done => return None,
        Pc::Start if drainer => n.pc[t] = Pc::Lock,
        Pc::Start => {
            // leave: fetch_sub(1) == 1 settles.
            let before = n.counter;
            n.counter -= 1;
            let settles = if fault == Some(Fault::LeaveTestsZero) {
                before == 0
            } else {
                before == 1
            };
            n.pc[t] = if settles { Pc::Lock } else { Pc::Done };
        }
        Pc::Lock => {
            if s.owner.is_some() {
                return None;
            }
            n.owner = Some(t);
            n.pc[t] = Pc::AddMarks;
        }
        Pc::AddMarks => {
            if drainer {
                n.waiting = true;
            }
            n.pc[t] = after(Pc::AddMarks, fault);
        }
        Pc::Unbias => {
            if s.waiting && s.biased {
                n.counter -= 1;
                n.biased = false;
            }
            n.pc[t] = after(Pc::Unbias, fault);
        }
        Pc::Look => {
            let batches = n.counter - i64::from(n.biased);
            if n.waiting && batches == 0 {
                n.waiting = false;
                n.settled = true;
                let held = (1..s.pc.len()).any(|u| s.pc[u] == Pc::Start);
                n.early = held;
            }
            n.pc[t] = after(Pc::Look, fault);
        }
        Pc::Rebias => {
            let biased = !n.waiting || fault == Some(Fault::RebiasWhileDraining);
            if biased != n.biased {
                n.counter += if biased { 1 } else { -1 };
                n.biased = biased;
            }
            n.pc[t] = Pc::Unlock;
        }
        Pc::Unlock => {
            n.owner = None;
            n.pc[t] = Pc::Done;
        }
    }
    Some(n)
}

#[test]
fn no_release_is_missed_and_none_settles_early() {
    for releasers in 1..=3 {
        let states = explore(releasers, None).unwrap();
        assert!(states > 10, "{releasers} releasers: {states} states");
    }
}

/// A look before the bias is off, a bias put back while marks wait, and a
/// release that tests the count before it: each is found.
#[test]
fn the_model_finds_a_look_before_the_unbias_and_a_bias_put_back() {
    for (fault, expected) in [
        (Fault::LookBeforeUnbias, "missed"),
        (Fault::RebiasWhileDraining, "missed"),
        (Fault::LeaveTestsZero, "missed"),
    ] {
        let what = explore(2, Some(fault)).unwrap_err();
        assert!(what.contains(expected), "{fault:?}: {what}");
    }
}
