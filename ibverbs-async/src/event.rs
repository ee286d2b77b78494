//! Asynchronous events: `ibv_get_async_event(3)` / `ibv_ack_async_event(3)`.
//!
//! # Acknowledge before destroy, made impossible to get wrong
//!
//! libibverbs has two rules for an event about a CQ, QP, SRQ or WQ
//! (`ibv_get_async_event(3)`):
//! - destroying the object waits until every event reported for it is
//!   acknowledged, so destroying it while holding such an event deadlocks;
//! - acknowledging reads the object, so acknowledging after the destroy is a
//!   use after free.
//!
//! Here an [`AsyncEvent`] holds a strong reference to the object it names
//! ([`Element::Cq`], [`Element::Qp`], [`Element::Srq`]). The real
//! `ibv_destroy_*` runs when the object's last reference goes, so it cannot
//! start while the event is held, whatever the program drops; and the
//! event's `Drop` acknowledges *before* it releases that reference, so the
//! destroy it may trigger finds nothing left to wait for. If the event is
//! read at the moment another thread drops the object's last handle (that
//! thread then waits inside `ibv_destroy_*` for this very acknowledgement),
//! the event is acknowledged at once and reports [`Element::Destroyed`].
//!
//! The event borrows the [`Context`] it was read from, so the context
//! handle cannot be dropped or closed while an event is held. An
//! [`OwnedAsyncEvent`] holds a clone of the context instead, so it can be
//! moved to another thread or task; [`Context::close`] then fails with
//! [`Error::InUse`] until it is dropped.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use libibverbs_sys as sys;

use crate::context::Context;
use crate::cq::Cq;
use crate::error::{check_minus_one, Errno, Error, Result};
use crate::fd::{wait_readable, Deadline, EventFd, Stopper, Wait};
use crate::qp::Qp;
use crate::registry::{Lookup, ObjectId, Table};
use crate::srq::Srq;

/// The type of an asynchronous event (`enum ibv_event_type`).
///
/// Values this crate does not know decode to [`EventType::Unknown`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum EventType {
    /// `IBV_EVENT_CQ_ERR`: CQ overrun; the CQ is in error.
    CqErr,
    /// `IBV_EVENT_QP_FATAL`: error on a QP's work queue; the QP is in error.
    QpFatal,
    /// `IBV_EVENT_QP_REQ_ERR`: invalid request on a QP's work queue.
    QpReqErr,
    /// `IBV_EVENT_QP_ACCESS_ERR`: local access violation on a QP.
    QpAccessErr,
    /// `IBV_EVENT_COMM_EST`: first packet received on a QP in RTR.
    CommEst,
    /// `IBV_EVENT_SQ_DRAINED`: a QP's send queue drained in SQD.
    SqDrained,
    /// `IBV_EVENT_PATH_MIG`: a QP migrated to its alternate path.
    PathMig,
    /// `IBV_EVENT_PATH_MIG_ERR`: path migration failed.
    PathMigErr,
    /// `IBV_EVENT_DEVICE_FATAL`: the device is unusable.
    DeviceFatal,
    /// `IBV_EVENT_PORT_ACTIVE`: a port became active.
    PortActive,
    /// `IBV_EVENT_PORT_ERR`: a port left the active state.
    PortErr,
    /// `IBV_EVENT_LID_CHANGE`: a port's LID changed.
    LidChange,
    /// `IBV_EVENT_PKEY_CHANGE`: a port's P_Key table changed.
    PkeyChange,
    /// `IBV_EVENT_SM_CHANGE`: a port's subnet manager changed.
    SmChange,
    /// `IBV_EVENT_SRQ_ERR`: error on an SRQ.
    SrqErr,
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: an armed SRQ fell below its limit.
    SrqLimitReached,
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: the last receive of a QP attached
    /// to an SRQ was consumed after the QP went to error.
    QpLastWqeReached,
    /// `IBV_EVENT_CLIENT_REREGISTER`: the subnet manager asks to register
    /// again.
    ClientReregister,
    /// `IBV_EVENT_GID_CHANGE`: a port's GID table changed.
    GidChange,
    /// `IBV_EVENT_WQ_FATAL`: error on a work queue.
    WqFatal,
    /// A value this crate does not know (newer kernels or libraries).
    Unknown(u32),
}

/// What kind of element an event type names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ElementKind {
    /// A completion queue.
    Cq,
    /// A queue pair.
    Qp,
    /// A shared receive queue.
    Srq,
    /// A work queue.
    Wq,
    /// A port, by number.
    Port,
    /// The device as a whole.
    Device,
    /// Not known for an [`EventType::Unknown`].
    Unknown,
}

impl EventType {
    const TABLE: [(u32, EventType, &'static str); 20] = [
        (sys::IBV_EVENT_CQ_ERR, EventType::CqErr, "IBV_EVENT_CQ_ERR"),
        (
            sys::IBV_EVENT_QP_FATAL,
            EventType::QpFatal,
            "IBV_EVENT_QP_FATAL",
        ),
        (
            sys::IBV_EVENT_QP_REQ_ERR,
            EventType::QpReqErr,
            "IBV_EVENT_QP_REQ_ERR",
        ),
        (
            sys::IBV_EVENT_QP_ACCESS_ERR,
            EventType::QpAccessErr,
            "IBV_EVENT_QP_ACCESS_ERR",
        ),
        (
            sys::IBV_EVENT_COMM_EST,
            EventType::CommEst,
            "IBV_EVENT_COMM_EST",
        ),
        (
            sys::IBV_EVENT_SQ_DRAINED,
            EventType::SqDrained,
            "IBV_EVENT_SQ_DRAINED",
        ),
        (
            sys::IBV_EVENT_PATH_MIG,
            EventType::PathMig,
            "IBV_EVENT_PATH_MIG",
        ),
        (
            sys::IBV_EVENT_PATH_MIG_ERR,
            EventType::PathMigErr,
            "IBV_EVENT_PATH_MIG_ERR",
        ),
        (
            sys::IBV_EVENT_DEVICE_FATAL,
            EventType::DeviceFatal,
            "IBV_EVENT_DEVICE_FATAL",
        ),
        (
            sys::IBV_EVENT_PORT_ACTIVE,
            EventType::PortActive,
            "IBV_EVENT_PORT_ACTIVE",
        ),
        (
            sys::IBV_EVENT_PORT_ERR,
            EventType::PortErr,
            "IBV_EVENT_PORT_ERR",
        ),
        (
            sys::IBV_EVENT_LID_CHANGE,
            EventType::LidChange,
            "IBV_EVENT_LID_CHANGE",
        ),
        (
            sys::IBV_EVENT_PKEY_CHANGE,
            EventType::PkeyChange,
            "IBV_EVENT_PKEY_CHANGE",
        ),
        (
            sys::IBV_EVENT_SM_CHANGE,
            EventType::SmChange,
            "IBV_EVENT_SM_CHANGE",
        ),
        (
            sys::IBV_EVENT_SRQ_ERR,
            EventType::SrqErr,
            "IBV_EVENT_SRQ_ERR",
        ),
        (
            sys::IBV_EVENT_SRQ_LIMIT_REACHED,
            EventType::SrqLimitReached,
            "IBV_EVENT_SRQ_LIMIT_REACHED",
        ),
        (
            sys::IBV_EVENT_QP_LAST_WQE_REACHED,
            EventType::QpLastWqeReached,
            "IBV_EVENT_QP_LAST_WQE_REACHED",
        ),
        (
            sys::IBV_EVENT_CLIENT_REREGISTER,
            EventType::ClientReregister,
            "IBV_EVENT_CLIENT_REREGISTER",
        ),
        (
            sys::IBV_EVENT_GID_CHANGE,
            EventType::GidChange,
            "IBV_EVENT_GID_CHANGE",
        ),
        (
            sys::IBV_EVENT_WQ_FATAL,
            EventType::WqFatal,
            "IBV_EVENT_WQ_FATAL",
        ),
    ];

    /// Decodes an `enum ibv_event_type` value.
    #[must_use]
    pub fn from_raw(raw: u32) -> EventType {
        Self::TABLE
            .iter()
            .find(|(v, _, _)| *v == raw)
            .map_or(EventType::Unknown(raw), |(_, t, _)| *t)
    }

    /// The `enum ibv_event_type` value.
    #[must_use]
    pub fn to_raw(self) -> u32 {
        match self {
            EventType::Unknown(raw) => raw,
            known => Self::TABLE
                .iter()
                .find(|(_, t, _)| *t == known)
                .map_or(u32::MAX, |(v, _, _)| *v),
        }
    }

    /// The C name, e.g. `"IBV_EVENT_PORT_ERR"`; `None` for unknown values.
    #[must_use]
    pub fn name(self) -> Option<&'static str> {
        Self::TABLE
            .iter()
            .find(|(_, t, _)| *t == self)
            .map(|(_, _, n)| *n)
    }

    /// What the event's element is, per `ibv_get_async_event(3)`.
    #[must_use]
    pub fn element_kind(self) -> ElementKind {
        use EventType::*;
        match self {
            CqErr => ElementKind::Cq,
            QpFatal | QpReqErr | QpAccessErr | CommEst | SqDrained | PathMig | PathMigErr
            | QpLastWqeReached => ElementKind::Qp,
            SrqErr | SrqLimitReached => ElementKind::Srq,
            WqFatal => ElementKind::Wq,
            PortActive | PortErr | LidChange | PkeyChange | SmChange | ClientReregister
            | GidChange => ElementKind::Port,
            DeviceFatal => ElementKind::Device,
            Unknown(_) => ElementKind::Unknown,
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "unknown event type {}", self.to_raw()),
        }
    }
}

/// What an asynchronous event is about, resolved to this crate's objects.
#[derive(Debug)]
#[non_exhaustive]
pub enum Element {
    /// The CQ (held until the event is dropped).
    Cq(Cq),
    /// The QP (held until the event is dropped).
    Qp(Qp),
    /// The SRQ (held until the event is dropped).
    Srq(Srq),
    /// A work queue, by number (`ibv_wq.wq_num`; this crate creates none).
    Wq(u32),
    /// A port number.
    Port(u8),
    /// The device.
    Device,
    /// The object was being destroyed when the event was read: its last
    /// handle was already gone. The event was acknowledged at once so that
    /// the destroy could finish; only its identity remains.
    Destroyed(ElementId),
    /// A CQ, QP or SRQ this crate did not create.
    Untracked(ElementKind),
    /// The raw element of an event type this crate does not know.
    Unknown(u64),
}

/// The identity of an event's element: a plain copyable value that outlives
/// the event (see [`AsyncEventInfo`]). Every variant with data names its
/// fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ElementId {
    /// A CQ.
    Cq {
        /// The CQ's identity.
        id: ObjectId,
    },
    /// A QP.
    Qp {
        /// The QP's identity.
        id: ObjectId,
        /// The QP number.
        qp_num: u32,
    },
    /// An SRQ.
    Srq {
        /// The SRQ's identity.
        id: ObjectId,
    },
    /// A work queue.
    Wq {
        /// The WQ number.
        wq_num: u32,
    },
    /// A port.
    Port {
        /// The port number.
        port: u8,
    },
    /// The device.
    Device,
    /// A CQ, QP or SRQ this crate did not create.
    Untracked {
        /// What kind of object it is.
        kind: ElementKind,
    },
    /// The element of an unknown event type.
    Unknown {
        /// Its raw value.
        raw: u64,
    },
}

impl Element {
    /// The element's identity.
    #[must_use]
    pub fn id(&self) -> ElementId {
        match self {
            Element::Cq(cq) => ElementId::Cq { id: cq.id() },
            Element::Qp(qp) => ElementId::Qp {
                id: qp.id(),
                qp_num: qp.qp_num(),
            },
            Element::Srq(srq) => ElementId::Srq { id: srq.id() },
            Element::Wq(wq_num) => ElementId::Wq { wq_num: *wq_num },
            Element::Port(port) => ElementId::Port { port: *port },
            Element::Device => ElementId::Device,
            Element::Destroyed(id) => *id,
            Element::Untracked(kind) => ElementId::Untracked { kind: *kind },
            Element::Unknown(raw) => ElementId::Unknown { raw: *raw },
        }
    }
}

impl fmt::Display for ElementId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElementId::Cq { id } => write!(f, "CQ {id}"),
            ElementId::Qp { id, qp_num } => write!(f, "QP {id} (qp_num {qp_num:#x})"),
            ElementId::Srq { id } => write!(f, "SRQ {id}"),
            ElementId::Wq { wq_num } => write!(f, "WQ {wq_num:#x}"),
            ElementId::Port { port } => write!(f, "port {port}"),
            ElementId::Device => f.write_str("device"),
            ElementId::Untracked { kind } => write!(f, "untracked {kind:?}"),
            ElementId::Unknown { raw } => write!(f, "element {raw:#x}"),
        }
    }
}

/// A copy of an event's type and element identity, made when the event is
/// acknowledged; holds no reference to any object.
// Plain integers copied out of C: Send + Sync by construction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct AsyncEventInfo {
    /// The event type.
    pub event_type: EventType,
    /// Its element.
    pub element: ElementId,
}

impl AsyncEventInfo {
    /// An event description, as a test or a replay may need one.
    #[must_use]
    pub fn new(event_type: EventType, element: ElementId) -> AsyncEventInfo {
        AsyncEventInfo {
            event_type,
            element,
        }
    }
}

impl fmt::Display for AsyncEventInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {}", self.event_type, self.element)
    }
}

/// What both event types hold: the C event and its resolved element, and
/// the acknowledgement, given in `Drop` before the element is released.
struct EventCore {
    raw: sys::ibv_async_event,
    event_type: EventType,
    /// Dropped after `Drop::drop` acknowledged: the acknowledgement comes
    /// before the object's destroy can start.
    element: Element,
    needs_ack: bool,
}

// SAFETY: acknowledging from another thread is allowed
// (ibv_ack_async_event(3) only locks the object's mutex and signals its
// condition variable; nothing ties it to the reading thread), and the
// element pointer stays valid because the event holds the object (or, for
// port and device events, acknowledging touches nothing).
unsafe impl Send for EventCore {}
// SAFETY: shared access only reads the copied type and the element handle,
// which is Sync itself.
unsafe impl Sync for EventCore {}

impl EventCore {
    fn info(&self) -> AsyncEventInfo {
        AsyncEventInfo {
            event_type: self.event_type,
            element: self.element.id(),
        }
    }

    fn ack_now(&mut self) {
        if std::mem::take(&mut self.needs_ack) {
            // SAFETY: the event came from ibv_get_async_event and is
            // acknowledged once (`needs_ack` is cleared first). Its element
            // pointer is valid: for CQ/QP/SRQ events this value holds the
            // object, whose destroy cannot start before the reference is
            // released after this call; a WQ or untracked object cannot be
            // destroyed before this acknowledgement (libibverbs waits for
            // it); other events do not touch the element.
            unsafe { sys::ibv_ack_async_event(&mut self.raw) };
        }
    }
}

impl EventCore {
    /// Resolves the address of a CQ, QP or SRQ through its table: a live
    /// object is held by the event (`live`); one whose last handle is gone
    /// has its destroy waiting, on another thread, for this very
    /// acknowledgement, so the event is acknowledged at once, after `dying`
    /// read what identifies the object.
    fn track<T>(
        &mut self,
        table: &Table<T>,
        key: usize,
        kind: ElementKind,
        live: impl FnOnce(Arc<T>) -> Element,
        dying: impl FnOnce(ObjectId) -> ElementId,
    ) -> Element {
        match table.lookup(key) {
            Lookup::Live(object) => live(object),
            Lookup::Dying(id) => {
                let id = dying(id);
                self.ack_now();
                Element::Destroyed(id)
            }
            Lookup::Missing => Element::Untracked(kind),
        }
    }
}

impl Drop for EventCore {
    fn drop(&mut self) {
        self.ack_now();
        // `element` is dropped after this: it may hold the last reference to
        // its object, whose destroy now has nothing left to wait for.
    }
}

/// The accessors both event types share.
macro_rules! event_accessors {
    () => {
        /// The event type.
        #[must_use]
        pub fn event_type(&self) -> EventType {
            self.core.event_type
        }

        /// The element the event is about.
        #[must_use]
        pub fn element(&self) -> &Element {
            &self.core.element
        }

        /// A copy of the type and element identity.
        #[must_use]
        pub fn info(&self) -> AsyncEventInfo {
            self.core.info()
        }

        /// The CQ of a CQ event.
        #[must_use]
        pub fn cq(&self) -> Option<&Cq> {
            match &self.core.element {
                Element::Cq(cq) => Some(cq),
                _ => None,
            }
        }

        /// The QP of a QP event.
        #[must_use]
        pub fn qp(&self) -> Option<&Qp> {
            match &self.core.element {
                Element::Qp(qp) => Some(qp),
                _ => None,
            }
        }

        /// The SRQ of an SRQ event.
        #[must_use]
        pub fn srq(&self) -> Option<&Srq> {
            match &self.core.element {
                Element::Srq(srq) => Some(srq),
                _ => None,
            }
        }

        /// The port number of a port event.
        #[must_use]
        pub fn port(&self) -> Option<u8> {
            match self.core.element {
                Element::Port(p) => Some(p),
                _ => None,
            }
        }

        /// Acknowledges the event (`ibv_ack_async_event()`) and returns a
        /// copy of what it was. Equivalent to dropping it, but explicit.
        #[doc(alias = "ibv_ack_async_event")]
        #[allow(clippy::must_use_candidate)]
        pub fn ack(self) -> AsyncEventInfo {
            self.core.info()
            // `self` is dropped here: the core acknowledges, then releases
            // the element.
        }
    };
}

/// An asynchronous event, not yet acknowledged: `ibv_get_async_event()`.
///
/// Dropping it acknowledges it (`ibv_ack_async_event()`), and so does
/// [`ack`](AsyncEvent::ack); a panic while it is held acknowledges it too
/// (`Drop` runs during unwinding). It holds the CQ, QP or SRQ it names, so
/// that object cannot be destroyed before the acknowledgement, and it
/// borrows the [`Context`], which cannot be dropped or closed meanwhile.
/// [`into_owned`](AsyncEvent::into_owned) turns it into an
/// [`OwnedAsyncEvent`], which can be moved to another thread or task.
///
/// `Send` and `Sync`: `ibv_ack_async_event` may run on any thread.
#[must_use = "dropping an AsyncEvent acknowledges it at once; use `ack()` to make that explicit"]
pub struct AsyncEvent<'ctx> {
    core: EventCore,
    ctx: &'ctx Context,
}

impl AsyncEvent<'_> {
    event_accessors!();

    /// The event, holding a clone of its context instead of a borrow:
    /// `Send + 'static`, for a spawned task or another thread. It is still
    /// acknowledged when dropped, and still holds the object it names; the
    /// context cannot be closed ([`Error::InUse`]) until it is gone.
    pub fn into_owned(self) -> OwnedAsyncEvent {
        let AsyncEvent { core, ctx } = self;
        OwnedAsyncEvent {
            core,
            ctx: ctx.clone(),
        }
    }
}

/// An asynchronous event that holds its [`Context`] (a clone) rather than
/// borrowing it: `Send + Sync + 'static`, so it can be moved into a spawned
/// task or another thread. Made by [`AsyncEvent::into_owned`],
/// [`Context::get_owned_async_event`], or the tokio stream.
///
/// Everything else is as for [`AsyncEvent`]: dropping it acknowledges it,
/// the object it names cannot be destroyed before that (an explicit
/// `destroy()` returns [`Error::InUse`]), and neither can the context
/// ([`Context::close`] returns [`Error::InUse`]).
#[must_use = "dropping an OwnedAsyncEvent acknowledges it at once; use `ack()` to make that explicit"]
pub struct OwnedAsyncEvent {
    // Dropped first: acknowledges and releases the element before the
    // context handle goes.
    core: EventCore,
    ctx: Context,
}

impl OwnedAsyncEvent {
    event_accessors!();

    /// The context the event was read from.
    #[must_use]
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}

impl fmt::Debug for AsyncEvent<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncEvent")
            .field("event_type", &self.core.event_type)
            .field("element", &self.core.element)
            .finish()
    }
}

impl fmt::Debug for OwnedAsyncEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedAsyncEvent")
            .field("event_type", &self.core.event_type)
            .field("element", &self.core.element)
            .field("context", &self.ctx)
            .finish()
    }
}

impl fmt::Display for AsyncEvent<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.info(), f)
    }
}

impl fmt::Display for OwnedAsyncEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.info(), f)
    }
}

/// Reads one event without blocking and resolves it; `Ok(None)` on EAGAIN.
pub(crate) fn try_read(ctx: &Context) -> Result<Option<AsyncEvent<'_>>> {
    // SAFETY: ibv_async_event is plain data (a union of pointers and an
    // int, and an enum); all-zero is a valid value.
    let mut raw: sys::ibv_async_event = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid context; ibv_get_async_event(3) fills `raw` and
        // returns 0, or -1 with errno set (EAGAIN: the fd is non-blocking
        // and empty).
        let rc = unsafe { sys::ibv_get_async_event(ctx.inner.raw(), &mut raw) };
        match check_minus_one(rc) {
            Ok(()) => {
                return Ok(Some(AsyncEvent {
                    core: resolve(ctx, raw),
                    ctx,
                }))
            }
            Err(Errno::INTR) => continue,
            Err(Errno::AGAIN) => return Ok(None),
            Err(errno) => {
                return Err(Error::Call {
                    call: "ibv_get_async_event",
                    errno,
                })
            }
        }
    }
}

/// Resolves the element of a freshly read event to this crate's objects.
fn resolve(ctx: &Context, raw: sys::ibv_async_event) -> EventCore {
    #[cfg(feature = "__rxe-tests")]
    crate::test_hooks::before_resolve();

    let event_type = EventType::from_raw(raw.event_type);
    let mut event = EventCore {
        raw,
        event_type,
        element: Element::Device,
        needs_ack: true,
    };
    let inner = &ctx.inner;
    // SAFETY (all union reads below): ibv_get_async_event(3) sets the union
    // member that matches the event type, which element_kind() follows; the
    // pointed-to object is alive until this event is acknowledged.
    event.element = match event_type.element_kind() {
        ElementKind::Cq => {
            // SAFETY: see above: a CQ event carries `cq`.
            let p = unsafe { raw.element.cq };
            event.track(
                &inner.cqs,
                p as usize,
                ElementKind::Cq,
                |cq| Element::Cq(Cq { inner: cq }),
                |id| ElementId::Cq { id },
            )
        }
        ElementKind::Qp => {
            // SAFETY: see above: a QP event carries `qp`.
            let p = unsafe { raw.element.qp };
            event.track(
                &inner.qps,
                p as usize,
                ElementKind::Qp,
                |qp| Element::Qp(Qp { inner: qp }),
                |id| ElementId::Qp {
                    id,
                    // SAFETY: the QP is alive until the event is
                    // acknowledged, which `track` does after this returns.
                    qp_num: unsafe { (*p).qp_num },
                },
            )
        }
        ElementKind::Srq => {
            // SAFETY: see above: an SRQ event carries `srq`.
            let p = unsafe { raw.element.srq };
            event.track(
                &inner.srqs,
                p as usize,
                ElementKind::Srq,
                |srq| Element::Srq(Srq { inner: srq }),
                |id| ElementId::Srq { id },
            )
        }
        ElementKind::Wq => {
            // SAFETY: see above: a WQ event carries `wq`, alive until
            // acknowledged.
            Element::Wq(unsafe { (*raw.element.wq).wq_num })
        }
        ElementKind::Port => {
            // SAFETY: see above: a port event carries `port_num`.
            let port = unsafe { raw.element.port_num };
            Element::Port(u8::try_from(port).unwrap_or(0))
        }
        ElementKind::Device => Element::Device,
        ElementKind::Unknown => {
            // SAFETY: libibverbs stores the element of a type it does not
            // know as `port_num`, an int (libibverbs/device.c 488-489 in
            // rdma-core 44); the other bytes of the pointer-sized member are
            // the zeroes `raw` was initialised with. Every member is plain
            // data, so reading it copies initialised bits.
            Element::Unknown(unsafe { raw.element.cq } as u64)
        }
    };
    event
}

impl Context {
    /// The asynchronous event file descriptor, to poll for readability
    /// (`poll`/`epoll` or an async reactor), as an [`EventFd`]: it cannot be
    /// read or re-flagged from safe code, which would lose events or make
    /// the non-blocking gets block.
    #[must_use]
    pub fn async_fd(&self) -> EventFd<'_> {
        EventFd::new(self.inner.async_fd())
    }

    /// Returns the next asynchronous event if one is pending, without
    /// waiting.
    ///
    /// # Errors
    /// [`Error::Call`] when `ibv_get_async_event` fails.
    pub fn try_get_async_event(&self) -> Result<Option<AsyncEvent<'_>>> {
        try_read(self)
    }

    /// Waits for the next asynchronous event (`ibv_get_async_event()`).
    ///
    /// Several threads may wait at once; each event reaches exactly one. To
    /// end the wait from another thread, use
    /// [`wait_async_event`](Context::wait_async_event).
    ///
    /// ```no_run
    /// # fn main() -> ibverbs_async::Result<()> {
    /// use ibverbs_async::{Context, Element, EventType};
    /// let ctx = Context::open("rxe0")?;
    /// let event = ctx.get_async_event()?;
    /// match (event.event_type(), event.element()) {
    ///     (EventType::PortErr, Element::Port(port)) => println!("port {port} went down"),
    ///     (EventType::CqErr, Element::Cq(cq)) => println!("{cq:?} overran"),
    ///     (other, element) => println!("{other} on {:?}", element),
    /// }
    /// event.ack();
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Call`] when `ibv_get_async_event` fails, [`Error::System`]
    /// when `poll` does.
    #[doc(alias = "ibv_get_async_event")]
    pub fn get_async_event(&self) -> Result<AsyncEvent<'_>> {
        loop {
            if let Wait::Ready(event) = self.read_async(None, Deadline::Never)? {
                return Ok(event);
            }
        }
    }

    /// Waits for the next asynchronous event and returns it as an
    /// [`OwnedAsyncEvent`], to move to another thread.
    ///
    /// # Errors
    /// As [`get_async_event`](Context::get_async_event).
    pub fn get_owned_async_event(&self) -> Result<OwnedAsyncEvent> {
        self.get_async_event().map(AsyncEvent::into_owned)
    }

    /// Waits at most `timeout` for the next asynchronous event.
    ///
    /// # Errors
    /// As [`get_async_event`](Context::get_async_event).
    pub fn get_async_event_timeout(&self, timeout: Duration) -> Result<Option<AsyncEvent<'_>>> {
        Ok(self.read_async(None, Deadline::after(timeout))?.ready())
    }

    /// Waits for the next asynchronous event until `stopper` is stopped
    /// (from another thread) or `timeout` passes (`None`: no limit).
    ///
    /// A stopped wait reads nothing, so no event is lost; a stop made
    /// before the call ends it at once.
    ///
    /// # Errors
    /// As [`get_async_event`](Context::get_async_event).
    pub fn wait_async_event(
        &self,
        stopper: &Stopper,
        timeout: Option<Duration>,
    ) -> Result<Wait<AsyncEvent<'_>>> {
        self.read_async(
            Some(stopper),
            timeout.map_or(Deadline::Never, Deadline::after),
        )
    }

    /// Waits for the next asynchronous event, acknowledges it at once and
    /// returns a copy of it.
    ///
    /// # Errors
    /// As [`get_async_event`](Context::get_async_event).
    pub fn get_and_ack(&self) -> Result<AsyncEventInfo> {
        self.get_async_event().map(AsyncEvent::ack)
    }

    fn read_async(
        &self,
        stopper: Option<&Stopper>,
        deadline: Deadline,
    ) -> Result<Wait<AsyncEvent<'_>>> {
        loop {
            if let Some(s) = stopper {
                // A stop ends the wait before anything is read: no event is
                // taken and then dropped.
                if s.is_stopped()? {
                    return Ok(Wait::Stopped);
                }
            }
            if let Some(event) = try_read(self)? {
                return Ok(Wait::Ready(event));
            }
            match wait_readable(self.inner.async_fd(), stopper, deadline)? {
                Wait::Ready(()) => {}
                Wait::TimedOut => return Ok(Wait::TimedOut),
                Wait::Stopped => return Ok(Wait::Stopped),
            }
        }
    }
}
