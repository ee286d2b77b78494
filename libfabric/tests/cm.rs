//! Connection management over the real provider: CONNREQ with connection
//! data of 0, 1 and the maximum length, accept data seen in the active side's
//! CONNECTED, reject seen as an error entry, shutdown seen on both sides, and
//! event fids resolved to the endpoints they name.
#[macro_use]
mod common;

use common::*;
use libfabric::cq::{CqAttr, Msg};
use libfabric::eq::EventSource;
use libfabric::{Errno, Error};
use std::time::Duration;

fn max_cm_data() -> usize {
    let (fabric, _) = fabric();
    let (pep, _, _) = listener(&fabric);
    pep.cm_data_size().expect("FI_OPT_CM_DATA_SIZE")
}

#[test]
fn connreq_carries_0_1_and_max_bytes_and_accept_data_reaches_the_client() {
    skip_unless_msg!();
    let max = max_cm_data();
    for len in [0usize, 1, max] {
        let req: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let acc: Vec<u8> = (0..len).map(|i| (i % 13) as u8 + 100).collect();
        let pair = connect_pair_with::<Msg>(CqAttr::new(), &req, &acc);
        assert_eq!(
            pair.connected_data, acc,
            "accept data of {len} bytes in CONNECTED"
        );
    }
}

#[test]
fn connection_data_over_the_maximum_is_refused_before_sending() {
    skip_unless_msg!();
    let max = max_cm_data();
    let (fabric, domain, _) = fabric_domain();
    let (pep, _eq, _) = listener(&fabric);
    let eq = fd_eq(&fabric);
    let ep = enabled_client(&domain, &eq, &pep);
    let too_big = vec![0u8; max + 1];
    assert!(matches!(ep.connect(&too_big), Err(Error::TooLarge { .. })));
}

#[test]
fn reject_is_an_error_entry_with_the_reject_data() {
    skip_unless_msg!();
    let (fabric, domain, _) = fabric_domain();
    let (pep, server_eq, _) = listener(&fabric);
    let client_eq = fd_eq(&fabric);
    let _ep = connecting(&domain, &client_eq, &pep, b"let me in");
    let Ev::ConnReq { request, data } =
        next_event(&server_eq, &[&client_eq], Duration::from_secs(10))
    else {
        panic!("expected CONNREQ")
    };
    assert_eq!(data, b"let me in");
    request.reject(b"no").unwrap();
    match next_event(&client_eq, &[&server_eq], Duration::from_secs(10)) {
        Ev::Error { err, data } => {
            assert_eq!(err, Errno::CONNREFUSED);
            if is_tcp() {
                assert_eq!(data, b"no", "reject data reaches the active side");
            }
        }
        other => panic!("expected an error entry, got {other:?}"),
    }
}

#[test]
fn shutdown_is_seen_on_both_sides() {
    skip_unless_msg!();
    let pair = connect_pair::<Msg>(CqAttr::new());
    if !shut_down(&pair.client) {
        return;
    }
    // The peer always hears of it. The server side progresses as its
    // queues are read.
    let mut entries: [libfabric::cq::MsgEntry; 4] = Default::default();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut buf = libfabric::eq::EventBuf::new();
    loop {
        let _ = pair.server_cq.read(&mut entries);
        let _ = pair.client_cq.read(&mut entries);
        if let Some(ev) = own(pair.server_eq.read(&mut buf).unwrap(), &pair.server_eq) {
            assert!(matches!(ev, Ev::Shutdown), "server: {ev:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no FI_SHUTDOWN on the server"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // The side that shut down: the tcp provider reports it there too; verbs
    // (rdma_cm) reports a disconnect only to the peer.
    if is_tcp() {
        let ev = next_event(&pair.client_eq, &[&pair.server_eq], Duration::from_secs(10));
        assert!(matches!(ev, Ev::Shutdown), "client: {ev:?}");
    } else {
        assert!(shut_down(&pair.server));
        let ev = next_event(&pair.client_eq, &[&pair.server_eq], Duration::from_secs(10));
        assert!(
            matches!(ev, Ev::Shutdown),
            "client, after the server's shutdown: {ev:?}"
        );
    }
}

#[test]
fn event_fids_resolve_to_their_endpoints() {
    skip_unless_msg!();
    let (fabric, domain, _) = fabric_domain();
    let (pep, server_eq, _) = listener(&fabric);
    let client_eq = fd_eq(&fabric);
    let ep = connecting(&domain, &client_eq, &pep, &[]);
    let mut buf = libfabric::eq::EventBuf::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let fid = loop {
        match server_eq.read(&mut buf).unwrap() {
            libfabric::eq::EqRead::Event(ev) => break ev.fid().unwrap(),
            _ => {
                let _ = client_eq.peek(&mut libfabric::eq::EventBuf::new());
                assert!(std::time::Instant::now() < deadline);
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    };
    assert_eq!(fid, pep.fid());
    match server_eq.resolve(fid) {
        Some(EventSource::Passive(p)) => assert_eq!(p.fid(), pep.fid()),
        other => panic!("{other:?}"),
    }
    assert!(client_eq.resolve(ep.fid()).is_some());
    assert!(
        server_eq.resolve(ep.fid()).is_none(),
        "not bound to this queue"
    );
}
