//! The micro-benchmarks: each case is a C baseline (`bench/baselines.c`)
//! and its Rust counterpart written on the safe API, run on the same queues.

use crate::baselines as c;
use crate::baselines::{CRmaPair, RmaOp};
use libfabric::conn::{ConnConfig, Rdm};
use libfabric::cq::{Addr, CompletionFlags, CqAttr, CqRead, Data, DataEntry, Msg, MsgEntry};
use libfabric::eq::{Entry, EqAttr, EqRead, Event, EventBuf};
use libfabric::info::{Caps, EpType, Threading};
use libfabric::mr::{MemoryRegion, MrAccess, RemoteRegion};
use libfabric::tokio::AsyncEventQueue;
use libfabric::wait::{TryWait, TryWaitSet, WaitObj, Waiter, Wake};
use libfabric::{
    getinfo, Buffer, BufferPool, CompletionQueue, Domain, EventQueue, Fabric, Hints, ThreadDomain,
    ThreadModel,
};
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

/// Completions per one-shot `fi_cq_read`, as in the C baseline.
pub const CQ_BATCH: usize = 8;
/// The batch sizes of the `fi_cq_read` case (real applications read 16-64
/// completions at a time).
pub const BATCHES: [usize; 3] = [1, 8, 64];
/// The largest of them: the size of both sides' entry arrays.
pub const MAX_BATCH: usize = 64;
/// The providers the benchmarks run on by default: tcp, and the two
/// utility providers layered over a core one (whose empty reads cost far
/// less, so a wrapper's cost shows more).
pub const PROVIDERS: [&str; 3] = ["tcp", "udp;ofi_rxd", "tcp;ofi_rxm"];
/// Per-call cases must stay at or under this instruction (and time) ratio.
pub const PER_CALL_TARGET: f64 = 1.02;
/// Wake-up cases: at or under this ratio to their anchor.
pub const WAKE_TARGET: f64 = 1.05;
/// Events queued before the timed reads of "fi_eq_read, queued event".
pub const QUEUED_BATCH: u64 = 512;
/// How long a blocking read waits before the benchmark gives up.
const TIMEOUT: Duration = Duration::from_millis(5000);

/// An open fabric with the queues the per-call cases run on.
pub struct Queues {
    /// The provider name, as given to `open`.
    pub provider: String,
    pub fabric: Fabric,
    /// `FI_WAIT_FD`, `FI_WRITE`, room for [`QUEUED_BATCH`] events.
    pub eq: EventQueue,
    /// `FI_CQ_FORMAT_MSG`, `FI_WAIT_FD`.
    pub cq: CompletionQueue<Msg>,
    /// The same, of a domain opened with `FI_THREAD_DOMAIN` (on its own
    /// fabric handle, from the `fi_info` asked with that model). Like every
    /// object of such a domain it stays on the thread that opened it, so
    /// `Queues` does too.
    pub cq_domain: CompletionQueue<Msg, ThreadDomain>,
    /// The loopback pairs of the RMA cases (RDM providers), or why there
    /// are none.
    pub rma: Result<RmaPairs, String>,
}

impl Queues {
    pub fn open(provider: &str, node: &str) -> libfabric::Result<Self> {
        // tcp is connection-oriented; the utility providers give reliable
        // datagram endpoints.
        let ep_type = if provider == "tcp" {
            EpType::Msg
        } else {
            EpType::Rdm
        };
        let hints = Hints::new()
            .provider(provider)
            .ep_type(ep_type)
            .caps(Caps::MSG)
            .node(node);
        let list = getinfo(&hints)?;
        let info = list.first().ok_or(libfabric::Error::NoProvider {
            request: format!("provider {provider}"),
        })?;
        let fabric = Fabric::open(info)?;
        let domain = Domain::open(&fabric, info)?;
        let eq = fd_eq(&fabric, QUEUED_BATCH as usize * 2)?;
        let cq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new().size(64).wait(WaitObj::Fd))?;
        let list = getinfo(&hints.threading(Threading::Domain))?;
        let info = list.first().ok_or(libfabric::Error::NoProvider {
            request: format!("provider {provider}, FI_THREAD_DOMAIN"),
        })?;
        let domain = Domain::<ThreadDomain>::open_model(&Fabric::open(info)?, info)?;
        let cq_domain = CompletionQueue::<Msg, ThreadDomain>::open(
            &domain,
            &CqAttr::new().size(64).wait(WaitObj::Fd),
        )?;
        let rma = if ep_type == EpType::Rdm {
            RmaPairs::open(provider, node)
        } else {
            Err(format!("{provider}: the RMA cases run on RDM endpoints"))
        };
        Ok(Queues {
            provider: provider.into(),
            fabric,
            eq,
            cq,
            cq_domain,
            rma,
        })
    }
}

fn fd_eq(fabric: &Fabric, size: usize) -> libfabric::Result<EventQueue> {
    EventQueue::open(
        fabric,
        &EqAttr::new().size(size).wait(WaitObj::Fd).write(true),
    )
}

/// Bytes of each RMA of the RMA cases.
pub const RMA_SIZE: usize = 64;
/// Completion queue size of both sides' RMA pairs (`BL_RMA_CQ_SIZE`).
const RMA_CQ_SIZE: usize = 128;

/// The Rust side's loopback pair of the RMA cases: two `Rdm` endpoints,
/// each with its own domain, address vector and `FI_CQ_FORMAT_DATA` queue
/// (`FI_WAIT_NONE`), `a` writing into or reading from a region of `b`;
/// and the C side's pair, opened the same way by `bench/baselines.c`.
pub struct RmaPairs {
    a: Rdm<Data>,
    b: Rdm<Data>,
    to_b: Addr,
    pool_a: BufferPool,
    pool_b: BufferPool,
    /// a's buffer, between runs.
    buf: Mutex<Option<Buffer>>,
    /// b's region, which a reaches through `remote`.
    _region: MemoryRegion<Vec<u8>>,
    remote: RemoteRegion,
    data_mask: u64,
    pub c: CRmaPair,
}

impl RmaPairs {
    fn open(provider: &str, node: &str) -> Result<Self, String> {
        let mut hints = Hints::new()
            .provider(provider)
            .ep_type(EpType::Rdm)
            .caps(Caps::MSG | Caps::RMA);
        hints = if provider == "shm" {
            // shm checks an RMA at the target only with an RMA ordering.
            hints.msg_order(libfabric::sys::FI_ORDER_RAW | libfabric::sys::FI_ORDER_WAW)
        } else {
            hints.node(node)
        };
        let fail = |e: libfabric::Error| format!("{provider}: RMA pair: {e}");
        let list = getinfo(&hints).map_err(fail)?;
        let info = list
            .first()
            .ok_or_else(|| format!("{provider}: no FI_RMA"))?;
        let fabric = Fabric::open(info).map_err(fail)?;
        let config = ConnConfig::new().cq(CqAttr::new().size(RMA_CQ_SIZE).wait(WaitObj::None));
        let a = Rdm::<Data>::open_on(&fabric, info, 1, &config).map_err(fail)?;
        let b = Rdm::<Data>::open_on(&fabric, info, 1, &config).map_err(fail)?;
        let to_b = a.insert(&b.name().map_err(fail)?).map_err(fail)?;
        b.insert(&a.name().map_err(fail)?).map_err(fail)?;
        let pool_a = BufferPool::new(a.domain(), 1, RMA_SIZE).map_err(fail)?;
        let pool_b = BufferPool::new(b.domain(), 1, RMA_SIZE).map_err(fail)?;
        let region = MemoryRegion::register(
            b.domain(),
            vec![0u8; RMA_SIZE],
            MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE,
        )
        .map_err(fail)?;
        let rx = pool_b.take().ok_or("no receive buffer")?;
        b.endpoint().recv(rx).map_err(|e| fail(e.into()))?;
        let data_bytes = info.cq_data_size();
        let mut pairs = RmaPairs {
            to_b,
            pool_a,
            pool_b,
            buf: Mutex::new(None),
            remote: region.remote(),
            _region: region,
            data_mask: match data_bytes {
                n if n >= 8 => u64::MAX,
                n => (1u64 << (n * 8)) - 1,
            },
            c: CRmaPair::open(info, RMA_SIZE)
                .map_err(|e| format!("{provider}: the C RMA pair: error {e}"))?,
            a,
            b,
        };
        // One write, so that a connection made on first use is made.
        let buf = pairs.pool_a.take().ok_or("no buffer")?;
        let buf = pairs.one(buf, RmaOp::Write, 0, &mut Default::default())?;
        *pairs.buf.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(buf);
        Ok(pairs)
    }

    /// One RMA of `op` from a into b's region, as `bl_rma_one`: posted
    /// (retried while the provider says -FI_EAGAIN), its completion at a,
    /// b's queue read while there is none; for writedata also b's remote CQ
    /// data completion, whose data must be `data`. `entry` is where the
    /// queues are read into (as `bl_rma_one`'s, it holds nothing between
    /// calls). Errors leave through cold functions, as the C side's
    /// returns do.
    ///
    /// Each arm of a read's result moves out what it holds (the batch, an
    /// error entry's box, the error boxed): an arm that let the result be
    /// dropped whole, or handed it on whole, took its address, and every
    /// batch was then stored, loaded back and tested again where it was
    /// dropped (10 instructions a completion read on `tcp;ofi_rxm`).
    #[inline(always)]
    fn one(
        &self,
        buf: Buffer,
        op: RmaOp,
        data: u64,
        entry: &mut [DataEntry; 1],
    ) -> Result<Buffer, String> {
        let ep = self.a.endpoint();
        let mut buf = buf;
        loop {
            let posted = match op {
                RmaOp::Write => ep.write(buf, RMA_SIZE, &self.remote, 0, self.to_b),
                RmaOp::Read => ep.read(buf, RMA_SIZE, &self.remote, 0, self.to_b),
                RmaOp::WriteData => ep.write_data(buf, RMA_SIZE, data, &self.remote, 0, self.to_b),
            };
            match posted {
                Ok(()) => break,
                Err((back, e)) if e.is_again() => {
                    buf = back;
                    const REFUSED: &str = "a's queue while a post is refused";
                    match self.a.cq().read(entry) {
                        Ok(CqRead::Empty) => {}
                        Ok(CqRead::Error(e)) => return Err(gave(REFUSED, e)),
                        Ok(_) => return Err(unexpected(REFUSED)),
                        Err(e) => return Err(gave(REFUSED, Box::new(e))),
                    }
                    match self.b.cq().read(entry) {
                        Ok(CqRead::Empty | CqRead::Completions(_)) => {}
                        Ok(CqRead::Error(e)) => return Err(gave(B_QUEUE, e)),
                        Ok(_) => return Err(unexpected(B_QUEUE)),
                        Err(e) => return Err(gave(B_QUEUE, Box::new(e))),
                    }
                }
                Err((_, e)) => return Err(post_failed(e)),
            }
        }
        let mut b_done = op != RmaOp::WriteData;
        // a's completion, b's queue read while there is none.
        let back = loop {
            match self.a.cq().read(entry) {
                Ok(CqRead::Completions(done)) => match self.pool_a.reclaim(&done[0]) {
                    Some(back) => break back,
                    None => return Err(unexpected("a completion of another operation")),
                },
                Ok(CqRead::Empty) => {}
                Ok(CqRead::Error(e)) => return Err(gave(A_QUEUE, e)),
                Ok(_) => return Err(unexpected(A_QUEUE)),
                Err(e) => return Err(gave(A_QUEUE, Box::new(e))),
            }
            self.poll_b(entry, &mut b_done, data)?;
        };
        while !b_done {
            self.poll_b(entry, &mut b_done, data)?;
        }
        Ok(back)
    }

    /// Reads b's queue once, as `bl_rma_one` does: a completion must be
    /// writedata's remote CQ data (`data`), the first; the receive it
    /// consumed, if any, is posted again.
    #[inline(always)]
    fn poll_b(
        &self,
        entry: &mut [DataEntry; 1],
        b_done: &mut bool,
        data: u64,
    ) -> Result<(), String> {
        match self.b.cq().read(entry) {
            Ok(CqRead::Completions(done)) => {
                let e = &done[0];
                if *b_done
                    || !e.flags().contains(CompletionFlags::REMOTE_CQ_DATA)
                    || e.data() != data
                {
                    return Err(unexpected("a completion at the target"));
                }
                if let Some(rx) = self.pool_b.reclaim(e) {
                    if let Err((_, e)) = self.b.endpoint().recv(rx) {
                        return Err(post_failed(e));
                    }
                }
                *b_done = true;
            }
            Ok(CqRead::Empty) => {}
            Ok(CqRead::Error(e)) => return Err(gave(B_QUEUE, e)),
            Ok(_) => return Err(unexpected(B_QUEUE)),
            Err(e) => return Err(gave(B_QUEUE, Box::new(e))),
        }
        Ok(())
    }

    /// `iters` RMAs of `op`, each waited for: the CPU time per RMA.
    fn run(&self, op: RmaOp, iters: u64) -> Result<Vec<f64>, String> {
        let mut buf = self
            .buf
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or("the RMA buffer is lost")?;
        let mut entry: [DataEntry; 1] = Default::default();
        let start = cpu_ns();
        for i in 0..iters {
            buf = self.one(buf, op, i & self.data_mask, &mut entry)?;
        }
        let per_call = elapsed_per_call(start, iters);
        *self.buf.lock().unwrap_or_else(|e| e.into_inner()) = Some(buf);
        Ok(per_call)
    }
}

const A_QUEUE: &str = "a's queue";
const B_QUEUE: &str = "b's queue";

#[cold]
#[inline(never)]
fn unexpected(what: &str) -> String {
    format!("RMA: unexpected result of {what}")
}

/// A case's unexpected result, described out of line.
#[cold]
#[inline(never)]
fn gave(what: &str, got: impl std::fmt::Debug) -> String {
    format!("{what} gave {got:?}")
}

#[cold]
#[inline(never)]
fn post_failed(e: libfabric::Error) -> String {
    format!("RMA post: {e}")
}

/// What a case measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A timed loop: a run gives one sample, its mean time per call.
    PerCall,
    /// Wake-up latency: every wake-up is a sample.
    WakeUp,
}

/// One run of one side: `iters` calls (or wake-ups), reading `batch`
/// entries at a time where the case reads a CQ. Returns the samples in ns:
/// the mean time per call, or every wake-up latency.
pub type RunFn = fn(&Queues, u64, usize) -> Result<Vec<f64>, String>;

pub struct Case {
    /// Names the case and its Rust function, `rust_<id>`.
    pub id: &'static str,
    /// Names the C side's function, `c_<c_id>`.
    pub c_id: &'static str,
    pub name: &'static str,
    pub kind: Kind,
    /// Whether the case reads a CQ `batch` entries at a time (run at every
    /// size of [`BATCHES`]).
    pub batched: bool,
    /// The ratio Rust/C must stay at or under; `None` for a comparison
    /// reported for information.
    pub target: Option<f64>,
    /// An RMA case, run on the RDM providers only.
    pub rma: bool,
    pub c: RunFn,
    pub rust: RunFn,
}

/// The name of the empty-read case on an `FI_THREAD_SAFE` domain.
pub const CQ_READ_EMPTY: &str = "fi_cq_read, empty CQ";
/// The same on an `FI_THREAD_DOMAIN` domain (its gain over the first is
/// reported).
pub const CQ_READ_EMPTY_DOMAIN: &str = "fi_cq_read, empty CQ, FI_THREAD_DOMAIN";

pub const CASES: &[Case] = &[
    Case {
        id: "cq_read_empty",
        c_id: "cq_read_empty",
        name: CQ_READ_EMPTY,
        kind: Kind::PerCall,
        batched: true,
        target: Some(PER_CALL_TARGET),
        rma: false,
        c: c_cq_read_empty,
        rust: rust_cq_read_empty,
    },
    Case {
        id: "cq_read_empty_domain",
        c_id: "cq_read_empty_domain",
        name: CQ_READ_EMPTY_DOMAIN,
        kind: Kind::PerCall,
        batched: true,
        target: Some(PER_CALL_TARGET),
        rma: false,
        c: c_cq_read_empty_domain,
        rust: rust_cq_read_empty_domain,
    },
    Case {
        id: "eq_write_read",
        c_id: "eq_write_read",
        name: "fi_eq_write + fi_eq_read",
        kind: Kind::PerCall,
        batched: false,
        target: Some(PER_CALL_TARGET),
        rma: false,
        c: c_eq_write_read,
        rust: rust_eq_write_read,
    },
    Case {
        id: "eq_read_queued",
        c_id: "eq_read_queued",
        name: "fi_eq_read, queued event",
        kind: Kind::PerCall,
        batched: false,
        target: Some(PER_CALL_TARGET),
        rma: false,
        c: c_eq_read_queued,
        rust: rust_eq_read_queued,
    },
    Case {
        id: "eq_read_connreq",
        c_id: "eq_read_connreq",
        name: "fi_eq_read, queued CONNREQ + data",
        kind: Kind::PerCall,
        batched: false,
        target: Some(PER_CALL_TARGET),
        rma: false,
        c: c_eq_read_connreq,
        rust: rust_eq_read_connreq,
    },
    Case {
        id: "trywait_empty",
        c_id: "trywait_empty",
        name: "fi_trywait, empty EQ + CQ",
        kind: Kind::PerCall,
        batched: false,
        target: Some(PER_CALL_TARGET),
        rma: false,
        c: c_trywait_empty,
        rust: rust_trywait_empty,
    },
    Case {
        id: "wake_sread",
        c_id: "wake_sread",
        name: "wake-up: fi_eq_sread",
        kind: Kind::WakeUp,
        batched: false,
        target: Some(WAKE_TARGET),
        rma: false,
        c: c_wake_sread,
        rust: rust_wake_sread,
    },
    Case {
        id: "wake_waiter",
        c_id: "wake_poll",
        name: "wake-up: trywait + poll (Waiter)",
        kind: Kind::WakeUp,
        batched: false,
        target: Some(WAKE_TARGET),
        rma: false,
        c: c_wake_poll,
        rust: rust_wake_waiter,
    },
    Case {
        id: "wake_tokio",
        c_id: "wake_tokio_anchor",
        name: "wake-up: tokio vs bare AsyncFd + C read",
        kind: Kind::WakeUp,
        batched: false,
        target: Some(WAKE_TARGET),
        rma: false,
        c: c_wake_tokio_anchor,
        rust: rust_wake_tokio,
    },
    Case {
        id: "wake_tokio",
        c_id: "wake_poll",
        name: "wake-up: tokio vs C trywait + poll",
        kind: Kind::WakeUp,
        batched: false,
        target: None,
        rma: false,
        c: c_wake_poll,
        rust: rust_wake_tokio,
    },
    Case {
        id: "rma_write",
        c_id: "rma_write",
        name: "fi_write 64 B + completion",
        kind: Kind::PerCall,
        batched: false,
        target: Some(PER_CALL_TARGET),
        rma: true,
        c: c_rma_write,
        rust: rust_rma_write,
    },
    Case {
        id: "rma_read",
        c_id: "rma_read",
        name: "fi_read 64 B + completion",
        kind: Kind::PerCall,
        batched: false,
        target: Some(PER_CALL_TARGET),
        rma: true,
        c: c_rma_read,
        rust: rust_rma_read,
    },
    Case {
        id: "rma_writedata",
        c_id: "rma_writedata",
        name: "fi_writedata 64 B + both completions",
        kind: Kind::PerCall,
        batched: false,
        target: Some(PER_CALL_TARGET),
        rma: true,
        c: c_rma_writedata,
        rust: rust_rma_writedata,
    },
];

/// Pause of the writer thread before each write, so that the reader is
/// blocked when the event arrives.
pub const WAKE_GAP: Duration = Duration::from_micros(100);

fn per_call(total: Result<u64, i64>, iters: u64, what: &str) -> Result<Vec<f64>, String> {
    match total {
        Ok(ns) => Ok(vec![ns as f64 / iters as f64]),
        Err(e) => Err(format!("C {what}: returned {e}")),
    }
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes one timespec to the valid pointer it
    // is given; the clocks used here exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The calling thread's CPU time in ns (`CLOCK_THREAD_CPUTIME_ID`), the
/// clock of the per-call cases on both sides: time the thread spends
/// preempted by other load does not count.
pub fn cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// `CLOCK_MONOTONIC` in ns, read exactly as the C side reads it: the clock
/// of the wake-up latencies.
fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn elapsed_per_call(start: u64, iters: u64) -> Vec<f64> {
    vec![(cpu_ns() - start) as f64 / iters as f64]
}

// ---- per-call cases ----

fn c_cq_read_empty(q: &Queues, iters: u64, batch: usize) -> Result<Vec<f64>, String> {
    per_call(c::cq_read_empty(&q.cq, iters, batch), iters, "fi_cq_read")
}

fn rust_cq_read_empty(q: &Queues, iters: u64, batch: usize) -> Result<Vec<f64>, String> {
    read_empty(&q.cq, iters, batch)
}

/// The Rust loop of both empty-read cases. Out of line, so that it takes
/// the queue's handle as `bl_cq_read_empty` takes the queue: as an
/// argument (a reference, which the compiler knows no call in the loop
/// changes), not loaded out of `Queues` on each read. Called from each
/// case's function, which callgrind counts with what it calls.
#[inline(never)]
fn read_empty<T: ThreadModel>(
    cq: &CompletionQueue<Msg, T>,
    iters: u64,
    batch: usize,
) -> Result<Vec<f64>, String> {
    let mut all: [MsgEntry; MAX_BATCH] = std::array::from_fn(|_| MsgEntry::default());
    let entries = all
        .get_mut(..batch)
        .filter(|e| !e.is_empty())
        .ok_or(format!("a batch of {batch} entries (1..={MAX_BATCH})"))?;
    let start = cpu_ns();
    for _ in 0..iters {
        match cq.read(entries) {
            Ok(CqRead::Empty) => {}
            // Apart, not as one `other`: the whole result handed on would
            // keep it in memory, and the empty case would be built and
            // matched there on every read.
            Ok(read) => return Err(gave("fi_cq_read of an empty CQ", read)),
            Err(e) => return Err(gave("fi_cq_read of an empty CQ", e)),
        }
    }
    Ok(elapsed_per_call(start, iters))
}

fn c_cq_read_empty_domain(q: &Queues, iters: u64, batch: usize) -> Result<Vec<f64>, String> {
    per_call(
        c::cq_read_empty(&q.cq_domain, iters, batch),
        iters,
        "fi_cq_read",
    )
}

fn rust_cq_read_empty_domain(q: &Queues, iters: u64, batch: usize) -> Result<Vec<f64>, String> {
    read_empty(&q.cq_domain, iters, batch)
}

fn c_eq_write_read(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    per_call(
        c::eq_write_read(&q.eq, iters),
        iters,
        "fi_eq_write + fi_eq_read",
    )
}

// What the event queue cases report of an unexpected read. Each outcome
// has an arm of its own, as in `read_empty`: one arm taking the whole
// result would keep it in memory, and the expected event would be stored
// there and loaded back on every read.
const AFTER_WRITE: &str = "fi_eq_read after a write";
const QUEUED: &str = "fi_eq_read of a queued event";
const CONNREQ: &str = "fi_eq_read of a queued CONNREQ";

fn rust_eq_write_read(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    eq_write_read(&q.eq, iters)
}

// The event queue cases' loops are out of line, as `read_empty`: each
// takes the queue's handle as the C loop takes the queue.

#[inline(never)]
fn eq_write_read(eq: &EventQueue, iters: u64) -> Result<Vec<f64>, String> {
    // One entry, of which each write changes the data, as C's.
    let mut entry = Entry::new(eq.fid(), 0, 0);
    let mut buf = EventBuf::new();
    let start = cpu_ns();
    for i in 0..iters {
        entry.data = i;
        eq.write_entry(&entry).map_err(|e| e.to_string())?;
        match eq.read(&mut buf) {
            Ok(EqRead::Event(Event::Notify(e))) if e.data == i => {}
            Ok(EqRead::Event(Event::Notify(e))) => return Err(gave(AFTER_WRITE, e)),
            Ok(read) => return Err(gave(AFTER_WRITE, read)),
            Err(e) => return Err(gave(AFTER_WRITE, e)),
        }
    }
    Ok(elapsed_per_call(start, iters))
}

fn c_eq_read_queued(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    per_call(
        c::eq_read_queued(&q.eq, iters, QUEUED_BATCH),
        iters,
        "fi_eq_read",
    )
}

fn rust_eq_read_queued(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    eq_read_queued(&q.eq, iters)
}

#[inline(never)]
fn eq_read_queued(eq: &EventQueue, iters: u64) -> Result<Vec<f64>, String> {
    let mut buf = EventBuf::new();
    let mut total = 0;
    let mut done = 0;
    while done < iters {
        let n = (iters - done).min(QUEUED_BATCH);
        // The same writer as the C side's: only the reads differ.
        written(c::eq_write_notifies(eq, n))?;
        let start = cpu_ns();
        for j in 0..n {
            match eq.read(&mut buf) {
                Ok(EqRead::Event(Event::Notify(e))) if e.data == j => {}
                Ok(EqRead::Event(Event::Notify(e))) => return Err(gave(QUEUED, e)),
                Ok(read) => return Err(gave(QUEUED, read)),
                Err(e) => return Err(gave(QUEUED, e)),
            }
        }
        total += cpu_ns() - start;
        done += n;
    }
    Ok(vec![total as f64 / iters as f64])
}

fn written(ret: i64) -> Result<(), String> {
    if ret == 0 {
        Ok(())
    } else {
        Err(format!("C fi_eq_write: returned {ret}"))
    }
}

fn c_eq_read_connreq(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    per_call(
        c::eq_read_connreq(&q.eq, iters, QUEUED_BATCH),
        iters,
        "fi_eq_read (CONNREQ)",
    )
}

fn rust_eq_read_connreq(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    eq_read_connreq(&q.eq, iters)
}

#[inline(never)]
fn eq_read_connreq(eq: &EventQueue, iters: u64) -> Result<Vec<f64>, String> {
    // A constant, as C's loop compares with BL_CONNREQ_DATA.
    const DATA: usize = 16;
    const LAST: usize = DATA - 1;
    if c::connreq_data() != DATA {
        return Err(format!(
            "the C writer queues {} bytes of connection data, the reads expect {DATA}",
            c::connreq_data()
        ));
    }
    let mut buf = EventBuf::new();
    let mut total = 0;
    let mut done = 0;
    while done < iters {
        let n = (iters - done).min(QUEUED_BATCH);
        written(c::eq_write_connreqs(eq, n))?;
        let start = cpu_ns();
        for j in 0..n {
            match eq.read(&mut buf) {
                Ok(EqRead::Event(Event::UnownedConnReq(r)))
                    if r.data().len() == DATA && r.data()[LAST] == (j as usize + LAST) as u8 => {}
                Ok(EqRead::Event(Event::UnownedConnReq(r))) => return Err(gave(CONNREQ, r)),
                Ok(read) => return Err(gave(CONNREQ, read)),
                Err(e) => return Err(gave(CONNREQ, e)),
            }
        }
        total += cpu_ns() - start;
        done += n;
    }
    Ok(vec![total as f64 / iters as f64])
}

fn c_trywait_empty(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    // SAFETY: the EQ and CQ were opened on q.fabric (Queues::open).
    let total = unsafe { c::trywait_empty(&q.fabric, &q.eq, &q.cq, iters) };
    per_call(total, iters, "fi_trywait")
}

fn rust_trywait_empty(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    // Checked once, as the C side builds its fid array once.
    let mut set = TryWaitSet::new(&q.fabric, &[&q.eq, &q.cq]).map_err(|e| e.to_string())?;
    let start = cpu_ns();
    for _ in 0..iters {
        match set.trywait() {
            Ok(TryWait::MayBlock) => {}
            other => return Err(format!("fi_trywait on empty queues gave {other:?}")),
        }
    }
    Ok(elapsed_per_call(start, iters))
}

// ---- RMA cases ----

fn rma(q: &Queues) -> Result<&RmaPairs, String> {
    q.rma.as_ref().map_err(|e| e.clone())
}

fn c_rma(q: &Queues, iters: u64, op: RmaOp) -> Result<Vec<f64>, String> {
    per_call(rma(q)?.c.run(op, iters), iters, "RMA loop")
}

fn c_rma_write(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    c_rma(q, iters, RmaOp::Write)
}

fn rust_rma_write(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    rma(q)?.run(RmaOp::Write, iters)
}

fn c_rma_read(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    c_rma(q, iters, RmaOp::Read)
}

fn rust_rma_read(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    rma(q)?.run(RmaOp::Read, iters)
}

fn c_rma_writedata(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    c_rma(q, iters, RmaOp::WriteData)
}

fn rust_rma_writedata(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    rma(q)?.run(RmaOp::WriteData, iters)
}

// ---- wake-up cases ----

fn as_f64(samples: Vec<u64>) -> Vec<f64> {
    samples.into_iter().map(|s| s as f64).collect()
}

/// Event data a failing writer sends to wake the reader up.
const WRITER_FAILED: u64 = u64::MAX;

struct WakePair {
    eq: EventQueue,
    ack: EventQueue,
}

fn wake_pair(q: &Queues) -> Result<WakePair, String> {
    let open = || fd_eq(&q.fabric, 64).map_err(|e| e.to_string());
    Ok(WakePair {
        eq: open()?,
        ack: open()?,
    })
}

fn c_wake_sread(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    let p = wake_pair(q)?;
    let mut samples = vec![0u64; iters as usize];
    c::wake_sread(&p.eq, &p.ack, WAKE_GAP.as_nanos() as u64, &mut samples)
        .map_err(|e| format!("C wake-up (fi_eq_sread): returned {e}"))?;
    Ok(as_f64(samples))
}

fn c_wake_poll(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    let p = wake_pair(q)?;
    let mut samples = vec![0u64; iters as usize];
    // SAFETY: the EQ was opened on q.fabric (wake_pair).
    unsafe {
        c::wake_poll(
            &q.fabric,
            &p.eq,
            &p.ack,
            WAKE_GAP.as_nanos() as u64,
            &mut samples,
        )
    }
    .map_err(|e| format!("C wake-up (trywait + poll): returned {e}"))?;
    Ok(as_f64(samples))
}

/// The Rust writer thread, the twin of the C one: waits for the reader's
/// acknowledgement, sleeps [`WAKE_GAP`], writes an event whose data is the
/// `CLOCK_MONOTONIC` time of the write.
fn spawn_writer(p: &WakePair, iters: u64) -> thread::JoinHandle<Result<(), String>> {
    spawn_writer_to(p, iters, None)
}

/// [`spawn_writer`], which also adds 1 to `eventfd` (when given) after each
/// event: the wake-up of the tokio anchor.
fn spawn_writer_to(
    p: &WakePair,
    iters: u64,
    eventfd: Option<std::os::fd::RawFd>,
) -> thread::JoinHandle<Result<(), String>> {
    let (eq, ack) = (p.eq.clone(), p.ack.clone());
    thread::spawn(move || {
        let mut buf = EventBuf::new();
        let fid = eq.fid();
        let kick = || {
            if let Some(fd) = eventfd {
                let one = 1u64;
                // SAFETY: write(2) of 8 bytes from a valid u64 to an eventfd
                // the reader keeps open until this thread is joined.
                unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
            }
        };
        let result = (0..iters).try_for_each(|i| {
            if i > 0 {
                match ack.sread(&mut buf, Some(TIMEOUT)) {
                    Ok(EqRead::Event(_)) => {}
                    other => return Err(format!("writer: acknowledgement read gave {other:?}")),
                }
            }
            thread::sleep(WAKE_GAP);
            eq.write_notify(fid, 0, mono_ns())
                .map_err(|e| e.to_string())?;
            kick();
            Ok(())
        });
        if result.is_err() {
            // The reader may wait without a time limit: wake it up.
            let _ = eq.write_notify(fid, 0, WRITER_FAILED);
            kick();
        }
        result
    })
}

/// Records the latency of the event just read and acknowledges it. Inlined,
/// and reading the event where it is, as the C side's static
/// `bl_take_sample` does.
#[inline(always)]
fn take_sample(read: &libfabric::Result<EqRead<'_>>, ack: &EventQueue) -> Result<u64, String> {
    let now = mono_ns();
    match read {
        Ok(EqRead::Event(Event::Notify(e))) if e.data != WRITER_FAILED => {
            ack.write_notify(ack.fid(), 0, 0)
                .map_err(|e| e.to_string())?;
            Ok(now.saturating_sub(e.data))
        }
        other => Err(format!("reader: got {other:?}")),
    }
}

fn join(
    writer: thread::JoinHandle<Result<(), String>>,
    reader: Result<(), String>,
) -> Result<(), String> {
    let written = writer
        .join()
        .map_err(|_| "the writer thread panicked".to_string())?;
    reader.and(written)
}

fn rust_wake_sread(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    let p = wake_pair(q)?;
    let mut samples = vec![0u64; iters as usize];
    let mut buf = EventBuf::new();
    let writer = spawn_writer(&p, iters);
    let reader = samples.iter_mut().try_for_each(|s| {
        *s = take_sample(&p.eq.sread(&mut buf, Some(TIMEOUT)), &p.ack)?;
        Ok(())
    });
    join(writer, reader)?;
    Ok(as_f64(samples))
}

fn rust_wake_waiter(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    let p = wake_pair(q)?;
    let mut samples = vec![0u64; iters as usize];
    let mut buf = EventBuf::new();
    let mut waiter = Waiter::new(&[&p.eq]).map_err(|e| e.to_string())?;
    let writer = spawn_writer(&p, iters);
    let reader = samples.iter_mut().try_for_each(|s| loop {
        // Matched where it is (as the C side reads its buffer), not moved.
        let read = p.eq.read(&mut buf);
        if matches!(read, Ok(EqRead::Empty)) {
            match waiter.wait(Some(TIMEOUT)) {
                Ok(Wake::Ready) => continue,
                other => return Err(format!("reader: Waiter::wait gave {other:?}")),
            }
        }
        *s = take_sample(&read, &p.ack)?;
        return Ok(());
    });
    join(writer, reader)?;
    Ok(as_f64(samples))
}

fn rust_wake_tokio(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    let p = wake_pair(q)?;
    let mut samples = vec![0u64; iters as usize];
    // I/O only: the reader has no timer (a failing writer wakes it up).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| e.to_string())?;
    let writer = spawn_writer(&p, iters);
    let reader = rt.block_on(async {
        let aeq = AsyncEventQueue::new(p.eq.clone()).map_err(|e| e.to_string())?;
        let mut buf = EventBuf::new();
        for s in samples.iter_mut() {
            *s = take_sample(&aeq.read(&mut buf).await, &p.ack)?;
        }
        Ok(())
    });
    join(writer, reader)?;
    Ok(as_f64(samples))
}

/// The fair anchor of the tokio wake-up: what any tokio program pays to be
/// woken by another thread and read one event. A bare tokio `AsyncFd` on an
/// eventfd, which the writer bumps right after its `fi_eq_write`; the
/// reader awaits readiness, empties the eventfd, clears the readiness, and
/// reads the event with C's `fi_eq_read`.
fn c_wake_tokio_anchor(q: &Queues, iters: u64, _batch: usize) -> Result<Vec<f64>, String> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let p = wake_pair(q)?;
    let mut samples = vec![0u64; iters as usize];
    // SAFETY: eventfd(2) creates a new fd or returns -1.
    let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if raw < 0 {
        return Err(format!("eventfd: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: raw is a new fd nothing else owns.
    let efd = unsafe { OwnedFd::from_raw_fd(raw) };
    // The reader's own duplicate: the writer's fd stays open until it is
    // joined, whatever the reader does.
    let reader_fd = efd.try_clone().map_err(|e| e.to_string())?;
    let raw = reader_fd.as_raw_fd();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| e.to_string())?;
    let writer = spawn_writer_to(&p, iters, Some(efd.as_raw_fd()));
    let reader = rt.block_on(async {
        // SAFETY: reader_fd is an open eventfd owned by the AsyncFd from
        // here on, only read (never closed or re-flagged) while registered.
        let afd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(
                reader_fd,
                tokio::io::Interest::READABLE,
            )
        }
        .map_err(|e| e.into_parts().1.to_string())?;
        for s in samples.iter_mut() {
            loop {
                let mut guard = afd.readable().await.map_err(|e| e.to_string())?;
                let mut count = 0u64;
                // SAFETY: read(2) of 8 bytes into a valid u64 from the
                // eventfd, open for the whole loop.
                let n = unsafe { libc::read(raw, (&mut count as *mut u64).cast(), 8) };
                guard.clear_ready();
                if n == 8 {
                    break;
                }
            }
            let r = c::eq_read(&p.eq);
            let now = mono_ns();
            if r.ret != std::mem::size_of::<libfabric_sys::fabric::fi_eq_entry>() as isize
                || r.event != libfabric_sys::fabric::FI_NOTIFY
                || r.data == WRITER_FAILED
            {
                return Err(format!("reader: C fi_eq_read gave {r:?}"));
            }
            p.ack
                .write_notify(p.ack.fid(), 0, 0)
                .map_err(|e| e.to_string())?;
            *s = now.saturating_sub(r.data);
        }
        Ok(())
    });
    join(writer, reader)?;
    drop(efd);
    Ok(as_f64(samples))
}
