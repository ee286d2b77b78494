//! Serialized threading models (`Domain<ThreadDomain>`) and the fabric-level
//! event queue, which any thread may read: sequences of safe calls that
//! could make a provider touch objects of a serialized domain from two
//! threads at once (tcp of 1.17 tears a failed connect's endpoint down in
//! an event queue read, writing its completion queue).
mod common;

use common::{msg_capable, node, provider, test_name};
use libfabric::cq::{CqAttr, CqRead, Data, DataEntry};
use libfabric::ep::CqBind;
use libfabric::eq::{EqAttr, EqRead, EventBuf};
use libfabric::info::{Caps, EpType, Threading};
use libfabric::{
    getinfo, BufferPool, CompletionQueue, Domain, Endpoint, EventQueue, Fabric, Hints,
    ThreadDomain, ThreadModel, ThreadSafe,
};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn skip(why: impl std::fmt::Display) {
    println!("SKIP {}: provider {}: {why}", test_name(), provider());
}

/// The event queue is fabric-level and `Send + Sync`; reading it runs the
/// provider's connection manager. On tcp (1.17: `tcpx_eq_read` ->
/// `tcpx_conn_mgr_run` -> `tcpx_cm_send_req` -> `tcpx_ep_disable` ->
/// `tcpx_ep_flush_all_queues`) a refused connection flushes the
/// endpoint's posted receives into its completion queue and frees their
/// transfer entries into the queue's pool, both under the queue's
/// `cq_lock`, which util makes a no-op under `FI_THREAD_DOMAIN`
/// (`util_cq.c` 493-498). Meanwhile the owner thread reads that queue and
/// posts receives (allocating from the same pool under the same no-op
/// lock). Two threads inside one serialized domain's CQ.
///
/// Expected of a sound design: either the queue cannot be read on another
/// thread while bound to a serialized endpoint, or nothing here races
/// (helgrind-clean, no lost or duplicated completion).
#[test]
fn an_event_queue_read_on_another_thread_does_not_race_a_serialized_domains_queue() {
    refused_connects_flush_receives::<ThreadDomain>(Threading::Domain, true);
}

/// Control: the same with the event queue read on the owner's thread.
#[test]
fn the_event_queue_read_on_the_owner_thread() {
    refused_connects_flush_receives::<ThreadDomain>(Threading::Domain, false);
}

/// Control: the same on an `FI_THREAD_SAFE` domain, the queue read on
/// another thread.
#[test]
fn a_thread_safe_domains_event_queue_read_on_another_thread() {
    refused_connects_flush_receives::<ThreadSafe>(Threading::Safe, true);
}

/// Sets `stop` when dropped (also while a panic unwinds), so that the
/// scoped reader thread ends and the failure is reported instead of a hang.
struct StopOnDrop<'a>(&'a AtomicBool);
impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

fn refused_connects_flush_receives<T: ThreadModel>(model: Threading, other_thread: bool) {
    if !msg_capable() {
        skip("no FI_EP_MSG endpoints (connection manager)");
        return;
    }
    if common::is_iwarp() {
        // verbs over iWARP answers a refused connect as an fi_eq_read
        // error and does not flush the endpoint's posted receives, which
        // this test counts.
        skip("iWARP reports a refused connect otherwise (no flushed receives to count)");
        return;
    }
    let rounds = 200;
    let eps_per_round = 4;
    let recvs_per_ep = 16;
    // Kept refusing for the whole test (see common::refusing_port).
    let (_refusing, port) = common::refusing_port();
    let hints = Hints::new()
        .provider(provider())
        .ep_type(EpType::Msg)
        .caps(Caps::MSG)
        .threading(model)
        .node(node())
        .service(port.to_string());
    let list = match getinfo(&hints) {
        Ok(l) => l,
        Err(e) => {
            skip(format!("no FI_THREAD_DOMAIN fi_info ({e})"));
            return;
        }
    };
    let info = list.first().unwrap();
    if info.threading() != model {
        skip(format!("granted {:?}", info.threading()));
        return;
    }
    let fabric = Fabric::open(info).unwrap();
    let domain = Domain::<T>::open_model(&fabric, info).unwrap();
    let cq = CompletionQueue::<Data, _>::open(&domain, &CqAttr::new().size(4096)).unwrap();
    let eq = EventQueue::open(&fabric, &EqAttr::new()).unwrap();
    let total = eps_per_round * recvs_per_ep;
    let pool = BufferPool::new(&domain, total, 64).unwrap();
    let stop = AtomicBool::new(false);
    let eq_events = AtomicUsize::new(0);
    let mut entries: [DataEntry; 16] = Default::default();
    let (mut cancelled, mut completed) = (0usize, 0usize);
    let mut owner_buf = EventBuf::new();
    let mut owner_eq = || {
        if !other_thread {
            match eq.read(&mut owner_buf).unwrap() {
                EqRead::Empty => {}
                _ => {
                    eq_events.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    };
    let skipped = std::thread::scope(|s| {
        let _stop = StopOnDrop(&stop);
        // Thread B: only the fabric-level event queue.
        let reader = s.spawn(|| {
            let mut buf = EventBuf::new();
            while other_thread && !stop.load(Ordering::Acquire) {
                match eq.read(&mut buf) {
                    Ok(EqRead::Empty) => {}
                    Ok(_) => {
                        eq_events.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => panic!("eq read: {e}"),
                }
            }
        });
        for round in 0..rounds {
            let mut eps = Vec::new();
            for _ in 0..eps_per_round {
                let ep = Endpoint::open(&domain, info).unwrap();
                ep.bind_eq(&eq).unwrap();
                ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
                ep.enable().unwrap();
                for _ in 0..recvs_per_ep {
                    let b = pool.take().expect("pool empty");
                    ep.recv(b).map_err(|(_, e)| e).unwrap();
                }
                // The connection is refused: thread B's EQ read flushes the
                // receives just posted, while this thread goes on posting on
                // the next endpoint and reading the queue.
                match ep.connect(b"") {
                    Ok(()) => {}
                    Err(libfabric::Error::Call { errno, .. })
                        if errno == libfabric::Errno::CONNREFUSED =>
                    {
                        // sockets connects synchronously: nothing is left
                        // for the event queue to do on another thread.
                        skip("fi_connect refused synchronously (no connection manager run in fi_eq_read)");
                        return true;
                    }
                    Err(e) => panic!("fi_connect: {e}"),
                }
                eps.push(ep);
                for _ in 0..8 {
                    owner_eq();
                    match cq.read(&mut entries).unwrap() {
                        CqRead::Completions(done) => completed += done.len(),
                        CqRead::Error(_e) => cancelled += 1,
                        _ => {}
                    }
                }
            }
            let deadline = Instant::now() + Duration::from_secs(20);
            while cancelled + completed < (round + 1) * total {
                owner_eq();
                match cq.read(&mut entries).unwrap() {
                    CqRead::Completions(done) => completed += done.len(),
                    CqRead::Error(_e) => cancelled += 1,
                    _ => {}
                }
                assert!(
                    Instant::now() < deadline,
                    "round {round}: {} of {} posted receives came back ({cancelled} cancelled, \
                     {completed} completed, {} EQ events)",
                    cancelled + completed,
                    (round + 1) * total,
                    eq_events.load(Ordering::Relaxed)
                );
            }
            drop(eps);
        }
        stop.store(true, Ordering::Release);
        reader.join().unwrap();
        false
    });
    if skipped {
        return;
    }
    assert_eq!(cancelled + completed, rounds * total);
    println!(
        "{} {model:?} other_thread={other_thread}: {rounds} rounds, {cancelled} cancelled receives, {} EQ events",
        provider(),
        eq_events.load(Ordering::Relaxed)
    );
}

/// Two `FI_THREAD_DOMAIN` domains of one fabric, each on its own thread
/// (the types allow it: the fabric is `Send + Sync`), each sending to
/// itself through its own endpoint. Whatever the providers share between
/// domains must still be locked (run under helgrind to see).
#[test]
fn two_serialized_domains_of_one_fabric_on_two_threads() {
    use libfabric::av::AvType;
    use libfabric::cq::CompletionFlags;
    use libfabric::AddressVector;
    if msg_capable() {
        skip("connectionless loopback only (RDM providers)");
        return;
    }
    let iters = 2000;
    let mut h = Hints::new()
        .provider(provider())
        .ep_type(EpType::Rdm)
        .caps(Caps::MSG)
        .threading(Threading::Domain);
    if provider() != "shm" {
        h = h.node(node());
    }
    let list = match getinfo(&h) {
        Ok(l) => l,
        Err(e) => {
            skip(format!("no FI_THREAD_DOMAIN fi_info ({e})"));
            return;
        }
    };
    let info = list.first().unwrap();
    if info.threading() != Threading::Domain {
        skip(format!("granted {:?}", info.threading()));
        return;
    }
    let fabric = Fabric::open(info).unwrap();
    if let Err(e) = Domain::<ThreadDomain>::open_model(&fabric, info) {
        assert!(
            provider() == "shm" && matches!(e, libfabric::Error::Unsupported { .. }),
            "{e:?}"
        );
        skip(format!("serialized models are refused on shm ({e})"));
        return;
    }
    std::thread::scope(|s| {
        let run = || {
            let info = list.first().unwrap();
            let domain = Domain::<ThreadDomain>::open_model(&fabric, info).unwrap();
            let cq = CompletionQueue::<Data, _>::open(&domain, &CqAttr::new()).unwrap();
            let av = AddressVector::open(&domain, AvType::Table, 4).unwrap();
            let ep = Endpoint::open(&domain, info).unwrap();
            ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
            ep.bind_av(&av).unwrap();
            ep.enable().unwrap();
            let me = av.insert(&ep.name().unwrap()).unwrap();
            let pool = BufferPool::new(&domain, 4, 256).unwrap();
            let mut entries: [DataEntry; 8] = Default::default();
            for i in 0..iters {
                ep.recv(pool.take().unwrap()).map_err(|(_, e)| e).unwrap();
                let mut b = pool.take().unwrap();
                b[..8].copy_from_slice(&(i as u64).to_le_bytes());
                let mut b = Some(b);
                let deadline = Instant::now() + Duration::from_secs(20);
                while let Some(buf) = b.take() {
                    if let Err((buf, e)) = ep.send_to(buf, 8, me) {
                        assert!(e.is_again(), "{e}");
                        b = Some(buf);
                        let _ = cq.read(&mut entries).unwrap();
                    }
                    assert!(Instant::now() < deadline);
                }
                let (mut sent, mut got) = (false, false);
                while !(sent && got) {
                    if let CqRead::Completions(done) = cq.read(&mut entries).unwrap() {
                        for c in &done {
                            let buffer = pool.reclaim(c).unwrap();
                            if c.flags().contains(CompletionFlags::RECV) {
                                assert_eq!(buffer[..8], (i as u64).to_le_bytes());
                                got = true;
                            } else {
                                sent = true;
                            }
                        }
                    }
                    assert!(Instant::now() < deadline, "iteration {i}: no completion");
                }
            }
        };
        let a = s.spawn(run);
        let b = s.spawn(run);
        a.join().unwrap();
        b.join().unwrap();
    });
}
