//! Completion counters (fi_cntr(3)) on the suite's provider: counting real
//! messages, the counts and error counts, waits, binding rules, and the
//! waits of the crate (trywait, Waiter, poll sets, tokio) over counters.
// Poll sets are deprecated by libfabric 2.x; their rules are still tested.
#![cfg_attr(libfabric_2, allow(deprecated))]
#[macro_use]
mod common;

use common::*;
use libfabric::av::{AddressVector, AvType};
use libfabric::cntr::{CntrAttr, CntrBind, Counter};
use libfabric::conn::{ConnConfig, Rdm};
use libfabric::cq::{CqAttr, Msg};
use libfabric::ep::CqBind;
use libfabric::eq::Fid;
use libfabric::info::EpType;
use libfabric::poll::PollSet;
use libfabric::wait::{trywait, TryWait, TryWaitSet, WaitObj, Waitable, Waiter, Wake};
use libfabric::{CompletionQueue, Domain, Endpoint, Error, EventQueue, Fabric, Info};
use std::time::{Duration, Instant};

const TEN_S: Duration = Duration::from_secs(10);

fn skip(why: &str) {
    println!("SKIP {}: provider {}: {why}", test_name(), provider());
}

/// Whether the suite's provider has counters. verbs has none (its RDM
/// endpoints have them through ofi_rxm, where this suite also runs): its
/// open is a typed [`Error::Unsupported`], and the test prints SKIP.
fn has_counters() -> bool {
    let (_f, domain, _) = fabric_domain();
    match Counter::open(&domain, &CntrAttr::new()) {
        Ok(_) => true,
        Err(Error::Unsupported { .. }) if provider() == "verbs" => {
            skip("verbs has no counters (fi_no_cntr_open); verbs;ofi_rxm has");
            false
        }
        Err(e) => panic!("fi_cntr_open: {e}"),
    }
}

/// A counter with the default wait object.
fn counter(domain: &Domain) -> Counter {
    Counter::open(domain, &CntrAttr::new()).expect("fi_cntr_open")
}

/// Whether [`Counter::wait`] can block on it (shm's counters cannot).
fn blocks(c: &Counter) -> bool {
    !matches!(c.wait_obj(), WaitObj::None)
}

/// Waits until the counter reaches `n`: in `Counter::wait` where it
/// blocks, else by reading it (a read runs the provider's progress).
fn reach(c: &Counter, n: u64) {
    let deadline = Instant::now() + TEN_S;
    loop {
        let now = c.read().expect("fi_cntr_read");
        if now >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the counter is at {now}, not {n}, after {TEN_S:?}"
        );
        if blocks(c) {
            match c.wait(n, Some(Duration::from_millis(50))) {
                Ok(()) | Err(Error::TimedOut { .. }) => {}
                Err(e) => panic!("fi_cntr_wait: {e}"),
            }
        } else {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// An endpoint of the suite's provider on `domain`, with a completion
/// queue, the counter bound for sends and receives, and what enabling
/// needs (an event queue or an address vector); enabled if `enable`.
struct Bound {
    ep: Endpoint,
    _cq: CompletionQueue<Msg>,
    _eq: Option<EventQueue>,
    _av: Option<AddressVector>,
}

/// The process's soft limit of file descriptors.
fn fd_limit() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) writes the limit into the struct given.
    let ret = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(ret, 0);
    usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
}

/// File descriptors this process may still open: its soft limit less
/// those open now.
fn fds_left() -> usize {
    let open = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count();
    fd_limit().saturating_sub(open)
}

fn bound_endpoint(
    fabric: &Fabric,
    domain: &Domain,
    info: &Info,
    c: &Counter,
    enable: bool,
) -> Bound {
    let ep = Endpoint::open(domain, info).expect("fi_endpoint");
    let cq = CompletionQueue::<Msg>::open(domain, &CqAttr::new()).unwrap();
    ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
    ep.bind_cntr(c, CntrBind::SEND | CntrBind::RECV)
        .expect("bind_cntr");
    let (eq, av) = if info.ep_type() == EpType::Msg {
        let eq = fd_eq(fabric);
        ep.bind_eq(&eq).unwrap();
        (Some(eq), None)
    } else {
        let av = AddressVector::open(domain, AvType::Table, 4).unwrap();
        ep.bind_av(&av).unwrap();
        (None, Some(av))
    };
    if enable {
        ep.enable().expect("fi_enable");
    }
    Bound {
        ep,
        _cq: cq,
        _eq: eq,
        _av: av,
    }
}

/// Drains `n` completions of `cq`, their buffers back to `pool`.
fn drain(cq: &CompletionQueue<Msg>, pool: &libfabric::BufferPool, n: usize) {
    for i in 0..n {
        cq.wait_one(pool, Some(TEN_S))
            .unwrap_or_else(|e| panic!("completion {i} of {n}: {e}"));
    }
}

const MESSAGES: u64 = 5;

#[test]
fn counters_count_the_sends_and_receives_of_real_messages() {
    if !has_counters() {
        return;
    }
    let config = ConnConfig::new().counter(CntrAttr::new(), CntrBind::SEND | CntrBind::RECV);
    let info = node_info();
    if info.ep_type() == EpType::Msg {
        let (pair, server, client) = connect_pair_config::<Msg>(config, b"hi", b"ho");
        let (server, client) = (
            server.expect("server counter"),
            client.expect("client counter"),
        );
        for _ in 0..MESSAGES {
            pair.server.recv(pair.server_pool.take().unwrap()).unwrap();
        }
        for i in 0..MESSAGES {
            let mut b = pair.client_pool.take().unwrap();
            b[0] = i as u8;
            pair.client.send(b, 1).unwrap();
        }
        reach(&server, MESSAGES);
        reach(&client, MESSAGES);
        assert_eq!(server.read().unwrap(), MESSAGES, "receives counted once");
        assert_eq!(client.read().unwrap(), MESSAGES, "sends counted once");
        assert_eq!(
            (server.read_err().unwrap(), client.read_err().unwrap()),
            (0, 0)
        );
        drain(&pair.server_cq, &pair.server_pool, MESSAGES as usize);
        drain(&pair.client_cq, &pair.client_pool, MESSAGES as usize);
        return;
    }
    let (fabric, _) = fabric();
    let a = Rdm::<Msg>::open_on(&fabric, &info, 4, &config).expect("a");
    let b = Rdm::<Msg>::open_on(&fabric, &info, 4, &config).expect("b");
    let to_b = a.insert(&b.name().unwrap()).unwrap();
    let (pa, pb) = (a.buffer_pool(8, 64).unwrap(), b.buffer_pool(8, 64).unwrap());
    for _ in 0..MESSAGES {
        b.endpoint().recv(pb.take().unwrap()).unwrap();
    }
    let deadline = Instant::now() + TEN_S;
    for i in 0..MESSAGES {
        let mut buf = pa.take().unwrap();
        buf[0] = i as u8;
        while let Err((back, e)) = a.endpoint().send_to(buf, 1, to_b) {
            assert!(e.is_again() && Instant::now() < deadline, "{e}");
            buf = back;
            // Progress only (rxm connects to the peer meanwhile).
            let _ = a.counter().unwrap().read().unwrap();
            let _ = b.counter().unwrap().read().unwrap();
        }
    }
    let (ca, cb) = (a.counter().unwrap(), b.counter().unwrap());
    std::thread::scope(|s| {
        // Each side's progress runs in its own counter's reads.
        let receiver = s.spawn(|| reach(cb, MESSAGES));
        reach(ca, MESSAGES);
        receiver.join().expect("the receiving side");
    });
    assert_eq!(ca.read().unwrap(), MESSAGES, "sends counted once");
    assert_eq!(cb.read().unwrap(), MESSAGES, "receives counted once");
    assert_eq!((ca.read_err().unwrap(), cb.read_err().unwrap()), (0, 0));
    drain(b.cq(), &pb, MESSAGES as usize);
    drain(a.cq(), &pa, MESSAGES as usize);
}

#[test]
fn counts_and_error_counts_are_read_added_and_set() {
    if !has_counters() {
        return;
    }
    let (_f, domain, _) = fabric_domain();
    let c = counter(&domain);
    assert_eq!((c.read().unwrap(), c.read_err().unwrap()), (0, 0));
    c.add(5).unwrap();
    c.add(0).unwrap();
    assert_eq!(c.read().unwrap(), 5);
    c.set(2).unwrap();
    assert_eq!(c.read().unwrap(), 2);
    c.add_err(3).unwrap();
    assert_eq!(c.read_err().unwrap(), 3);
    c.set_err(1).unwrap();
    assert_eq!(c.read_err().unwrap(), 1);
    assert_eq!(
        c.read().unwrap(),
        2,
        "the count is apart from the error count"
    );
    assert!(format!("{c:?}").contains("Counter"));
    assert!(!c.as_raw().is_null());
    assert_eq!(c.fid(), c.clone().fid());
    // sockets keeps 32-bit counts: larger values are refused, not wrapped.
    let big = 1u64 << 40;
    if provider() == "sockets" {
        assert!(matches!(c.add(big), Err(Error::TooLarge { .. })));
        assert!(matches!(c.set(big), Err(Error::TooLarge { .. })));
        assert!(matches!(
            c.wait(big, Some(Duration::ZERO)),
            Err(Error::TooLarge { .. })
        ));
        assert_eq!(c.read().unwrap(), 2);
    } else {
        c.set(big).unwrap();
        c.add(1).unwrap();
        assert_eq!(c.read().unwrap(), big + 1);
    }
    c.close().expect("close");
}

#[test]
fn a_wait_reaches_its_threshold_or_times_out() {
    if !has_counters() {
        return;
    }
    let (_f, domain, _) = fabric_domain();
    let c = counter(&domain);
    if !blocks(&c) {
        let e = c.wait(1, Some(Duration::ZERO)).unwrap_err();
        assert!(matches!(e, Error::WrongWaitMode { .. }), "{e}");
        return skip("its counters have no wait object (waits are WrongWaitMode)");
    }
    c.add(3).unwrap();
    c.wait(3, Some(Duration::from_secs(1)))
        .expect("already there");
    c.wait(0, None).expect("a threshold of 0 is always reached");
    for timeout in [
        Duration::ZERO,
        Duration::from_millis(1),
        Duration::from_millis(250),
    ] {
        let start = Instant::now();
        let e = c.wait(4, Some(timeout)).unwrap_err();
        assert!(matches!(e, Error::TimedOut { .. }), "{e}");
        assert!(start.elapsed() >= timeout, "returned before the timeout");
    }
    // Reached from another thread while blocked (longer than one slice).
    let adder = c.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        adder.add(2).unwrap();
    });
    c.wait(5, Some(TEN_S)).expect("woken by the add");
    t.join().unwrap();
    assert_eq!(c.read().unwrap(), 5);
}

#[test]
fn a_wait_ends_with_a_typed_error_when_the_error_count_changes() {
    if !has_counters() {
        return;
    }
    let (_f, domain, _) = fabric_domain();
    let c = counter(&domain);
    if !blocks(&c) {
        return skip("its counters have no wait object");
    }
    // An error counted before the wait began is not this wait's.
    c.add_err(1).unwrap();
    let e = c.wait(1, Some(Duration::from_millis(50))).unwrap_err();
    assert!(matches!(e, Error::TimedOut { .. }), "{e}");
    let adder = c.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        adder.add_err(2).unwrap();
    });
    let start = Instant::now();
    match c.wait(100, Some(TEN_S)) {
        Err(Error::CounterError { errors, .. }) => assert_eq!(errors, 3),
        other => panic!("{other:?}"),
    }
    assert!(start.elapsed() < TEN_S);
    t.join().unwrap();
    // Nothing changed since: the next wait times out again.
    let e = c.wait(100, Some(Duration::from_millis(20))).unwrap_err();
    assert!(matches!(e, Error::TimedOut { .. }), "{e}");
}

#[test]
fn a_counter_without_a_wait_object_is_refused_by_every_wait() {
    if !has_counters() {
        return;
    }
    let (fabric, domain, _) = fabric_domain();
    let c = Counter::open(&domain, &CntrAttr::new().wait(WaitObj::None)).unwrap();
    assert_eq!(c.wait_obj(), WaitObj::None);
    let e = c.wait(1, Some(Duration::ZERO)).unwrap_err();
    assert!(matches!(e, Error::WrongWaitMode { .. }), "{e}");
    let e = trywait(&fabric, &[&c]).unwrap_err();
    assert!(matches!(e, Error::WrongWaitMode { .. }), "{e}");
    assert!(matches!(c.wait_fd(), Err(Error::WrongWaitMode { .. })));
    assert!(matches!(
        Waiter::new(&[&c]),
        Err(Error::WrongWaitMode { .. })
    ));
    // Counting still works.
    c.add(1).unwrap();
    assert_eq!(c.read().unwrap(), 1);
}

#[test]
fn wait_objects_the_crate_cannot_use_are_refused() {
    if !has_counters() {
        return;
    }
    let (fabric, domain, _) = fabric_domain();
    for wait in [
        WaitObj::Yield,
        WaitObj::Other(5),
        WaitObj::Other(99),
        WaitObj::Set,
    ] {
        match Counter::open(&domain, &CntrAttr::new().wait(wait)) {
            Err(Error::UnsupportedWait { .. }) => {}
            other => panic!("{wait:?}: {other:?}"),
        }
    }
    if provider() == "sockets" {
        let set = libfabric::wait::WaitSet::open(&fabric, WaitObj::Fd).unwrap();
        let e = Counter::open(&domain, &CntrAttr::new().wait_set(&set)).unwrap_err();
        assert!(matches!(e, Error::UnsupportedWait { .. }), "{e}");
    }
    match (
        provider().as_str(),
        Counter::open(&domain, &CntrAttr::new().wait(WaitObj::Fd)),
    ) {
        // sockets: refused by the crate (its fd fills up); shm: by shm.
        ("sockets" | "shm", Err(Error::UnsupportedWait { .. })) => {}
        ("sockets" | "shm", other) => panic!("{other:?}"),
        (_, Ok(c)) => assert_eq!(c.wait_obj(), WaitObj::Fd),
        (_, Err(e)) => panic!("FI_WAIT_FD: {e}"),
    }
}

#[test]
fn a_counter_closed_while_bound_is_in_use_until_its_endpoint_closes() {
    if !has_counters() {
        return;
    }
    let (fabric, domain, info) = fabric_domain();
    // Bound, never enabled.
    let c = counter(&domain);
    let b = bound_endpoint(&fabric, &domain, &info, &c, false);
    let (c, e) = c.close().unwrap_err();
    // Held once per kind it counts.
    assert!(
        matches!(
            e,
            Error::InUse {
                object: libfabric::ObjectKind::Counter,
                users: 2
            }
        ),
        "{e}"
    );
    drop(b);
    c.close().expect("closes once its endpoint is gone");
    // Bound and enabled: the provider holds it too.
    let c = counter(&domain);
    let b = bound_endpoint(&fabric, &domain, &info, &c, true);
    let (c, e) = c.close().unwrap_err();
    assert!(matches!(e, Error::InUse { .. }), "{e}");
    c.add(1).unwrap();
    assert_eq!(c.read().unwrap(), 1, "handed back open");
    let (ep, e) = b.ep.clone().close().unwrap_err();
    assert!(matches!(e, Error::InUse { .. }), "{e}");
    drop(ep);
    drop(b);
    c.close().expect("closes once its endpoint is gone");
}

#[test]
fn a_counter_of_another_domain_is_refused() {
    if !has_counters() {
        return;
    }
    let (fabric, domain, info) = fabric_domain();
    let other = Domain::open(&fabric, &info).unwrap();
    let foreign = counter(&other);
    let ep = Endpoint::open(&domain, &info).unwrap();
    let e = ep.bind_cntr(&foreign, CntrBind::SEND).unwrap_err();
    assert!(
        matches!(
            e,
            Error::ForeignObject {
                what: "counter",
                scope: libfabric::error::ObjectScope::Domain,
                ..
            }
        ),
        "{e}"
    );
    // Of another fabric too.
    let (_f2, domain2, _) = fabric_domain();
    let e = ep
        .bind_cntr(&counter(&domain2), CntrBind::RECV)
        .unwrap_err();
    assert!(matches!(e, Error::ForeignObject { .. }), "{e}");
    foreign.close().expect("never bound");
}

#[test]
fn binding_rules() {
    if !has_counters() {
        return;
    }
    let (fabric, domain, info) = fabric_domain();
    let c = counter(&domain);
    let ep = Endpoint::open(&domain, &info).unwrap();
    let e = ep.bind_cntr(&c, CntrBind::empty()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    ep.bind_cntr(&c, CntrBind::SEND).unwrap();
    let e = ep
        .bind_cntr(&counter(&domain), CntrBind::SEND | CntrBind::READ)
        .unwrap_err();
    assert!(
        matches!(e, Error::State { .. }),
        "one counter per kind: {e}"
    );
    // One counter may count several kinds, bound in several calls.
    ep.bind_cntr(&c, CntrBind::RECV).unwrap();
    drop(ep);
    // After enable: refused.
    let b = bound_endpoint(&fabric, &domain, &info, &counter(&domain), true);
    let e = b.ep.bind_cntr(&c, CntrBind::READ).unwrap_err();
    assert!(
        matches!(
            e,
            Error::State {
                call: "fi_ep_bind",
                ..
            }
        ),
        "{e}"
    );
}

#[test]
fn a_counter_bound_to_a_never_enabled_endpoint_is_read_and_waited_on() {
    if !has_counters() {
        return;
    }
    // The util providers run a counter's endpoints in its reads and waits;
    // rxm's read state only fi_enable creates. The bind is given to the
    // provider at enable, so these reach no such endpoint.
    let (fabric, domain, info) = fabric_domain();
    let c = counter(&domain);
    let _b = bound_endpoint(&fabric, &domain, &info, &c, false);
    for _ in 0..100 {
        assert_eq!(c.read().unwrap(), 0);
        assert_eq!(c.read_err().unwrap(), 0);
    }
    if blocks(&c) {
        let e = c.wait(1, Some(Duration::from_millis(20))).unwrap_err();
        assert!(matches!(e, Error::TimedOut { .. }), "{e}");
        let _ = trywait(&fabric, &[&c]).expect("fi_trywait");
    }
    let set = PollSet::open(&domain).unwrap();
    set.add(&c).unwrap();
    let mut ready = [Fid::default(); 4];
    set.poll(&mut ready).expect("fi_poll");
}

#[test]
fn trywait_takes_counters() {
    if !has_counters() {
        return;
    }
    let (fabric, domain, _) = fabric_domain();
    let c = counter(&domain);
    if !blocks(&c) {
        assert!(matches!(
            trywait(&fabric, &[&c]),
            Err(Error::WrongWaitMode { .. })
        ));
        return skip("its counters have no wait object");
    }
    let cq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new()).unwrap();
    let mut queues: Vec<&dyn Waitable> = vec![&c];
    if cq.wait_obj() != WaitObj::None {
        queues.push(&cq);
    }
    // The util trywait reports a count that changed since it last looked
    // (`util_poll_run`); sockets answers 0 always.
    let mut seen = false;
    for _ in 0..3 {
        match trywait(&fabric, &queues).expect("fi_trywait") {
            TryWait::MayBlock => {
                seen = true;
                break;
            }
            TryWait::EventsPending => {}
        }
    }
    assert!(seen, "an idle counter lets the caller block");
    c.add(1).unwrap();
    let after = trywait(&fabric, &queues).expect("fi_trywait");
    // The util trywait (rxm, rxd, shm; tcp before 1.18) reports it; tcp's
    // own from 1.18 (`xnet_trywait`) and sockets' look at nothing.
    let tcp_own = provider() == "tcp"
        && libfabric::sys::runtime_version() >= libfabric::sys::FI_VERSION(1, 18);
    if provider() != "sockets" && !tcp_own {
        assert_eq!(
            after,
            TryWait::EventsPending,
            "a count the caller has not seen"
        );
    }
    // A counter of another fabric is refused.
    let (f2, _) = common::fabric();
    assert!(matches!(
        trywait(&f2, &[&c]),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn no_provider_gives_a_counter_wait_fd_and_the_waiter_says_so() {
    if !has_counters() {
        return;
    }
    let (_f, domain, _) = fabric_domain();
    let c = counter(&domain);
    match (c.wait_obj(), c.wait_fd()) {
        (_, Ok(fd)) => {
            // A provider that gives one: the Waiter takes it.
            let _ = fd;
            let mut w = Waiter::new(&[&c]).expect("a Waiter over a counter with a wait fd");
            c.add(1).unwrap();
            assert_eq!(w.wait(Some(TEN_S)).unwrap(), Wake::Ready);
        }
        (WaitObj::Fd, Err(Error::Unsupported { .. })) => {
            assert!(matches!(Waiter::new(&[&c]), Err(Error::Unsupported { .. })));
            skip("the util counters give no wait fd (FI_GETWAIT: -FI_ENOSYS)");
        }
        (WaitObj::None | WaitObj::Unspec, Err(Error::WrongWaitMode { .. })) => {
            assert!(matches!(
                Waiter::new(&[&c]),
                Err(Error::WrongWaitMode { .. })
            ));
            skip("its counters' wait object is not a fd");
        }
        (obj, other) => panic!("{obj:?}: {other:?}"),
    }
}

#[test]
fn poll_sets_report_counters_whose_count_changed() {
    if !has_counters() {
        return;
    }
    let (_f, domain, _) = fabric_domain();
    let c = counter(&domain);
    let cq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new()).unwrap();
    let set = PollSet::open(&domain).unwrap();
    set.add(&c).unwrap();
    set.add(&cq).unwrap();
    assert!(
        matches!(set.add(&c), Err(Error::InvalidArgument(_))),
        "added twice"
    );
    let mut ready = [Fid::default(); 4];
    // The first poll may report what it had not seen yet.
    let _ = set.poll(&mut ready).unwrap();
    assert_eq!(set.poll(&mut ready).unwrap(), 0, "nothing changed");
    c.add(1).unwrap();
    let n = set.poll(&mut ready).unwrap();
    if provider() == "sockets" {
        // sockets marks an explicit add as seen (`sock_cntr_add` sets
        // `last_read_val`): only counted completions are reported.
        assert_eq!(n, 0);
    } else {
        assert_eq!(&ready[..n], &[c.fid()], "the counter changed");
    }
    assert_eq!(set.poll(&mut ready).unwrap(), 0, "reported once");
    // The set holds its members.
    let (c, e) = c.close().unwrap_err();
    assert!(matches!(e, Error::InUse { .. }), "{e}");
    set.remove(&c).unwrap();
    assert!(matches!(set.remove(&c), Err(Error::InvalidArgument(_))));
    c.close().expect("out of the set");
    // Another domain's counter is refused.
    let (_f2, d2, _) = fabric_domain();
    assert!(matches!(
        set.add(&counter(&d2)),
        Err(Error::InvalidArgument(_))
    ));
}

/// The util poll sets count a change they have no room to report as seen:
/// a `ready` shorter than the set is refused, and a set of 40 changed
/// counters reports all 40 in one poll.
#[test]
fn poll_sets_report_every_change_or_refuse_a_short_array() {
    if !has_counters() {
        return;
    }
    let (_f, domain, _) = fabric_domain();
    let set = PollSet::open(&domain).unwrap();
    let counters: Vec<Counter> = (0..40)
        .map(|_| Counter::open(&domain, &CntrAttr::new().wait(WaitObj::None)).unwrap())
        .collect();
    for c in &counters {
        set.add(c).unwrap();
    }
    let mut ready = vec![Fid::default(); 40];
    let _ = set.poll(&mut ready).unwrap();
    let e = set.poll(&mut ready[..39]).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(matches!(set.poll(&mut []), Err(Error::InvalidArgument(_))));
    if provider() == "sockets" {
        // Its explicit adds are marked seen (see above).
        return;
    }
    for c in &counters {
        c.add(1).unwrap();
    }
    assert_eq!(set.poll(&mut ready).unwrap(), 40, "every change, at once");
    assert_eq!(set.poll(&mut ready).unwrap(), 0, "reported once");
}

/// Thousands of members in a poll set, a trywait and a wait set: their
/// progress locks are held without a stack frame each (a spawned thread's
/// 2 MiB stack overflowed at a few thousand).
#[test]
fn thousands_of_counters_are_polled_and_trywaited_on_a_small_stack() {
    if !has_counters() {
        return;
    }
    const MANY: usize = 5_000;
    let (fabric, domain, _) = fabric_domain();
    let set = PollSet::open(&domain).unwrap();
    let mut counters = Vec::new();
    for i in 0..MANY {
        // tcp 1.17 opens descriptors even for these: stop while the tests
        // running beside this one in the process still have a quarter of
        // the process's limit.
        if i % 100 == 0 && fds_left() < fd_limit() / 4 {
            println!("{i} counters of provider {}: leaving the rest of the descriptors to the other tests", provider());
            break;
        }
        match Counter::open(&domain, &CntrAttr::new().wait(WaitObj::None)) {
            Ok(c) => counters.push(c),
            // tcp 1.17 opens descriptors even for these: out of them
            // (EMFILE; EBADF under valgrind, which keeps some for itself).
            Err(e @ Error::Call { .. }) if i > 500 => {
                println!("counter {i} of provider {}: {e}", provider());
                break;
            }
            Err(e) => panic!("counter {i}: {e}"),
        }
    }
    for c in &counters {
        set.add(c).unwrap();
    }
    let waitable: Vec<Counter> = (0..64)
        .filter_map(|_| Counter::open(&domain, &CntrAttr::new()).ok())
        .filter(blocks)
        .collect();
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut ready = vec![Fid::default(); counters.len()];
            set.poll(&mut ready)
                .expect("fi_poll over thousands of counters");
            if waitable.len() > 16 {
                let queues: Vec<&dyn Waitable> =
                    waitable.iter().map(|c| c as &dyn Waitable).collect();
                let _ = trywait(&fabric, &queues).expect("fi_trywait over many counters");
            }
        })
        .join()
        .expect("the polling thread did not overflow its stack")
    });
    assert!(counters.len() > 500, "{} counters", counters.len());
}

/// Default counters of one domain all get the wait object the first got,
/// or an error: tcp from 1.18 refuses `FI_WAIT_FD` past about 500 per
/// domain, which is reported, not answered with a counter that cannot
/// block.
#[test]
fn default_counters_keep_their_wait_object_or_fail() {
    if !has_counters() {
        return;
    }
    let (_f, domain, _) = fabric_domain();
    let first = counter(&domain);
    let want = first.wait_obj();
    let mut counters = vec![first];
    for i in 1..600 {
        match Counter::open(&domain, &CntrAttr::new()) {
            Ok(c) => {
                assert_eq!(c.wait_obj(), want, "counter {i}");
                counters.push(c);
            }
            Err(e) => {
                println!("counter {i} of provider {}: {e}", provider());
                assert!(i > 100, "counter {i}: {e}");
                break;
            }
        }
    }
}

/// A counter bound with flags that name no kind is refused, not bound to
/// nothing.
#[test]
fn counter_flags_of_no_known_kind_are_refused() {
    if !has_counters() {
        return;
    }
    let (fabric, domain, info) = fabric_domain();
    let c = counter(&domain);
    let ep = Endpoint::open(&domain, &info).unwrap();
    for flags in [
        CntrBind::from_bits_retain(1 << 50),
        CntrBind::SEND | CntrBind::from_bits_retain(1 << 63),
    ] {
        let e = ep.bind_cntr(&c, flags).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    }
    drop((ep, fabric));
}

/// sockets keeps 32-bit signed counts: an add that would take the count
/// past `i32::MAX` is refused, and reads never show a sign-extended count.
#[test]
fn sums_past_a_32_bit_count_are_refused_on_sockets() {
    if !has_counters() {
        return;
    }
    let (_f, domain, _) = fabric_domain();
    let c = counter(&domain);
    c.add(i32::MAX as u64).unwrap();
    if provider() == "sockets" {
        let e = c.add(1).unwrap_err();
        assert!(matches!(e, Error::TooLarge { .. }), "{e}");
        assert_eq!(c.read().unwrap(), i32::MAX as u64);
    } else {
        c.add(i32::MAX as u64).unwrap();
        assert_eq!(c.read().unwrap(), 2 * i32::MAX as u64);
    }
}

/// Two threads add to one counter at the same moment, each a value that
/// fits alone but not with the other's: on sockets (32-bit counts) exactly
/// one of them is refused every time. Each add looks at the count before
/// its call; two of them between each other's look and call took the count
/// past `i32::MAX` (where sockets' waits, comparing signed counts, never
/// end).
#[test]
fn concurrent_adds_never_take_a_32_bit_count_past_its_limit() {
    if !has_counters() {
        return;
    }
    const HALF: u64 = 0x5000_0000;
    const ROUNDS: u32 = 300;
    let (_f, domain, _) = fabric_domain();
    let c = counter(&domain);
    let arrived = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    // Both threads spin until both are there: tighter than a Barrier.
    let meet = |arrived: &std::sync::atomic::AtomicU32, round: u32| {
        arrived.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        while arrived.load(std::sync::atomic::Ordering::Acquire) < 2 * round {
            std::hint::spin_loop();
        }
    };
    for round in 1..=ROUNDS {
        c.set(0).unwrap();
        let (other, arrived2) = (c.clone(), arrived.clone());
        let t = std::thread::spawn(move || {
            meet(&arrived2, round);
            other.add(HALF)
        });
        meet(&arrived, round);
        let mine = c.add(HALF);
        let theirs = t.join().unwrap();
        let count = c.read().unwrap();
        if provider() == "sockets" {
            let refused = [&mine, &theirs]
                .iter()
                .filter(|r| matches!(r, Err(Error::TooLarge { .. })))
                .count();
            assert!(
                refused == 1 && (mine.is_ok() || theirs.is_ok()) && count == HALF,
                "round {round}: {mine:?} and {theirs:?}, the count reads {count:#x}"
            );
        } else {
            assert!(
                mine.is_ok() && theirs.is_ok() && count == 2 * HALF,
                "round {round}"
            );
        }
    }
}

/// 10,000 adds by another thread; the main thread waits for each value in
/// turn. None may be lost and nothing may hang.
#[test]
fn ten_thousand_adds_waited_for_one_by_one_none_lost() {
    if !has_counters() {
        return;
    }
    const N: u64 = 10_000;
    let (_f, domain, _) = fabric_domain();
    let c = counter(&domain);
    if !blocks(&c) {
        return skip("its counters have no wait object");
    }
    let adder = c.clone();
    let t = std::thread::spawn(move || {
        for _ in 0..N {
            adder.add(1).unwrap();
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    for target in 1..=N {
        let left = deadline.saturating_duration_since(Instant::now());
        c.wait(target, Some(left))
            .unwrap_or_else(|e| panic!("waiting for {target}: {e} (a lost wake-up)"));
    }
    t.join().unwrap();
    assert_eq!(c.read().unwrap(), N);
}

#[test]
#[cfg(feature = "tokio")]
fn ten_thousand_adds_awaited_by_a_tokio_task_none_lost() {
    if !has_counters() {
        return;
    }
    use libfabric::tokio::AsyncCounter;
    const N: u64 = 10_000;
    let (_f, domain, _) = fabric_domain();
    let c = counter(&domain);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let ac = match AsyncCounter::new(c.clone()) {
            Ok(ac) => ac,
            Err(Error::WrongWaitMode { .. }) if !blocks(&c) => {
                return skip("its counters have no wait object");
            }
            Err(e) => panic!("AsyncCounter::new: {e}"),
        };
        assert!(format!("{ac:?}").contains("AsyncCounter"));
        let adder = ac.get_ref().clone();
        let t = std::thread::spawn(move || {
            for _ in 0..N {
                adder.add(1).unwrap();
            }
        });
        let all = async {
            let mut target = 1;
            while target <= N {
                let now = ac.wait_for(target).await.expect("wait_for");
                assert!(now >= target);
                target = now + 1;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), all)
            .await
            .expect("10,000 adds awaited within 60 s (a lost wake-up?)");
        t.join().unwrap();
        // Cancel safe: a wait dropped half-way leaves the counter as it was.
        let pending = tokio::time::timeout(Duration::from_millis(50), ac.wait_for(N + 1)).await;
        assert!(pending.is_err(), "nothing reaches N + 1");
        ac.get_ref().add(1).unwrap();
        assert_eq!(ac.wait_for(N + 1).await.unwrap(), N + 1);
        // An error count change ends the wait.
        let errs = ac.get_ref().clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            errs.add_err(1).unwrap();
        });
        match ac.wait_for(i32::MAX as u64).await {
            Err(Error::CounterError { errors: 1, .. }) => {}
            other => panic!("{other:?}"),
        }
        let c = ac.into_inner();
        assert_eq!(c.read().unwrap(), N + 1);
    });
}

/// Polls `fut` to its end on this thread, outside any tokio runtime (an
/// executor of another kind), parking between wake-ups.
#[cfg(feature = "tokio")]
fn block_on_outside_tokio<F: std::future::Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    assert!(tokio::runtime::Handle::try_current().is_err());
    let waker = std::task::Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        if let std::task::Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        assert!(Instant::now() < end, "the future did not end within 30 s");
        std::thread::park_timeout(Duration::from_millis(100));
    }
}

#[test]
#[cfg(feature = "tokio")]
fn an_async_counter_wait_polled_outside_its_runtime_waits_or_errs() {
    if !has_counters() {
        return;
    }
    use libfabric::tokio::AsyncCounter;
    let (_f, domain, _) = fabric_domain();
    let c = counter(&domain);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ac = match rt.block_on(async { AsyncCounter::new(c.clone()) }) {
        Ok(ac) => ac,
        Err(Error::WrongWaitMode { .. }) if !blocks(&c) => {
            return skip("its counters have no wait object");
        }
        Err(e) => panic!("AsyncCounter::new: {e}"),
    };
    // Its runtime alive but not running this future: the wait runs on
    // that runtime's blocking pool (it panicked, outside a runtime).
    let adder = c.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        adder.add(2).unwrap();
    });
    assert!(block_on_outside_tokio(ac.wait_for(2)).unwrap() >= 2);
    t.join().unwrap();
    // Its runtime gone: a typed error, no panic.
    drop(rt);
    match block_on_outside_tokio(ac.wait_for(3)) {
        Err(Error::State {
            call: "AsyncCounter::wait_for",
            ..
        }) => {}
        other => panic!("a wait after its runtime shut down: {other:?}"),
    }
    // The count is read before any wait: a reached threshold needs none.
    assert_eq!(block_on_outside_tokio(ac.wait_for(1)).unwrap(), 2);
}

#[test]
fn counter_reads_while_endpoints_bound_to_it_are_enabled_and_closed() {
    if !has_counters() {
        return;
    }
    // The progress lock keeps reads and waits off endpoints being enabled
    // or closed (rxm, rxd and shm crashed otherwise).
    let (fabric, domain, info) = fabric_domain();
    let c = counter(&domain);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut reads = 0u64;
            loop {
                c.read().unwrap();
                if blocks(&c) {
                    match c.wait(u64::MAX / 2, Some(Duration::from_millis(1))) {
                        Err(
                            Error::TimedOut { .. } | Error::State { .. } | Error::TooLarge { .. },
                        ) => {}
                        other => panic!("{other:?}"),
                    }
                }
                reads += 1;
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break reads;
                }
            }
        });
        for _ in 0..20 {
            let b = bound_endpoint(&fabric, &domain, &info, &c, true);
            drop(b);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().expect("the reader") > 0);
    });
}

#[test]
fn waits_on_a_counter_after_its_endpoint_closed_are_refused_where_unsafe() {
    if !has_counters() {
        return;
    }
    let (fabric, domain, info) = fabric_domain();
    let c = counter(&domain);
    let b = bound_endpoint(&fabric, &domain, &info, &c, true);
    drop(b);
    if !blocks(&c) {
        return skip("its counters have no wait object");
    }
    let p = provider();
    let unsafe_after_close = p.contains("ofi_rxm") || p.contains("ofi_rxd") || p == "shm";
    let waited = c.wait(1, Some(Duration::from_millis(10)));
    let tried = trywait(&fabric, &[&c]);
    if unsafe_after_close {
        assert!(matches!(waited, Err(Error::State { .. })), "{waited:?}");
        assert!(matches!(tried, Err(Error::State { .. })), "{tried:?}");
    } else {
        assert!(matches!(waited, Err(Error::TimedOut { .. })), "{waited:?}");
        let _ = tried.expect("fi_trywait");
    }
    // Reads and adds still work.
    c.add(2).unwrap();
    assert_eq!(c.read().unwrap(), 2);
}

/// Trywait sets made while an endpoint bound to the counter (and to a
/// completion queue) is open look at the counter again on every call: once
/// the endpoint closed, every shape that holds the counter is refused
/// where a wait would call into the endpoint (rxm, rxd, shm), and runs
/// elsewhere; another counter's sets, and the counter's reads, are not
/// refused.
#[test]
fn trywait_sets_made_before_a_close_refuse_the_counter_where_unsafe() {
    if !has_counters() {
        return;
    }
    let (fabric, domain, info) = fabric_domain();
    let c = counter(&domain);
    if !blocks(&c) {
        return skip("its counters have no wait object");
    }
    let other = counter(&domain);
    let eq = fd_eq(&fabric);
    let b = bound_endpoint(&fabric, &domain, &info, &c, true);
    let cq = b._cq.clone();
    let shapes: [(&str, &[&dyn Waitable]); 6] = [
        ("the counter", &[&c]),
        ("an event queue and the counter", &[&eq, &c]),
        ("another counter and the counter", &[&other, &c]),
        ("the counter given twice", &[&c, &eq, &c]),
        ("its completion queue and the counter", &[&cq, &c]),
        (
            "the counter, its queue, the counter",
            &[&c, &cq, &other, &c],
        ),
    ];
    let mut sets = Vec::new();
    for (what, queues) in shapes {
        if queues.iter().any(|q| q.wait_obj() == WaitObj::None) {
            println!("SKIP {what}: its completion queue has no wait object");
            continue;
        }
        let mut set = TryWaitSet::new(&fabric, queues).unwrap();
        // Either answer: the util trywait reports a count that changed.
        let _ = set
            .trywait()
            .unwrap_or_else(|e| panic!("{what}, before the close: {e}"));
        sets.push((what, set));
    }
    assert!(sets.len() >= 4, "{} shapes", sets.len());
    drop(b);
    let p = provider();
    let unsafe_after_close = p.contains("ofi_rxm") || p.contains("ofi_rxd") || p == "shm";
    for _ in 0..2 {
        for (what, set) in &mut sets {
            let tried = set.trywait();
            if unsafe_after_close {
                assert!(
                    matches!(tried, Err(Error::State { .. })),
                    "{what}: {tried:?}"
                );
            } else {
                let _ = tried.unwrap_or_else(|e| panic!("{what}: {e}"));
            }
        }
    }
    let _ = TryWaitSet::new(&fabric, &[&other, &eq])
        .unwrap()
        .trywait()
        .expect("another counter's set");
    c.add(2).unwrap();
    assert_eq!(c.read().unwrap(), 2);
}

#[test]
fn the_default_wait_object_is_what_the_provider_blocks_on() {
    if !has_counters() {
        return;
    }
    let (_f, domain, _) = fabric_domain();
    let c = counter(&domain);
    let expected = match provider().as_str() {
        "shm" => WaitObj::None,
        "sockets" => WaitObj::Unspec,
        _ => WaitObj::Fd,
    };
    assert_eq!(c.wait_obj(), expected);
}

/// Byte counters, where the headers define them: refused unless the
/// provider counts bytes (none that runs here does).
#[cfg(libfabric_cntr_events_bytes)]
#[test]
fn byte_counters_are_refused_where_the_provider_counts_completions() {
    if !has_counters() {
        return;
    }
    use libfabric::cntr::CntrEvents;
    let (_f, domain, _) = fabric_domain();
    let e = Counter::open(&domain, &CntrAttr::new().events(CntrEvents::Bytes)).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let c = Counter::open(&domain, &CntrAttr::new().events(CntrEvents::Completions)).unwrap();
    c.close().unwrap();
}

#[test]
fn a_counter_on_a_wait_set_signals_it() {
    if !has_counters() {
        return;
    }
    use libfabric::wait::WaitSet;
    let (fabric, domain, _) = fabric_domain();
    let set = match WaitSet::open(&fabric, WaitObj::Fd) {
        Ok(set) => set,
        Err(e) => return skip(&format!("no FD wait set ({e})")),
    };
    let c = match Counter::open(&domain, &CntrAttr::new().wait_set(&set)) {
        Ok(c) => c,
        Err(Error::UnsupportedWait { reason, .. }) => {
            let p = provider();
            assert!(
                p.contains("ofi_rxm") || p.contains("ofi_rxd") || p == "shm" || p == "sockets",
                "{reason}"
            );
            return skip(&format!("no counters on a wait set ({reason})"));
        }
        Err(e) => panic!("a counter on a wait set: {e}"),
    };
    assert_eq!(c.wait_obj(), WaitObj::Set);
    let e = c.wait(1, Some(Duration::ZERO)).unwrap_err();
    assert!(
        matches!(e, Error::WrongWaitMode { .. }),
        "wait on the set instead: {e}"
    );
    assert!(!set.wait(Some(Duration::from_millis(20))).unwrap(), "idle");
    c.add(1).unwrap();
    assert!(set.wait(Some(TEN_S)).unwrap(), "signaled by the add");
    // The set holds the counter's progress lock while it waits; the
    // counter keeps the set open.
    let (set, e) = set.close().unwrap_err();
    assert!(matches!(e, Error::InUse { .. }), "{e}");
    c.close().unwrap();
    set.close().expect("closes once its counter is gone");
    // A set of another fabric is refused.
    let (f2, _) = common::fabric();
    let other = WaitSet::open(&f2, WaitObj::Fd).unwrap();
    let e = Counter::open(&domain, &CntrAttr::new().wait_set(&other)).unwrap_err();
    assert!(matches!(e, Error::ForeignObject { .. }), "{e}");
}

#[test]
fn a_provider_without_counters_says_so_with_a_typed_error() {
    let (_f, domain, _) = fabric_domain();
    let opened = Counter::open(&domain, &CntrAttr::new());
    if provider() == "verbs" {
        let e = opened.expect_err("verbs has no counters");
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
        assert!(e.to_string().contains("ofi_rxm"), "{e}");
    } else {
        opened.unwrap_or_else(|e| panic!("provider {} has counters: {e}", provider()));
    }
}
