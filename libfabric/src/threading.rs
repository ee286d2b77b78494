//! Threading models of a domain (`enum fi_threading`, fi_domain(3)), as a
//! type parameter of the domain and of every object opened from it.
//!
//! | Model | fi_domain(3) | Objects here |
//! |---|---|---|
//! | [`ThreadSafe`] (the default) | `FI_THREAD_SAFE`: any object from any thread at once | `Send + Sync` |
//! | [`ThreadDomain`] | `FI_THREAD_DOMAIN`: the application serializes access to all objects of the domain | neither `Send` nor `Sync` |
//! | [`ThreadCompletion`] | `FI_THREAD_COMPLETION`: the application serializes access to the objects that share a completion structure | neither `Send` nor `Sync` (as [`ThreadDomain`]) |
//!
//! Under the two serialized models the provider leaves out its own locks
//! (the util providers, rxd for one, then use no-op locks: an empty
//! `fi_cq_read` costs 30-40% less there), and so does this crate: a read
//! of a completion queue or counter of such a domain takes no lock of its
//! own either. What makes that sound is that every handle of such a
//! domain stays on the thread that opened the domain: a [`Domain`], an
//! [`Endpoint`], a [`CompletionQueue`], a [`Counter`], an
//! [`AddressVector`], a [`MemoryRegion`](crate::mr::MemoryRegion) or a
//! [`PollSet`](crate::poll::PollSet) of a serialized domain can be neither
//! moved to nor shared with another thread, so no two of them are ever
//! used at once. `FI_THREAD_COMPLETION` allows more (objects that share no
//! completion queue could be used on different threads); this crate
//! encodes it as conservatively as `FI_THREAD_DOMAIN`.
//!
//! What does cross threads is handled apart:
//! - a [`Buffer`](crate::Buffer) and a [`BufferPool`](crate::BufferPool)
//!   stay `Send + Sync` (they make no provider call but the pool's
//!   `fi_close` of its memory region when its last handle goes): when that
//!   last handle goes on another thread than the domain's, the close is
//!   parked in the domain and done on the domain's thread, at its next
//!   opening of an object, close of an endpoint, [`Domain::run_deferred`]
//!   or when the domain itself closes (see [`Domain::deferred_closes`]);
//! - an [`EventQueue`](crate::EventQueue) is a fabric-level object, which
//!   fi_domain(3) keeps thread safe whatever the model; an endpoint of a
//!   serialized domain bound to one is told of its connection events on its
//!   own thread, and [`EventQueue::resolve`](crate::EventQueue::resolve)
//!   does not hand it out on another. Reading an event queue runs the
//!   provider's connection progress of the domains bound to it (tcp:
//!   `xnet_eq_read` runs `xnet_progress_all`, `prov/tcp/src/xnet_eq.c` 80,
//!   `xnet_progress.c` 1573-1589 in 1.22), under the domain's progress lock,
//!   which tcp keeps a real mutex whatever the model ("we always need to
//!   enable an active lock, independent from the threading model",
//!   `xnet_progress.c` 1783-1800; its progress thread runs concurrently
//!   with the application in any model); verbs handles connection events
//!   under its endpoints' lock (`prov/verbs/src/verbs_eq.c` 953), a mutex
//!   whatever the model (`verbs_cq.c` 615). tcp of 1.17 did otherwise: its
//!   event queue read tears a failed connect's endpoint down, writing the
//!   endpoint's queued transfers into its completion queue under the
//!   queue's lock, a no-op under the serialized models (`tcpx_eq.c` 38-48,
//!   `tcpx_conn_mgr.c` 496-543, `tcpx_ep.c` 264-359, `util_cq.c` 493-498):
//!   on tcp the provider's domain is opened `FI_THREAD_SAFE` underneath
//!   whatever the type says, so its locks stay real (the crate's lock
//!   elision on reads stays);
//! - wait sets ([`WaitSet`](crate::wait::WaitSet)) and
//!   [`Waiter`](crate::wait::Waiter) may run on any thread, so queues and
//!   counters of a serialized domain cannot join them
//!   ([`Error::InvalidArgument`](crate::Error::InvalidArgument));
//!   [`trywait`](crate::wait::trywait), the wait fds and blocking reads
//!   work;
//! - the connection layer ([`conn`](crate::conn)) and the `tokio` module
//!   open and take thread-safe objects only.
//!
//! ```
//! use libfabric::info::{getinfo, EpType, Hints, Threading};
//! use libfabric::threading::ThreadDomain;
//! use libfabric::{cq::{CqAttr, CqRead, Msg, MsgEntry}, CompletionQueue, Domain, Fabric};
//! let hints = Hints::new().provider("udp;ofi_rxd").ep_type(EpType::Rdm)
//!     .threading(Threading::Domain);
//! let list = getinfo(&hints)?;
//! let info = list.first().unwrap();
//! let fabric = Fabric::open(info)?;
//! let domain = Domain::<ThreadDomain>::open_model(&fabric, info)?;
//! let cq = CompletionQueue::<Msg, _>::open(&domain, &CqAttr::new())?;
//! let mut entries: [MsgEntry; 8] = Default::default();
//! assert!(matches!(cq.read(&mut entries)?, CqRead::Empty)); // no lock taken
//! # Ok::<(), libfabric::Error>(())
//! ```
//!
//! The handles of such a domain cannot leave their thread:
//!
//! ```compile_fail
//! use libfabric::{info::{getinfo, Hints, Threading}, threading::ThreadDomain, Domain, Fabric};
//! let list = getinfo(&Hints::new().provider("udp;ofi_rxd").threading(Threading::Domain)).unwrap();
//! let info = list.first().unwrap();
//! let domain = Domain::<ThreadDomain>::open_model(&Fabric::open(info).unwrap(), info).unwrap();
//! std::thread::spawn(move || drop(domain)); // Domain<ThreadDomain> is not Send
//! ```
//!
//! [`Domain`]: crate::Domain
//! [`Domain::run_deferred`]: crate::Domain::run_deferred
//! [`Domain::deferred_closes`]: crate::Domain::deferred_closes
//! [`Endpoint`]: crate::Endpoint
//! [`CompletionQueue`]: crate::CompletionQueue
//! [`Counter`]: crate::Counter
//! [`AddressVector`]: crate::AddressVector

use crate::info::Threading;
use crate::wait::sealed;
use std::marker::PhantomData;

/// A threading model of a domain: [`ThreadSafe`], [`ThreadDomain`] or
/// [`ThreadCompletion`]. Sealed. The type parameter `T` of
/// [`Domain`](crate::Domain) and of the objects opened from it; its auto
/// traits are theirs (only [`ThreadSafe`] is `Send` and `Sync`).
pub trait ThreadModel: sealed::Sealed + Sized + 'static {
    /// The model asked of `fi_getinfo` for this type
    /// ([`Hints::threading`](crate::info::Hints::threading)).
    const THREADING: Threading;
    /// Whether the crate's own locks that exclude other threads are taken
    /// (the progress lock of a queue's reads): only under `FI_THREAD_SAFE`.
    #[doc(hidden)]
    const LOCKED: bool;
    /// Whether a domain of `model` (an `fi_info`'s) can be opened as this
    /// type: one whose provider guarantees at least what the type lets
    /// safe code do.
    fn accepts(model: Threading) -> bool;
}

/// `FI_THREAD_SAFE`: every object may be used from any thread at once. The
/// default model; its objects are `Send + Sync`.
#[derive(Debug, Clone, Copy)]
pub enum ThreadSafe {}

/// `FI_THREAD_DOMAIN`: the application serializes access to all objects of
/// the domain. Its objects are neither `Send` nor `Sync`, which serializes
/// them: they all stay on the thread that opened the domain.
///
/// A domain of this type opens from an `fi_info` of `FI_THREAD_DOMAIN` or
/// of any model that promises more (`FI_THREAD_COMPLETION`,
/// `FI_THREAD_ENDPOINT`, `FI_THREAD_FID`, `FI_THREAD_SAFE`).
#[derive(Debug, Clone, Copy)]
pub struct ThreadDomain {
    _not_send: PhantomData<*const ()>,
}

/// `FI_THREAD_COMPLETION`: the application serializes access to objects
/// that share a completion structure. Encoded as conservatively as
/// [`ThreadDomain`]: its objects are neither `Send` nor `Sync`.
///
/// A domain of this type opens from an `fi_info` of
/// `FI_THREAD_COMPLETION`, `FI_THREAD_ENDPOINT`, `FI_THREAD_FID` or
/// `FI_THREAD_SAFE`.
#[derive(Debug, Clone, Copy)]
pub struct ThreadCompletion {
    _not_send: PhantomData<*const ()>,
}

impl sealed::Sealed for ThreadSafe {}
impl sealed::Sealed for ThreadDomain {}
impl sealed::Sealed for ThreadCompletion {}

impl ThreadModel for ThreadSafe {
    const THREADING: Threading = Threading::Safe;
    const LOCKED: bool = true;
    fn accepts(model: Threading) -> bool {
        model == Threading::Safe
    }
}

impl ThreadModel for ThreadDomain {
    const THREADING: Threading = Threading::Domain;
    const LOCKED: bool = false;
    fn accepts(model: Threading) -> bool {
        matches!(
            model,
            Threading::Domain
                | Threading::Completion
                | Threading::Endpoint
                | Threading::Fid
                | Threading::Safe
        )
    }
}

impl ThreadModel for ThreadCompletion {
    const THREADING: Threading = Threading::Completion;
    const LOCKED: bool = false;
    fn accepts(model: Threading) -> bool {
        matches!(
            model,
            Threading::Completion | Threading::Endpoint | Threading::Fid | Threading::Safe
        )
    }
}
