//! The one place that closes libfabric objects.

use crate::error::{check, Errno, ObjectKind, Result};
use libfabric_sys::fabric as sys;
use std::ptr::NonNull;

/// A libfabric object type whose first member is its `struct fid`.
pub(crate) trait RawFid {}

macro_rules! raw_fid {
    ($($ty:ident)*) => {$( impl RawFid for sys::$ty {} )*};
}

raw_fid!(fid_fabric fid_domain fid_eq fid_cq fid_cntr fid_ep fid_pep fid_av fid_mr fid_wait fid_poll);

/// Owns one open libfabric object and closes it (`fi_close`) exactly once:
/// through [`OwnedFid::close`], or else when dropped, where a failure is
/// ignored because Drop must not panic.
///
/// Every wrapper declares its `OwnedFid` as its first field, so the object is
/// closed before the parents and bound objects held in later fields are
/// released: children close first, which is the order fi_close(3) requires
/// (closing a parent with children open fails with `-FI_EBUSY`).
pub(crate) struct OwnedFid<T: RawFid> {
    raw: NonNull<T>,
    closed: bool,
}

// SAFETY: domains opened as `Domain<ThreadSafe>` are FI_THREAD_SAFE
// (checked in `Domain::open_model`), under which fi_domain(3) allows any
// object to be used through any interface from any thread at once;
// fabric-level objects (EQs, wait sets) are always thread safe. For the
// serialized models (FI_THREAD_DOMAIN, FI_THREAD_COMPLETION) every public
// handle of the domain's objects is !Send and !Sync (their type parameter),
// so the calls made through them are all made on the domain's thread; the
// internal values that do cross threads make no call there (a pool's MR
// close is parked for the domain's thread: `DomainInner::close_on_owner`;
// Waiter and wait sets refuse such queues; event queues hold no such
// endpoint). One exception is known and guarded:
// the util providers (rxm, rxd, shm) crash a completion queue's or
// counter's progress run on one thread while an endpoint bound to it is
// enabled or closed on another, so those calls exclude each other
// (`CqInner::lifecycle`, `CntrInner::lifecycle`). The
// pointer itself is just an address.
unsafe impl<T: RawFid> Send for OwnedFid<T> {}
// SAFETY: as above.
unsafe impl<T: RawFid> Sync for OwnedFid<T> {}

impl<T: RawFid> OwnedFid<T> {
    /// Takes ownership of an object just opened. `raw` must point to an open
    /// object of type T that nothing else closes.
    pub(crate) fn new(raw: *mut T) -> Option<Self> {
        NonNull::new(raw).map(|raw| OwnedFid { raw, closed: false })
    }

    /// The object an open call returned: its return code checked, and a
    /// NULL object on success reported as `-FI_EINVAL`.
    pub(crate) fn opened(call: &'static str, ret: std::ffi::c_int, raw: *mut T) -> Result<Self> {
        check(call, ret)?;
        Self::new(raw).ok_or(crate::Error::call(call, Errno::INVAL))
    }

    /// The object.
    #[inline(always)]
    pub(crate) fn as_ptr(&self) -> *mut T {
        self.raw.as_ptr()
    }

    /// The object, as the non-null pointer it is.
    #[inline(always)]
    pub(crate) fn as_non_null(&self) -> NonNull<T> {
        self.raw
    }

    /// Its `struct fid`.
    #[inline(always)]
    pub(crate) fn fid(&self) -> *mut sys::fid {
        // Every fid_* struct starts with `struct fid fid;`.
        self.raw.as_ptr().cast()
    }

    /// The ownership, moved to the handle returned: `self` no longer
    /// closes the object.
    pub(crate) fn take(&mut self) -> Self {
        let out = OwnedFid {
            raw: self.raw,
            closed: self.closed,
        };
        self.closed = true;
        out
    }

    /// Whether the object is still open.
    pub(crate) fn is_open(&self) -> bool {
        !self.closed
    }

    /// Moves the ownership of the open object into the handle returned,
    /// leaving this one closed (its drop then closes nothing).
    pub(crate) fn take_open(&mut self) -> Self {
        let taken = OwnedFid {
            raw: self.raw,
            closed: self.closed,
        };
        self.closed = true;
        taken
    }

    /// Closes now and reports the result. A failed close leaves the object
    /// open and owned (fi_close(3): on error nothing was released), so that
    /// it is neither used after a release nor forgotten.
    pub(crate) fn close(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        // SAFETY: the object is open (closed is false) and owned by self;
        // once fi_close succeeds it is never used again.
        check("fi_close", unsafe { sys::fi_close(self.fid()) })?;
        self.closed = true;
        Ok(())
    }
}

impl<T: RawFid> Drop for OwnedFid<T> {
    fn drop(&mut self) {
        // An error here (say -FI_EBUSY) cannot be reported from Drop; the
        // ownership rules of this crate make it not happen in safe code.
        let _ = self.close();
    }
}

/// Closes the object behind `arc` now if this is the last handle. Otherwise,
/// or when the close itself fails, the handle comes back with the error
/// (rebuilt by `wrap`), so that nothing is lost and the caller may retry.
pub(crate) fn close_last<I, H>(
    arc: std::sync::Arc<I>,
    name: ObjectKind,
    wrap: impl FnOnce(std::sync::Arc<I>) -> H,
    close: impl FnOnce(&mut I) -> Result<()>,
) -> std::result::Result<(), (H, crate::Error)> {
    match std::sync::Arc::try_unwrap(arc) {
        Ok(mut inner) => match close(&mut inner) {
            Ok(()) => Ok(()),
            Err(e) => Err((wrap(std::sync::Arc::new(inner)), e)),
        },
        Err(shared) => {
            let users = std::sync::Arc::strong_count(&shared) - 1;
            Err((
                wrap(shared),
                crate::Error::InUse {
                    object: name,
                    users,
                },
            ))
        }
    }
}
