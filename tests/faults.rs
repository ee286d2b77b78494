//! Faults on the real tcp provider over 127.0.0.1:
//!
//! - a peer process killed with SIGKILL in the middle of a stream of sends:
//!   the survivor sees its posted receives fail and `FI_SHUTDOWN` within a
//!   bounded time, hands every buffer back, closes everything with explicit
//!   `close()` calls, and then accepts a new connection on the same passive
//!   endpoint and exchanges data over it;
//! - a burst of connection attempts (100 by default, `FAULTS_CONNECTIONS`)
//!   of which every third is rejected, with connection data of every size
//!   from none to `FI_OPT_CM_DATA_SIZE` in requests, accepts and rejects:
//!   each side sees exactly the events it should, and nothing more.
//!
//! The killed peer is this test binary run again with `FAULTS_PEER_CONNECT`
//! set, which makes [`peer_process_streaming_sends`] connect and stream.
mod common;

use common::*;
use libfabric::cq::{CqAttr, CqRead, Msg, MsgEntry};
use libfabric::ep::CqBind;
use libfabric::eq::{EventBuf, Fid};
use libfabric::wait::WaitObj;
use libfabric::{BufferPool, CompletionQueue, Domain, Endpoint, Errno, EventQueue, Fabric};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Set in the peer process: the address to connect to.
const PEER_ENV: &str = "FAULTS_PEER_CONNECT";
/// Receives the survivor keeps posted.
const WINDOW: usize = 32;

/// Run as a child process by the SIGKILL test (with `FAULTS_PEER_CONNECT`
/// set): connects to the given address and sends numbered messages until it
/// is killed. Ignored in a normal run: it is only the child's entry point.
#[test]
#[ignore = "the peer process of the SIGKILL test, which runs it itself"]
fn peer_process_streaming_sends() {
    let addr = std::env::var(PEER_ENV)
        .expect("run by a_peer_killed_mid_traffic_is_detected_and_the_listener_accepts_again");
    let addr: SocketAddr = addr.parse().expect("FAULTS_PEER_CONNECT is ip:port");
    let (fabric, _) = fabric();
    let info = client_info(addr);
    let domain = Domain::open(&fabric, &info).expect("fi_domain");
    let eq = fd_eq(&fabric);
    let cq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new().size(256).wait(WaitObj::Fd))
        .expect("fi_cq_open");
    let ep = Endpoint::open(&domain, &info).expect("fi_endpoint");
    ep.bind_eq(&eq).expect("bind eq");
    ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV)
        .expect("bind cq");
    ep.enable().expect("fi_enable");
    ep.connect(b"streamer").expect("fi_connect");
    let ev = next_event(&eq, &[], Duration::from_secs(10));
    assert!(matches!(ev, Ev::Connected { .. }), "peer: {ev:?}");
    let pool = BufferPool::new(&domain, 16, 64).expect("pool");
    let mut entries: [MsgEntry; 16] = Default::default();
    // A safety net: never outlive a parent that failed to kill us.
    let give_up = Instant::now() + Duration::from_secs(60);
    let mut next = 0u64;
    while Instant::now() < give_up {
        while let Some(mut buf) = pool.take() {
            buf[..8].copy_from_slice(&next.to_le_bytes());
            match ep.send(buf, 8) {
                Ok(()) => next += 1,
                Err(e) if e.1.is_again() => break,
                Err(e) => panic!("peer: fi_send: {}", e.1),
            }
        }
        match cq.sread(&mut entries, Some(Duration::from_millis(100))) {
            Ok(CqRead::Completions(done)) => {
                for e in &done {
                    drop(pool.reclaim(e));
                }
            }
            Ok(CqRead::Error(_)) => return, // the survivor went away
            Ok(_) => {}
            Err(e) => panic!("peer: fi_cq_sread: {e}"),
        }
    }
}

fn spawn_peer(addr: SocketAddr) -> Child {
    let exe = std::env::current_exe().expect("the test binary's path");
    Command::new(exe)
        .args([
            "--exact",
            "--ignored",
            "peer_process_streaming_sends",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(PEER_ENV, addr.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the peer process")
}

/// Kills the child when dropped, so a failing test leaves no process.
struct Reap(Option<Child>);

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// What the survivor of the killed peer saw.
#[derive(Default)]
struct Survivor {
    received: u64,
    after_kill: u64,
    /// When the last message delivered after the kill came, from the kill.
    last_after_kill: Option<Duration>,
    failed: usize,
    first_error: Option<(Duration, Errno, i32)>,
}

impl Survivor {
    /// A successful receive: in order, exactly once.
    fn received(&mut self, buf: &libfabric::Buffer, killed_at: Option<Instant>) {
        let i = u64::from_le_bytes(buf[..8].try_into().unwrap());
        assert_eq!(i, self.received, "messages arrive in order, once");
        self.received += 1;
        if let Some(at) = killed_at {
            self.after_kill += 1;
            self.last_after_kill = Some(at.elapsed());
        }
    }

    /// A failed receive: only after the kill, with a cancellation error; its
    /// buffer comes back.
    fn failed(
        &mut self,
        err: &mut libfabric::cq::CqError<'_>,
        killed_at: Option<Instant>,
        pool: &BufferPool,
    ) {
        let at = killed_at.expect("an error completion before the peer was killed");
        if self.first_error.is_none() {
            self.first_error = Some((at.elapsed(), err.err, err.prov_errno));
        }
        assert!(
            matches!(err.err, Errno::CANCELED | Errno::CONNRESET | Errno::NOTCONN),
            "a receive of a dead connection fails with ECANCELED: {err:?}"
        );
        assert!(
            pool.reclaim_err(err).is_some(),
            "the failed receive hands its buffer back"
        );
        self.failed += 1;
    }
}

/// Ten times what `n` messages take at `rate` messages per second: how long
/// the messages in flight at a kill may take to arrive.
fn draining(n: u64, rate: f64) -> Duration {
    Duration::try_from_secs_f64(10.0 * n as f64 / rate).unwrap_or(Duration::MAX)
}

/// The survivor's side of one connection.
struct Server {
    domain: Domain,
    cq: CompletionQueue<Msg>,
    ep: Endpoint,
    pool: BufferPool,
}

/// Waits for a CONNREQ on `eq`, accepts it, waits for CONNECTED; the request
/// data must be `expect_data`. `drive` is called while waiting (progress of
/// an in-process client).
fn accept_one(
    fabric: &Fabric,
    eq: &EventQueue,
    expect_data: &[u8],
    drive: &dyn Fn(),
    what: &str,
) -> Server {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = EventBuf::new();
    let request = loop {
        match try_event(eq, &mut buf) {
            Some(Ev::ConnReq { request, data }) => {
                assert_eq!(data, expect_data, "{what}: request data");
                break request;
            }
            Some(other) => panic!("{what}: expected FI_CONNREQ, got {other:?}"),
            None => {}
        }
        drive();
        assert!(
            Instant::now() < deadline,
            "{what}: no FI_CONNREQ within 20 s"
        );
        std::thread::sleep(Duration::from_micros(200));
    };
    let domain = Domain::open(fabric, request.info()).expect("fi_domain (server)");
    let cq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new().size(256).wait(WaitObj::Fd))
        .expect("fi_cq_open");
    let ep = Endpoint::from_request(&domain, request).expect("fi_endpoint (server)");
    ep.bind_eq(eq).expect("bind eq");
    ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV)
        .expect("bind cq");
    ep.enable().expect("fi_enable");
    ep.accept(b"accepted").expect("fi_accept");
    loop {
        match try_event(eq, &mut buf) {
            Some(Ev::Connected { fid, .. }) => {
                assert_eq!(fid, ep.fid(), "{what}: CONNECTED names the new endpoint");
                break;
            }
            Some(other) => panic!("{what}: expected FI_CONNECTED, got {other:?}"),
            None => {}
        }
        let _ = cq.read(&mut [MsgEntry::default()]);
        drive();
        assert!(
            Instant::now() < deadline,
            "{what}: no FI_CONNECTED within 20 s"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    let pool = BufferPool::new(&domain, WINDOW, 64).expect("pool");
    Server {
        domain,
        cq,
        ep,
        pool,
    }
}

#[test]
fn a_peer_killed_mid_traffic_is_detected_and_the_listener_accepts_again() {
    let kill_after = count("FAULTS_KILL_AFTER", 20_000);
    let (fabric, _) = fabric();
    let (pep, eq) = listener(&fabric);
    let addr = pep.local_addr().expect("listener address");
    let mut child = Reap(Some(spawn_peer(addr)));
    let server = accept_one(&fabric, &eq, b"streamer", &|| {}, "first connection");
    for _ in 0..WINDOW {
        server
            .ep
            .recv(server.pool.take().expect("free buffer"))
            .expect("fi_recv");
    }

    // Receive until it is time to kill the peer, then until the loss is seen.
    let mut entries: [MsgEntry; 16] = Default::default();
    let mut evbuf = EventBuf::new();
    let mut killed_at: Option<Instant> = None;
    let mut shutdown_after: Option<Duration> = None;
    let mut seen = Survivor::default();
    // Messages per second before the kill: what the messages in flight at
    // the kill are allowed to take to arrive is timed by it (a tenth of it,
    // on this machine, as loaded as it is, valgrind or not).
    let mut rate_before = f64::INFINITY;
    let start = Instant::now();
    let mut last_progress = Instant::now();
    while shutdown_after.is_none() {
        match server
            .cq
            .sread(&mut entries, Some(Duration::from_millis(20)))
            .expect("fi_cq_sread")
        {
            CqRead::Completions(done) => {
                last_progress = Instant::now();
                for e in &done {
                    let buf = server.pool.reclaim(e).expect("receive buffer");
                    seen.received(&buf, killed_at);
                    server.ep.recv(buf).expect("repost fi_recv");
                }
            }
            CqRead::Error(mut err) => {
                seen.failed(&mut err, killed_at, &server.pool);
            }
            _ => {}
        }
        match try_event(&eq, &mut evbuf) {
            None => {}
            Some(Ev::Shutdown { fid }) => {
                assert_eq!(fid, server.ep.fid(), "FI_SHUTDOWN names the endpoint");
                let at = killed_at.expect("FI_SHUTDOWN before the peer was killed");
                shutdown_after = Some(at.elapsed());
            }
            Some(other) => panic!("unexpected event {other:?}"),
        }
        if killed_at.is_none() && seen.received >= kill_after {
            let c = child.0.as_mut().expect("peer");
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGKILL,
            )
            .expect("SIGKILL the peer");
            killed_at = Some(Instant::now());
            let status = c.wait().expect("wait for the peer");
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&status),
                Some(9),
                "the peer died of SIGKILL: {status:?}"
            );
            child.0 = None;
            rate_before = rate(seen.received, start.elapsed());
            println!(
                "peer killed with SIGKILL after {} messages ({:.2?} of traffic, \
                 {rate_before:.0} messages/s)",
                seen.received,
                start.elapsed(),
            );
        }
        if let Some(at) = killed_at {
            let allowed =
                Duration::from_secs(10).saturating_add(draining(seen.after_kill, rate_before));
            assert!(
                at.elapsed() < allowed,
                "no FI_SHUTDOWN {allowed:.2?} after SIGKILL ({} messages delivered after it, {} \
                 receives failed meanwhile)",
                seen.after_kill,
                seen.failed
            );
        } else {
            assert!(
                last_progress.elapsed() < Duration::from_secs(20),
                "no message from the peer for 20 s ({} received)",
                seen.received
            );
        }
    }
    let killed_at = killed_at.expect("killed");
    let shutdown_after = shutdown_after.expect("FI_SHUTDOWN");
    // The messages the peer sent before it died are delivered first, and how
    // long they take depends on the machine (valgrind: seconds), not on the
    // detection: it is timed from the last of them read before FI_SHUTDOWN
    // (the drain below reads those queued before it).
    let delivered_until = seen.last_after_kill.unwrap_or_default();
    let allowed = Duration::from_secs(2).saturating_add(draining(seen.after_kill, rate_before));
    assert!(
        delivered_until <= allowed,
        "the {} messages in flight at the kill took {delivered_until:.2?} to arrive ({rate_before:.0} \
         messages/s before it: at most {allowed:.2?})",
        seen.after_kill
    );
    // Completions queued before the shutdown was read, not posted again.
    let mut drained = 0usize;
    loop {
        match server.cq.read(&mut entries).expect("fi_cq_read") {
            CqRead::Completions(done) => {
                for e in &done {
                    let buf = server.pool.reclaim(e).expect("receive buffer");
                    seen.received(&buf, Some(killed_at));
                    drained += 1;
                }
            }
            CqRead::Error(mut err) => {
                seen.failed(&mut err, Some(killed_at), &server.pool);
            }
            _ => break,
        }
    }
    let detected = seen
        .first_error
        .map_or(shutdown_after, |(e, _, _)| e.min(shutdown_after));
    let silent = detected.saturating_sub(delivered_until);
    println!(
        "after SIGKILL: {} more messages were delivered; FI_SHUTDOWN after \
         {shutdown_after:.2?}; {} posted receives failed with an error completion before the \
         endpoint was closed ({}); the loss was detected after {detected:.2?}, {silent:.2?} \
         after the last message",
        seen.after_kill,
        seen.failed,
        seen.first_error
            .map_or("none".to_string(), |(t, e, p)| format!(
                "the first after {t:.2?}: {e:?}, prov_errno {p}"
            )),
    );
    assert!(
        silent < Duration::from_secs(5),
        "detection took {silent:?} after the last message ({detected:?} after SIGKILL)"
    );

    // Everything of the dead connection closes cleanly: closing the endpoint
    // hands back the buffers of the receives still posted.
    let Server {
        domain,
        cq,
        ep,
        pool,
    } = server;
    ep.close()
        .expect("close the endpoint of the dead connection");
    let outstanding = WINDOW - seen.failed - drained;
    assert_pool_whole(&pool, WINDOW);
    let flushed = read_flushed_of_closed(&cq, &pool);
    assert!(flushed <= outstanding, "{flushed} flushed of {outstanding}");
    println!(
        "closing the endpoint handed back the {outstanding} receives still posted (the provider \
         flushed {flushed}); every buffer is back"
    );
    assert_pool_whole(&pool, WINDOW);
    drop(pool);
    cq.close().expect("close its completion queue");
    domain.close().expect("close its domain");

    // The same passive endpoint accepts a new connection, which carries data.
    let cinfo = client_info(addr);
    let cdomain = Domain::open(&fabric, &cinfo).expect("fi_domain (client)");
    let ceq = fd_eq(&fabric);
    let ccq = CompletionQueue::<Msg>::open(&cdomain, &CqAttr::new().size(64))
        .expect("fi_cq_open (client)");
    let cep = Endpoint::open(&cdomain, &cinfo).expect("fi_endpoint (client)");
    cep.bind_eq(&ceq).expect("bind eq");
    cep.bind_cq(&ccq, CqBind::TRANSMIT | CqBind::RECV)
        .expect("bind cq");
    cep.enable().expect("fi_enable");
    cep.connect(b"second").expect("fi_connect");
    let reconnect = Instant::now();
    let drive = || {
        let _ = ceq.peek(&mut EventBuf::new());
    };
    let server = accept_one(&fabric, &eq, b"second", &drive, "second connection");
    let ev = next_event(&ceq, &[&eq], Duration::from_secs(10));
    assert!(
        matches!(&ev, Ev::Connected { data, .. } if data == b"accepted"),
        "client: {ev:?}"
    );
    let cpool = BufferPool::new(&cdomain, 4, 64).expect("pool");
    let got = exchange(
        (&cep, &ccq, &cpool),
        (&server.ep, &server.cq, &server.pool),
        b"ping",
    );
    assert_eq!(got, b"ping");
    let got = exchange(
        (&server.ep, &server.cq, &server.pool),
        (&cep, &ccq, &cpool),
        b"pong",
    );
    assert_eq!(got, b"pong");
    println!(
        "the passive endpoint accepted a new connection and exchanged data in {:.2?}",
        reconnect.elapsed()
    );

    // Close in order, each close reporting its result.
    cep.shutdown().expect("fi_shutdown");
    // The server hears of it as its completion queue is read.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut evbuf = EventBuf::new();
    let ev = loop {
        if let Some(ev) = try_event(&eq, &mut evbuf) {
            break ev;
        }
        assert!(matches!(
            server.cq.read(&mut entries).unwrap(),
            CqRead::Empty
        ));
        assert!(
            Instant::now() < deadline,
            "no FI_SHUTDOWN on the server within 10 s"
        );
        std::thread::sleep(Duration::from_micros(200));
    };
    assert!(
        matches!(ev, Ev::Shutdown { fid } if fid == server.ep.fid()),
        "server: {ev:?}"
    );
    let Server {
        domain,
        cq,
        ep,
        pool,
    } = server;
    ep.close().expect("close the server endpoint");
    cep.close().expect("close the client endpoint");
    // Flushed operations: none were left posted.
    assert_pool_whole(&pool, WINDOW);
    assert_pool_whole(&cpool, 4);
    drop((pool, cpool));
    cq.close().expect("close the server CQ");
    ccq.close().expect("close the client CQ");
    domain.close().expect("close the server domain");
    cdomain.close().expect("close the client domain");
    pep.close().expect("close the passive endpoint");
    eq.close().expect("close the server EQ");
    ceq.close().expect("close the client EQ");
    fabric.close().expect("close the fabric");
}

type Side<'a> = (&'a Endpoint, &'a CompletionQueue<Msg>, &'a BufferPool);

/// Sends `msg` from `tx` to `rx` and waits for both completions (the
/// buffers come back to their pools); returns what `rx` received.
fn exchange(tx: Side<'_>, rx: Side<'_>, msg: &[u8]) -> Vec<u8> {
    use libfabric::cq::CompletionFlags;
    rx.0.recv(rx.2.take().expect("receive buffer"))
        .expect("fi_recv");
    let mut buf = tx.2.take().expect("send buffer");
    buf[..msg.len()].copy_from_slice(msg);
    tx.0.send(buf, msg.len()).expect("fi_send");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut entries: [MsgEntry; 4] = Default::default();
    let (mut sent, mut received) = (false, None);
    while !sent || received.is_none() {
        match tx.1.read(&mut entries).expect("fi_cq_read") {
            CqRead::Completions(done) => {
                for e in &done {
                    assert!(e.flags().contains(CompletionFlags::SEND), "{e:?}");
                    assert!(!sent, "one send completion");
                    drop(tx.2.reclaim(e).expect("send buffer"));
                    sent = true;
                }
            }
            CqRead::Error(e) => panic!("send failed: {e:?}"),
            _ => {}
        }
        match rx.1.read(&mut entries).expect("fi_cq_read") {
            CqRead::Completions(done) => {
                for e in &done {
                    assert!(e.flags().contains(CompletionFlags::RECV), "{e:?}");
                    assert!(received.is_none(), "one receive completion");
                    let buf = rx.2.reclaim(e).expect("receive buffer");
                    received = Some(buf[..e.len()].to_vec());
                }
            }
            CqRead::Error(e) => panic!("receive failed: {e:?}"),
            _ => {}
        }
        assert!(Instant::now() < deadline, "no exchange within 10 s");
        std::thread::sleep(Duration::from_micros(200));
    }
    received.expect("received")
}

/// Connection data of request `i` (its number first, so the server can tell
/// requests apart), of its accept and of its reject. Sizes run through
/// every length from none to the maximum.
struct CmData {
    max: usize,
}

const EMPTY_REQUEST: usize = 1;
const MAX_REQUEST: usize = 2;
const EMPTY_REJECT: usize = 3;
const MAX_REJECT: usize = 6;
const EMPTY_ACCEPT: usize = 4;
const MAX_ACCEPT: usize = 5;

impl CmData {
    fn fill(&self, i: usize, len: usize, salt: u8) -> Vec<u8> {
        let mut v: Vec<u8> = (0..len)
            .map(|k| (k as u8).wrapping_mul(31).wrapping_add(salt ^ i as u8))
            .collect();
        if len >= 4 {
            v[..4].copy_from_slice(&(i as u32).to_le_bytes());
        }
        v
    }
    fn len(&self, i: usize, empty: usize, max: usize) -> usize {
        if i == empty {
            0
        } else if i == max {
            self.max
        } else {
            4 + i % (self.max - 3)
        }
    }
    fn request(&self, i: usize) -> Vec<u8> {
        self.fill(i, self.len(i, EMPTY_REQUEST, MAX_REQUEST), 1)
    }
    fn accept(&self, i: usize) -> Vec<u8> {
        self.fill(i, self.len(i, EMPTY_ACCEPT, MAX_ACCEPT), 2)
    }
    fn reject(&self, i: usize) -> Vec<u8> {
        self.fill(i, self.len(i, EMPTY_REJECT, MAX_REJECT), 3)
    }
    /// The request number in a request's data.
    fn number(&self, data: &[u8]) -> usize {
        if data.is_empty() {
            EMPTY_REQUEST
        } else {
            u32::from_le_bytes(data[..4].try_into().unwrap()) as usize
        }
    }
}

fn rejected(i: usize) -> bool {
    i.is_multiple_of(3)
}

#[test]
fn a_burst_of_connections_with_every_third_rejected_gives_exactly_the_expected_events() {
    let n = count("FAULTS_CONNECTIONS", 100) as usize;
    assert!(
        n >= 7,
        "FAULTS_CONNECTIONS must be at least 7 to cover every data size"
    );
    let (fabric, _) = fabric();
    let (pep, server_eq) = listener(&fabric);
    let addr = pep.local_addr().expect("listener address");
    let max = pep.cm_data_size().expect("FI_OPT_CM_DATA_SIZE");
    assert!(max >= 8, "FI_OPT_CM_DATA_SIZE is {max}");
    let cm = CmData { max };

    // The active side: n endpoints on one domain, one EQ and one CQ.
    let cinfo = client_info(addr);
    let cdomain = Domain::open(&fabric, &cinfo).expect("fi_domain (client)");
    let ceq = fd_eq(&fabric);
    let ccq = CompletionQueue::<Msg>::open(&cdomain, &CqAttr::new().size(256))
        .expect("fi_cq_open (client)");
    let start = Instant::now();
    let clients: Vec<Endpoint> = (0..n)
        .map(|i| {
            let ep = Endpoint::open(&cdomain, &cinfo).expect("fi_endpoint (client)");
            ep.bind_eq(&ceq).expect("bind eq");
            ep.bind_cq(&ccq, CqBind::TRANSMIT | CqBind::RECV)
                .expect("bind cq");
            ep.enable().expect("fi_enable");
            assert_eq!(ep.cm_data_size(), Some(max));
            ep.connect(&cm.request(i))
                .unwrap_or_else(|e| panic!("fi_connect {i}: {e}"));
            ep
        })
        .collect();
    let client_of: HashMap<Fid, usize> = clients
        .iter()
        .enumerate()
        .map(|(i, e)| (e.fid(), i))
        .collect();
    let posted = start.elapsed();

    // The passive side accepts or rejects each request as it comes.
    let mut sdomain: Option<Domain> = None;
    let mut scq: Option<CompletionQueue<Msg>> = None;
    let mut servers: HashMap<Fid, (usize, Endpoint)> = HashMap::new();
    let mut requests = HashSet::new();
    let mut server_connected = HashSet::new();
    let mut client_connected = HashSet::new();
    let mut client_refused = HashSet::new();
    let accepted = (0..n).filter(|&i| !rejected(i)).count();
    let (mut sizes_req, mut sizes_acc, mut sizes_rej) =
        (HashSet::new(), HashSet::new(), HashSet::new());
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut sbuf = EventBuf::new();
    let mut cbuf = EventBuf::new();
    let done = |r: &HashSet<usize>, s: &HashSet<usize>, c: &HashSet<usize>, f: &HashSet<usize>| {
        r.len() == n && s.len() == accepted && c.len() == accepted && f.len() == n - accepted
    };
    while !done(
        &requests,
        &server_connected,
        &client_connected,
        &client_refused,
    ) {
        let mut idle = true;
        while let Some(ev) = try_event(&server_eq, &mut sbuf) {
            idle = false;
            match ev {
                Ev::ConnReq { request, data } => {
                    let i = cm.number(&data);
                    assert_eq!(data, cm.request(i), "request {i}: its data arrived intact");
                    assert!(requests.insert(i), "a second FI_CONNREQ for request {i}");
                    sizes_req.insert(data.len());
                    if rejected(i) {
                        let reject = cm.reject(i);
                        sizes_rej.insert(reject.len());
                        request.reject(&reject).expect("fi_reject");
                    } else {
                        let d = sdomain.get_or_insert_with(|| {
                            Domain::open(&fabric, request.info()).expect("fi_domain (server)")
                        });
                        let cq = scq.get_or_insert_with(|| {
                            CompletionQueue::<Msg>::open(d, &CqAttr::new().size(256))
                                .expect("fi_cq_open (server)")
                        });
                        let ep = Endpoint::from_request(d, request).expect("fi_endpoint (server)");
                        ep.bind_eq(&server_eq).expect("bind eq");
                        ep.bind_cq(cq, CqBind::TRANSMIT | CqBind::RECV)
                            .expect("bind cq");
                        ep.enable().expect("fi_enable");
                        let accept = cm.accept(i);
                        sizes_acc.insert(accept.len());
                        ep.accept(&accept).expect("fi_accept");
                        servers.insert(ep.fid(), (i, ep));
                    }
                }
                Ev::Connected { fid, data } => {
                    let (i, _) = servers.get(&fid).unwrap_or_else(|| {
                        panic!("server: FI_CONNECTED for an unknown fid {fid:?}")
                    });
                    assert!(
                        data.is_empty(),
                        "server: CONNECTED carries no data: {data:?}"
                    );
                    assert!(
                        server_connected.insert(*i),
                        "server: a second FI_CONNECTED for {i}"
                    );
                }
                other => panic!("server: unexpected event {other:?}"),
            }
        }
        while let Some(ev) = try_event(&ceq, &mut cbuf) {
            idle = false;
            match ev {
                Ev::Connected { fid, data } => {
                    let i = client_of[&fid];
                    assert!(
                        !rejected(i),
                        "client {i} was to be rejected but got FI_CONNECTED"
                    );
                    assert_eq!(data, cm.accept(i), "client {i}: the accept data");
                    assert!(
                        client_connected.insert(i),
                        "client {i}: a second FI_CONNECTED"
                    );
                }
                Ev::Error { fid, err, data } => {
                    let i = client_of[&fid];
                    assert!(rejected(i), "client {i}: unexpected error entry {err:?}");
                    assert_eq!(
                        err,
                        Errno::CONNREFUSED,
                        "client {i}: a reject is ECONNREFUSED"
                    );
                    assert_eq!(data, cm.reject(i), "client {i}: the reject data");
                    assert!(client_refused.insert(i), "client {i}: a second error entry");
                }
                other => panic!("client: unexpected event {other:?}"),
            }
        }
        if idle {
            assert!(
                Instant::now() < deadline,
                "after 30 s: {} requests, {} CONNECTED on the server, {} on the client, {} refused",
                requests.len(),
                server_connected.len(),
                client_connected.len(),
                client_refused.len()
            );
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let settled = start.elapsed();

    // No extra events, on either side, for a while.
    let quiet = Instant::now();
    let mut centries: [MsgEntry; 4] = Default::default();
    while quiet.elapsed() < Duration::from_millis(300) {
        assert!(
            try_event(&server_eq, &mut sbuf).is_none(),
            "an extra server event"
        );
        assert!(
            try_event(&ceq, &mut cbuf).is_none(),
            "an extra client event"
        );
        assert!(
            matches!(ccq.read(&mut centries).unwrap(), CqRead::Empty),
            "client CQ"
        );
        if let Some(cq) = &scq {
            assert!(
                matches!(cq.read(&mut centries).unwrap(), CqRead::Empty),
                "server CQ"
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    println!(
        "{n} connection attempts (connect calls took {posted:.2?}): {} FI_CONNREQ, {} accepted \
         (FI_CONNECTED {} on the server, {} on the client), {} rejected with ECONNREFUSED; all \
         settled in {settled:.2?}; no extra event in 300 ms",
        requests.len(),
        servers.len(),
        server_connected.len(),
        client_connected.len(),
        client_refused.len()
    );
    let (mut rq, mut ac, mut rj): (Vec<_>, Vec<_>, Vec<_>) = (
        sizes_req.into_iter().collect(),
        sizes_acc.into_iter().collect(),
        sizes_rej.into_iter().collect(),
    );
    rq.sort_unstable();
    ac.sort_unstable();
    rj.sort_unstable();
    println!(
        "connection data sizes (FI_OPT_CM_DATA_SIZE = {max}): requests {}..={} ({} sizes), \
         accepts {}..={}, rejects {}..={}",
        rq[0],
        rq[rq.len() - 1],
        rq.len(),
        ac[0],
        ac[ac.len() - 1],
        rj[0],
        rj[rj.len() - 1]
    );
    for sizes in [&rq, &ac, &rj] {
        assert_eq!(sizes[0], 0, "some connection data was empty");
        assert_eq!(
            sizes[sizes.len() - 1],
            max,
            "some connection data had the maximum size"
        );
    }

    // Everything closes, each close reporting its result.
    for (_, (i, ep)) in servers {
        ep.close()
            .unwrap_or_else(|e| panic!("close server endpoint {i}: {}", e.1));
    }
    for (i, ep) in clients.into_iter().enumerate() {
        ep.close()
            .unwrap_or_else(|e| panic!("close client endpoint {i}: {}", e.1));
    }
    if let Some(cq) = scq {
        cq.close().expect("close the server CQ");
    }
    ccq.close().expect("close the client CQ");
    if let Some(d) = sdomain {
        d.close().expect("close the server domain");
    }
    cdomain.close().expect("close the client domain");
    pep.close().expect("close the passive endpoint");
    server_eq.close().expect("close the server EQ");
    ceq.close().expect("close the client EQ");
    fabric.close().expect("close the fabric");
}
