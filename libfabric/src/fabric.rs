//! `fi_fabric(3)`: the fabric, parent of domains, event queues and passive
//! endpoints.

use crate::error::{Error, Handback, ObjectKind, ObjectScope, Result};
use crate::fid::{close_last, OwnedFid};
use crate::info::{Info, InfoEntry};
use libfabric_sys::fabric as sys;
use std::ptr;
use std::sync::Arc;

pub(crate) struct FabricInner {
    pub(crate) fid: OwnedFid<sys::fid_fabric>,
    /// The `fi_info` whose `fabric_attr` opened it, kept while it is open
    /// (fi_fabric(3) does not say the provider copies what the attribute
    /// points to).
    _info: Info,
    /// The provider and fabric names it was opened with: domains, passive
    /// endpoints and endpoints are refused for an `fi_info` of another.
    pub(crate) provider: String,
    pub(crate) name: String,
}

impl FabricInner {
    /// Refuses an `fi_info` of another provider or fabric (fi_domain(3) and
    /// fi_endpoint(3) take an info "returned by fi_getinfo" for this fabric;
    /// providers cast the objects they are given to their own types without
    /// checking, e.g. tcp `tcpx_domain_open`).
    pub(crate) fn check_info(&self, call: &'static str, info: &InfoEntry) -> Result<()> {
        if info.provider() != self.provider {
            return Err(Error::ForeignObject {
                call,
                what: "fi_info",
                scope: ObjectScope::Provider,
            });
        }
        if info.fabric_name() != self.name {
            return Err(Error::ForeignObject {
                call,
                what: "fi_info",
                scope: ObjectScope::Fabric,
            });
        }
        Ok(())
    }
}

/// An open fabric. Cloning gives another handle to the same fabric; it is
/// closed when the last handle, and every object opened from it, is gone.
///
/// ```
/// use libfabric::{info::{getinfo, Hints}, Fabric};
/// let list = getinfo(&Hints::new().provider("tcp").node("127.0.0.1"))?;
/// let fabric = Fabric::open(list.first().unwrap())?;
/// fabric.close()?;
/// # Ok::<(), libfabric::Error>(())
/// ```
#[derive(Clone)]
pub struct Fabric {
    pub(crate) inner: Arc<FabricInner>,
}

impl Fabric {
    /// `fi_fabric`: opens the fabric that `info` names.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `info` has no fabric attributes;
    /// [`Error::Call`] when `fi_dupinfo` or `fi_fabric` fails.
    #[doc(alias = "fi_fabric")]
    pub fn open(info: &InfoEntry) -> Result<Self> {
        let info = info.to_owned_info()?;
        // SAFETY: a valid fi_info; a NULL fabric_attr is refused.
        let attr = unsafe { (*info.as_raw()).fabric_attr };
        if attr.is_null() {
            return Err(Error::InvalidArgument(
                "the fi_info has no fabric_attr".into(),
            ));
        }
        let mut raw = ptr::null_mut();
        // SAFETY: fi_fabric(3) reads attr and returns an open fabric in raw,
        // which OwnedFid closes once.
        let ret = unsafe { sys::fi_fabric(attr, &mut raw, ptr::null_mut()) };
        let fid = OwnedFid::opened("fi_fabric", ret, raw)?;
        Ok(Fabric {
            inner: Arc::new(FabricInner {
                fid,
                provider: info.provider().to_owned(),
                name: info.fabric_name().to_owned(),
                _info: info,
            }),
        })
    }

    /// The raw `fid_fabric`, for calls this crate does not wrap.
    #[must_use]
    pub fn as_raw(&self) -> *mut sys::fid_fabric {
        self.inner.fid.as_ptr()
    }

    /// The provider it was opened for, such as `"tcp"`.
    #[must_use]
    pub fn provider(&self) -> &str {
        &self.inner.provider
    }

    /// Closes the fabric now (`fi_close`), returning its error.
    ///
    /// # Errors
    /// [`Error::InUse`] while other handles or objects opened from it exist;
    /// [`Error::Call`] when `fi_close` fails. The fabric comes back with the
    /// error, still open.
    pub fn close(self) -> Handback<Self> {
        close_last(
            self.inner,
            ObjectKind::Fabric,
            |inner| Fabric { inner },
            |i| i.fid.close(),
        )
    }
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("raw", &self.as_raw())
            .finish()
    }
}
