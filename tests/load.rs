//! Load on the real tcp provider over 127.0.0.1:
//!
//! - a million `FI_NOTIFY` events written into one event queue by two
//!   threads, read by several threads (`fi_eq_sread`), then again by several
//!   tokio tasks sharing one `AsyncEventQueue`;
//! - real send/receive completions over a connected pair of message
//!   endpoints, the receive completion queue read by several threads that
//!   hand each buffer back and post it again.
//!
//! Every event and message carries a unique number: the tests check that the
//! count read equals the count written and that no number arrives twice.
//! Every wait is bounded, so a lost wake-up fails instead of hanging. The
//! counts can be lowered with `LOAD_EQ_EVENTS` and `LOAD_CQ_COMPLETIONS`.
mod common;

use common::*;
use libfabric::cq::{CqAttr, CqRead, Msg, MsgEntry};
use libfabric::eq::{EqAttr, EqRead, Event, EventBuf};
use libfabric::tokio::AsyncEventQueue;
use libfabric::wait::WaitObj;
use libfabric::{Buffer, EventQueue};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Events written per run of the event queue tests.
fn eq_events() -> u64 {
    count("LOAD_EQ_EVENTS", 1_000_000)
}

/// Completions per run of the completion queue test (see its doc).
fn cq_completions() -> u64 {
    count("LOAD_CQ_COMPLETIONS", 1_000_000)
}

/// The context of the events that tell a reader to stop.
const STOP: usize = usize::MAX;
const WRITERS: u64 = 2;

fn event_queue() -> (libfabric::Fabric, EventQueue) {
    let (fabric, _) = fabric();
    let eq = EventQueue::open(
        &fabric,
        &EqAttr::new().size(4096).wait(WaitObj::Fd).write(true),
    )
    .expect("fi_eq_open");
    (fabric, eq)
}

/// Writes events `w*n/WRITERS .. (w+1)*n/WRITERS` (the number is the data).
fn write_share(eq: &EventQueue, w: u64, n: u64) {
    for i in w * n / WRITERS..(w + 1) * n / WRITERS {
        eq.write_notify(eq.fid(), w as usize, i)
            .unwrap_or_else(|e| panic!("fi_eq_write of event {i}: {e}"));
    }
}

/// Counts one event; the reader that counts the last one writes one stop
/// event per reader.
struct Tally {
    seen: Seen,
    read: AtomicU64,
    n: u64,
}

impl Tally {
    fn new(n: u64) -> Self {
        Tally {
            seen: Seen::new(n),
            read: AtomicU64::new(0),
            n,
        }
    }

    fn event(&self, data: u64, eq: &EventQueue, readers: usize) {
        assert!(self.seen.mark(data), "event {data} was read twice");
        if self.read.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            for _ in 0..readers {
                eq.write_notify(eq.fid(), STOP, 0).expect("stop event");
            }
        }
    }

    fn check(&self, what: &str, start: Instant) {
        let elapsed = start.elapsed();
        let read = self.read.load(Ordering::Acquire);
        println!(
            "{what}: {read} events written and read in {elapsed:.2?} ({:.0} events/s), \
             {} distinct",
            rate(read, elapsed),
            self.seen.count()
        );
        assert_eq!(read, self.n, "events read");
        assert_eq!(self.seen.count(), self.n, "distinct events");
        assert_eq!(self.seen.first_missing(), None);
    }
}

#[test]
fn a_million_events_read_by_several_threads() {
    const READERS: usize = 3;
    let n = eq_events();
    let (_fabric, eq) = event_queue();
    let tally = Tally::new(n);
    let start = Instant::now();
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let eq = &eq;
            s.spawn(move || write_share(eq, w, n));
        }
        for r in 0..READERS {
            let (eq, tally) = (&eq, &tally);
            s.spawn(move || {
                let mut buf = EventBuf::new();
                let mut mine = 0u64;
                loop {
                    match eq.sread(&mut buf, Some(Duration::from_secs(10))).unwrap() {
                        EqRead::Event(Event::Notify(e)) if e.context == STOP => break,
                        EqRead::Event(Event::Notify(e)) => {
                            tally.event(e.data, eq, READERS);
                            mine += 1;
                        }
                        EqRead::TimedOut => panic!(
                            "reader {r} waited 10 s with {} of {n} events read",
                            tally.read.load(Ordering::Acquire)
                        ),
                        other => panic!("reader {r}: unexpected {other:?}"),
                    }
                }
                println!("reader thread {r}: {mine} events");
            });
        }
    });
    tally.check("event queue, 3 reader threads", start);
    let mut buf = EventBuf::new();
    assert!(
        matches!(eq.read(&mut buf).unwrap(), EqRead::Empty),
        "nothing is left over"
    );
}

#[test]
fn a_million_events_read_by_several_tokio_tasks() {
    const TASKS: usize = 4;
    let n = eq_events();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let (_fabric, eq) = event_queue();
    let tally = Arc::new(Tally::new(n));
    let start = Instant::now();
    rt.block_on(async {
        let aeq = Arc::new(AsyncEventQueue::new(eq.clone()).expect("AsyncEventQueue"));
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let (aeq, tally) = (aeq.clone(), tally.clone());
                tokio::spawn(async move {
                    let mut buf = EventBuf::new();
                    let mut mine = 0u64;
                    loop {
                        let read =
                            tokio::time::timeout(Duration::from_secs(10), aeq.read(&mut buf))
                                .await
                                .unwrap_or_else(|_| {
                                    panic!(
                                        "task {t} waited 10 s with {} of {n} events read",
                                        tally.read.load(Ordering::Acquire)
                                    )
                                })
                                .unwrap();
                        match read {
                            EqRead::Event(Event::Notify(e)) if e.context == STOP => break,
                            EqRead::Event(Event::Notify(e)) => {
                                tally.event(e.data, aeq.get_ref(), TASKS);
                                mine += 1;
                            }
                            other => panic!("task {t}: unexpected {other:?}"),
                        }
                    }
                    mine
                })
            })
            .collect();
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let eq = eq.clone();
                std::thread::spawn(move || write_share(&eq, w, n))
            })
            .collect();
        let mut per_task = Vec::new();
        for (t, task) in tasks.into_iter().enumerate() {
            let mine = task.await.expect("reader task");
            println!("tokio task {t}: {mine} events");
            per_task.push(mine);
        }
        if n >= 100_000 {
            // A queue that always has events must not keep a worker to one
            // task: every task gets its share.
            assert!(
                per_task.iter().all(|&m| m > 0),
                "a task read nothing: {per_task:?}"
            );
        }
        for w in writers {
            w.join().expect("writer thread");
        }
    });
    tally.check("event queue, 4 tokio tasks on 2 workers", start);
    let mut buf = EventBuf::new();
    assert!(
        matches!(eq.read(&mut buf).unwrap(), EqRead::Empty),
        "nothing is left over"
    );
}

/// Receives posted at any time, and sends in flight at most.
const WINDOW: usize = 64;
const READERS: usize = 3;

/// Sends numbered 8-byte messages over a connected pair of tcp message
/// endpoints while `READERS` threads read the receive completion queue,
/// check each number, hand the buffer back and post it again.
///
/// The default is one million completions on each side (sends and
/// receives): on 2 shared cores a debug build moves 110 000 to 160 000
/// messages a second here, so about 6 to 9 s. `LOAD_CQ_COMPLETIONS` lowers
/// the count.
#[test]
fn a_million_real_completions_read_by_several_threads() {
    let n = cq_completions();
    let pair = connect_pair::<Msg>(CqAttr::new().size(4096).wait(WaitObj::Fd), WINDOW, 64);
    for _ in 0..WINDOW {
        pair.server
            .recv(pair.server_pool.take().expect("a free receive buffer"))
            .expect("fi_recv");
    }
    let seen = Seen::new(n);
    let received = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let start = Instant::now();
    let (sent, reposts) = std::thread::scope(|s| {
        let readers: Vec<_> = (0..READERS)
            .map(|r| {
                let (pair, seen, received, done) = (&pair, &seen, &received, &done);
                s.spawn(move || receive(r, pair, seen, received, done, n))
            })
            .collect();
        let sent = send_all(&pair, n);
        let reposts: Vec<u64> = readers
            .into_iter()
            .map(|r| r.join().expect("reader thread"))
            .collect();
        (sent, reposts)
    });
    let elapsed = start.elapsed();
    println!(
        "completion queue, {READERS} reader threads, window {WINDOW}: {n} sends and {} \
         receives completed in {elapsed:.2?} ({:.0} messages/s); per reader {reposts:?}",
        received.load(Ordering::Acquire),
        rate(n, elapsed)
    );
    assert_eq!(sent, n, "send completions");
    assert_eq!(received.load(Ordering::Acquire), n, "receive completions");
    assert_eq!(seen.count(), n, "distinct messages");
    assert_eq!(seen.first_missing(), None);

    // The receives still posted come back when the endpoint is closed.
    pair.close(|server_cq, server_pool, client_pool| {
        assert_pool_whole(server_pool, WINDOW);
        let flushed = read_flushed_of_closed(server_cq, server_pool);
        println!("closing the server endpoint handed back {WINDOW} posted receives (the provider flushed {flushed})");
        assert!(flushed <= WINDOW);
        assert_pool_whole(server_pool, WINDOW);
        assert_pool_whole(client_pool, WINDOW);
    });
}

/// One reader of the receive completion queue; returns how many receives it
/// handled.
fn receive(
    r: usize,
    pair: &Pair<Msg>,
    seen: &Seen,
    received: &AtomicU64,
    done: &AtomicBool,
    n: u64,
) -> u64 {
    let mut entries: [MsgEntry; 32] = Default::default();
    let mut mine = 0u64;
    let mut idle_since = Instant::now();
    while !done.load(Ordering::Acquire) {
        let got = match pair
            .server_cq
            .sread(&mut entries, Some(Duration::from_millis(50)))
            .expect("fi_cq_sread")
        {
            CqRead::Completions(got) => got,
            CqRead::Error(err) => {
                panic!("reader {r}: error completion {err:?}")
            }
            _ => {
                assert!(
                    idle_since.elapsed() < Duration::from_secs(10),
                    "reader {r}: no receive for 10 s with {} of {n} received",
                    received.load(Ordering::Acquire)
                );
                continue;
            }
        };
        idle_since = Instant::now();
        for entry in &got {
            let buf = pair
                .server_pool
                .reclaim(entry)
                .expect("a receive completion hands its buffer back");
            assert_eq!(entry.len(), 8, "message length");
            let i = u64::from_le_bytes(buf[..8].try_into().unwrap());
            assert!(
                seen.mark(i),
                "message {i} was received twice (or is out of range)"
            );
            mine += 1;
            repost(&pair.server, buf);
            if received.fetch_add(1, Ordering::AcqRel) + 1 == n {
                done.store(true, Ordering::Release);
                // Wake the other readers now rather than at their timeout.
                for _ in 0..READERS {
                    pair.server_cq.signal().expect("fi_cq_signal");
                }
            }
        }
    }
    mine
}

fn repost(ep: &libfabric::Endpoint, buf: Buffer) {
    let mut buf = buf;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match ep.recv(buf) {
            Ok(()) => return,
            Err(e) if e.1.is_again() && Instant::now() < deadline => {
                buf = e.0;
                std::thread::yield_now();
            }
            Err(e) => panic!("fi_recv: {}", e.1),
        }
    }
}

/// Sends messages 0..n with at most WINDOW in flight; returns the number of
/// send completions.
fn send_all(pair: &Pair<Msg>, n: u64) -> u64 {
    let mut entries: [MsgEntry; 32] = Default::default();
    let mut next = 0u64;
    let mut completed = 0u64;
    let mut spare: Option<Buffer> = None;
    let mut idle_since = Instant::now();
    while completed < n {
        // Post as many as the window allows.
        while next < n {
            let Some(mut buf) = spare.take().or_else(|| pair.client_pool.take()) else {
                break;
            };
            buf[..8].copy_from_slice(&next.to_le_bytes());
            match pair.client.send(buf, 8) {
                Ok(()) => next += 1,
                Err(e) if e.1.is_again() => {
                    spare = Some(e.0);
                    break;
                }
                Err(e) => panic!("fi_send of message {next}: {}", e.1),
            }
        }
        let read = if next < n && spare.is_none() {
            pair.client_cq.read(&mut entries)
        } else {
            pair.client_cq
                .sread(&mut entries, Some(Duration::from_millis(50)))
        };
        match read.expect("fi_cq_read") {
            CqRead::Completions(got) => {
                idle_since = Instant::now();
                for entry in &got {
                    drop(
                        pair.client_pool
                            .reclaim(entry)
                            .expect("a send completion hands its buffer back"),
                    );
                    completed += 1;
                }
            }
            CqRead::Error(err) => {
                panic!("sender: error completion {err:?}")
            }
            _ => assert!(
                idle_since.elapsed() < Duration::from_secs(10),
                "sender: no send completion for 10 s ({completed} of {n} done, {next} posted)"
            ),
        }
    }
    completed
}
