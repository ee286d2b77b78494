//! Property tests over every size, length and count the API takes: each
//! either works as documented or is a typed error, never an abort, a
//! wrapped size or an out-of-bounds access (CI also runs these under
//! valgrind, with a small case count: `PROPTEST_CASES`).
#[macro_use]
mod common;

use common::*;
use libfabric::av::AvType;
use libfabric::cq::{Addr, CqAttr, Msg};
use libfabric::eq::{EqAttr, ErrDataBuf, EventBuf, MAX_CM_DATA_CAPACITY};
use libfabric::error::MAX_QUEUE_SIZE;
use libfabric::info::{Caps, EpType};
use libfabric::{
    getinfo, AddressVector, BufferPool, CompletionQueue, Domain, Endpoint, Error, EventQueue,
    Fabric, Hints,
};
use proptest::prelude::*;
use std::sync::OnceLock;

/// Sizes spread over the whole range: small ones, the limits and around
/// them, and huge ones.
fn any_size() -> impl Strategy<Value = usize> {
    prop_oneof![
        0usize..4096,
        Just(MAX_QUEUE_SIZE),
        Just(MAX_QUEUE_SIZE + 1),
        Just(MAX_CM_DATA_CAPACITY),
        Just(MAX_CM_DATA_CAPACITY + 1),
        (1usize << 40)..usize::MAX,
        Just(usize::MAX),
        Just(usize::MAX - 63),
        Just(1usize << 63),
    ]
}

fn domain() -> &'static (Fabric, Domain) {
    static D: OnceLock<(Fabric, Domain)> = OnceLock::new();
    D.get_or_init(|| {
        let (f, d, _) = fabric_domain();
        (f, d)
    })
}

proptest! {
    // Failures are reported, not written next to the sources (which may be
    // read-only, as in the soft-RoCE guest).
    #![proptest_config(ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn event_buffers(n in any_size()) {
        match EventBuf::with_cm_data_capacity(n) {
            Ok(b) => {
                prop_assert!(n <= MAX_CM_DATA_CAPACITY);
                prop_assert_eq!(b.cm_data_capacity(), n);
            }
            Err(Error::TooLarge { given, .. }) => {
                prop_assert!(n > MAX_CM_DATA_CAPACITY);
                prop_assert_eq!(given, n);
            }
            Err(e) => prop_assert!(false, "{n}: {e}"),
        }
    }

    #[test]
    fn error_data_buffers(n in prop_oneof![0usize..(1 << 20), Just(usize::MAX), (1usize << 62)..usize::MAX]) {
        match ErrDataBuf::with_capacity(n) {
            Ok(_) => prop_assert!(n < 1 << 20),
            Err(Error::OutOfMemory { .. }) => prop_assert!(n >= 1 << 20),
            Err(e) => prop_assert!(false, "{n}: {e}"),
        }
    }

    #[test]
    fn queue_and_vector_sizes(n in any_size()) {
        let (fabric, domain) = domain();
        // Only sizes a provider may really allocate are opened.
        let small = n <= 4096;
        let cq = CompletionQueue::<Msg>::open(domain, &CqAttr::new().size(if small || n > MAX_QUEUE_SIZE { n } else { 1 }));
        let eq = EventQueue::open(fabric, &EqAttr::new().size(if small || n > MAX_QUEUE_SIZE { n } else { 1 }));
        let av = AddressVector::open(domain, AvType::Table, if small || n > MAX_QUEUE_SIZE { n } else { 1 });
        if n > MAX_QUEUE_SIZE {
            prop_assert!(matches!(cq, Err(Error::TooLarge { .. })), "{:?}", cq.err());
            prop_assert!(matches!(eq, Err(Error::TooLarge { .. })), "{:?}", eq.err());
            prop_assert!(matches!(av, Err(Error::TooLarge { .. })), "{:?}", av.err());
        } else {
            prop_assert!(cq.is_ok(), "cq {n}: {:?}", cq.err());
            prop_assert!(eq.is_ok(), "eq {n}: {:?}", eq.err());
            if n == 0 {
                prop_assert!(matches!(av, Err(Error::InvalidArgument(_))));
            } else if provider() == "verbs" {
                // verbs' MSG domains have no address vectors.
                prop_assert!(
                    matches!(&av, Err(e) if e.errno() == Some(libfabric::Errno::NOSYS)),
                    "av {n} on verbs: {:?}",
                    av.as_ref().err()
                );
            } else {
                prop_assert!(av.is_ok(), "av {n}: {:?}", av.err());
            }
        }
    }

    #[test]
    fn buffer_pools(count in prop_oneof![0usize..8, Just(usize::MAX), Just(1usize << 33)],
                    size in prop_oneof![0usize..(1 << 16), Just(usize::MAX), Just(usize::MAX - 63), (1usize << 50)..usize::MAX]) {
        let (_, domain) = domain();
        let r = BufferPool::new(domain, count, size);
        let sane = (1..8).contains(&count) && (1..(1 << 16)).contains(&size);
        match r {
            Ok(pool) => {
                prop_assert!(sane, "{count} x {size} accepted");
                prop_assert_eq!(pool.slot_size(), size.next_multiple_of(64));
                let taken: Vec<_> = (0..count).map(|_| pool.take().expect("a slot")).collect();
                prop_assert!(pool.take().is_none());
                for b in &taken {
                    prop_assert_eq!(b.len(), pool.slot_size());
                }
            }
            Err(Error::TooLarge { .. }) | Err(Error::OutOfMemory { .. }) | Err(Error::InvalidArgument(_)) => {
                prop_assert!(!sane, "{count} x {size} refused");
            }
            Err(e) => prop_assert!(false, "{count} x {size}: {e}"),
        }
    }

    #[test]
    fn address_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..64), family in prop_oneof![Just(None), Just(Some(libc::AF_INET as u16)), Just(Some(libc::AF_INET6 as u16)), any::<u16>().prop_map(Some)]) {
        let r = rdm_av();
        let mut bytes = bytes;
        if let (Some(f), true) = (family, bytes.len() >= 2) {
            bytes[..2].copy_from_slice(&f.to_ne_bytes());
        }
        match r.insert(&bytes) {
            Ok(addr) => {
                // The format is FI_SOCKADDR_IN: at least a sockaddr_in, and
                // a whole sockaddr_in6 for that family.
                let fam = u16::from_ne_bytes([bytes[0], bytes[1]]);
                prop_assert!(bytes.len() >= 16);
                prop_assert!(fam != libc::AF_INET6 as u16 || bytes.len() >= 28);
                r.remove(addr).unwrap();
            }
            Err(Error::BufferTooSmall { needed, given, .. }) => prop_assert!(given < needed),
            Err(Error::InvalidArgument(_)) | Err(Error::Call { .. }) => {}
            Err(e) => prop_assert!(false, "{e}"),
        }
    }

    #[test]
    fn send_and_inject_lengths(len in prop_oneof![0usize..300, Just(usize::MAX), (4096usize..1 << 20)]) {
        let ep = rdm_ep();
        let pool = &ep.pool;
        let buf = pool.take().expect("the pool is whole between cases");
        // Longer than the buffer: refused with it handed back.
        if len > buf.len() {
            let e = ep.ep.send_to(buf, len, Addr(0)).unwrap_err();
            let refused_for_length = matches!(e.1, Error::BufferTooSmall { .. });
            prop_assert!(refused_for_length, "{}", e.1);
        }
        let limit = ep.ep.info().inject_size();
        let r = ep.ep.inject(&vec![0u8; len.min(1 << 20)], Addr(u64::MAX - 1));
        if len.min(1 << 20) > limit {
            prop_assert!(matches!(r, Err(Error::TooLarge { .. })), "{r:?}");
        } else {
            // Within inject_size, the address is what is refused.
            prop_assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
        }
    }
}

struct RdmEp {
    ep: Endpoint,
    pool: BufferPool,
}

fn rdm_info() -> libfabric::Info {
    getinfo(
        &Hints::new()
            .provider("tcp;ofi_rxm")
            .ep_type(EpType::Rdm)
            .caps(Caps::MSG | Caps::TAGGED)
            .node("127.0.0.1"),
    )
    .expect("tcp;ofi_rxm")
    .into_iter()
    .next()
    .unwrap()
}

fn rdm_av() -> &'static AddressVector {
    static AV: OnceLock<(Fabric, Domain, AddressVector)> = OnceLock::new();
    &AV.get_or_init(|| {
        let info = rdm_info();
        let f = Fabric::open(&info).unwrap();
        let d = Domain::open(&f, &info).unwrap();
        let av = AddressVector::open(&d, AvType::Table, 4).unwrap();
        (f, d, av)
    })
    .2
}

fn rdm_ep() -> &'static RdmEp {
    static EP: OnceLock<(Fabric, Domain, RdmEp)> = OnceLock::new();
    &EP.get_or_init(|| {
        let info = rdm_info();
        let f = Fabric::open(&info).unwrap();
        let d = Domain::open(&f, &info).unwrap();
        let av = AddressVector::open(&d, AvType::Table, 4).unwrap();
        let cq = CompletionQueue::<libfabric::cq::Tagged>::open(&d, &CqAttr::new()).unwrap();
        let ep = Endpoint::open(&d, &info).unwrap();
        ep.bind_av(&av).unwrap();
        ep.bind_cq(
            &cq,
            libfabric::ep::CqBind::TRANSMIT | libfabric::ep::CqBind::RECV,
        )
        .unwrap();
        ep.enable().unwrap();
        let pool = BufferPool::new(&d, 1, 256).unwrap();
        (f, d, RdmEp { ep, pool })
    })
    .2
}
