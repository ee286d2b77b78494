//! Completion counters, per fi_cntr(3): a count of completed operations
//! and a count of failed ones, bound to endpoints with
//! [`Endpoint::bind_cntr`](crate::Endpoint::bind_cntr).
//!
//! A counter is the cheap way to learn that operations finished: no entry
//! per operation, just two numbers. Reads and [`Counter::add`] allocate
//! nothing and take no lock of their own (a read takes the shared side of
//! the counter's progress lock, as a completion queue read does).
//!
//! A counter bound to the receives of a connection over the tcp provider,
//! the receiver waiting on it for the message:
//!
//! ```
//! use libfabric::prelude::*;
//! use libfabric::cq::Msg;
//! use std::time::Duration;
//!
//! let listener = Listener::bind(&Hints::new().provider("tcp").node("127.0.0.1").service(0))?;
//! let addr = listener.local_addr()?;
//! let server = std::thread::spawn(move || -> libfabric::Result<()> {
//!     let conn = listener.accept()?;
//!     let pool = conn.buffer_pool(2, 64)?;
//!     let mut ping = pool.take().expect("a free buffer");
//!     ping[..4].copy_from_slice(b"ping");
//!     conn.send(ping, 4)?;
//!     conn.wait_one(&pool, None)?; // the send's completion
//!     Ok(())
//! });
//!
//! // The counter is bound to the endpoint before it is enabled.
//! let config = ConnConfig::new().counter(CntrAttr::new(), CntrBind::RECV);
//! let info = getinfo(&Hints::new().provider("tcp").ep_type(EpType::Msg).addr(addr))?;
//! let info = info.first().expect("tcp provider");
//! let pending = Connection::<Msg>::prepare(&Fabric::open(info)?, info, &config)?;
//! let pool = pending.buffer_pool(2, 64)?;
//! pending.endpoint().recv(pool.take().expect("a free buffer"))?;
//! let conn = pending.establish(b"")?;
//! let counter = conn.counter().expect("the counter");
//! // tcp progresses the connection in the counter's wait.
//! counter.wait(1, Some(Duration::from_secs(10)))?;
//! assert_eq!(counter.read()?, 1);
//! assert_eq!(counter.read_err()?, 0);
//! let rx = conn.wait_one(&pool, None)?; // its completion is queued too
//! assert_eq!(rx.bytes(), b"ping");
//! server.join().expect("the server thread")?;
//! # Ok::<(), libfabric::Error>(())
//! ```
//!
//! An endpoint of one's own binds a counter with
//! [`Endpoint::bind_cntr`](crate::Endpoint::bind_cntr), before
//! [`Endpoint::enable`](crate::Endpoint::enable).
//!
//! # Counting at the target of RMA (`FI_RMA_EVENT`)
//! A counter bound to an endpoint for [`CntrBind::REMOTE_WRITE`] /
//! [`CntrBind::REMOTE_READ`] counts the RMA peers target at it (udp;ofi_rxd,
//! shm, sockets; tcp offers `FI_RMA_EVENT` but counts only writes with CQ
//! data, and is refused); one bound to a memory region with
//! [`MemoryRegion::register_counted`](crate::mr::MemoryRegion::register_counted)
//! counts the remote writes and atomics that modify the region (sockets
//! only). Both need [`Caps::RMA_EVENT`](crate::info::Caps::RMA_EVENT) in
//! the hints; tcp;ofi_rxm and verbs offer neither.
//!
//! # Providers
//! Measured with libfabric 1.17, 1.22 and 2.1:
//!
//! | provider | default wait object | [`Counter::wait`] | wait fd ([`Waiter`](crate::wait::Waiter), tokio) |
//! |---|---|---|---|
//! | tcp, tcp;ofi_rxm, udp;ofi_rxd | `Fd` | yes | no: the util counters answer `FI_GETWAIT` with `-FI_ENOSYS` (`prov/util/src/util_cntr.c` 256 in 1.17), [`Error::Unsupported`] |
//! | shm | `None`: shm refuses `FI_WAIT_FD` and resolves `FI_WAIT_UNSPEC` to `FI_WAIT_YIELD` (`prov/shm/src/smr_cntr.c` 41-51 in 1.17), refused here (its waits ignore their timeout) | no ([`Error::WrongWaitMode`]): poll with [`Counter::read`] | no |
//! | sockets | `Unspec` (a mutex and condition): `FI_WAIT_FD` is refused here, see [`CntrAttr::wait`] | yes | no |
//!
//! So [`wait::trywait`](crate::wait::trywait) takes counters wherever they
//! have a wait object, but [`Waiter`](crate::wait::Waiter) finds no fd on
//! these providers, and [`AsyncCounter`](crate::tokio::AsyncCounter) waits
//! in [`Counter::wait`] on tokio's blocking pool. `fi_trywait` of a counter
//! reports a count it has not seen on the util providers
//! (`util_poll_run`, `prov/util/src/util_poll.c` 99-111 in 1.22), but not
//! on tcp from 1.18 on (`xnet_trywait`, `prov/tcp/src/xnet_progress.c`
//! 1645-1654 in 1.22, only resets the wait) nor on sockets (always 0): read
//! the count before and after it.

pub use crate::ep::CntrBind;

use crate::domain::{Domain, DomainInner};
use crate::eq::Fid;
use crate::error::{check, classify, Errno, Error, Handback, ObjectKind, ObjectScope, Result};
use crate::fabric::Fabric;
use crate::fid::{close_last, OwnedFid};
use crate::progress::{ProgressLock, ProgressRead};
use crate::threading::{ThreadModel, ThreadSafe};
use crate::wait::{
    open_with_default_wait, provider_timeout_ms, query_wait_obj, refuse_poisoned, refused_progress,
    resolved_wait_obj, sealed, Deadline, ProgressMember, WaitFd, WaitObj, WaitSet, WaitSetInner,
    Waitable,
};
use libfabric_sys::fabric as sys;
use std::ffi::c_void;
use std::fmt;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The longest one `fi_cntr_wait` blocks: an endpoint bound to the counter
/// being enabled or closed on another thread waits at most this long.
const WAIT_SLICE: Duration = Duration::from_millis(100);

/// The pause between two tries of a wait the provider ended at once
/// without the threshold reached (sockets: see `Counter::wait`).
const EARLY_PAUSE: Duration = Duration::from_millis(1);

/// What a counter counts (`enum fi_cntr_events`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum CntrEvents {
    /// `FI_CNTR_EVENTS_COMP`: completed operations.
    #[default]
    Completions,
    /// `FI_CNTR_EVENTS_BYTES`: bytes transferred instead of operations.
    /// Present only when the headers the crate was built against define
    /// it (libfabric 1.22 and 2.1 do, 1.17 does not). Only cxi counts
    /// bytes: libfabric's util counters (tcp, rxm, rxd, shm) take it and
    /// count completions (`ofi_check_cntr_attr`,
    /// `prov/util/src/util_cntr.c` 39-70 in 1.22, never reads `events`), so
    /// [`Counter::open`] refuses it elsewhere with [`Error::Unsupported`];
    /// sockets refuses it itself (`-FI_ENOSYS`).
    #[cfg(libfabric_cntr_events_bytes)]
    Bytes,
}

impl CntrEvents {
    fn raw(self) -> sys::fi_cntr_events {
        match self {
            CntrEvents::Completions => sys::FI_CNTR_EVENTS_COMP,
            #[cfg(libfabric_cntr_events_bytes)]
            CntrEvents::Bytes => sys::FI_CNTR_EVENTS_BYTES,
        }
    }
}

/// Attributes of a counter (`struct fi_cntr_attr`).
#[derive(Debug, Clone, Default)]
pub struct CntrAttr {
    events: CntrEvents,
    wait_obj: Option<WaitObj>,
    wait_set: Option<WaitSet>,
}

impl CntrAttr {
    /// Counts completions, with the default wait object: the first of
    /// `FI_WAIT_FD`, `FI_WAIT_UNSPEC` and `FI_WAIT_NONE` the provider opens
    /// and this crate can use (see the [module's table](self#providers)).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// What to count (default: completions).
    #[must_use]
    pub fn events(mut self, events: CntrEvents) -> Self {
        self.events = events;
        self
    }

    /// The wait object. A raw value given as [`WaitObj::Other`] is taken
    /// as the variant libfabric names it by; one libfabric does not name,
    /// `FI_WAIT_YIELD` (whose util waits ignore their timeout), and
    /// `FI_WAIT_FD` or `FI_WAIT_SET` on sockets are refused when the
    /// counter is opened. sockets writes a byte into a blocking socket
    /// pair for every count of such a counter and reads them only in a wait
    /// set's `fi_wait` (`sock_wait_signal`, `prov/sockets/src/sock_wait.c`
    /// 187-200, `sock_wait_init` 88-101 in 1.17): the 280th count nobody
    /// drained blocked its progress for good (measured).
    #[must_use]
    pub fn wait(mut self, wait_obj: WaitObj) -> Self {
        self.wait_obj = Some(wait_obj.normalized());
        self
    }

    /// Signal this wait set (`FI_WAIT_SET`).
    #[must_use]
    pub fn wait_set(mut self, set: &WaitSet) -> Self {
        self.wait_obj = Some(WaitObj::Set);
        self.wait_set = Some(set.clone());
        self
    }
}

/// A counter's shared state. A memory region bound to it
/// ([`MemoryRegion::register_counted`](crate::mr::MemoryRegion::register_counted))
/// holds an `Arc` of this, as endpoints do (`ep::Bound::cntrs`), and after
/// its close parks it with its memory, so that [`Counter::close`] stays
/// [`Error::InUse`] while it may still be counted on.
pub(crate) struct CntrInner {
    pub(crate) fid: OwnedFid<sys::fid_cntr>,
    pub(crate) domain: Arc<DomainInner>,
    _wait_set: Option<Arc<WaitSetInner>>,
    pub(crate) wait_obj: WaitObj,
    /// Whether `FI_GETWAIT` gives a fd (the util counters have none).
    wait_fd: bool,
    /// sockets keeps 32-bit signed counts and compares a wait's threshold
    /// as an `int` (`prov/sockets/src/sock_cntr.c` 277, 320 in 1.17).
    narrow: bool,
    /// On a narrow counter, held by `add` across its look at the count and
    /// its call, and by `set`: two adds (or an add and a set) on two
    /// threads could each find room for their own value and together take
    /// the count past `i32::MAX`.
    narrow_writes: std::sync::Mutex<()>,
    /// The context the counter was opened with (what `fi_poll` reports).
    id: u64,
    /// As `CqInner::lifecycle`: the util providers run the endpoints
    /// bound to a counter in its progress (`ofi_cntr_progress`,
    /// `prov/util/src/util_cntr.c` 237-250 in 1.17, called by every read
    /// and wait, 77, 87, 155), reading state only `fi_enable` creates, so
    /// reads, waits and polls hold it shared and an endpoint's enable and
    /// close exclusively. Its count of endpoints that failed to enable (see
    /// `Endpoint::enable`) refuses reads, waits and polls while any of them
    /// is open (on rxm, rxd and shm).
    /// Its waits are refused once an endpoint bound to it closed
    /// ([`ProgressLock::set_poisoned`]): rxm adds each enabled endpoint to
    /// the wait objects of the counters bound to it, with a callback into
    /// the endpoint (`rxm_ep_wait_fd_add`, `prov/rxm/src/rxm_ep.c`
    /// 1067-1079, 1160-1162 in 1.17), and never removes it.
    pub(crate) lifecycle: ProgressLock,
}

impl CntrInner {
    /// Held while the provider's progress may run on this counter; refuses
    /// progress while an endpoint bound to it that failed to enable is
    /// open.
    #[inline]
    fn progress_guard(&self, call: &'static str) -> Result<ProgressRead<'_>> {
        let guard = self.lifecycle.read();
        if guard.noted().refused() {
            return Err(refused_progress(call));
        }
        Ok(guard)
    }
}

impl ProgressMember for CntrInner {
    fn lifecycle(&self) -> &ProgressLock {
        &self.lifecycle
    }
    fn progress_refused(&self) -> bool {
        self.lifecycle.is_refused()
    }
    fn member_fid(&self) -> *mut sys::fid {
        self.fid.fid()
    }
    fn member_id(&self) -> u64 {
        self.id
    }
    fn member_domain(&self) -> &Arc<DomainInner> {
        &self.domain
    }
}

/// An open completion counter. Cloning gives another handle; endpoints
/// bound to it hold one, so it stays open while they exist.
///
/// See the [module docs](self) for an example and what each provider
/// offers.
///
/// `T` is the threading model of its domain (see [`Domain`]):
/// the objects bound to it are of the same model, and under the serialized
/// models it is neither `Send` nor `Sync`.
pub struct Counter<T: ThreadModel = ThreadSafe> {
    pub(crate) inner: Arc<CntrInner>,
    _model: std::marker::PhantomData<T>,
}

impl<T: ThreadModel> Clone for Counter<T> {
    fn clone(&self) -> Self {
        Counter::from_inner(self.inner.clone())
    }
}

impl<T: ThreadModel> Counter<T> {
    /// A handle of the model `T` over `inner`, opened as a `Counter<T>`.
    pub(crate) fn from_inner(inner: Arc<CntrInner>) -> Self {
        Counter {
            inner,
            _model: std::marker::PhantomData,
        }
    }

    /// `fi_cntr_open`.
    ///
    /// # Errors
    /// [`Error::UnsupportedWait`] for a wait object libfabric does not
    /// name, `FI_WAIT_YIELD` (also as shm's resolution of
    /// `FI_WAIT_UNSPEC`), `FI_WAIT_FD` or `FI_WAIT_SET` on sockets,
    /// `FI_WAIT_SET` without a wait set (or on rxm, rxd or shm), or one the
    /// provider refuses;
    /// [`Error::ForeignObject`] for a wait set of another fabric;
    /// [`Error::Unsupported`] on a provider without counters (verbs: use
    /// `verbs;ofi_rxm`), and for `CntrEvents::Bytes` on a provider that
    /// does not count bytes; [`Error::Call`] when `fi_cntr_open` fails.
    #[doc(alias = "fi_cntr_open")]
    pub fn open(domain: &Domain<T>, attr: &CntrAttr) -> Result<Self> {
        domain.inner.run_deferred();
        let Some(wait_obj) = attr.wait_obj else {
            return open_with_default_wait(
                crate::quirks::limits_fd_waits_per_domain(domain.info().provider())
                    .then_some(&domain.inner.fd_counters),
                |wait| Self::open(domain, &attr.clone().wait(wait)),
            );
        };
        let wait_obj = wait_obj.checked("counter")?;
        let provider = domain.inner.info.provider();
        #[cfg(libfabric_cntr_events_bytes)]
        if attr.events == CntrEvents::Bytes && !crate::quirks::counts_bytes(provider) {
            return Err(Error::Unsupported {
                call: "fi_cntr_open",
                reason: "the provider does not count bytes (libfabric's util counters take FI_CNTR_EVENTS_BYTES and count completions)",
            });
        }
        if let Some(set) = &attr.wait_set {
            if !T::LOCKED {
                // A wait set is Send and Sync, and its fi_wait runs the
                // progress of its counters on whatever thread calls it.
                return Err(Error::InvalidArgument(
                    "a counter of a FI_THREAD_DOMAIN or FI_THREAD_COMPLETION domain cannot \
                     join a wait set (which any thread may wait on)"
                        .into(),
                ));
            }
            if !set.belongs_to(&domain.inner.fabric) {
                return Err(Error::ForeignObject {
                    call: "fi_cntr_open",
                    what: "wait set",
                    scope: ObjectScope::Fabric,
                });
            }
        }
        if wait_obj == WaitObj::Set && attr.wait_set.is_none() {
            return Err(Error::UnsupportedWait {
                queue: "counter",
                requested: WaitObj::Set,
                reason: "FI_WAIT_SET needs a wait set: use CntrAttr::wait_set",
            });
        }
        if wait_obj == WaitObj::Set && crate::quirks::keeps_closed_endpoints_in_waits(provider) {
            // As for completion queues: the set is shared, and a wait on
            // it after an endpoint closed would call into freed memory.
            return Err(Error::UnsupportedWait {
                queue: "counter",
                requested: WaitObj::Set,
                reason: "rxm, rxd and shm leave a closed endpoint's callbacks in a wait set (a wait then reads freed memory)",
            });
        }
        if matches!(wait_obj, WaitObj::Fd | WaitObj::Set)
            && crate::quirks::wait_set_fills_up(provider)
        {
            return Err(Error::UnsupportedWait {
                queue: "counter",
                requested: wait_obj,
                reason: "sockets writes a byte per count into a blocking socket pair that only a wait set's fi_wait drains: its progress blocked for good after 279 counts",
            });
        }
        let mut raw_attr = sys::fi_cntr_attr {
            events: attr.events.raw(),
            wait_obj: wait_obj.raw(),
            wait_set: attr
                .wait_set
                .as_ref()
                .map_or(ptr::null_mut(), |s| s.inner.fid.as_ptr()),
            flags: 0,
        };
        let mut raw = ptr::null_mut();
        // The context is a process-unique id: poll sets report it.
        static NEXT_ID: AtomicU64 = AtomicU64::new(1 << 62);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        // SAFETY: fi_cntr_open(3) reads attr and opens a counter on the
        // open domain; OwnedFid closes it before the domain handle is
        // released. The context is an opaque value to the provider.
        let ret = unsafe {
            sys::fi_cntr_open(
                domain.inner.fid.as_ptr(),
                &mut raw_attr,
                &mut raw,
                id as usize as *mut c_void,
            )
        };
        if wait_obj != WaitObj::None
            && attr.events == CntrEvents::Completions
            && matches!(classify(ret), Err(Errno::INVAL | Errno::NOSYS))
        {
            return Err(Error::UnsupportedWait {
                queue: "counter",
                requested: wait_obj,
                reason: "the provider refused it (fi_cntr_open returned -FI_EINVAL or -FI_ENOSYS)",
            });
        }
        if matches!(classify(ret), Err(Errno::NOSYS | Errno::OPNOTSUPP)) {
            // verbs has no counters: `.cntr_open = fi_no_cntr_open`
            // (`prov/verbs/src/verbs_domain.c` 290 in 1.22); its RDM
            // endpoints have them through ofi_rxm (`verbs;ofi_rxm`).
            return Err(Error::Unsupported {
                call: "fi_cntr_open",
                reason: "the provider has no counters (verbs has them only through ofi_rxm)",
            });
        }
        let fid = OwnedFid::opened("fi_cntr_open", ret, raw)?;
        let wait_obj = resolved_wait_obj("counter", wait_obj, raw_attr.wait_obj)?;
        let wait_obj = query_wait_obj(fid.fid(), wait_obj);
        let wait_fd = wait_obj == WaitObj::Fd && getwait_fd(fid.fid()).is_ok();
        let cntr = Counter::from_inner(Arc::new(CntrInner {
            fid,
            domain: domain.inner.clone(),
            _wait_set: attr.wait_set.as_ref().map(|s| s.inner.clone()),
            wait_obj,
            wait_fd,
            narrow: crate::quirks::counts_in_32_bits(provider),
            narrow_writes: std::sync::Mutex::new(()),
            id,
            lifecycle: ProgressLock::default(),
        }));
        if let Some(set) = &cntr.inner._wait_set {
            let member: Arc<dyn ProgressMember> = cntr.inner.clone();
            set.add_member(Arc::downgrade(&member));
        }
        Ok(cntr)
    }

    /// The counter's fid.
    #[must_use]
    pub fn fid(&self) -> Fid {
        Fid::from_raw(self.inner.fid.fid())
    }

    /// The raw `fid_cntr`.
    #[must_use]
    pub fn as_raw(&self) -> *mut sys::fid_cntr {
        self.inner.fid.as_ptr()
    }

    /// The domain it was opened on.
    #[must_use]
    pub fn domain(&self) -> Domain<T> {
        Domain {
            inner: self.inner.domain.clone(),
            _model: std::marker::PhantomData,
        }
    }

    /// `fi_cntr_read`: the count of completed operations. Runs the
    /// provider's progress on the util providers. Allocates nothing.
    ///
    /// # Errors
    /// [`Error::State`] while an endpoint bound to the counter that failed
    /// to enable is open (on rxm, rxd and shm).
    #[doc(alias = "fi_cntr_read")]
    #[inline]
    pub fn read(&self) -> Result<u64> {
        // Under a serialized threading model without the progress guard,
        // which only excludes an enable or close of a bound endpoint on
        // another thread (every handle of the domain is on this one).
        let _progress = if T::LOCKED {
            Some(self.inner.progress_guard("fi_cntr_read")?)
        } else if self.inner.lifecycle.noted().refused() {
            return Err(refused_progress("fi_cntr_read"));
        } else {
            None
        };
        // SAFETY: fi_cntr_read(3) on the open counter; no endpoint bound
        // to it is being enabled or closed (the guard, or this thread).
        let count = unsafe { sys::fi_cntr_read(self.inner.fid.as_ptr()) };
        Ok(self.widened(count))
    }

    /// sockets keeps its counts in an `int` and returns them sign-extended
    /// (`sock_cntr_read`, `prov/sockets/src/sock_cntr.c`): read as the
    /// 32-bit count they are.
    #[inline(always)]
    fn widened(&self, count: u64) -> u64 {
        if self.inner.narrow {
            u64::from(count as u32)
        } else {
            count
        }
    }

    /// `fi_cntr_readerr`: the count of operations that completed in error.
    /// On sockets it also clears the flag that makes every
    /// [`wait`](Self::wait) fail once an error was counted.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    #[doc(alias = "fi_cntr_readerr")]
    #[inline]
    pub fn read_err(&self) -> Result<u64> {
        let _progress = self.inner.progress_guard("fi_cntr_readerr")?;
        // SAFETY: as read.
        let errors = unsafe { sys::fi_cntr_readerr(self.inner.fid.as_ptr()) };
        Ok(self.widened(errors))
    }

    /// Holds `narrow_writes` on a narrow counter (see `CntrInner`).
    #[inline]
    fn narrow_writes(&self) -> Option<std::sync::MutexGuard<'_, ()>> {
        self.inner.narrow.then(|| {
            self.inner
                .narrow_writes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
        })
    }

    /// The value check of sockets' 32-bit counts.
    #[inline]
    fn check_value(&self, call: &'static str, value: u64) -> Result<()> {
        if self.inner.narrow && value > i32::MAX as u64 {
            return Err(narrow_value(call, value));
        }
        Ok(())
    }

    /// `fi_cntr_add`: adds `value` to the count, waking waiters.
    ///
    /// # Errors
    /// [`Error::TooLarge`] on sockets for a value, or a count after the
    /// add, over `i32::MAX` (its counts are 32-bit: completions the
    /// provider counts past that wrap there);
    /// [`Error::Call`] when `fi_cntr_add` fails.
    #[doc(alias = "fi_cntr_add")]
    #[inline]
    pub fn add(&self, value: u64) -> Result<()> {
        self.check_value("fi_cntr_add", value)?;
        let _narrow = self.narrow_writes();
        if self.inner.narrow && value != 0 {
            // The sum too: past i32::MAX sockets' count turns negative, and
            // its waits compare signed counts (a wait then never ends).
            let now = self.read()?;
            if now
                .checked_add(value)
                .is_none_or(|sum| sum > i32::MAX as u64)
            {
                return Err(narrow_value("fi_cntr_add (the count after it)", value));
            }
        }
        // SAFETY: fi_cntr_add(3) on the open counter; it runs no progress
        // (`ofi_cntr_add`, `prov/util/src/util_cntr.c` 92-103; sockets
        // `sock_cntr_add`, under the counter's own mutex).
        check("fi_cntr_add", unsafe {
            sys::fi_cntr_add(self.inner.fid.as_ptr(), value)
        })
    }

    /// `fi_cntr_set`: sets the count, waking waiters.
    ///
    /// # Errors
    /// As [`add`](Self::add).
    #[doc(alias = "fi_cntr_set")]
    pub fn set(&self, value: u64) -> Result<()> {
        self.check_value("fi_cntr_set", value)?;
        let _narrow = self.narrow_writes();
        // SAFETY: as add.
        check("fi_cntr_set", unsafe {
            sys::fi_cntr_set(self.inner.fid.as_ptr(), value)
        })
    }

    /// `fi_cntr_adderr`: adds `value` to the error count, waking waiters
    /// (whose [`wait`](Self::wait) then ends with [`Error::CounterError`]).
    /// On sockets the error count is 32-bit too, but no wait compares it:
    /// only `value` is checked, and a sum past `i32::MAX` wraps what
    /// [`read_err`](Self::read_err) gives.
    ///
    /// # Errors
    /// As [`add`](Self::add) (the value only).
    #[doc(alias = "fi_cntr_adderr")]
    pub fn add_err(&self, value: u64) -> Result<()> {
        self.check_value("fi_cntr_adderr", value)?;
        // SAFETY: as add.
        check("fi_cntr_adderr", unsafe {
            sys::fi_cntr_adderr(self.inner.fid.as_ptr(), value)
        })
    }

    /// `fi_cntr_seterr`: sets the error count, waking waiters.
    ///
    /// # Errors
    /// As [`add`](Self::add).
    #[doc(alias = "fi_cntr_seterr")]
    pub fn set_err(&self, value: u64) -> Result<()> {
        self.check_value("fi_cntr_seterr", value)?;
        // SAFETY: as add.
        check("fi_cntr_seterr", unsafe {
            sys::fi_cntr_seterr(self.inner.fid.as_ptr(), value)
        })
    }

    /// `fi_cntr_wait`: blocks until the count reaches `threshold`, the
    /// error count changes, or the timeout passes (`None`: for ever).
    /// Returns at once when the count is already there.
    ///
    /// It blocks in slices of at most 100 ms, so that endpoints bound to
    /// the counter can be enabled or closed meanwhile; the error count is
    /// compared with its value when the call began (one read of it, which
    /// on sockets clears its error flag: see [`read_err`](Self::read_err)).
    /// sockets' timed waits return at once (a clock mix-up in libfabric),
    /// so there it looks at the counter every millisecond instead.
    ///
    /// # Errors
    /// [`Error::WrongWaitMode`] for a counter without a wait object it can
    /// block on (`FI_WAIT_NONE`, `FI_WAIT_SET`); [`Error::TimedOut`] when
    /// the timeout passed; [`Error::CounterError`] when the error count
    /// changed (`-FI_EAVAIL`); [`Error::TooLarge`] on sockets for a
    /// threshold over `i32::MAX`; [`Error::State`] as [`read`](Self::read),
    /// or on rxm, rxd or shm once an endpoint bound to it closed;
    /// [`Error::Call`] when `fi_cntr_wait` fails otherwise.
    #[doc(alias = "fi_cntr_wait")]
    pub fn wait(&self, threshold: u64, timeout: Option<Duration>) -> Result<()> {
        const CALL: &str = "fi_cntr_wait";
        let actual = self.inner.wait_obj;
        if !actual.can_sread() {
            return Err(Error::WrongWaitMode {
                call: CALL,
                needed: "FI_WAIT_FD, FI_WAIT_UNSPEC, FI_WAIT_MUTEX_COND or FI_WAIT_POLLFD",
                actual,
            });
        }
        self.check_value(CALL, threshold)?;
        let deadline = Deadline::after(timeout);
        let errors = self.read_err()?;
        loop {
            let slice = deadline.slice(WAIT_SLICE);
            let ret = {
                let _progress = self.inner.progress_guard(CALL)?;
                refuse_poisoned(CALL, std::iter::once(Some(&self.inner.lifecycle)))?;
                // SAFETY: fi_cntr_wait(3) on the open counter, which has a
                // wait object it blocks on (checked above: the util
                // counters assert one, `util_cntr.c` 150); no endpoint
                // bound to it is being enabled or closed (the guard).
                unsafe {
                    sys::fi_cntr_wait(
                        self.inner.fid.as_ptr(),
                        threshold,
                        provider_timeout_ms(Some(slice)),
                    )
                }
            };
            let mut early = false;
            match classify(ret) {
                Ok(0) => return Ok(()),
                // sockets: a timed wait returns at once with ETIMEDOUT,
                // positive. `ofi_wait_cond` gives `pthread_cond_timedwait`
                // (realtime clock) a deadline on the monotonic clock, long
                // past (`src/unix/osd.c` 111-123), and `sock_cntr_wait`
                // returns its result as is (`sock_cntr.c` 335-364, in
                // 1.17). Not reached: looked at again after a pause.
                Ok(_) => early = true,
                // The util counters return -FI_EAVAIL when the error count
                // changed during the call (`util_cntr.c` 159-160), sockets
                // while its error flag is set (`sock_cntr.c` 315-316, 361).
                Err(Errno::AVAIL) => return Err(self.counter_error()),
                // A slice's end; or a signal handled on this thread ended
                // it early (see `is_interrupted`): on for the time left.
                Err(Errno::TIMEDOUT | Errno::AGAIN | Errno::INTR) => {}
                Err(errno) => return Err(Error::call(CALL, errno)),
            }
            // A slice ended: an error counted between two slices is seen
            // here, before blocking again.
            let now = self.read_err()?;
            if now != errors {
                return Err(Error::CounterError {
                    call: CALL,
                    errors: now,
                });
            }
            if deadline.passed() {
                return Err(Error::TimedOut { call: CALL });
            }
            if early {
                std::thread::sleep(deadline.slice(EARLY_PAUSE));
            }
        }
    }

    #[cold]
    fn counter_error(&self) -> Error {
        match self.read_err() {
            Ok(errors) => Error::CounterError {
                call: "fi_cntr_wait",
                errors,
            },
            Err(e) => e,
        }
    }

    /// Closes the counter now (`fi_close`).
    ///
    /// # Errors
    /// [`Error::InUse`] while endpoints or memory regions bound to it
    /// (including the memory of a dropped region, kept until the
    /// endpoints of its domain open at its close have closed) or other
    /// handles exist;
    /// [`Error::Call`] when `fi_close` fails. The counter comes back with
    /// the error, still open.
    pub fn close(self) -> Handback<Self> {
        close_last(self.inner, ObjectKind::Counter, Counter::from_inner, |i| {
            i.fid.close()
        })
    }
}

#[cold]
fn narrow_value(what: &'static str, value: u64) -> Error {
    Error::TooLarge {
        what,
        limit: i32::MAX as usize,
        given: usize::try_from(value).unwrap_or(usize::MAX),
    }
}

/// `fi_control(FI_GETWAIT)` of an `FI_WAIT_FD` counter.
fn getwait_fd(fid: *mut sys::fid) -> Result<RawFd> {
    let mut fd: RawFd = -1;
    // SAFETY: fi_control(3): FI_GETWAIT on an FI_WAIT_FD counter writes an
    // int fd (sockets: `sock_wait_get_obj`, `prov/sockets/src/sock_wait.c`
    // 62-63) or fails without writing (the util counters: `fi_no_control`,
    // `prov/util/src/util_cntr.c` 256 in 1.17). Only called for counters
    // whose wait object is FI_WAIT_FD: for others sockets copies a mutex
    // and a condition variable into the argument (`sock_cntr.c` 383-390).
    let ret = unsafe {
        sys::fi_control(
            fid,
            sys::FI_GETWAIT as i32,
            (&mut fd as *mut RawFd).cast::<c_void>(),
        )
    };
    check("fi_control(FI_GETWAIT)", ret)?;
    if fd < 0 {
        return Err(Error::call("fi_control(FI_GETWAIT)", Errno::BADF));
    }
    Ok(fd)
}

impl<T: ThreadModel> sealed::Sealed for Counter<T> {}

impl<T: ThreadModel> Waitable for Counter<T> {
    fn wait_fid(&self) -> *mut sys::fid {
        self.inner.fid.fid()
    }
    fn fabric_ptr(&self) -> *const () {
        Arc::as_ptr(&self.inner.domain.fabric).cast()
    }
    fn fabric(&self) -> Fabric {
        Fabric {
            inner: self.inner.domain.fabric.clone(),
        }
    }
    fn wait_obj(&self) -> WaitObj {
        self.inner.wait_obj
    }
    fn progress_lock(&self, _: sealed::Token) -> Option<&ProgressLock> {
        Some(&self.inner.lifecycle)
    }
    fn thread_safe(&self, _: sealed::Token) -> bool {
        T::LOCKED
    }
    /// `fi_control(FI_GETWAIT)`: the counter's wait fd, borrowed from it.
    ///
    /// # Errors
    /// [`Error::WrongWaitMode`] for a counter whose wait object is not a
    /// fd; [`Error::Unsupported`] where the provider gives counters no fd
    /// (the util counters of tcp, rxm, rxd and shm).
    fn wait_fd(&self) -> Result<WaitFd<'_>> {
        let actual = self.inner.wait_obj;
        if actual != WaitObj::Fd {
            return Err(Error::WrongWaitMode {
                call: "fi_control(FI_GETWAIT)",
                needed: "FI_WAIT_FD or FI_WAIT_UNSPEC resolved to a fd",
                actual,
            });
        }
        if !self.inner.wait_fd {
            return Err(Error::Unsupported {
                call: "fi_control(FI_GETWAIT)",
                reason: "the provider gives counters no wait fd (libfabric's util counters answer -FI_ENOSYS): use Counter::wait",
            });
        }
        Ok(WaitFd::borrowed(getwait_fd(self.inner.fid.fid())?))
    }
}

impl<T: ThreadModel> crate::poll::Pollable for Counter<T> {
    fn poll_member(&self, _: sealed::Token) -> crate::poll::PollMember {
        crate::poll::PollMember(self.inner.clone())
    }
}

impl<T: ThreadModel> fmt::Debug for Counter<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Counter")
            .field("fid", &self.fid())
            .field("wait_obj", &self.inner.wait_obj)
            .finish()
    }
}
