//! Address vectors (`fi_av(3)`): peer addresses for connectionless
//! endpoints.
//!
//! ```
//! use libfabric::{av::AvType, cq::{CqAttr, Tagged}, ep::CqBind, info::{Caps, EpType}};
//! use libfabric::{getinfo, AddressVector, CompletionQueue, Domain, Endpoint, Fabric, Hints};
//! let hints = Hints::new()?.provider("tcp;ofi_rxm")?.ep_type(EpType::Rdm)
//!     .caps(Caps::MSG | Caps::TAGGED).node("127.0.0.1")?;
//! let info = getinfo(&hints)?.into_iter().next().expect("tcp;ofi_rxm");
//! let domain = Domain::open(&Fabric::open(&info)?, &info)?;
//! let av = AddressVector::open(&domain, AvType::Map, 8)?;
//! let cq = CompletionQueue::<Tagged>::open(&domain, &CqAttr::new())?;
//! let ep = Endpoint::open(&domain, &info)?;
//! ep.bind_av(&av)?;
//! ep.bind_cq(&cq, CqBind::TRANSMIT | CqBind::RECV)?;
//! ep.enable()?;
//! let me = av.insert(&ep.name()?)?; // the endpoint's own address
//! av.remove(me)?;
//! # Ok::<(), libfabric::Error>(())
//! ```

use crate::cq::Addr;
use crate::domain::{Domain, DomainInner};
use crate::error::{check, Error, Result};
use crate::fid::OwnedFid;
use libfabric_sys::fabric as sys;
use std::ptr;
use std::sync::Arc;

/// Kind of address vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AvType {
    /// `FI_AV_UNSPEC`: the provider chooses.
    Unspec,
    /// `FI_AV_MAP`
    Map,
    /// `FI_AV_TABLE`
    Table,
}

pub(crate) struct AvInner {
    pub(crate) fid: OwnedFid<sys::fid_av>,
    _domain: Arc<DomainInner>,
}

/// An open address vector.
#[derive(Clone)]
pub struct AddressVector {
    pub(crate) inner: Arc<AvInner>,
}

impl AddressVector {
    /// `fi_av_open` for about `count` addresses.
    #[doc(alias = "fi_av_open")]
    pub fn open(domain: &Domain, ty: AvType, count: usize) -> Result<Self> {
        let mut attr = sys::fi_av_attr {
            type_: match ty {
                AvType::Unspec => sys::FI_AV_UNSPEC,
                AvType::Map => sys::FI_AV_MAP,
                AvType::Table => sys::FI_AV_TABLE,
            },
            count,
            ..Default::default()
        };
        let mut raw = ptr::null_mut();
        // SAFETY: fi_av_open(3) reads attr; OwnedFid closes the AV before the
        // domain handle is released.
        let ret = unsafe {
            sys::fi_av_open(
                domain.inner.fid.as_ptr(),
                &mut attr,
                &mut raw,
                ptr::null_mut(),
            )
        };
        let fid = OwnedFid::opened("fi_av_open", ret, raw)?;
        Ok(AddressVector {
            inner: Arc::new(AvInner {
                fid,
                _domain: domain.inner.clone(),
            }),
        })
    }

    /// `fi_av_insert` of one address in the domain's format (for example
    /// the bytes of `Endpoint::name`).
    #[doc(alias = "fi_av_insert")]
    pub fn insert(&self, addr: &[u8]) -> Result<Addr> {
        if addr.is_empty() {
            return Err(Error::InvalidArgument("fi_av_insert: empty address".into()));
        }
        let mut out = Addr::UNSPEC;
        // SAFETY: fi_av_insert(3) reads one address from addr (in the
        // domain's address format; providers check the length they need
        // against the format) and writes one fi_addr_t.
        let ret = unsafe {
            sys::fi_av_insert(
                self.inner.fid.as_ptr(),
                addr.as_ptr().cast(),
                1,
                (&mut out as *mut Addr).cast(),
                0,
                ptr::null_mut(),
            )
        };
        if ret != 1 {
            return Err(Error::fabric(
                "fi_av_insert",
                if ret < 0 { ret } else { -libc::EINVAL },
            ));
        }
        Ok(out)
    }

    /// `fi_av_remove` of one address.
    #[doc(alias = "fi_av_remove")]
    pub fn remove(&self, addr: Addr) -> Result<()> {
        let mut raw = addr.0;
        // SAFETY: fi_av_remove(3) reads one fi_addr_t.
        check("fi_av_remove", unsafe {
            sys::fi_av_remove(self.inner.fid.as_ptr(), &mut raw, 1, 0)
        })
    }
}

impl std::fmt::Debug for AddressVector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressVector").finish_non_exhaustive()
    }
}
