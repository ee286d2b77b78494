//! A reader that is told an error entry is next (`-FI_EAVAIL`) and then
//! finds none, because another reader of the queue took it in between,
//! goes on waiting: a blocking read with no timeout never reports one, and
//! the tokio reads never return `Empty`. Each used to hand back an empty
//! or timed-out result there.
#[macro_use]
mod common;

use common::*;
use libfabric::cq::{CqRead, Tagged, TaggedEntry};
use libfabric::eq::{EqAttr, EqRead, ErrDataBuf, EventBuf};
use libfabric::info::{Caps, EpType, Hints};
use libfabric::wait::WaitObj;
use libfabric::{sys, BufferPool, CompletionQueue, Domain, EventQueue, Fabric, Info};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The flag of libfabric's util event queues that queues an entry written
/// with `fi_eq_write` as an error entry (`UTIL_FLAG_ERROR`,
/// `include/ofi_util.h` 84 in 1.22 and 2.1): how a provider reports a
/// failed connection. Not in the public headers.
const UTIL_FLAG_ERROR: u64 = 1 << 60;

/// An event queue error entries can be written into: a util one (every
/// provider here but sockets and verbs on its own, whose queues are their
/// own: verbs' `fi_eq_write` ignores the flag, `vrb_eq_write`,
/// `prov/verbs/src/verbs_eq.c` 1259-1269 in 1.22).
fn util_eq() -> Option<EventQueue> {
    if matches!(provider().as_str(), "sockets" | "verbs") {
        println!(
            "SKIP {}: provider {}: no util event queue to write error entries into",
            test_name(),
            provider()
        );
        return None;
    }
    let (fabric, _) = fabric();
    let attr = EqAttr::new().size(1024).wait(WaitObj::Fd).write(true);
    Some(EventQueue::open(&fabric, &attr).unwrap())
}

/// Queues an error entry, as a provider does for a failed connection.
fn write_error(eq: &EventQueue) {
    let entry = sys::fi_eq_err_entry {
        err: libc::ECONNREFUSED,
        ..Default::default()
    };
    // SAFETY: fi_eq_write(3) copies the whole fi_eq_err_entry into the util
    // queue, which the flag makes an error entry.
    let ret = unsafe {
        sys::fi_eq_write(
            eq.as_raw(),
            sys::FI_NOTIFY,
            (&entry as *const sys::fi_eq_err_entry).cast(),
            size_of::<sys::fi_eq_err_entry>(),
            UTIL_FLAG_ERROR,
        )
    };
    assert_eq!(ret, size_of::<sys::fi_eq_err_entry>() as isize);
}

#[test]
fn an_event_queue_read_for_ever_waits_on() {
    let Some(eq) = util_eq() else { return };
    const ERRORS: u64 = 20_000;
    let stop = AtomicBool::new(false);
    let timed_out = AtomicU64::new(0);
    let taken = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = EventBuf::new();
            while !stop.load(Ordering::Relaxed) {
                match eq.sread(&mut buf, None).unwrap() {
                    EqRead::TimedOut => _ = timed_out.fetch_add(1, Ordering::Relaxed),
                    EqRead::Error(_) => _ = taken.fetch_add(1, Ordering::Relaxed),
                    _ => {}
                }
            }
        });
        s.spawn(|| {
            let mut buf = ErrDataBuf::new();
            while !stop.load(Ordering::Relaxed) {
                if eq.read_err(&mut buf).unwrap().is_some() {
                    taken.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        'errors: for i in 0..ERRORS {
            write_error(&eq);
            // One at a time, so that the two readers race for each.
            let start = Instant::now();
            while taken.load(Ordering::Relaxed) <= i {
                if start.elapsed() > Duration::from_secs(5) {
                    break 'errors; // reported below, once the readers stop
                }
                std::hint::spin_loop();
            }
        }
        stop.store(true, Ordering::Relaxed);
        // Wakes the blocked reader to see the stop.
        eq.write_notify(eq.fid(), 0, 0).unwrap();
    });
    assert_eq!(
        taken.load(Ordering::Relaxed),
        ERRORS,
        "error entries read (one was not read within 5 s)"
    );
    assert_eq!(
        timed_out.load(Ordering::Relaxed),
        0,
        "a read with no timeout reported one"
    );
}

#[cfg(feature = "tokio")]
#[test]
fn an_async_event_queue_read_is_never_empty() {
    use libfabric::tokio::AsyncEventQueue;
    let Some(eq) = util_eq() else { return };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stop = AtomicBool::new(false);
    let (mut empty, mut errors) = (0u64, 0u64);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut buf = ErrDataBuf::new();
            while !stop.load(Ordering::Relaxed) {
                let _ = eq.read_err(&mut buf).unwrap();
            }
        });
        rt.block_on(async {
            let queue = AsyncEventQueue::new(eq.clone()).unwrap();
            let mut buf = EventBuf::new();
            for _ in 0..20_000 {
                write_error(&eq);
                // An event behind it, which ends this round whoever took
                // the error entry.
                eq.write_notify(eq.fid(), 0, 0).unwrap();
                loop {
                    match queue.read(&mut buf).await.unwrap() {
                        EqRead::Empty => empty += 1,
                        EqRead::Error(_) => errors += 1,
                        EqRead::Event(_) => break,
                        other => panic!("{other:?}"),
                    }
                }
            }
        });
        stop.store(true, Ordering::Relaxed);
    });
    println!("error entries read here: {errors} of 20000");
    assert_eq!(empty, 0, "AsyncEventQueue::read returned Empty");
}

/// A sockets RDM endpoint whose receives are cancelled at its close: each
/// comes back as an `FI_ECANCELED` error completion (sockets, unlike rxm
/// and rxd, still lets its queue be waited on after the close).
struct Cancelling {
    fabric: Fabric,
    domain: Domain,
    info: Info,
    cq: CompletionQueue<Tagged>,
    pool: BufferPool,
}

impl Cancelling {
    fn open() -> Option<Self> {
        if provider() != "sockets" {
            println!(
                "SKIP {}: provider {}: only sockets keeps its queues' waits after an endpoint's close",
                test_name(),
                provider()
            );
            return None;
        }
        let hints = Hints::new()
            .provider("sockets")
            .ep_type(EpType::Rdm)
            .caps(Caps::MSG | Caps::TAGGED)
            .node(node());
        let info = info_for(&hints);
        let fabric = Fabric::open(&info).unwrap();
        let domain = Domain::open(&fabric, &info).unwrap();
        let cq = fd_cq::<Tagged>(&domain).expect("an FI_WAIT_FD queue on sockets");
        let pool = BufferPool::new(&domain, 64, 64).unwrap();
        Some(Cancelling {
            fabric,
            domain,
            info,
            cq,
            pool,
        })
    }

    /// Posts 32 receives on an endpoint of its own and closes it.
    fn cancel_receives(&self) {
        let ep = endpoint_on(&self.fabric, &self.domain, &self.info, &self.cq);
        ep.enable().unwrap();
        for _ in 0..32 {
            let Some(b) = self.pool.take() else { break };
            ep.recv(b).unwrap();
        }
        drop(ep);
    }

    /// Takes error completions on this thread until `stop`.
    fn take_errors(&self, stop: &AtomicBool) {
        let mut buf = ErrDataBuf::new();
        while !stop.load(Ordering::Relaxed) {
            if let Some(mut e) = self.cq.read_err(&mut buf).unwrap() {
                let _ = self.pool.reclaim_err(&mut e);
            }
        }
    }

    /// Hands a read's buffers back; whether it was empty.
    fn reclaim(&self, read: CqRead<'_, TaggedEntry>) -> bool {
        match read {
            CqRead::Empty => return true,
            CqRead::Error(mut e) => _ = self.pool.reclaim_err(&mut e),
            CqRead::Completions(c) => c.iter().for_each(|e| _ = self.pool.reclaim(e)),
            CqRead::Signaled | CqRead::TimedOut => {}
        }
        false
    }
}

/// Rounds of cancelled receives: the empty result showed after 20 to 45
/// rounds. Each close of the blocking test waits up to 100 ms for the
/// read's slice (the progress lock).
#[cfg(feature = "tokio")]
const ROUNDS: usize = 60;
const BLOCKING_ROUNDS: usize = 40;

#[test]
fn a_completion_queue_read_for_ever_is_never_empty() {
    let Some(c) = Cancelling::open() else { return };
    let stop = AtomicBool::new(false);
    let empty = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| c.take_errors(&stop));
        s.spawn(|| {
            let mut entries: [TaggedEntry; 4] = Default::default();
            while !stop.load(Ordering::Relaxed) {
                if c.reclaim(c.cq.sread(&mut entries, None).unwrap()) {
                    empty.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        for _ in 0..BLOCKING_ROUNDS {
            c.cancel_receives();
            std::thread::sleep(Duration::from_millis(2));
            if empty.load(Ordering::Relaxed) > 0 {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        c.cq.signal().unwrap();
    });
    assert_eq!(
        empty.load(Ordering::Relaxed),
        0,
        "sread(None) returned CqRead::Empty"
    );
}

#[cfg(feature = "tokio")]
#[test]
fn an_async_completion_queue_read_is_never_empty() {
    use libfabric::tokio::AsyncCompletionQueue;
    let Some(c) = Cancelling::open() else { return };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let stop = AtomicBool::new(false);
    let mut empty = 0u64;
    std::thread::scope(|s| {
        s.spawn(|| c.take_errors(&stop));
        rt.block_on(async {
            let queue = AsyncCompletionQueue::new(c.cq.clone()).unwrap();
            let mut entries: [TaggedEntry; 4] = Default::default();
            for _ in 0..ROUNDS {
                c.cancel_receives();
                // Reads while the queue may have entries (the timeout ends
                // a wait for entries the other thread took).
                while let Ok(read) =
                    tokio::time::timeout(Duration::from_millis(5), queue.read(&mut entries)).await
                {
                    if c.reclaim(read.unwrap()) {
                        empty += 1;
                    }
                }
            }
        });
        stop.store(true, Ordering::Relaxed);
    });
    assert_eq!(empty, 0, "AsyncCompletionQueue::read returned Empty");
}
