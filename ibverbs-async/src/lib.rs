//! Safe libibverbs asynchronous events and completion-channel events, with
//! the verbs objects that raise them.
//!
//! # Events
//! - **Asynchronous events** ([`Context::get_async_event`]): port up/down,
//!   GID table changes, CQ overrun, QP and SRQ errors, SRQ limit, drained
//!   send queues... Each is an [`AsyncEvent`] guard with a typed
//!   [`EventType`] and its [`Element`] resolved to this crate's [`Cq`],
//!   [`Qp`] or [`Srq`], a port number or the device. Dropping the guard
//!   acknowledges the event; [`AsyncEvent::ack`] does so explicitly and
//!   returns a plain [`AsyncEventInfo`].
//! - **Completion events** ([`CompChannel::get_cq_event`]): the [`Cq`] that
//!   has new completions. Acknowledgements are counted and given in batches.
//! - Blocking, non-blocking and timed variants of both, the raw fds as
//!   [`BorrowedFd`](std::os::fd::BorrowedFd), and with the `tokio` feature,
//!   async methods and streams (`tokio::AsyncEvents`, `tokio::CqEvents`).
//!
//! # Acknowledge before destroy
//! libibverbs' `ibv_destroy_cq`/`_qp`/`_srq` wait until every event
//! reported for the object is acknowledged, and acknowledging reads the
//! object. In C, destroying while holding an event deadlocks and
//! acknowledging after destroying is a use after free. Here neither can be
//! written in safe code:
//! - an [`AsyncEvent`] holds the object it names, so the real destroy runs
//!   only after the event is gone, and the event acknowledges before it lets
//!   go of the object;
//! - a [`Cq`] acknowledges the completion events counted against it before
//!   its destroy;
//! - an event borrows its [`Context`], which therefore cannot be closed
//!   while the event lives;
//! - acknowledging consumes the event, so it happens once.
//!
//! # Ownership
//! Every object holds what it depends on: a PD, CQ and completion channel
//! hold their [`Context`]; memory regions, QPs and SRQs their [`Pd`]; a QP
//! its CQs and SRQ (destroying a CQ a QP uses fails with `EBUSY`); a CQ its
//! channel. So destruction always happens children first, whatever order the
//! handles are dropped in. `Drop` never panics and ignores errors; each
//! object also has an explicit `destroy`/`close`/`dealloc`/`dereg` that
//! reports them.
//!
//! Memory regions own their memory ([`Pd::reg_mr`]) and are read and
//! written by copy; a QP or SRQ keeps every region it was given work on
//! registered until the queue is destroyed, so the device never writes
//! freed memory.
//!
//! # Threads
//! libibverbs objects are safe for multi-threaded access
//! (`ibv_alloc_td(3)`: "By default all verbs objects are safe for
//! multi-threaded access"). Every handle here is `Send + Sync`; each
//! type's `unsafe impl` says why. Several threads may wait for events on
//! one context or channel: the fds are non-blocking and waiting is
//! `poll(2)` followed by a read, so each event reaches exactly one of them.
//!
//! # Example
//! Listing devices works everywhere, including where the kernel has no
//! RDMA support:
//! ```
//! use ibverbs_async::{DeviceList, Error};
//! match DeviceList::new() {
//!     Ok(list) => {
//!         for dev in list.iter() {
//!             println!("{} {:016x}", dev.name(), dev.guid());
//!         }
//!     }
//!     Err(e @ (Error::NoRdmaSupport | Error::NoDevices)) => println!("{e}"),
//!     Err(e) => panic!("{e}"),
//! }
//! ```
//!
//! Watching a device's events (needs a device, e.g. soft-RoCE `rxe0`):
//! ```no_run
//! use std::time::Duration;
//! use ibverbs_async::{Context, Element, EventType};
//! # fn main() -> ibverbs_async::Result<()> {
//! let ctx = Context::open("rxe0")?;
//! while let Some(event) = ctx.get_async_event_timeout(Duration::from_secs(10))? {
//!     match (event.event_type(), event.element()) {
//!         (EventType::PortActive, Element::Port(p)) => println!("port {p} up"),
//!         (EventType::PortErr, Element::Port(p)) => println!("port {p} down"),
//!         (EventType::SrqLimitReached, Element::Srq(srq)) => {
//!             println!("{srq:?} is running low; post more receives");
//!         }
//!         _ => println!("{event}"),
//!     }
//!     // `event` is acknowledged here, when it is dropped.
//! }
//! # Ok(()) }
//! ```
mod attr;
mod channel;
mod context;
mod cq;
mod device;
mod error;
mod event;
mod fd;
mod mr;
mod pd;
mod qp;
mod registry;
mod srq;

#[cfg(feature = "tokio")]
pub mod tokio;

pub use attr::{DeviceAttr, Gid, GidEntry, GidType, LinkLayer, Mtu, PortAttr, PortState};
pub use channel::CompChannel;
pub use context::Context;
pub use cq::{Cq, WcOpcode, WcStatus, WorkCompletion, CQ_EVENT_ACK_BATCH};
pub use device::{devices, Device, DeviceList};
pub use error::{Error, Result};
pub use event::{AsyncEvent, AsyncEventInfo, Element, ElementId, ElementKind, EventType};
pub use mr::{AccessFlags, Mr, RemoteAddr};
pub use pd::Pd;
pub use qp::{ConnectOptions, Endpoint, Qp, QpCap, QpInit, QpState, SendRequest};
pub use registry::ObjectId;
pub use srq::{Srq, SrqAttr};

/// Hooks for the device tests (feature `rxe-tests`): not part of the API.
#[cfg(feature = "rxe-tests")]
#[doc(hidden)]
pub mod test_hooks {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    static RESOLVE_DELAY_MS: AtomicU64 = AtomicU64::new(0);
    static EVENTS_READ: AtomicU64 = AtomicU64::new(0);

    /// How many asynchronous events were read so far by this process.
    pub fn events_read() -> u64 {
        EVENTS_READ.load(Ordering::SeqCst)
    }

    /// Sleeps this long between reading an asynchronous event and resolving
    /// its element, to open the race with a concurrent destroy.
    pub fn set_resolve_delay(delay: Duration) {
        RESOLVE_DELAY_MS.store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    pub(crate) fn before_resolve() {
        EVENTS_READ.fetch_add(1, Ordering::SeqCst);
        let ms = RESOLVE_DELAY_MS.load(Ordering::SeqCst);
        if ms > 0 {
            std::thread::sleep(Duration::from_millis(ms));
        }
    }
}
