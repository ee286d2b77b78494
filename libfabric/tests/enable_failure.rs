//! An endpoint whose `fi_enable` fails after its completion queue was
//! given to the provider: rxm and shm keep running it in the queue's
//! progress, and a read of the queue crashed until it was closed. A binary
//! of its own: it runs the process out of file descriptors.
#![cfg_attr(libfabric_2, allow(deprecated))]
#[macro_use]
mod common;

use common::*;
use libfabric::av::AvType;
use libfabric::cq::{CqAttr, Msg, MsgEntry};
use libfabric::ep::CqBind;
use libfabric::info::EpType;
use libfabric::info::{getinfo, Threading};
use libfabric::wait::{WaitObj, Waitable};
use libfabric::{
    AddressVector, CntrAttr, CntrBind, CompletionQueue, Counter, Domain, Endpoint, Error, Fabric,
    Info, ThreadDomain, ThreadModel,
};

#[test]
fn a_queue_whose_endpoint_failed_to_enable_is_not_read_until_it_is_closed() {
    let (fabric, domain, info) = fabric_domain();
    run(&fabric, &domain, &info, CqAttr::new());
    // With a wait fd: rxd's bind of such a queue fails without descriptors,
    // and it keeps the queue all the same.
    match CompletionQueue::<Msg>::open(&domain, &CqAttr::new().wait(WaitObj::Fd)) {
        Ok(_) => run(&fabric, &domain, &info, CqAttr::new().wait(WaitObj::Fd)),
        Err(e) => println!("provider {}: no FI_WAIT_FD queues ({e})", provider()),
    }
    // A counter bound to such an endpoint: the same (in this test, not one
    // of its own: the two would run each other out of descriptors).
    counter(&fabric, &domain, &info);
    // Under a serialized threading model the reads take no lock: the
    // refusal reaches them through the queue's gate.
    serialized();
}

/// `run` on a domain of the `FI_THREAD_DOMAIN` model, where the provider
/// gives one (a skip line where it does not, or where the model is
/// refused).
fn serialized() {
    let hints = provider_hints().threading(Threading::Domain);
    let info = match getinfo(&hints) {
        Ok(list) => list.into_iter().next().expect("a non-empty list"),
        Err(e) => {
            return println!(
                "SKIP serialized: provider {}: no FI_THREAD_DOMAIN fi_info ({e})",
                provider()
            )
        }
    };
    let fabric = Fabric::open(&info).unwrap();
    match Domain::<ThreadDomain>::open_model(&fabric, &info) {
        Ok(domain) => run(&fabric, &domain, &info, CqAttr::new()),
        Err(e @ Error::Unsupported { .. }) if provider() == "shm" => {
            println!("SKIP serialized: provider shm refuses serialized models ({e})")
        }
        Err(e) => panic!("provider {}: FI_THREAD_DOMAIN domain: {e}", provider()),
    }
}

fn counter(fabric: &Fabric, domain: &Domain, info: &Info) {
    let c = match Counter::open(domain, &CntrAttr::new()) {
        Ok(c) => c,
        Err(e @ Error::Unsupported { .. }) if provider() == "verbs" => {
            return println!("provider verbs: no counters ({e})");
        }
        Err(e) => panic!("fi_cntr_open: {e}"),
    };
    let cq = CompletionQueue::<Msg>::open(domain, &CqAttr::new()).unwrap();
    let ep = Endpoint::open(domain, info).unwrap();
    let _av = if info.ep_type() == EpType::Msg {
        ep.bind_eq(&fd_eq(fabric)).unwrap();
        None
    } else {
        let av = AddressVector::open(domain, AvType::Table, 4).unwrap();
        ep.bind_av(&av).unwrap();
        Some(av)
    };
    ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
    ep.bind_cntr(&c, CntrBind::SEND | CntrBind::RECV).unwrap();
    let mut files = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        files.push(f);
    }
    let enabled = ep.enable();
    drop(files);
    let p = provider();
    let walks_endpoints = p.contains("ofi_rxm") || p.contains("ofi_rxd") || p == "shm";
    let Err(e) = enabled else {
        println!("provider {p}: enable opened no descriptor, and succeeded");
        c.read().expect("reads of an enabled endpoint's counter");
        return;
    };
    println!("provider {p}: enable with a counter failed without descriptors: {e}");
    let can_block = c.wait_obj() != WaitObj::None;
    if !walks_endpoints {
        c.read()
            .expect("reads work: the provider does not run the endpoint");
    } else {
        assert!(
            matches!(c.read(), Err(Error::State { .. })),
            "a read that would run the endpoint"
        );
        assert!(matches!(c.read_err(), Err(Error::State { .. })));
        if can_block {
            let w = c.wait(1, Some(std::time::Duration::from_millis(10)));
            assert!(matches!(w, Err(Error::State { .. })), "{w:?}");
        }
        let set = libfabric::poll::PollSet::open(domain).unwrap();
        set.add(&c).unwrap();
        let mut ready = [libfabric::eq::Fid::default(); 2];
        assert!(matches!(set.poll(&mut ready), Err(Error::State { .. })));
        set.remove(&c).unwrap();
    }
    drop(ep);
    assert_eq!(c.read().expect("reads once the endpoint is closed"), 0);
    c.add(1).unwrap();
    if walks_endpoints && can_block {
        // Its wait object may still call into the closed endpoint.
        let w = c.wait(1, Some(std::time::Duration::from_millis(10)));
        assert!(matches!(w, Err(Error::State { .. })), "{w:?}");
    }
}

fn run<T: ThreadModel>(fabric: &Fabric, domain: &Domain<T>, info: &Info, attr: CqAttr) {
    let cq = CompletionQueue::<Msg, T>::open(domain, &attr).unwrap();
    let ep = Endpoint::<T>::open(domain, info).unwrap();
    let av = if info.ep_type() == EpType::Msg {
        ep.bind_eq(&fd_eq(fabric)).unwrap();
        None
    } else {
        let av = AddressVector::open(domain, AvType::Table, 4).unwrap();
        ep.bind_av(&av).unwrap();
        Some(av)
    };
    ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
    let mut files = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        files.push(f);
    }
    let enabled = ep.enable();
    drop(files);
    let mut entries: [MsgEntry; 4] = Default::default();
    let p = provider();
    let walks_endpoints = p.contains("ofi_rxm") || p.contains("ofi_rxd") || p == "shm";
    let Err(e) = enabled else {
        println!("provider {p}: enable opened no descriptor, and succeeded");
        assert!(
            cq.read(&mut entries).is_ok(),
            "reads of an enabled endpoint's queue"
        );
        return;
    };
    println!("provider {p}: enable failed without descriptors: {e}");
    let read = cq.read(&mut entries).map(|r| r.count());
    if !walks_endpoints {
        read.expect("reads work: the provider does not run the endpoint");
    } else {
        assert!(
            refused_as(&read, "fi_cq_read"),
            "a read that would run the endpoint is refused: {read:?}"
        );
        // Every read is refused before its call, and names its call.
        let mut addrs = [libfabric::cq::Addr::UNSPEC; 4];
        let from = cq.read_from(&mut entries, &mut addrs).map(|r| r.count());
        assert!(refused_as(&from, "fi_cq_readfrom"), "{from:?}");
        if cq.wait_obj() != WaitObj::None {
            let waited = cq
                .sread(&mut entries, Some(std::time::Duration::from_millis(10)))
                .map(|r| r.count());
            assert!(refused_as(&waited, "fi_cq_sread"), "{waited:?}");
        }
        // Final: nothing more is bound or enabled, and the vector takes no
        // insert (shm would map it into the endpoint's missing region).
        assert!(
            matches!(ep.enable(), Err(Error::State { .. })),
            "a second enable"
        );
        if let Some(av) = &av {
            assert!(
                matches!(av.insert(&ep.name().unwrap()), Err(Error::State { .. })),
                "an insert while the endpoint is open"
            );
        }
    }
    let name = ep.name().unwrap();
    drop(ep);
    assert!(
        cq.read(&mut entries).is_ok(),
        "reads once the endpoint is closed"
    );
    if let Some(av) = &av {
        match av.insert(&name) {
            Ok(_) => {}
            // shm: the enable may have got as far as the endpoint's region,
            // which its close unmapped while the provider keeps its name
            // for peers of this process: the name of a closed endpoint is
            // refused.
            Err(Error::State { call, .. }) if p == "shm" => assert_eq!(call, "fi_av_insert"),
            Err(e) => panic!("inserts once the endpoint is closed: {e}"),
        }
    }
}

/// Whether `result` is the refusal of a call named `name`.
fn refused_as<T>(result: &libfabric::Result<T>, name: &str) -> bool {
    matches!(result, Err(Error::State { call, .. }) if *call == name)
}
