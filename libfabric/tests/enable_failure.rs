//! An endpoint whose `fi_enable` fails after its completion queue was
//! given to the provider: rxm and shm keep running it in the queue's
//! progress, and a read of the queue crashed until it was closed. A binary
//! of its own: it runs the process out of file descriptors.
#![cfg_attr(libfabric_2, allow(deprecated))]
#[macro_use]
mod common;

use common::*;
use libfabric::av::AvType;
use libfabric::cq::{CqAttr, Tagged, TaggedEntry};
use libfabric::ep::CqBind;
use libfabric::info::EpType;
use libfabric::{AddressVector, CompletionQueue, Endpoint, Error};

#[test]
fn a_queue_whose_endpoint_failed_to_enable_is_not_read_until_it_is_enabled_or_closed() {
    let (fabric, domain, info) = fabric_domain();
    let cq = CompletionQueue::<Tagged>::open(&domain, &CqAttr::new()).unwrap();
    let ep = Endpoint::open(&domain, &info).unwrap();
    if info.ep_type() == EpType::Msg {
        ep.bind_eq(&fd_eq(&fabric)).unwrap();
    } else {
        ep.bind_av(&AddressVector::open(&domain, AvType::Table, 4).unwrap())
            .unwrap();
    }
    ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV).unwrap();
    let mut files = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        files.push(f);
    }
    let enabled = ep.enable();
    drop(files);
    let mut entries: [TaggedEntry; 4] = Default::default();
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
    if walks_endpoints {
        assert!(
            matches!(read, Err(Error::State { .. })),
            "a read that would run the endpoint is refused: {read:?}"
        );
    } else {
        read.expect("reads work: the provider does not run the endpoint");
    }
    // With descriptors again, enable succeeds and the queue is read.
    match ep.enable() {
        Ok(()) => {
            assert!(cq.read(&mut entries).is_ok(), "reads once enabled");
            println!("provider {p}: enabled on the second try");
        }
        Err(e) => println!("provider {p}: the second enable failed too: {e}"),
    }
    drop(ep);
    assert!(
        cq.read(&mut entries).is_ok(),
        "reads once the endpoint is closed"
    );
}
