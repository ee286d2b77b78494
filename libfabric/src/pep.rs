//! Passive endpoints (`fi_passive_ep(3)`, `fi_cm(3)`): listeners whose
//! connection requests arrive on their event queue.
//!
//! # Close order
//! A provider may hold a connection it accepted at the socket level before
//! its `FI_CONNREQ` reaches the event queue: libfabric 1.17's tcp keeps a raw
//! pointer to the passive endpoint in it (`handle->pep`,
//! `prov/tcp/src/tcpx_conn_mgr.c` 580) and follows it when the request
//! arrives (453-475), with nothing in `tcpx_pep_fi_close` (`tcpx_ep.c`
//! 881-894) to cancel it. No call tells when none is pending, so a passive
//! endpoint bound to an event queue is closed only when that queue closes:
//! the queue keeps it, and dropping the last [`PassiveEndpoint`] handle
//! only gives it up.
//!
//! Until then it goes on listening. Its port stays bound: a new passive
//! endpoint on it is refused (tcp's `fi_passive_ep` fails with
//! `EADDRINUSE`, sockets' `fi_listen` with `EINVAL`). The requests it
//! accepts still arrive on the queue (one dropped unanswered is rejected),
//! and its socket, memory and (sockets) threads stay in use. So a program
//! whose listeners come and go gives each its own queue, as
//! [`Listener`](crate::conn::Listener) does: listeners that share one
//! queue accumulate in it until it closes.

use crate::eq::{EqInner, EventQueue, Fid, RegisteredObject};
use crate::error::{check, Error, Handback, ObjectKind, ObjectScope, Result};
use crate::fabric::{Fabric, FabricInner};
use crate::fid::{close_last, OwnedFid};
use crate::info::InfoEntry;
use libfabric_sys::fabric as sys;
use std::fmt;
use std::net::SocketAddr;
use std::ptr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The open passive endpoint itself, kept by its handles, by the event
/// queue it is bound to, and by its connection requests.
pub(crate) struct PepCore {
    pub(crate) fid: OwnedFid<sys::fid_pep>,
    /// The `fi_info` it was opened with, kept as long as it is open: the
    /// sockets provider copies the struct, not what it points to
    /// (`_pep->info = *info`, `prov/sockets/src/sock_ep_msg.c` 1115 in
    /// 1.17), and reads its `domain_attr` at each connection request
    /// (`sock_ep_msg_get_info`, 730).
    _info: crate::info::Info,
    pub(crate) fabric: Arc<FabricInner>,
}

pub(crate) struct PepInner {
    pub(crate) core: Arc<PepCore>,
    /// The event queue bound to it: one, for good (libfabric 1.17's
    /// `ofi_pep_bind_eq` takes a reference of each EQ bound and overwrites
    /// `pep->eq`, `prov/util/src/util_pep.c` 52-53, and the close drops only
    /// the last one's, so a second bind would keep the first EQ busy for
    /// ever).
    eq: Mutex<Option<Arc<EqInner>>>,
    listening: AtomicBool,
}

/// A passive endpoint: listens for connection requests, which arrive on its
/// event queue as [`Event::ConnReq`](crate::eq::Event::ConnReq).
#[derive(Clone)]
pub struct PassiveEndpoint {
    pub(crate) inner: Arc<PepInner>,
}

impl PassiveEndpoint {
    /// `fi_passive_ep`.
    ///
    /// # Errors
    /// [`Error::ForeignObject`] for an `fi_info` of another provider or
    /// fabric, [`Error::InvalidArgument`] for a connection request's.
    #[doc(alias = "fi_passive_ep")]
    pub fn open(fabric: &Fabric, info: &InfoEntry) -> Result<Self> {
        fabric.inner.check_info("fi_passive_ep", info)?;
        if info.has_handle() {
            return Err(Error::InvalidArgument(
                "fi_passive_ep: this fi_info carries a connection request's handle".into(),
            ));
        }
        let info = info.to_owned_info()?;
        let mut raw = ptr::null_mut();
        // SAFETY: fi_passive_ep(3) with an open fabric and an fi_info of its
        // provider and fabric (checked above); the fi_info is kept until
        // the passive endpoint is closed (PepCore's field order).
        let ret = unsafe {
            sys::fi_passive_ep(
                fabric.inner.fid.as_ptr(),
                info.ptr.as_ptr(),
                &mut raw,
                ptr::null_mut(),
            )
        };
        let fid = OwnedFid::opened("fi_passive_ep", ret, raw)?;
        Ok(PassiveEndpoint {
            inner: Arc::new(PepInner {
                core: Arc::new(PepCore {
                    fid,
                    _info: info,
                    fabric: fabric.inner.clone(),
                }),
                eq: Mutex::new(None),
                listening: AtomicBool::new(false),
            }),
        })
    }

    /// The passive endpoint's fid, as `FI_CONNREQ` events name it.
    #[must_use]
    pub fn fid(&self) -> Fid {
        Fid::from_raw(self.inner.core.fid.fid())
    }

    /// `fi_pep_bind` to the event queue that receives its connection
    /// requests. Once: a second queue is refused. The passive endpoint is
    /// closed when that queue closes, not before (see the module docs): a
    /// queue shared by listeners that come and go keeps each of them open.
    ///
    /// # Errors
    /// [`Error::ForeignObject`] for a queue of another fabric,
    /// [`Error::State`] when a queue is already bound;
    /// [`Error::TooLarge`] for a passive endpoint whose connection data
    /// (`FI_OPT_CM_DATA_SIZE`) is more than an event queue holds
    /// ([`DEFAULT_CM_DATA_CAPACITY`](crate::eq::DEFAULT_CM_DATA_CAPACITY);
    /// no provider has one).
    #[doc(alias = "fi_pep_bind")]
    pub fn bind_eq(&self, eq: &EventQueue) -> Result<()> {
        if !Arc::ptr_eq(&eq.inner.fabric, &self.inner.core.fabric) {
            return Err(Error::ForeignObject {
                call: "fi_pep_bind",
                what: "event queue",
                scope: ObjectScope::Fabric,
            });
        }
        let mut bound = self.inner.eq.lock().unwrap_or_else(|e| e.into_inner());
        if bound.is_some() {
            return Err(Error::State {
                call: "fi_pep_bind",
                reason: "an event queue is already bound to this passive endpoint",
            });
        }
        let cm_data = self.cm_data_size();
        if let Some(size) = cm_data {
            crate::eq::check_cm_data_size(size)?;
        }
        // SAFETY: fi_pep_bind(3) of two open objects of one fabric; the EQ
        // keeps the passive endpoint (keep_passive below) and is kept by it
        // until both close, the endpoint first.
        check("fi_pep_bind", unsafe {
            sys::fi_pep_bind(self.inner.core.fid.as_ptr(), eq.inner.fid.fid(), 0)
        })?;
        if let Some(size) = cm_data {
            eq.inner.raise_cm_data(size);
        }
        eq.inner.keep_passive(self.inner.core.clone());
        eq.inner.registry.insert(
            self.fid(),
            RegisteredObject::Passive(Arc::downgrade(&self.inner)),
        );
        *bound = Some(eq.inner.clone());
        Ok(())
    }

    /// `fi_listen`. Needs an event queue bound first (the providers deliver
    /// requests into it without checking that there is one: tcp's
    /// `tcpx_pep_listen` adds its socket to `pep->util_pep.eq->wait`,
    /// `prov/tcp/src/tcpx_ep.c` 979, a NULL dereference without one).
    ///
    /// # Errors
    /// [`Error::State`] without an event queue, or when already listening;
    /// [`Error::TooLarge`] as for [`bind_eq`](Self::bind_eq).
    #[doc(alias = "fi_listen")]
    pub fn listen(&self) -> Result<()> {
        let bound = self.inner.eq.lock().unwrap_or_else(|e| e.into_inner());
        let Some(eq) = bound.as_ref() else {
            return Err(Error::State {
                call: "fi_listen",
                reason: "bind an event queue first (PassiveEndpoint::bind_eq)",
            });
        };
        // Before requests carrying connection data can be queued.
        eq.admit_cm_data(self.cm_data_size())?;
        if self.inner.listening.swap(true, Ordering::AcqRel) {
            return Err(Error::State {
                call: "fi_listen",
                reason: "already listening",
            });
        }
        // SAFETY: fi_listen(3) on an open passive endpoint with its EQ bound.
        let ret = unsafe { sys::fi_listen(self.inner.core.fid.as_ptr()) };
        if ret != 0 {
            self.inner.listening.store(false, Ordering::Release);
        }
        check("fi_listen", ret)
    }

    /// `fi_getname`: the address it listens on.
    ///
    /// # Errors
    /// [`Error::Call`] when `fi_getname` fails (`FI_ETOOSMALL` for an address
    /// over 64 KiB).
    pub fn name(&self) -> Result<Vec<u8>> {
        crate::ep::name_of(self.inner.core.fid.fid(), false)
    }

    /// The address it listens on, for socket-based providers.
    ///
    /// # Errors
    /// As [`name`](Self::name); [`Error::InvalidArgument`] when the address
    /// is not an IPv4 or IPv6 socket address.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        let name = self.name()?;
        crate::ep::socket_addr(&name)
            .ok_or_else(|| Error::InvalidArgument("the address is not a socket address".into()))
    }

    /// `FI_OPT_CM_DATA_SIZE`.
    #[must_use]
    pub fn cm_data_size(&self) -> Option<usize> {
        crate::ep::cm_data_size(self.inner.core.fid.fid())
    }

    /// Closes it: now when no event queue is bound, else together with
    /// that queue (see the module docs): `Ok` then means that this handle
    /// no longer keeps it, and it listens until the queue closes.
    ///
    /// # Errors
    /// [`Error::InUse`] while other handles, or objects holding it, exist;
    /// [`Error::Call`] when `fi_close` fails. The passive endpoint comes back
    /// with the error, still open.
    pub fn close(self) -> Handback<Self> {
        let bound = self
            .inner
            .eq
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        close_last(
            self.inner,
            ObjectKind::PassiveEndpoint,
            |inner| PassiveEndpoint { inner },
            |i| match Arc::get_mut(&mut i.core) {
                Some(core) => core.fid.close(),
                // Only the event queue (or a request of it) holds the core.
                None if bound => Ok(()),
                None => Err(Error::InUse {
                    object: ObjectKind::PassiveEndpoint,
                    users: Arc::strong_count(&i.core) - 1,
                }),
            },
        )
    }
}

impl fmt::Debug for PassiveEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PassiveEndpoint")
            .field("fid", &self.fid())
            .finish()
    }
}
