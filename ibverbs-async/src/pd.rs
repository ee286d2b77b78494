//! Protection domains: `ibv_alloc_pd(3)` / `ibv_dealloc_pd(3)`.

use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use libibverbs_sys as sys;

use crate::context::{Context, ContextInner};
use crate::error::{check_ptr, check_rc, ObjectKind, Result};
use crate::registry::{handle, Describe, Destroy, ObjectId};

pub(crate) struct PdInner {
    raw: NonNull<sys::ibv_pd>,
    id: ObjectId,
    dead: bool,
    pub(crate) ctx: Arc<ContextInner>,
}

// SAFETY: verbs objects are safe for multi-threaded access (ibv_alloc_td(3));
// the raw pointer is only passed to thread-safe verbs.
unsafe impl Send for PdInner {}
// SAFETY: as for Send.
unsafe impl Sync for PdInner {}

impl PdInner {
    pub(crate) fn raw(&self) -> *mut sys::ibv_pd {
        self.raw.as_ptr()
    }
}

impl Drop for PdInner {
    fn drop(&mut self) {
        if !self.dead && self.destroy_now().is_err() {
            // Still allocated: keep the context open for ever rather than
            // close it under the PD. Drop cannot report the error.
            std::mem::forget(Arc::clone(&self.ctx));
        }
    }
}

impl Destroy for PdInner {
    const KIND: ObjectKind = ObjectKind::ProtectionDomain;

    fn destroy_now(&mut self) -> Result<()> {
        // SAFETY: MRs, QPs and SRQs of this PD hold an Arc of it, so none is
        // left (one that could not be destroyed keeps an Arc for ever);
        // called once: `dead` is set after success, and Drop skips it then.
        check_rc("ibv_dealloc_pd", unsafe { sys::ibv_dealloc_pd(self.raw()) })?;
        self.dead = true;
        Ok(())
    }
}

/// A protection domain: `ibv_alloc_pd()`. Memory regions, queue pairs and
/// shared receive queues are created from it.
///
/// A cheap handle (an `Arc`); clones refer to the same PD. Objects created
/// from it hold it, so it is deallocated after them.
// Send + Sync through Arc<PdInner>: see the `unsafe impl`s on PdInner
// for why the C object may be used and dropped from any thread.
#[derive(Clone)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

impl Context {
    /// Allocates a protection domain (`ibv_alloc_pd()`).
    ///
    /// # Errors
    /// [`Error::Call`](crate::Error::Call) when libibverbs fails.
    #[doc(alias = "ibv_alloc_pd")]
    pub fn alloc_pd(&self) -> Result<Pd> {
        // SAFETY: ibv_alloc_pd(3) takes a valid context; NULL with errno on
        // failure.
        let raw = check_ptr("ibv_alloc_pd", unsafe {
            sys::ibv_alloc_pd(self.inner.raw())
        })?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                raw,
                id: ObjectId::next(),
                dead: false,
                ctx: Arc::clone(&self.inner),
            }),
        })
    }
}

impl Pd {
    /// The context the PD belongs to.
    #[must_use]
    pub fn context(&self) -> Context {
        Context {
            inner: Arc::clone(&self.inner.ctx),
        }
    }
}

handle! {
    Pd(PdInner), what = "protection domain",
    /// Deallocates the PD now (`ibv_dealloc_pd()`). Fails while objects
    /// created from it remain.
    fn dealloc = "ibv_dealloc_pd"
}

impl Describe for PdInner {
    fn describe(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("device", &self.ctx.name());
    }
}
