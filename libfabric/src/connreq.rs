//! Connection requests (`FI_CONNREQ`), per fi_cm(3): the `fi_info` of a
//! request carries a provider handle that exactly one `fi_accept` (through
//! an endpoint opened from it) or one `fi_reject` consumes.
//!
//! [`ConnRequest`] is move-only and consumed by
//! [`Endpoint::from_request`](crate::Endpoint::from_request) or
//! [`ConnRequest::reject`]; one that is dropped unanswered is rejected, so
//! the peer hears at once and the provider frees the handle. Rejecting twice,
//! rejecting after accepting, or opening two endpoints from one request, each
//! a use-after-free inside the provider, cannot be written.
//!
//! ```compile_fail,E0382
//! fn answer(domain: &libfabric::Domain, request: libfabric::ConnRequest) {
//!     let _ = request.reject(b"no");
//!     let _ = libfabric::Endpoint::from_request(domain, request); // already answered
//! }
//! ```
//!
//! The [`ep`](crate::ep) module's example accepts a request.

use crate::ep::check_cm_data;
use crate::eq::EqInner;
use crate::error::{check, Error, Handback};
use crate::info::{Info, InfoEntry};
use crate::pep::PepCore;
use libfabric_sys::fabric as sys;
use std::fmt;
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// The passive endpoint a request arrived on, and its event queue, kept
/// open until the request is answered (`fi_reject` needs the passive
/// endpoint; the queue must close after it).
pub(crate) struct RequestSource {
    pub(crate) pep: Arc<PepCore>,
    pub(crate) _eq: Arc<EqInner>,
}

/// A connection request received by a passive endpoint, owned by the
/// application until it is accepted or rejected.
pub struct ConnRequest {
    /// Its `fi_info`, with the request's handle. Taken by `into_parts`.
    info: ManuallyDrop<Info>,
    /// Where it arrived; `None` only if the event named no passive endpoint
    /// of the queue (then it cannot be answered). Dropped by `Drop` (or
    /// taken by `into_parts`), so that the drop of an event that holds a
    /// request is one call, not inlined into every event's drop.
    source: ManuallyDrop<Option<RequestSource>>,
}

/// `fi_reject` of a request's handle on the passive endpoint it arrived on.
pub(crate) fn reject_raw(pep: &PepCore, info: &InfoEntry, data: &[u8]) -> i32 {
    // SAFETY: fi_reject(3) on the open passive endpoint the request arrived
    // on, with the request's handle, which no other call has consumed (every
    // path that uses a request consumes it); data is read during the call
    // and is no longer than FI_OPT_CM_DATA_SIZE (checked by the callers).
    unsafe {
        sys::fi_reject(
            pep.fid.as_ptr(),
            (*info.as_raw()).handle,
            data.as_ptr().cast(),
            data.len(),
        )
    }
}

impl ConnRequest {
    pub(crate) fn new(info: Info, source: Option<RequestSource>) -> Self {
        ConnRequest {
            info: ManuallyDrop::new(info),
            source: ManuallyDrop::new(source),
        }
    }

    /// The request's `fi_info` (provider, domain, addresses, ...). Open the
    /// accepting side's domain with it.
    #[must_use]
    pub fn info(&self) -> &InfoEntry {
        &self.info
    }

    pub(crate) fn source(&self) -> Option<&RequestSource> {
        self.source.as_ref()
    }

    /// Takes the request apart without answering it: whoever takes the
    /// `fi_info` answers it (an endpoint opened from it accepts it).
    pub(crate) fn into_parts(self) -> (Info, Option<RequestSource>) {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so each field is moved out once.
        unsafe {
            let source = ManuallyDrop::take(&mut this.source);
            (ManuallyDrop::take(&mut this.info), source)
        }
    }

    /// `fi_reject`, sending `data` (at most `FI_OPT_CM_DATA_SIZE` bytes):
    /// the peer sees an error entry with `ECONNREFUSED` and this data as its
    /// `err_data`.
    ///
    /// # Errors
    /// [`Error::State`] when the request names no passive endpoint and
    /// [`Error::TooLarge`] for `data` over the limit, each with the request
    /// handed back unanswered (`Some`); [`Error::Call`] when `fi_reject`
    /// fails, with `None` (the provider has consumed the request's handle).
    #[doc(alias = "fi_reject")]
    pub fn reject(self, data: &[u8]) -> Handback<Option<ConnRequest>> {
        let Some(source) = &*self.source else {
            let error = Error::State {
                call: "fi_reject",
                reason: "the request names no passive endpoint of its event queue",
            };
            return Err((Some(self), error));
        };
        if let Err(error) = check_cm_data(source.pep.fid.fid(), data) {
            return Err((Some(self), error));
        }
        let ret = reject_raw(&source.pep, &self.info, data);
        // The handle is consumed whatever fi_reject returned; the fi_info
        // itself is still the application's to free (Info's Drop).
        drop(self.into_parts());
        check("fi_reject", ret).map_err(|error| (None, error))
    }
}

impl Drop for ConnRequest {
    #[inline(never)]
    fn drop(&mut self) {
        // SAFETY: dropped once, here (into_parts forgets self instead).
        if let Some(source) = unsafe { ManuallyDrop::take(&mut self.source) } {
            // Unanswered: reject it so the peer is told and the provider
            // frees the handle. The error cannot be reported from Drop.
            let _ = reject_raw(&source.pep, &self.info, &[]);
        }
        // SAFETY: dropped once, here (into_parts forgets self instead).
        unsafe { ManuallyDrop::drop(&mut self.info) };
    }
}

impl fmt::Debug for ConnRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnRequest")
            .field("info", &*self.info)
            .finish_non_exhaustive()
    }
}
