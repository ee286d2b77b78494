//! The checks of libfabric's own cq_test (fabtests), written against the
//! safe API, plus signal, threshold and wait-mode refusals.
// Wait sets, poll sets and FI_WAIT_MUTEX_COND are deprecated by libfabric
// 2.x; their rules are still tested.
#![cfg_attr(libfabric_2, allow(deprecated))]
#[macro_use]
mod common;

use common::*;
use libfabric::cq::{Context, CqAttr, CqRead, Msg, MsgEntry, Tagged, TaggedEntry};
use libfabric::eq::ErrDataBuf;
use libfabric::wait::WaitObj;
use libfabric::{CompletionQueue, Error};
use std::time::{Duration, Instant};

#[test]
fn open_and_close_many_sizes() {
    let (_f, domain, _) = fabric_domain();
    for size in [0usize, 1, 2, 64, 1024, 65536] {
        match CompletionQueue::<Msg>::open(&domain, &CqAttr::new().size(size)) {
            Ok(cq) => cq.close().unwrap(),
            // fabtests accept -FI_EINVAL for very large sizes.
            Err(e) if size >= 65536 && e.errno() == Some(libfabric::Errno::INVAL) => {}
            Err(e) => panic!("size {size}: {e}"),
        }
    }
}

#[test]
fn many_queues_open_at_once() {
    let (_f, domain, _) = fabric_domain();
    let cqs: Vec<_> = (0..64)
        .map(|i| {
            CompletionQueue::<Context>::open(&domain, &CqAttr::new().size(16))
                .unwrap_or_else(|e| panic!("CQ {i}: {e}"))
        })
        .collect();
    for cq in cqs {
        cq.close().unwrap();
    }
}

#[test]
fn signal_wakes_sread_and_is_told_apart_from_a_timeout() {
    let (_f, domain, _) = fabric_domain();
    let Some(cq) = fd_cq::<Msg>(&domain) else {
        return;
    };
    let mut buf: [MsgEntry; 4] = Default::default();
    // A timeout with no signal.
    assert!(matches!(
        cq.sread(&mut buf, Some(Duration::from_millis(50))).unwrap(),
        CqRead::TimedOut
    ));
    // A signal from another thread while blocked for 30 s: woken by it,
    // not at the timeout (which would also report the signal; the bound is
    // wide, for a loaded machine or valgrind).
    let signaller = cq.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        signaller.signal().unwrap();
    });
    let start = Instant::now();
    let r = cq.sread(&mut buf, Some(Duration::from_secs(30))).unwrap();
    let took = start.elapsed();
    t.join().unwrap();
    assert!(matches!(r, CqRead::Signaled), "{r:?}");
    drop(r);
    assert!(took < Duration::from_secs(15), "woken after {took:?}");
    // A signal sent before the call makes it return at once, as a signal.
    cq.signal().unwrap();
    let start = Instant::now();
    let r = cq.sread(&mut buf, Some(Duration::from_secs(30))).unwrap();
    assert!(matches!(r, CqRead::Signaled), "{r:?}");
    assert!(start.elapsed() < Duration::from_secs(15));
}

#[test]
fn every_format_reads_empty_and_readerr_is_none() {
    let (_f, domain, _) = fabric_domain();
    let msg = CompletionQueue::<Msg>::open(&domain, &CqAttr::new()).unwrap();
    assert!(matches!(
        msg.read(&mut [MsgEntry::default(), MsgEntry::default()])
            .unwrap(),
        CqRead::Empty
    ));
    match CompletionQueue::<Tagged>::open(&domain, &CqAttr::new()) {
        Ok(tagged) => assert!(matches!(
            tagged.read(&mut [TaggedEntry::default()]).unwrap(),
            CqRead::Empty
        )),
        // verbs MSG endpoints have no tagged format: a typed refusal.
        Err(e) => {
            assert!(!is_tcp(), "{e}");
            assert_eq!(e.errno(), Some(libfabric::Errno::NOSYS), "{e}");
        }
    }
    let mut errbuf = ErrDataBuf::new();
    assert!(msg.read_err(&mut errbuf).unwrap().is_none());
}

#[test]
fn sread_needs_a_wait_object_and_threshold_needs_the_condition() {
    let (_f, domain, _) = fabric_domain();
    let cq = CompletionQueue::<Msg>::open(&domain, &CqAttr::new().wait(WaitObj::None)).unwrap();
    let mut buf: [MsgEntry; 1] = Default::default();
    assert!(matches!(
        cq.sread(&mut buf, Some(Duration::from_millis(1))),
        Err(Error::WrongWaitMode {
            actual: WaitObj::None,
            ..
        })
    ));
    let Some(cq) = fd_cq::<Msg>(&domain) else {
        return;
    };
    assert!(matches!(
        cq.sread_threshold(&mut buf, 2, Some(Duration::from_millis(1))),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn threshold_sread_returns_when_enough_completions_are_queued() {
    skip_unless_msg!();
    let pair = connect_pair::<Msg>(CqAttr::new().wait(WaitObj::Fd).threshold_condition(true));
    for _ in 0..2 {
        pair.server.recv(pair.server_pool.take().unwrap()).unwrap();
    }
    for _ in 0..2 {
        pair.client
            .send(pair.client_pool.take().unwrap(), 8)
            .unwrap();
    }
    let mut buf: [MsgEntry; 4] = Default::default();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = 0;
    while got < 2 {
        let _ = pair.client_cq.read(&mut [MsgEntry::default()]);
        match pair
            .server_cq
            .sread_threshold(&mut buf, 2, Some(Duration::from_millis(50)))
            .unwrap()
        {
            CqRead::Completions(c) => got += c.len(),
            CqRead::Error(e) => panic!("error completion: {e:?}"),
            _ => {}
        }
        assert!(Instant::now() < deadline);
    }
    assert_eq!(got, 2);
}

#[test]
fn unsupported_wait_objects_are_typed_errors() {
    let (_f, domain, _) = fabric_domain();
    for obj in [WaitObj::MutexCond, WaitObj::Yield] {
        match CompletionQueue::<Msg>::open(&domain, &CqAttr::new().wait(obj)) {
            Err(Error::UnsupportedWait { requested, .. }) => assert_eq!(requested, obj),
            // A provider that gives it must also block on it.
            Ok(cq) => assert!(matches!(
                cq.sread(&mut [MsgEntry::default()], Some(Duration::from_millis(10)))
                    .unwrap(),
                CqRead::TimedOut
            )),
            Err(other) => panic!("{obj:?}: {other}"),
        }
    }
}
