//! Completion queues: `ibv_create_cq(3)`, `ibv_poll_cq(3)`,
//! `ibv_req_notify_cq(3)`, `ibv_destroy_cq(3)`.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use libibverbs_sys as sys;

use crate::channel::{ChannelInner, CompChannel};
use crate::context::{Context, ContextInner};
use crate::error::{check_count, check_ptr, check_rc, Error, ObjectKind, Result};
use crate::registry::{handle, Describe, Destroy, ObjectId, Registered};

/// Completion events are acknowledged in batches of this many
/// (`ibv_ack_cq_events(3)`: "it is recommended to acknowledge many events in
/// one call", as it takes a mutex).
pub const CQ_EVENT_ACK_BATCH: u32 = 64;

pub(crate) struct CqInner {
    raw: NonNull<sys::ibv_cq>,
    id: ObjectId,
    capacity: u32,
    dead: bool,
    /// Completion events read from the channel but not yet passed to
    /// `ibv_ack_cq_events`.
    unacked: AtomicU32,
    pub(crate) ctx: Arc<ContextInner>,
    /// `ibv_destroy_comp_channel` fails with EBUSY while a CQ uses the
    /// channel: the CQ keeps it.
    pub(crate) channel: Option<Arc<ChannelInner>>,
}

// SAFETY: verbs objects are safe for multi-threaded access (ibv_alloc_td(3));
// polling, arming and acknowledging may happen from several threads at once
// (providers lock the CQ); `unacked` is atomic.
unsafe impl Send for CqInner {}
// SAFETY: as for Send.
unsafe impl Sync for CqInner {}

impl Registered for CqInner {
    fn id(&self) -> ObjectId {
        self.id
    }
}

impl CqInner {
    pub(crate) fn raw(&self) -> *mut sys::ibv_cq {
        self.raw.as_ptr()
    }

    /// Counts one completion event read from the channel for this CQ, and
    /// acknowledges the batch when it is full.
    pub(crate) fn record_cq_event(&self) {
        let n = self.unacked.fetch_add(1, Ordering::AcqRel) + 1;
        if n >= CQ_EVENT_ACK_BATCH {
            self.ack_pending();
        }
    }

    fn ack_pending(&self) {
        let n = self.unacked.swap(0, Ordering::AcqRel);
        if n > 0 {
            // SAFETY: the CQ is alive (we are borrowed from a live inner
            // value), and `n` events were read for it and not yet
            // acknowledged (each was counted once, and swapped out once).
            unsafe { sys::ibv_ack_cq_events(self.raw(), n) };
        }
    }

    fn destroy_raw(&mut self) -> Result<()> {
        // ibv_destroy_cq waits until every completion event read for this CQ
        // is acknowledged: acknowledge the pending ones first. No event can
        // be counted any more: counting needs a strong reference, and there
        // is none left (this is Drop, or the last handle's destroy).
        self.ack_pending();
        // SAFETY: QPs using the CQ hold an Arc of this value, so none is
        // left; asynchronous events for it hold an Arc too, except those
        // read while the last reference was going, which their reader
        // acknowledges at once (registry.rs), so the wait inside
        // ibv_destroy_cq ends.
        let rc = unsafe { sys::ibv_destroy_cq(self.raw()) };
        check_rc("ibv_destroy_cq", rc)?;
        self.dead = true;
        self.ctx.cqs.remove(self.raw.as_ptr() as usize, self.id);
        Ok(())
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        if !self.dead && self.destroy_raw().is_err() {
            // Still alive: keep its context and channel open for ever
            // rather than close them under it.
            std::mem::forget(Arc::clone(&self.ctx));
            if let Some(channel) = &self.channel {
                std::mem::forget(Arc::clone(channel));
            }
        }
    }
}

impl Destroy for CqInner {
    const KIND: ObjectKind = ObjectKind::CompletionQueue;

    fn destroy_now(&mut self) -> Result<()> {
        self.destroy_raw()
    }

    fn handed_back(arc: &Arc<Self>) {
        arc.ctx.cqs.reinsert(arc.raw.as_ptr() as usize, arc);
    }
}

/// A completion queue: `ibv_create_cq()`.
///
/// A cheap handle (an `Arc`); clones, queue pairs using the CQ and events
/// naming it all keep it alive, and it is destroyed when the last of them
/// goes — after acknowledging the completion events still counted against
/// it, so the destroy never waits for an acknowledgement that cannot come.
// Send + Sync through Arc<CqInner>: see the `unsafe impl`s on CqInner
// for why the C object may be used and dropped from any thread.
#[derive(Clone)]
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

impl Context {
    /// Creates a CQ with room for at least `cqe` completions and no
    /// completion channel (`ibv_create_cq()`).
    ///
    /// # Errors
    /// [`Error::TooLarge`] for a `cqe` over the C `int`; [`Error::Call`] when
    /// `ibv_create_cq` fails (more entries than the device's `max_cqe`).
    #[doc(alias = "ibv_create_cq")]
    pub fn create_cq(&self, cqe: u32) -> Result<Cq> {
        create_cq(&self.inner, cqe, None, 0)
    }

    /// Creates a CQ whose completion notifications go to `channel`
    /// (`ibv_create_cq()` with a channel and completion vector).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the channel belongs to another context.
    pub fn create_cq_with_channel(
        &self,
        cqe: u32,
        channel: &CompChannel,
        comp_vector: u32,
    ) -> Result<Cq> {
        if !Arc::ptr_eq(&channel.inner.ctx, &self.inner) {
            return Err(Error::invalid(
                "the completion channel belongs to another context",
            ));
        }
        create_cq(
            &self.inner,
            cqe,
            Some(Arc::clone(&channel.inner)),
            comp_vector,
        )
    }
}

/// A count for an `int` parameter of a verb.
pub(crate) fn c_int_arg(what: &'static str, value: u32) -> Result<libc::c_int> {
    libc::c_int::try_from(value).map_err(|_| Error::TooLarge {
        what,
        limit: libc::c_int::MAX as usize,
        given: value as usize,
    })
}

fn create_cq(
    ctx: &Arc<ContextInner>,
    cqe: u32,
    channel: Option<Arc<ChannelInner>>,
    comp_vector: u32,
) -> Result<Cq> {
    let cqe = c_int_arg("CQ entries", cqe)?;
    let comp_vector = c_int_arg("completion vector", comp_vector)?;
    let channel_raw = channel.as_ref().map_or(std::ptr::null_mut(), |c| c.raw());
    let inner = ctx.cqs.create(|| {
        // SAFETY: valid context and (optional) channel of that context;
        // ibv_create_cq(3) returns NULL with errno set on failure.
        let raw = unsafe {
            sys::ibv_create_cq(
                ctx.raw(),
                cqe,
                std::ptr::null_mut(),
                channel_raw,
                comp_vector,
            )
        };
        let raw = check_ptr("ibv_create_cq", raw)?;
        // SAFETY: cqe is set by ibv_create_cq to the actual capacity.
        let capacity = u32::try_from(unsafe { (*raw.as_ptr()).cqe }).unwrap_or(0);
        let inner = Arc::new(CqInner {
            raw,
            id: ObjectId::next(),
            capacity,
            dead: false,
            unacked: AtomicU32::new(0),
            ctx: Arc::clone(ctx),
            channel,
        });
        Ok((raw.as_ptr() as usize, inner))
    })?;
    Ok(Cq { inner })
}

impl Cq {
    /// The number of entries the CQ holds (at least what was asked for).
    #[must_use]
    pub fn capacity(&self) -> u32 {
        self.inner.capacity
    }

    /// The CQ's completion channel, if it has one.
    #[must_use]
    pub fn channel(&self) -> Option<CompChannel> {
        self.inner.channel.as_ref().map(|c| CompChannel {
            inner: Arc::clone(c),
        })
    }

    /// The context the CQ belongs to.
    #[must_use]
    pub fn context(&self) -> Context {
        Context {
            inner: Arc::clone(&self.inner.ctx),
        }
    }

    /// Polls up to `out.len()` completions into `out` (`ibv_poll_cq()`) and
    /// returns the part of `out` they fill, empty when the CQ is empty.
    ///
    /// ```no_run
    /// # fn main() -> ibverbs_async::Result<()> {
    /// # let ctx = ibverbs_async::Context::open("rxe0")?;
    /// # let cq = ctx.create_cq(16)?;
    /// use ibverbs_async::WorkCompletion;
    /// let mut buf = [WorkCompletion::default(); 16];
    /// for wc in cq.poll(&mut buf)? {
    ///     println!("{} {:?}", wc.wr_id(), wc.status());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Call`] when `ibv_poll_cq` fails.
    #[doc(alias = "ibv_poll_cq")]
    pub fn poll<'w>(&self, out: &'w mut [WorkCompletion]) -> Result<&'w mut [WorkCompletion]> {
        let n = libc::c_int::try_from(out.len()).unwrap_or(libc::c_int::MAX);
        // SAFETY: WorkCompletion is repr(transparent) over ibv_wc, and `out`
        // has room for n of them; ibv_poll_cq(3) writes at most n entries
        // and returns how many, or a negative value on failure.
        let rc = unsafe { sys::ibv_poll_cq(self.inner.raw(), n, out.as_mut_ptr().cast()) };
        let filled = check_count("ibv_poll_cq", rc)?;
        // A provider returning more than it was asked for would have written
        // out of bounds already; never hand out more than `out` holds.
        let filled = filled.min(out.len());
        Ok(&mut out[..filled])
    }

    /// Polls one completion.
    ///
    /// # Errors
    /// As [`poll`](Cq::poll).
    pub fn poll_one(&self) -> Result<Option<WorkCompletion>> {
        let mut wc = [WorkCompletion::default()];
        Ok(self.poll(&mut wc)?.first().copied())
    }

    /// Arms the CQ: the next completion (or the next solicited one) adds an
    /// event to its completion channel (`ibv_req_notify_cq()`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a CQ without a completion channel;
    /// [`Error::Call`] when `ibv_req_notify_cq` fails.
    #[doc(alias = "ibv_req_notify_cq")]
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        if self.inner.channel.is_none() {
            return Err(Error::invalid("the CQ has no completion channel"));
        }
        // SAFETY: valid CQ; ibv_req_notify_cq(3) returns 0 or an errno value.
        let rc = unsafe { sys::ibv_req_notify_cq(self.inner.raw(), solicited_only.into()) };
        check_rc("ibv_req_notify_cq", rc)
    }

    /// Completion events read for this CQ whose acknowledgement is still
    /// batched (less than [`CQ_EVENT_ACK_BATCH`]). They are acknowledged
    /// when the batch fills, by [`ack_cq_events`](Cq::ack_cq_events), and
    /// before the CQ is destroyed.
    #[must_use]
    pub fn unacked_cq_events(&self) -> u32 {
        self.inner.unacked.load(Ordering::Acquire)
    }

    /// Acknowledges the batched completion events now
    /// (`ibv_ack_cq_events()`).
    #[doc(alias = "ibv_ack_cq_events")]
    pub fn ack_cq_events(&self) {
        self.inner.ack_pending();
    }
}

handle! {
    Cq(CqInner), what = "CQ",
    /// Destroys the CQ now (`ibv_destroy_cq()`), after acknowledging the
    /// completion events still counted against it. Fails while queue pairs
    /// use it.
    fn destroy = "ibv_destroy_cq"
}

impl Describe for CqInner {
    fn describe(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("capacity", &self.capacity)
            .field("channel", &self.channel.is_some());
    }
}

/// Status of a work completion (`enum ibv_wc_status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcStatus {
    /// Success.
    Success,
    /// Local length error.
    LocLenErr,
    /// Local QP operation error.
    LocQpOpErr,
    /// Local protection error.
    LocProtErr,
    /// Flushed: the QP went to the error state.
    WrFlushErr,
    /// Bad response.
    BadRespErr,
    /// Local access error.
    LocAccessErr,
    /// Remote invalid request.
    RemInvReqErr,
    /// Remote access error.
    RemAccessErr,
    /// Remote operation error.
    RemOpErr,
    /// Transport retry counter exceeded.
    RetryExcErr,
    /// RNR retry counter exceeded.
    RnrRetryExcErr,
    /// Fatal error.
    FatalErr,
    /// Response timeout.
    RespTimeoutErr,
    /// General error.
    GeneralErr,
    /// Another status (the raw `enum ibv_wc_status` value).
    Other(u32),
}

impl WcStatus {
    /// Decodes `enum ibv_wc_status`.
    #[must_use]
    pub fn from_raw(raw: u32) -> WcStatus {
        match raw {
            sys::IBV_WC_SUCCESS => WcStatus::Success,
            sys::IBV_WC_LOC_LEN_ERR => WcStatus::LocLenErr,
            sys::IBV_WC_LOC_QP_OP_ERR => WcStatus::LocQpOpErr,
            sys::IBV_WC_LOC_PROT_ERR => WcStatus::LocProtErr,
            sys::IBV_WC_WR_FLUSH_ERR => WcStatus::WrFlushErr,
            sys::IBV_WC_BAD_RESP_ERR => WcStatus::BadRespErr,
            sys::IBV_WC_LOC_ACCESS_ERR => WcStatus::LocAccessErr,
            sys::IBV_WC_REM_INV_REQ_ERR => WcStatus::RemInvReqErr,
            sys::IBV_WC_REM_ACCESS_ERR => WcStatus::RemAccessErr,
            sys::IBV_WC_REM_OP_ERR => WcStatus::RemOpErr,
            sys::IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExcErr,
            sys::IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
            sys::IBV_WC_FATAL_ERR => WcStatus::FatalErr,
            sys::IBV_WC_RESP_TIMEOUT_ERR => WcStatus::RespTimeoutErr,
            sys::IBV_WC_GENERAL_ERR => WcStatus::GeneralErr,
            other => WcStatus::Other(other),
        }
    }
}

/// Operation of a work completion (`enum ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcOpcode {
    /// A send finished.
    Send,
    /// An RDMA write finished.
    RdmaWrite,
    /// An RDMA read finished.
    RdmaRead,
    /// A message was received.
    Recv,
    /// An RDMA write with immediate data was received.
    RecvRdmaWithImm,
    /// Another opcode (the raw value).
    Other(u32),
}

/// One work completion (`struct ibv_wc`), read through accessors.
// Plain integers copied out of C: Send + Sync by construction.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct WorkCompletion(sys::ibv_wc);

impl Default for WorkCompletion {
    fn default() -> Self {
        // SAFETY: ibv_wc is plain data (integers and a union of integers);
        // all-zero is a valid value.
        WorkCompletion(unsafe { std::mem::zeroed() })
    }
}

impl WorkCompletion {
    /// The work request ID given when posting.
    #[must_use]
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }
    /// Status.
    #[must_use]
    pub fn status(&self) -> WcStatus {
        WcStatus::from_raw(self.0.status)
    }
    /// Whether the status is success.
    #[must_use]
    pub fn is_success(&self) -> bool {
        self.0.status == sys::IBV_WC_SUCCESS
    }
    /// The status as libibverbs describes it (`ibv_wc_status_str()`).
    #[must_use]
    pub fn status_str(&self) -> &'static str {
        // SAFETY: ibv_wc_status_str(3) returns a static string for any value.
        let p = unsafe { sys::ibv_wc_status_str(self.0.status) };
        if p.is_null() {
            return "unknown";
        }
        // SAFETY: a NUL-terminated static string.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_str()
            .unwrap_or("unknown")
    }
    /// Opcode (valid only for successful completions).
    #[must_use]
    pub fn opcode(&self) -> WcOpcode {
        match self.0.opcode {
            sys::IBV_WC_SEND => WcOpcode::Send,
            sys::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
            sys::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
            sys::IBV_WC_RECV => WcOpcode::Recv,
            sys::IBV_WC_RECV_RDMA_WITH_IMM => WcOpcode::RecvRdmaWithImm,
            other => WcOpcode::Other(other),
        }
    }
    /// Vendor error code.
    #[must_use]
    pub fn vendor_err(&self) -> u32 {
        self.0.vendor_err
    }
    /// Bytes received (receive completions).
    #[must_use]
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }
    /// Immediate data in host byte order, if the message carried some.
    #[must_use]
    pub fn imm_data(&self) -> Option<u32> {
        if self.0.wc_flags & sys::IBV_WC_WITH_IMM == 0 {
            return None;
        }
        // SAFETY: with IBV_WC_WITH_IMM set the union holds imm_data; both
        // members are u32 anyway.
        Some(u32::from_be(unsafe { self.0.__bindgen_anon_1.imm_data }))
    }
    /// Number of the local QP the completion belongs to.
    #[must_use]
    pub fn qp_num(&self) -> u32 {
        self.0.qp_num
    }
    /// Number of the remote QP (UD only).
    #[must_use]
    pub fn src_qp(&self) -> u32 {
        self.0.src_qp
    }
}

impl fmt::Debug for WorkCompletion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkCompletion")
            .field("wr_id", &self.wr_id())
            .field("status", &self.status())
            .field("opcode", &self.opcode())
            .field("byte_len", &self.byte_len())
            .field("qp_num", &self.qp_num())
            .field("imm_data", &self.imm_data())
            .finish()
    }
}
