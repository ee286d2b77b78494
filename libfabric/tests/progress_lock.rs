//! A queue's and a counter's progress lock under load: reads, blocking
//! reads, a `Waiter`, an async read and counter reads and waits on several
//! threads, while endpoints bound to the same queue and counter are
//! enabled and closed on others, with receives in flight whose buffers
//! come back only once an empty read after the close settled them.
#![cfg_attr(libfabric_2, allow(deprecated))]
#[macro_use]
mod common;

use common::*;
use libfabric::cq::{CqAttr, CqRead, Msg, MsgEntry};
#[cfg(feature = "tokio")]
use libfabric::tokio::AsyncCompletionQueue;
use libfabric::wait::{WaitObj, Waitable, Waiter};
use libfabric::{
    Buffer, BufferPool, CntrAttr, CntrBind, CompletionQueue, Counter, Domain, Endpoint, Error,
    Fabric, Info,
};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long the threads run, at least.
const RUN: Duration = Duration::from_secs(3);
/// Rounds each endpoint thread runs, at least.
const MIN_ROUNDS: usize = 20;
const SLOTS: usize = 16;

/// Every buffer handed out is held by one owner at a time.
struct Held(Mutex<HashSet<usize>>);

impl Held {
    fn pass(&self, b: &Buffer) {
        let at = b.as_ptr() as usize;
        assert!(self.0.lock().unwrap().insert(at), "a slot handed out twice");
        self.0.lock().unwrap().remove(&at);
    }
}

fn take_in(read: CqRead<'_, MsgEntry>, pool: &BufferPool, held: &Held) -> bool {
    match read {
        CqRead::Error(mut err) => {
            if let Some(b) = pool.reclaim_err(&mut err) {
                held.pass(&b);
            }
            true
        }
        CqRead::Completions(done) => {
            for entry in done.iter() {
                if let Some(b) = pool.reclaim(entry) {
                    held.pass(&b);
                }
            }
            true
        }
        _ => false,
    }
}

fn open_bound(
    fabric: &Fabric,
    domain: &Domain,
    info: &Info,
    cq: &CompletionQueue<Msg>,
    cntr: Option<&Counter>,
) -> Endpoint {
    let ep = endpoint_on(fabric, domain, info, cq);
    if let Some(c) = cntr {
        ep.bind_cntr(c, CntrBind::SEND | CntrBind::RECV).unwrap();
    }
    ep
}

/// A blocking wait's result: fine, or refused for good once an endpoint
/// bound to the queue closed on a provider that keeps closed endpoints in
/// its wait objects (then the thread stops waiting).
fn wait_goes_on(what: &str, r: Result<(), Error>) -> bool {
    match r {
        // A counter's wait ends when a receive cancelled at a close is
        // counted as an error (sockets).
        Ok(()) | Err(Error::TimedOut { .. }) | Err(Error::CounterError { .. }) => true,
        Err(Error::State { .. }) => {
            let p = provider();
            assert!(
                p.contains("ofi_rxm") || p.contains("ofi_rxd") || p == "shm",
                "{what} refused on {p}"
            );
            false
        }
        Err(e) => panic!("{what}: {e}"),
    }
}

#[test]
fn reads_and_waits_on_many_threads_while_bound_endpoints_enable_and_close() {
    let (fabric, domain, info) = fabric_domain();
    let cq = match CompletionQueue::<Msg>::open(&domain, &CqAttr::new().size(256).wait(WaitObj::Fd))
    {
        Ok(cq) => cq,
        Err(e) => {
            println!(
                "provider {}: no FI_WAIT_FD queue ({e}): one without",
                provider()
            );
            CompletionQueue::<Msg>::open(&domain, &CqAttr::new().size(256)).unwrap()
        }
    };
    // An async read, where the queue has a pollable fd (with the tokio
    // feature).
    #[cfg(feature = "tokio")]
    let (acq, cq) = match cq.wait_fd().map(|_| ()) {
        Ok(()) => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let acq = rt.block_on(async { AsyncCompletionQueue::new(cq) });
            (Some((rt, acq.unwrap())), None)
        }
        Err(_) => (None, Some(cq)),
    };
    #[cfg(feature = "tokio")]
    let cq: &CompletionQueue<Msg> = match (&acq, &cq) {
        (Some((_, a)), _) => a.get_ref(),
        (_, Some(c)) => c,
        _ => unreachable!(),
    };
    #[cfg(not(feature = "tokio"))]
    let cq = &cq;
    let cntr = match Counter::open(&domain, &CntrAttr::new()) {
        Ok(c) => Some(c),
        Err(e) => {
            println!("provider {}: no counter ({e})", provider());
            None
        }
    };
    let pool = BufferPool::new(&domain, SLOTS, 64).unwrap();
    let held = Held(Mutex::new(HashSet::new()));
    let stop = AtomicBool::new(false);
    let reads = AtomicUsize::new(0);
    let blocking = AtomicUsize::new(0);
    let counter_reads = AtomicUsize::new(0);
    let async_reads = AtomicUsize::new(0);
    let rounds = AtomicUsize::new(0);
    // The longest a read took (µs): a lost wake-up would hang it.
    let longest = AtomicUsize::new(0);
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut entries: [MsgEntry; 4] = Default::default();
                while !stop.load(Ordering::Relaxed) {
                    let at = Instant::now();
                    let r = cq
                        .read(&mut entries)
                        .expect("a read beside enables and closes");
                    let took = at.elapsed().as_micros() as usize;
                    longest.fetch_max(took, Ordering::Relaxed);
                    if !take_in(r, &pool, &held) {
                        std::thread::yield_now();
                    }
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        if cq.wait_obj() != WaitObj::None {
            s.spawn(|| {
                let mut entries: [MsgEntry; 4] = Default::default();
                while !stop.load(Ordering::Relaxed) {
                    let r = cq
                        .sread(&mut entries, Some(Duration::from_millis(5)))
                        .map(|r| {
                            take_in(r, &pool, &held);
                        });
                    blocking.fetch_add(1, Ordering::Relaxed);
                    if !wait_goes_on("sread", r) {
                        break;
                    }
                }
            });
        }
        if let Ok(mut waiter) = Waiter::new(&[cq]) {
            let (stop, blocking) = (&stop, &blocking);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let r = waiter.wait(Some(Duration::from_millis(5))).map(|_| ());
                    blocking.fetch_add(1, Ordering::Relaxed);
                    if !wait_goes_on("Waiter::wait", r) {
                        break;
                    }
                }
            });
        }
        #[cfg(feature = "tokio")]
        if let Some((rt, acq)) = &acq {
            s.spawn(|| {
                rt.block_on(async {
                    let mut entries: [MsgEntry; 4] = Default::default();
                    while !stop.load(Ordering::Relaxed) {
                        let r =
                            tokio::time::timeout(Duration::from_millis(5), acq.read(&mut entries))
                                .await;
                        async_reads.fetch_add(1, Ordering::Relaxed);
                        match r {
                            Err(_) => {}
                            Ok(r) => {
                                let r = r.map(|r| {
                                    take_in(r, &pool, &held);
                                });
                                if !wait_goes_on("an async read", r) {
                                    break;
                                }
                            }
                        }
                    }
                })
            });
        }
        if let Some(c) = &cntr {
            s.spawn(|| {
                let can_block = c.wait_obj() != WaitObj::None;
                let mut waits = true;
                while !stop.load(Ordering::Relaxed) {
                    c.read().expect("a counter read beside enables and closes");
                    c.read_err().expect("fi_cntr_readerr");
                    if can_block && waits {
                        let r = c.wait(1 << 30, Some(Duration::from_millis(2)));
                        waits = wait_goes_on("a counter wait", r);
                    }
                    counter_reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let endpoints: Vec<_> = (0..2)
            .map(|t| {
                let (fabric, domain, info, pool) = (&fabric, &domain, &info, &pool);
                let (cntr, held, rounds) = (cntr.as_ref(), &held, &rounds);
                s.spawn(move || {
                    let mut mine = 0;
                    while mine < MIN_ROUNDS || start.elapsed() < RUN {
                        let ep = open_bound(fabric, domain, info, cq, cntr);
                        // Some closed before they were ever enabled.
                        if (mine + t) % 5 != 4 {
                            ep.enable().unwrap();
                            for _ in 0..2 {
                                let Some(b) = pool.take() else { break };
                                held.pass(&b);
                                if let Err((b, e)) = ep.recv(b) {
                                    panic!("fi_recv: {e} ({} bytes)", b.len());
                                }
                            }
                        }
                        if mine % 2 == 0 {
                            drop(ep);
                        } else {
                            ep.close().unwrap();
                        }
                        mine += 1;
                        rounds.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for e in endpoints {
            e.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
    // Every slot comes back: the marks of the closes settle at empty reads.
    let mut entries: [MsgEntry; 4] = Default::default();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut back = Vec::new();
    while back.len() < SLOTS && Instant::now() < deadline {
        while take_in(cq.read(&mut entries).unwrap(), &pool, &held) {}
        back.extend(std::iter::from_fn(|| pool.take()));
        std::thread::sleep(Duration::from_millis(1));
    }
    let distinct: HashSet<usize> = back.iter().map(|b| b.as_ptr() as usize).collect();
    assert_eq!(distinct.len(), back.len(), "a slot in the free list twice");
    println!(
        "provider {}: {} endpoint rounds, {} reads, {} blocking waits, {} async reads, \
         {} counter reads, longest read {} µs; {} of {SLOTS} slots back",
        provider(),
        rounds.load(Ordering::Relaxed),
        reads.load(Ordering::Relaxed),
        blocking.load(Ordering::Relaxed),
        async_reads.load(Ordering::Relaxed),
        counter_reads.load(Ordering::Relaxed),
        longest.load(Ordering::Relaxed),
        back.len(),
    );
    assert_eq!(
        back.len(),
        SLOTS,
        "provider {}: every slot came back",
        provider()
    );
    assert!(rounds.load(Ordering::Relaxed) >= 2 * MIN_ROUNDS);
    assert!(reads.load(Ordering::Relaxed) > 0);
}
