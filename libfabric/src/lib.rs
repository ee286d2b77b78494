//! Safe libfabric (OFI): event queues, completion queues, wait objects and
//! `fi_trywait`, with the fabric, domain, endpoint and memory pieces that
//! produce real events.
//!
//! The reference semantics are the man pages fi_eq(3), fi_cq(3) and
//! fi_poll(3). The C rules they state are encoded in the types:
//!
//! - **Close order**: children keep `Arc`s of their parents, and endpoints
//!   of the EQs, CQs and AVs bound to them, so nothing is closed while
//!   something still uses it; `Drop` never panics and every object also has
//!   an explicit `close()` that returns the error.
//! - **Buffers in flight**: a [`Buffer`] is moved into the provider when
//!   posted and handed back by the completion ([`BufferPool::reclaim`]), so
//!   no safe code can touch or free memory the provider still uses.
//! - **Entry sizes**: event reads go through an [`eq::EventBuf`] that always
//!   has room for the largest connection data of the endpoints bound to the
//!   queue; CQ reads fill a slice of the queue's own entry type.
//! - **Error data**: `err_data` is copied into a caller-owned
//!   [`eq::ErrDataBuf`] that the error entry borrows.
//! - **Waiting**: the wait fd is a `BorrowedFd` tied to its queue;
//!   [`wait::Waiter`] runs the trywait / block / drain loop of fi_poll(3).
//!
//! # Threading
//! Domains are opened with `FI_THREAD_SAFE` only (the default of
//! [`info::Hints`]), under which fi_domain(3) lets any thread use any
//! object at any time; that is what makes every type here `Send + Sync`
//! without locks on the data path.
//!
//! # Coverage of fi_eq(3), fi_cq(3) and fi_poll(3)
//!
//! | C call | here |
//! |---|---|
//! | `fi_eq_open`, `fi_close` | [`EventQueue::open`], [`EventQueue::close`] / drop |
//! | `fi_eq_read`, with `FI_PEEK` | [`EventQueue::read`], [`EventQueue::peek`] |
//! | `fi_eq_sread`, with `FI_PEEK` | [`EventQueue::sread`], [`EventQueue::speek`] |
//! | `fi_eq_readerr` | [`EventQueue::read_err`] |
//! | `fi_eq_write` | [`EventQueue::write_notify`] |
//! | `fi_eq_strerror` | [`EventQueue::strerror`] |
//! | `fi_cq_open`, `fi_close` | [`CompletionQueue::open`], [`CompletionQueue::close`] / drop |
//! | `fi_cq_read`, `fi_cq_readfrom` | [`CompletionQueue::read`], [`CompletionQueue::read_from`] |
//! | `fi_cq_sread`, `fi_cq_sreadfrom` | [`CompletionQueue::sread`], [`CompletionQueue::sread_threshold`], [`CompletionQueue::sread_from`] |
//! | `fi_cq_readerr` | [`CompletionQueue::read_err`] |
//! | `fi_cq_signal` | [`CompletionQueue::signal`] |
//! | `fi_cq_strerror` | [`CompletionQueue::strerror`] |
//! | `fi_control(FI_GETWAIT)` | [`wait::Waitable::wait_fd`], [`wait::PollFdSet::refresh`] |
//! | `fi_control(FI_GETWAITOBJ)` | [`wait::Waitable::wait_obj`] |
//! | `fi_trywait` | [`wait::trywait`], [`wait::Waiter`], the queues of the `tokio` module (feature `tokio`) |
//! | `fi_wait_open`, `fi_wait` | [`wait::WaitSet::open`], [`wait::WaitSet::wait`] |
//! | `fi_poll_open`, `fi_poll_add`, `fi_poll_del`, `fi_poll` | [`poll::PollSet`] |
//!
//! Not wrapped: `FI_WAIT_MUTEX_COND`'s `fi_mutex_cond` (raw pthread
//! objects cannot be handed out safely; such queues still block in
//! `sread`), counters (`fi_cntr(3)`, a man page of their own), and
//! `fi_control(FI_GETOPSFLAG/FI_SETOPSFLAG)`, which concern endpoints.
//!
//! # Example
//! ```
//! use libfabric::{info::{getinfo, Hints}, eq::{EqAttr, Event, EventBuf, Read}, wait::WaitObj, EventQueue, Fabric};
//! let list = getinfo(&Hints::new()?.provider("tcp")?.node("127.0.0.1")?)?;
//! for info in &list {
//!     println!("{} {} {:?}", info.provider(), info.domain_name(), info.ep_type());
//! }
//! let fabric = Fabric::open(list.first().expect("tcp provider"))?;
//! let eq = EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::Fd).write(true))?;
//! eq.write_notify(eq.fid(), 1, 2)?;
//! let mut buf = EventBuf::new();
//! assert!(matches!(eq.read(&mut buf)?, Read::Event(Event::Notify(_))));
//! assert!(matches!(eq.read(&mut buf)?, Read::Empty));
//! # Ok::<(), libfabric::Error>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod av;
pub mod buffer;
pub mod cq;
pub mod domain;
pub mod ep;
pub mod eq;
pub mod error;
pub mod fabric;
mod fid;
pub mod info;
pub mod poll;
#[cfg(feature = "tokio")]
pub mod tokio;
pub mod wait;

pub use av::AddressVector;
pub use buffer::{Buffer, BufferPool};
pub use cq::CompletionQueue;
pub use domain::Domain;
pub use ep::{Endpoint, PassiveEndpoint};
pub use eq::EventQueue;
pub use error::{Errno, Error, Result};
pub use fabric::Fabric;
pub use info::{getinfo, Hints, Info};

/// The raw bindings this crate is built on.
pub use libfabric_sys::fabric as sys;
