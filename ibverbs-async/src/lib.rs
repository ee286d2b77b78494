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
//!   returns a plain [`AsyncEventInfo`]. [`AsyncEvent::into_owned`] gives
//!   an [`OwnedAsyncEvent`] (`Send + 'static`) to hand to another thread or
//!   a spawned task.
//! - **Completion events** ([`CompChannel::get_cq_event`]): the [`Cq`] that
//!   has new completions. Acknowledgements are counted and given in batches.
//!   Completions are read into the caller's buffer: [`Cq::poll`] returns
//!   the part it filled.
//! - Blocking, non-blocking and timed variants of both; waits that another
//!   thread can end through a [`Stopper`] ([`Context::wait_async_event`],
//!   [`CompChannel::wait_cq_event`], returning a [`Wait`]); the fds as
//!   [`EventFd`]s to poll for readability; and with the `tokio` feature,
//!   async methods and streams (`tokio::AsyncEvents`, `tokio::CqEvents`),
//!   with `CqEvents::poll_cq` doing the arm-poll-wait loop of
//!   `ibv_req_notify_cq(3)` in one call.
//!
//! # Errors
//! Every fallible call returns [`Error`]: [`Error::Call`] with the
//! libibverbs function and its [`Errno`], [`Error::System`] for a system
//! call on an event fd, and typed variants for what is found before any
//! call ([`Error::InvalidArgument`], [`Error::TooLarge`],
//! [`Error::State`], [`Error::InUse`], ...). A failed `destroy()` or
//! `close()` hands the object back with the error, as `(Self, Error)`;
//! `?` turns that into the [`Error`].
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
//! # Misuse
//! What the libibverbs manual pages warn about, and what happens here
//! instead. "Compile error" rows are proved by the files under
//! `tests/ui/` and `tests/ui-tokio/` (`tests/compile_fail.rs` checks that
//! each fails to build with the error recorded next to it); the other rows
//! by the named tests, which run on soft-RoCE devices (`tests/rxe/run-all.sh`).
//!
//! | Misuse (C behaviour) | Here | Proof |
//! |---|---|---|
//! | Destroying a CQ, QP or SRQ while an asynchronous event naming it is unacknowledged (`ibv_get_async_event(3)`: the destroy waits for the acknowledgement; on the reading thread, a deadlock) | The [`AsyncEvent`] holds the object: dropping the handles returns at once and the destroy runs when the event is dropped; an explicit `destroy()` returns [`Error::InUse`] and hands the handle back | `rxe_events::a_held_event_defers_the_destroy_of_its_cq_without_deadlock`; `rxe_faults::destroying_objects_while_their_events_are_read_and_held_on_another_thread` (36 rounds of CQ, QP and SRQ events held on another thread, also run under valgrind) |
//! | An event read by one thread while another thread destroys its object (C: the reader gets a pointer to an object being destroyed) | The reader acknowledges at once, so the destroy can finish, and gets [`Element::Destroyed`] with the object's [`ObjectId`] | `rxe_events::an_event_read_while_its_cq_is_destroyed_is_acknowledged_at_once`; `rxe_faults::destroying_objects_while_their_events_are_read_and_held_on_another_thread` (a resolve delay opens the race every third round) |
//! | Acknowledging an asynchronous event twice | Compile error: [`AsyncEvent::ack`] consumes the event (E0382) | `tests/ui/ack_twice.rs` |
//! | Reading an event from the context's or a completion channel's fd behind libibverbs (the kernel counts it reported, libibverbs never acknowledges it, the next destroy of its object blocks for ever), or clearing `O_NONBLOCK` on it (a non-blocking get then blocks) | The fds are handed out as an [`EventFd`]: its raw number, to poll ([`EventFd::wait_readable`], `poll`, `epoll`); a `BorrowedFd` or `OwnedFd` of it takes `unsafe` | compile error: `tests/ui/event_fd_read_through_std.rs`; `rxe_events::non_blocking_get_timeout_and_fd` |
//! | Using an event or its element after acknowledging it | Compile error: use of a moved value (E0382); a borrowed element cannot outlive the event (E0597) | `tests/ui/use_after_ack.rs`, `tests/ui/event_element_outlives_event_borrow.rs` |
//! | Acknowledging after the object was destroyed (`ibv_ack_async_event` reads the freed object) | Cannot happen: the object is not destroyed while the event holds it, and `Drop` acknowledges before releasing it | The rows above; the valgrind part of `tests/rxe/guest-all.sh` finds no invalid read in the destroy test |
//! | Never acknowledging an event (every later destroy of its object waits forever) | Dropping acknowledges, also during a panic; ignoring a returned event is a `must_use` warning. `std::mem::forget` on an event leaks its object (and the context) instead: no destroy is attempted, so nothing waits | `rxe_events::a_panic_while_holding_an_event_acknowledges_it`; `tests/ui/event_must_be_used.rs`; `rxe_faults::a_forgotten_event_leaks_its_object_instead_of_deadlocking` |
//! | Using an event after its context was closed; closing or dropping the context while an event is held | Compile error: the event borrows the [`Context`] (E0505, E0515), and cannot be moved to another thread (E0597); a tokio event borrows its `AsyncEvents`. An [`OwnedAsyncEvent`] holds a clone of the context instead: [`Context::close`] returns [`Error::InUse`] while it lives, and the object it names cannot be destroyed either | `tests/ui/drop_context_while_event_held.rs`, `tests/ui/close_context_while_event_held.rs`, `tests/ui/event_outlives_context.rs`, `tests/ui/borrowed_event_cannot_be_spawned.rs`, `tests/ui-tokio/event_outlives_stream.rs`, `rxe_events::an_owned_event_moves_into_a_spawned_task_and_holds_its_objects` |
//! | Arming a CQ, then sleeping on its channel without polling again (`ibv_req_notify_cq(3)`: a completion that came before the arming raises no event, so the sleep never ends) | `tokio::CqEvents::poll_cq` polls, arms, polls again, and only then waits | `rxe_completions::poll_cq_arms_polls_and_waits_without_losing_a_completion` |
//! | Waiting in `poll_cq` for a CQ whose event another reader of the channel takes (a second `CqEvents` of the channel, or a thread in [`CompChannel::get_cq_event`]): the read disarms the CQ, so no later completion raises an event and the waiter sleeps for ever with completions in its CQ | Every read from the channel, by any reader, wakes every `tokio::CqEvents::poll_cq` of the channel, which polls its CQ and arms it again | `rxe_poll_cq::poll_cq_wakes_when_another_reader_of_the_channel_takes_its_event` |
//! | Reading completions past those `ibv_poll_cq` wrote, or keeping them past the buffer | [`Cq::poll`] returns the filled part of the caller's buffer, which borrows it (E0515) | `rxe_completions::poll_returns_the_filled_part_of_the_buffer`, `tests/ui/polled_completions_outlive_buffer.rs` |
//! | A thread blocked in `ibv_get_async_event`/`ibv_get_cq_event` that shutdown cannot wake (closing the fd under it is a use after free in libibverbs) | [`Context::wait_async_event`] and [`CompChannel::wait_cq_event`] poll a [`Stopper`]'s eventfd beside the event fd and return [`Wait::Stopped`] without reading an event | `rxe_events::a_stopper_ends_a_blocked_async_event_wait`, `rxe_completions::a_stopper_ends_a_blocked_cq_event_wait_without_losing_the_event`; unit test `fd.rs` `a_stopper_ends_a_blocked_wait_from_another_thread` |
//! | Registering with tokio outside a runtime or in one without the IO driver (tokio panics) | `tokio::AsyncEvents::new` and `tokio::CqEvents::new` return [`Error::State`] | `rxe_events::tokio_constructors_outside_a_runtime_are_errors`; unit test `tokio.rs` `registering_without_a_runtime_or_its_io_driver_is_an_error` |
//! | Destroying a CQ with unacknowledged completion events (`ibv_get_cq_event(3)`: the destroy waits for them) | Completion events are counted against the [`Cq`] and acknowledged in batches of [`CQ_EVENT_ACK_BATCH`], and the rest just before the destroy; [`Cq::ack_cq_events`] acknowledges exactly the counted ones, so nothing is acknowledged twice | `rxe_completions::completion_channel_events_with_batched_acks` (destroy with 2 pending); `rxe_completions::completion_channel_event_for_a_cq_whose_handles_are_gone` (destroy with an event still queued) |
//! | Clearing `O_NONBLOCK` on a [`Stopper`]'s eventfd (a [`Stopper::reset`] of a stopper not stopped then blocks for ever) | The eventfd is handed out as an [`EventFd`] to poll ([`Stopper::fd`]), not as a `BorrowedFd` | compile error: `tests/ui/stopper_fd_made_blocking.rs` |
//! | Asking whether an fd is readable with a zero timeout ([`EventFd::wait_readable`]`(Some(Duration::ZERO))`, or a timeout that passes before the first `poll`) | A wait whose deadline has passed still polls once without waiting: only an fd that is not ready is a timeout | unit test `fd.rs` `wait_readable_times_out_then_sees_data`; `host.rs` `a_stopper_is_sticky_until_reset` |
//! | Several threads waiting on one context or channel (`ibv_get_async_event(3)`: only one receives each event, and which one cannot be predicted) | The fds are non-blocking and every wait is `poll` followed by a non-blocking read: each event reaches exactly one waiter, the others keep waiting or time out | `rxe_events::two_waiting_threads_each_event_reaches_one`; `rxe_completions::two_threads_on_one_completion_channel`; `rxe_faults::hundreds_of_link_flap_events_read_by_two_threads_and_a_tokio_task` |
//! | Destroying a CQ still used by a QP (`ibv_destroy_cq(3)` fails), an SRQ with QPs attached (`ibv_destroy_srq(3)` fails), a PD with children (`ibv_dealloc_pd(3)` fails), a completion channel with CQs (`ibv_destroy_comp_channel(3)` fails) | Children hold their parents, so dropping handles in any order destroys children first; an explicit `destroy()`/`dealloc()` while children remain returns [`Error::InUse`] | `rxe_completions::objects_in_use_cannot_be_destroyed_explicitly` (CQ, PD); `rxe_faults::destroying_objects_while_their_events_are_read_and_held_on_another_thread` (drops PD, CQs and SRQ before their QPs every other round); `rxe_completions::completion_channel_events_with_batched_acks` (CQ, then channel) |
//! | Closing the context with objects alive (`ibv_close_device(3)`: their resources leak) | [`Context::close`] returns [`Error::InUse`] and hands the context back; dropping the last handle closes it only after every object is gone | `rxe_events::closing_a_context_with_live_objects_is_refused` |
//! | Freeing or deregistering a buffer a work request still uses (`ibv_post_send(3)`, `ibv_post_recv(3)`: reusable only after the completion) | [`Mr`] owns its memory; a QP or SRQ keeps every region it was given work on registered until the queue is destroyed, and [`Mr::dereg`] returns [`Error::InUse`] meanwhile. Rewriting the bytes of a send in flight is not prevented: the device sends whichever bytes it reads (copies through raw pointers, never a Rust reference, so no undefined behaviour) | `rxe_completions::regions_stay_registered_while_a_queue_holds_them`; `rxe_completions::objects_in_use_cannot_be_destroyed_explicitly` |
//! | Two threads writing a region's bytes at once | Compile error: [`Mr`] is not `Clone` (E0599) and [`Mr::write`] takes `&mut self` (E0502) | `tests/ui/mr_is_not_clone.rs`, `tests/ui/mr_write_needs_exclusive_access.rs` |
//! | Posting a receive to a QP attached to an SRQ (`ibv_post_recv(3)`: use `ibv_post_srq_recv`), a region of another PD, a range outside the region, arming a CQ without a channel | [`Error::InvalidArgument`] / [`Error::OutOfBounds`] before libibverbs is called | `rxe_events::srq_limit_reached_when_an_armed_srq_falls_below_its_limit`; `rxe_completions::input_errors_are_typed` |
//! | Posting a send before the QP is connected (rxe and siw queue it, then report the failed doorbell: the call says it failed, yet the send goes out once the QP reaches RTS), or a receive on a QP in RESET (siw queues it) | [`Qp::post_send`] needs a QP this crate moved to RTS (or on to SQD or ERR), [`Qp::post_recv`] one out of RESET: [`Error::State`] before libibverbs is called, and no post overlaps a state change | `rxe_completions::a_send_refused_before_the_connection_never_goes_out`; `rxe_completions::input_errors_are_typed` |
//! | Connection attributes wider than the InfiniBand fields they fill (a PSN over 24 bits, an ACK timeout over 31, retry counts over 7, an RNR timer code over 31: libibverbs passes them on, rxe keeps a retry count of 200 as 200 retries); access flags no verb names ([`AccessFlags::from_bits_retain`]); remote write or atomics on a region without local write (`ibv_reg_mr(3)`: "must be set too") | [`Error::InvalidArgument`] before libibverbs is called | unit tests of `qp.rs` and `mr.rs`; `rxe_completions::input_errors_are_typed` |
//! | A peer's QP number wider than the 24 bits of the packet header ([`Endpoint::qp_num`]: rxe masks it and connects to another QP than the one given) | [`Error::InvalidArgument`] from [`Qp::modify_to_rtr`], and from [`Qp::connect`] before the first transition | unit test `qp.rs` `endpoint_fields_are_checked_against_their_widths`; `rxe_completions::a_remote_qp_number_wider_than_24_bits_is_refused` |
//! | Sizes and ranges no device or allocation can hold: a region of 2^50 bytes, a range that ends before it starts, a queue of 2^32 entries, capacities over the C `int` | [`Pd::reg_mr`] allocates fallibly ([`Error::OutOfMemory`], no abort), every range is checked before it reaches an allocation or a work request ([`Error::OutOfBounds`], also for a reversed range), counts that do not fit the C type are [`Error::TooLarge`], and the device's own refusals are [`Error::Call`] | `rxe_sizes` (property tests over lengths, offsets, ranges, CQ, SRQ and QP sizes on rxe and siw, also under valgrind); unit tests of `mr.rs` |
//!
//! Every C call the crate makes, with the preconditions its manual page
//! leaves to the caller and how each is met, is listed in [`preconditions`].
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
#![cfg_attr(docsrs, feature(doc_cfg))]
// The docs link to the `tokio` module's items, which exist only with the
// feature (docs.rs builds with every feature, and so does the test
// command's docs step, which denies broken links).
#![cfg_attr(not(feature = "tokio"), allow(rustdoc::broken_intra_doc_links))]
#![warn(missing_debug_implementations)]
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
#[doc = include_str!("preconditions.md")]
pub mod preconditions {}
mod qp;
mod registry;
mod srq;

#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod tokio;

pub use attr::{DeviceAttr, Gid, GidEntry, GidType, LinkLayer, Mtu, PortAttr, PortState};
pub use channel::CompChannel;
pub use context::Context;
pub use cq::{Cq, WcOpcode, WcStatus, WorkCompletion, CQ_EVENT_ACK_BATCH};
pub use device::{devices, Device, DeviceList};
pub use error::{Errno, Error, ObjectKind, Result};
pub use event::{
    AsyncEvent, AsyncEventInfo, Element, ElementId, ElementKind, EventType, OwnedAsyncEvent,
};
pub use fd::{EventFd, Stopper, Wait};
pub use mr::{AccessFlags, Mr, RemoteAddr};
pub use pd::Pd;
pub use qp::{ConnectOptions, Endpoint, Qp, QpCap, QpInit, QpState, RecvRequest, SendRequest};
pub use registry::ObjectId;
pub use srq::{Srq, SrqAttr};

/// Hooks for the device tests (feature `__rxe-tests`): not part of the API.
#[cfg(feature = "__rxe-tests")]
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

/// The README's examples, run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
