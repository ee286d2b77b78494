//! Shared receive queues: `ibv_create_srq(3)`, `ibv_modify_srq(3)`,
//! `ibv_post_srq_recv(3)`, `ibv_destroy_srq(3)`.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use libibverbs_sys as sys;

use crate::error::{check_ptr, check_rc, Error, ObjectKind, Result};
use crate::mr::HeldMrs;
use crate::pd::{Pd, PdInner};
use crate::qp::RecvRequest;
use crate::registry::{handle, Describe, Destroy, ObjectId, Registered};

pub(crate) struct SrqInner {
    raw: NonNull<sys::ibv_srq>,
    id: ObjectId,
    dead: bool,
    /// Memory regions receives were posted on: the device may write them
    /// until the SRQ is destroyed.
    mrs: HeldMrs,
    pub(crate) pd: Arc<PdInner>,
}

// SAFETY: verbs objects are safe for multi-threaded access (ibv_alloc_td(3));
// posting to one SRQ from several threads is allowed (the provider locks);
// the Rust-side state is behind a Mutex.
unsafe impl Send for SrqInner {}
// SAFETY: as for Send.
unsafe impl Sync for SrqInner {}

impl Registered for SrqInner {
    fn id(&self) -> ObjectId {
        self.id
    }
}

impl SrqInner {
    pub(crate) fn raw(&self) -> *mut sys::ibv_srq {
        self.raw.as_ptr()
    }

    fn destroy_raw(&mut self) -> Result<()> {
        // SAFETY: QPs attached to the SRQ hold an Arc of this value, so none
        // is left; asynchronous events for it hold one too, except those
        // read while the last reference was going, which their reader
        // acknowledges at once (registry.rs), so ibv_destroy_srq's wait for
        // acknowledgements ends.
        check_rc("ibv_destroy_srq", unsafe {
            sys::ibv_destroy_srq(self.raw())
        })?;
        self.dead = true;
        self.pd.ctx.srqs.remove(self.raw.as_ptr() as usize, self.id);
        Ok(())
    }
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        if !self.dead && self.destroy_raw().is_err() {
            // Still alive: the device may use its regions, and the SRQ its
            // PD: keep them for ever rather than free them under it.
            self.mrs.leak();
            std::mem::forget(Arc::clone(&self.pd));
        }
    }
}

impl Destroy for SrqInner {
    const KIND: ObjectKind = ObjectKind::SharedReceiveQueue;

    fn destroy_now(&mut self) -> Result<()> {
        self.destroy_raw()
    }

    fn handed_back(arc: &Arc<Self>) {
        arc.pd.ctx.srqs.reinsert(arc.raw.as_ptr() as usize, arc);
    }
}

/// Current attributes of an SRQ (`struct ibv_srq_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SrqAttr {
    /// Maximum number of outstanding receives.
    pub max_wr: u32,
    /// Maximum scatter entries per receive.
    pub max_sge: u32,
    /// The armed limit, 0 when not armed.
    pub srq_limit: u32,
}

/// A shared receive queue: `ibv_create_srq()`.
///
/// A cheap handle (an `Arc`); clones, queue pairs attached to it and events
/// naming it keep it alive. It holds the memory regions receives were
/// posted on until it is destroyed.
// Send + Sync through Arc<SrqInner>: see the `unsafe impl`s on SrqInner
// for why the C object may be used and dropped from any thread.
#[derive(Clone)]
pub struct Srq {
    pub(crate) inner: Arc<SrqInner>,
}

impl Pd {
    /// Creates an SRQ for `max_wr` receives of `max_sge` scatter entries
    /// (`ibv_create_srq()`).
    ///
    /// # Errors
    /// [`Error::Call`] when `ibv_create_srq` fails (more than the device's
    /// `max_srq_wr` or `max_srq_sge`).
    #[doc(alias = "ibv_create_srq")]
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Srq> {
        let pd = &self.inner;
        let inner = pd.ctx.srqs.create(|| {
            // libibverbs reads a `struct ibv_srq_init_attr` as the start of
            // the extended `struct ibv_srq_init_attr_ex` (ibv_cmd_create_srq
            // copies it whole, tail padding included, and tests the
            // `comp_mask` that follows `attr`, which falls in that padding).
            // Passing the extended struct, zeroed, makes `comp_mask` 0
            // instead of whatever the padding held.
            // SAFETY: ibv_srq_init_attr_ex is plain data (integers and
            // pointers); all-zero is a valid value.
            let mut init: sys::ibv_srq_init_attr_ex = unsafe { std::mem::zeroed() };
            init.attr = sys::ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            };
            let legacy = std::ptr::from_mut(&mut init).cast::<sys::ibv_srq_init_attr>();
            // SAFETY: valid PD; `legacy` points to an ibv_srq_init_attr_ex,
            // whose first members have the layout of ibv_srq_init_attr
            // (srq_context, attr), and which is larger than it, so every
            // byte libibverbs reads is initialised; ibv_create_srq(3) returns
            // NULL with errno set on failure and writes the actual sizes
            // back into `attr`.
            let raw = check_ptr("ibv_create_srq", unsafe {
                sys::ibv_create_srq(pd.raw(), legacy)
            })?;
            let inner = Arc::new(SrqInner {
                raw,
                id: ObjectId::next(),
                dead: false,
                mrs: HeldMrs::new(),
                pd: Arc::clone(pd),
            });
            Ok((raw.as_ptr() as usize, inner))
        })?;
        Ok(Srq { inner })
    }
}

impl Srq {
    /// Posts a receive (`ibv_post_srq_recv()`). The SRQ keeps the
    /// request's memory region registered until it is destroyed.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] if the range does not fit the region,
    /// [`Error::TooLarge`] for a range over 4 GiB,
    /// [`Error::InvalidArgument`] if the region belongs to another
    /// protection domain, [`Error::Call`] if posting fails (e.g. the SRQ is
    /// full).
    #[doc(alias = "ibv_post_srq_recv")]
    pub fn post_recv(&self, req: &RecvRequest<'_>) -> Result<()> {
        if !Arc::ptr_eq(&req.mr.inner.pd, &self.inner.pd) {
            return Err(Error::invalid(
                "the memory region belongs to another protection domain",
            ));
        }
        req.post(&self.inner.mrs, "ibv_post_srq_recv", |wr, bad| {
            // SAFETY: valid SRQ; the work request and its scatter list are
            // live for the call (the provider copies them); the memory it
            // names is held registered by this SRQ until destroy.
            unsafe { sys::ibv_post_srq_recv(self.inner.raw(), wr, bad) }
        })
    }

    /// Arms the limit: when fewer than `limit` receives remain, the
    /// `IBV_EVENT_SRQ_LIMIT_REACHED` asynchronous event is raised once and
    /// the limit is disarmed (`ibv_modify_srq()` with `IBV_SRQ_LIMIT`).
    ///
    /// # Errors
    /// [`Error::Call`] when `ibv_modify_srq` fails (a limit over `max_wr`).
    #[doc(alias = "ibv_modify_srq")]
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        let mut attr = sys::ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: limit,
        };
        // SAFETY: valid SRQ and attributes; returns 0 or an errno value.
        let rc = unsafe {
            sys::ibv_modify_srq(
                self.inner.raw(),
                &mut attr,
                sys::IBV_SRQ_LIMIT as libc::c_int,
            )
        };
        check_rc("ibv_modify_srq", rc)
    }

    /// Current attributes (`ibv_query_srq()`).
    ///
    /// # Errors
    /// [`Error::Call`] when `ibv_query_srq` fails.
    #[doc(alias = "ibv_query_srq")]
    pub fn query(&self) -> Result<SrqAttr> {
        let mut attr = sys::ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: 0,
        };
        // SAFETY: valid SRQ; fills the caller's struct.
        let rc = unsafe { sys::ibv_query_srq(self.inner.raw(), &mut attr) };
        check_rc("ibv_query_srq", rc)?;
        Ok(SrqAttr {
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            srq_limit: attr.srq_limit,
        })
    }

    /// The protection domain of the SRQ.
    #[must_use]
    pub fn pd(&self) -> Pd {
        Pd {
            inner: Arc::clone(&self.inner.pd),
        }
    }
}

handle! {
    Srq(SrqInner), what = "SRQ",
    /// Destroys the SRQ now (`ibv_destroy_srq()`). Fails while queue pairs
    /// are attached to it.
    fn destroy = "ibv_destroy_srq"
}

impl Describe for SrqInner {
    fn describe(&self, _: &mut fmt::DebugStruct<'_, '_>) {}
}
