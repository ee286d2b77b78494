//! Every way a connection request can end (dropped, rejected, accepted,
//! refused for bad input, unwound by a panic, dropped inside its event, or
//! left by a blocking read) frees its `fi_info` once and gives its hold on
//! the event queue and passive endpoint back once: both close afterwards.
#[macro_use]
mod common;

use common::*;
use libfabric::cq::{CqAttr, Msg};
use libfabric::ep::CqBind;
use libfabric::eq::{EqRead, Event, EventBuf};
use libfabric::{CompletionQueue, Domain, Endpoint, Errno, Error, EventQueue, Fabric};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

fn request(server_eq: &EventQueue, client_eq: &EventQueue) -> libfabric::ConnRequest {
    match next_event(server_eq, &[client_eq], Duration::from_secs(10)) {
        Ev::ConnReq { request, .. } => request,
        other => panic!("expected FI_CONNREQ, got {other:?}"),
    }
}

fn expect_refused(client_eq: &EventQueue, server_eq: &EventQueue) {
    match next_event(client_eq, &[server_eq], Duration::from_secs(10)) {
        Ev::Error { err, .. } => assert_eq!(err, Errno::CONNREFUSED),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// Runs `f` on a fresh listener with one connecting client and checks
/// afterwards that the queue and the passive endpoint close.
fn scenario(name: &str, f: impl FnOnce(&Fabric, &EventQueue, &EventQueue, libfabric::ConnRequest)) {
    let (fabric, domain, _) = fabric_domain();
    let (pep, server_eq, _) = listener(&fabric);
    let client_eq = fd_eq(&fabric);
    let client = connecting(&domain, &client_eq, &pep, b"x");
    let req = request(&server_eq, &client_eq);
    // While the request lives, the queue cannot close.
    match server_eq.clone().close() {
        Err((_, Error::InUse { .. })) => {}
        other => panic!("{name}: eq closed while a request holds it: {other:?}"),
    }
    f(&fabric, &server_eq, &client_eq, req);
    drop(client);
    pep.close()
        .unwrap_or_else(|(_, e)| panic!("{name}: pep close: {e}"));
    server_eq
        .close()
        .unwrap_or_else(|(_, e)| panic!("{name}: eq close (leaked source?): {e}"));
    client_eq
        .close()
        .unwrap_or_else(|(_, e)| panic!("{name}: client eq: {e}"));
    domain
        .close()
        .unwrap_or_else(|(_, e)| panic!("{name}: domain: {e}"));
    fabric
        .close()
        .unwrap_or_else(|(_, e)| panic!("{name}: fabric: {e}"));
}

#[test]
fn dropped() {
    skip_unless_msg!();
    scenario("dropped", |_, s, c, req| {
        drop(req);
        expect_refused(c, s);
    });
}

#[test]
fn rejected() {
    skip_unless_msg!();
    scenario("rejected", |_, s, c, req| {
        req.reject(b"no").unwrap();
        expect_refused(c, s);
    });
}

#[test]
fn rejected_too_large_then_dropped_then_again() {
    skip_unless_msg!();
    scenario("too large", |_, s, c, req| {
        let big = vec![0u8; 1 << 20];
        let (back, e) = req.reject(&big).unwrap_err();
        assert!(matches!(e, Error::TooLarge { .. }), "{e:?}");
        let back = back.expect("handed back");
        let (back, _) = back.reject(&big).unwrap_err();
        drop(back.unwrap());
        expect_refused(c, s);
    });
}

#[test]
fn foreign_domain_then_dropped() {
    skip_unless_msg!();
    scenario("foreign", |_, s, c, req| {
        let (other_fabric, other_domain, _) = fabric_domain();
        let (req, e) = match Endpoint::from_request(&other_domain, req) {
            Err(x) => x,
            Ok(_) => panic!("foreign fabric accepted"),
        };
        assert!(matches!(e, Error::ForeignObject { .. }), "{e:?}");
        let (req, _) = match Endpoint::from_request(&other_domain, req) {
            Err(x) => x,
            Ok(_) => panic!("foreign fabric accepted"),
        };
        drop(req);
        expect_refused(c, s);
        other_domain.close().unwrap();
        other_fabric.close().unwrap();
    });
}

#[test]
fn accepted_endpoint_dropped_unaccepted() {
    skip_unless_msg!();
    scenario("from_request dropped", |fabric, _s, _c, req| {
        let sdomain = Domain::open(fabric, req.info()).unwrap();
        let ep = Endpoint::from_request(&sdomain, req).unwrap();
        drop(ep);
        sdomain.close().unwrap();
    });
}

#[test]
fn accepted_and_connected() {
    skip_unless_msg!();
    scenario("accepted", |fabric, s, c, req| {
        let sdomain = Domain::open(fabric, req.info()).unwrap();
        let scq = CompletionQueue::<Msg>::open(&sdomain, &CqAttr::new()).unwrap();
        let ep = Endpoint::from_request(&sdomain, req).unwrap();
        let seq = fd_eq(fabric);
        ep.bind_eq(&seq).unwrap();
        ep.bind_cq(&scq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
        ep.enable().unwrap();
        ep.accept(b"ok").unwrap();
        match next_event(c, &[&seq, s], Duration::from_secs(10)) {
            Ev::Connected { data } => assert_eq!(data, b"ok"),
            other => panic!("{other:?}"),
        }
        match next_event(&seq, &[c, s], Duration::from_secs(10)) {
            Ev::Connected { .. } => {}
            other => panic!("{other:?}"),
        }
        ep.close().unwrap();
        scq.close().unwrap();
        seq.close().unwrap();
        sdomain.close().unwrap();
    });
}

#[test]
fn panic_while_owning() {
    skip_unless_msg!();
    scenario("panic", |_, s, c, req| {
        let r = catch_unwind(AssertUnwindSafe(move || {
            let req = req;
            let _ = req.info().domain_name();
            panic!("provoked");
        }));
        assert!(r.is_err());
        expect_refused(c, s);
    });
}

#[test]
fn panic_while_owning_inside_an_option_in_a_vec() {
    skip_unless_msg!();
    scenario("vec", |_, s, c, req| {
        let mut v = vec![Some(req)];
        let r = catch_unwind(AssertUnwindSafe(move || {
            let taken = v[0].take();
            v.push(taken);
            panic!("provoked");
        }));
        assert!(r.is_err());
        expect_refused(c, s);
    });
}

/// The read's result dropped whole, never taken apart.
#[test]
fn event_dropped_whole() {
    skip_unless_msg!();
    let (fabric, domain, _) = fabric_domain();
    let (pep, server_eq, _) = listener(&fabric);
    let client_eq = fd_eq(&fabric);
    let mut clients = Vec::new();
    for i in 0..4 {
        clients.push(connecting(&domain, &client_eq, &pep, b"x"));
        let mut buf = EventBuf::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let _ = client_eq.peek(&mut EventBuf::new());
            let read = if i % 2 == 0 {
                server_eq.read(&mut buf).unwrap()
            } else {
                server_eq
                    .sread(&mut buf, Some(Duration::from_millis(5)))
                    .unwrap()
            };
            if let EqRead::Event(Event::ConnReq(_)) = &read {
                drop(read);
                break;
            }
            assert!(std::time::Instant::now() < deadline);
        }
        expect_refused(&client_eq, &server_eq);
    }
    drop(clients);
    pep.close().unwrap();
    server_eq.close().expect("no request leaked its source");
}

#[test]
fn sread_timeouts() {
    let (fabric, _) = fabric();
    let eq = fd_eq(&fabric);
    let mut buf = EventBuf::new();
    for _ in 0..3 {
        assert!(matches!(
            eq.sread(&mut buf, Some(Duration::from_millis(5))).unwrap(),
            EqRead::TimedOut
        ));
        assert!(matches!(
            eq.speek(&mut buf, Some(Duration::from_millis(5))).unwrap(),
            EqRead::TimedOut
        ));
        assert!(matches!(
            eq.sread(&mut buf, Some(Duration::ZERO)).unwrap(),
            EqRead::TimedOut
        ));
    }
    eq.write_notify(libfabric::eq::Fid::default(), 7, 9)
        .unwrap();
    match eq.speek(&mut buf, Some(Duration::from_millis(5))).unwrap() {
        EqRead::Event(Event::Notify(e)) => assert_eq!((e.context, e.data), (7, 9)),
        other => panic!("{other:?}"),
    }
    match eq.sread(&mut buf, None).unwrap() {
        EqRead::Event(Event::Notify(e)) => assert_eq!((e.context, e.data), (7, 9)),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        eq.sread(&mut buf, Some(Duration::from_millis(1))).unwrap(),
        EqRead::TimedOut
    ));
}

/// Error entries through sread / speek (a rejection on the client side).
#[test]
fn sread_error_entries() {
    skip_unless_msg!();
    let (fabric, domain, _) = fabric_domain();
    let (pep, server_eq, _) = listener(&fabric);
    let client_eq = fd_eq(&fabric);
    let client = connecting(&domain, &client_eq, &pep, b"x");
    request(&server_eq, &client_eq).reject(b"why").unwrap();
    let mut buf = EventBuf::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let _ = server_eq.peek(&mut EventBuf::new());
        match client_eq
            .speek(&mut buf, Some(Duration::from_millis(5)))
            .unwrap()
        {
            EqRead::ErrorPending => break,
            EqRead::TimedOut => {}
            other => panic!("{other:?}"),
        }
        assert!(std::time::Instant::now() < deadline);
    }
    match client_eq.sread(&mut buf, None).unwrap() {
        EqRead::Error(e) => {
            assert_eq!(e.err, Errno::CONNREFUSED);
            assert_eq!(e.err_data(), b"why");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        client_eq
            .sread(&mut buf, Some(Duration::from_millis(5)))
            .unwrap(),
        EqRead::TimedOut
    ));
    drop(client);
    pep.close().unwrap();
    server_eq.close().unwrap();
}
