//! Completion channels: `ibv_create_comp_channel(3)`, `ibv_get_cq_event(3)`,
//! `ibv_ack_cq_events(3)`.
//!
//! An event read from a channel names a CQ by its address. It is resolved
//! through the context's table of CQs (see `registry.rs`) to a [`Cq`]
//! handle, and counted against the CQ; the counted events are acknowledged
//! in batches and, at the latest, just before the CQ is destroyed — so
//! `ibv_destroy_cq`, which waits for every completion event of its CQ to be
//! acknowledged, never waits forever.

use std::fmt;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Duration;

use libibverbs_sys as sys;

use crate::context::{Context, ContextInner};
use crate::cq::Cq;
use crate::error::{check_minus_one, check_ptr, check_rc, Errno, Error, ObjectKind, Result};
use crate::fd::{set_nonblocking, wait_readable, Deadline, EventFd, Stopper, Wait};
use crate::registry::{handle, Describe, Destroy, Lookup, ObjectId};

pub(crate) struct ChannelInner {
    raw: NonNull<sys::ibv_comp_channel>,
    id: ObjectId,
    dead: bool,
    pub(crate) ctx: Arc<ContextInner>,
    /// Woken at every event read from the channel, by any reader (a
    /// blocking get, any [`CqEvents`](crate::tokio::CqEvents) of the
    /// channel): the read disarms the CQ it names, and a
    /// [`CqEvents::poll_cq`](crate::tokio::CqEvents::poll_cq) waiting for
    /// that CQ must then poll it and re-arm, or sleep for ever.
    #[cfg(feature = "tokio")]
    pub(crate) reads: ::tokio::sync::Notify,
}

// SAFETY: verbs objects are safe for multi-threaded access (ibv_alloc_td(3));
// several threads may read events from one channel, each event going to one
// of them (the fd is non-blocking and reads are atomic in the kernel).
unsafe impl Send for ChannelInner {}
// SAFETY: as for Send.
unsafe impl Sync for ChannelInner {}

impl ChannelInner {
    pub(crate) fn raw(&self) -> *mut sys::ibv_comp_channel {
        self.raw.as_ptr()
    }

    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd belongs to the channel, which is open until this
        // value is dropped; the borrow cannot outlive &self.
        unsafe { BorrowedFd::borrow_raw((*self.raw.as_ptr()).fd) }
    }

    /// Reads one event without blocking: `Ok(None)` when the channel is
    /// empty.
    pub(crate) fn try_read(&self) -> Result<Option<Cq>> {
        loop {
            let mut cq: *mut sys::ibv_cq = std::ptr::null_mut();
            let mut cq_context: *mut libc::c_void = std::ptr::null_mut();
            // SAFETY: valid channel; ibv_get_cq_event(3) fills both out
            // pointers on success and returns -1 with errno set on failure
            // (EAGAIN: the fd is non-blocking and empty).
            let rc = unsafe { sys::ibv_get_cq_event(self.raw(), &mut cq, &mut cq_context) };
            match check_minus_one(rc) {
                Ok(()) => {}
                Err(Errno::INTR) => continue,
                Err(Errno::AGAIN) => return Ok(None),
                Err(errno) => {
                    return Err(Error::Call {
                        call: "ibv_get_cq_event",
                        errno,
                    })
                }
            }
            match self.ctx.cqs.lookup(cq as usize) {
                Lookup::Live(inner) => {
                    inner.record_cq_event();
                    // Whoever waits for this CQ polls it and re-arms.
                    #[cfg(feature = "tokio")]
                    self.reads.notify_waiters();
                    return Ok(Some(Cq { inner }));
                }
                Lookup::Dying(_) | Lookup::Missing => {
                    // The CQ's last handle is gone and its destroy is waiting
                    // for this acknowledgement: give it now. The CQ is still
                    // allocated until then. The notification itself is of no
                    // use to anybody: read the next one.
                    // SAFETY: `cq` was returned by ibv_get_cq_event and its
                    // destroy cannot complete before this acknowledgement.
                    unsafe { sys::ibv_ack_cq_events(cq, 1) };
                }
            }
        }
    }

    fn read(&self, stopper: Option<&Stopper>, deadline: Deadline) -> Result<Wait<Cq>> {
        loop {
            if let Some(s) = stopper {
                // A stop ends the wait before anything is read: no event is
                // taken from the channel and then dropped.
                if s.is_stopped()? {
                    return Ok(Wait::Stopped);
                }
            }
            if let Some(cq) = self.try_read()? {
                return Ok(Wait::Ready(cq));
            }
            match wait_readable(self.fd(), stopper, deadline)? {
                Wait::Ready(()) => {}
                Wait::TimedOut => return Ok(Wait::TimedOut),
                Wait::Stopped => return Ok(Wait::Stopped),
            }
        }
    }
}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        if !self.dead && self.destroy_now().is_err() {
            // Still open: keep the context open for ever rather than close
            // it under the channel. Drop cannot report the error.
            std::mem::forget(Arc::clone(&self.ctx));
        }
    }
}

impl Destroy for ChannelInner {
    const KIND: ObjectKind = ObjectKind::CompletionChannel;

    fn destroy_now(&mut self) -> Result<()> {
        // SAFETY: CQs using the channel hold an Arc of this value, so none
        // is left (one that could not be destroyed keeps an Arc for ever);
        // called once: `dead` is set after success, and Drop skips it then.
        check_rc("ibv_destroy_comp_channel", unsafe {
            sys::ibv_destroy_comp_channel(self.raw())
        })?;
        self.dead = true;
        Ok(())
    }
}

/// A completion channel: `ibv_create_comp_channel()`.
///
/// CQs created with [`Context::create_cq_with_channel`] report on it, once
/// armed with [`Cq::req_notify`]. Reading an event returns the [`Cq`] it
/// concerns; its acknowledgement is counted against the CQ and given in
/// batches, and before the CQ is destroyed at the latest.
///
/// The fd is switched to non-blocking mode at creation; blocking reads poll
/// it first, so several threads may wait on one channel.
///
/// ```no_run
/// # fn main() -> ibverbs_async::Result<()> {
/// use std::time::Duration;
/// use ibverbs_async::{Context, WorkCompletion};
/// let ctx = Context::open("rxe0")?;
/// let channel = ctx.create_comp_channel()?;
/// let cq = ctx.create_cq_with_channel(64, &channel, 0)?;
/// cq.req_notify(false)?;
/// // ... post work on a queue pair using `cq` ...
/// if let Some(cq) = channel.get_cq_event_timeout(Duration::from_secs(1))? {
///     cq.req_notify(false)?; // re-arm, then drain
///     let mut wc = [WorkCompletion::default(); 16];
///     while !cq.poll(&mut wc)?.is_empty() {}
/// }
/// # Ok(()) }
/// ```
// Send + Sync through Arc<ChannelInner>: see the `unsafe impl`s on ChannelInner
// for why the C object may be used and dropped from any thread.
#[derive(Clone)]
pub struct CompChannel {
    pub(crate) inner: Arc<ChannelInner>,
}

impl Context {
    /// Creates a completion channel (`ibv_create_comp_channel()`).
    ///
    /// # Errors
    /// [`Error::Call`] when libibverbs fails;
    /// [`Error::System`] when its fd cannot be made non-blocking.
    #[doc(alias = "ibv_create_comp_channel")]
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        // SAFETY: valid context; NULL with errno set on failure.
        let raw = check_ptr("ibv_create_comp_channel", unsafe {
            sys::ibv_create_comp_channel(self.inner.raw())
        })?;
        let inner = ChannelInner {
            raw,
            id: ObjectId::next(),
            dead: false,
            ctx: Arc::clone(&self.inner),
            #[cfg(feature = "tokio")]
            reads: ::tokio::sync::Notify::new(),
        };
        // ibv_get_cq_event(3) shows the fd switched to O_NONBLOCK with fcntl
        // for non-blocking reads.
        set_nonblocking(inner.fd())?;
        Ok(CompChannel {
            inner: Arc::new(inner),
        })
    }
}

impl CompChannel {
    /// The channel's file descriptor, to poll for readability, as an
    /// [`EventFd`] (see there why not a `BorrowedFd`).
    #[must_use]
    pub fn fd(&self) -> EventFd<'_> {
        EventFd::new(self.inner.fd())
    }

    /// Waits for the next completion event and returns its CQ
    /// (`ibv_get_cq_event()`). Re-arm the CQ with [`Cq::req_notify`] before
    /// draining it with [`Cq::poll`], or a completion may go unnoticed.
    ///
    /// # Errors
    /// [`Error::Call`] when `ibv_get_cq_event` fails, [`Error::System`] when
    /// `poll` does.
    #[doc(alias = "ibv_get_cq_event")]
    pub fn get_cq_event(&self) -> Result<Cq> {
        loop {
            if let Wait::Ready(cq) = self.inner.read(None, Deadline::Never)? {
                return Ok(cq);
            }
        }
    }

    /// Returns the next completion event's CQ if one is pending, without
    /// waiting.
    ///
    /// # Errors
    /// As [`get_cq_event`](CompChannel::get_cq_event).
    pub fn try_get_cq_event(&self) -> Result<Option<Cq>> {
        self.inner.try_read()
    }

    /// Waits at most `timeout` for the next completion event.
    ///
    /// # Errors
    /// As [`get_cq_event`](CompChannel::get_cq_event).
    pub fn get_cq_event_timeout(&self, timeout: Duration) -> Result<Option<Cq>> {
        Ok(self.inner.read(None, Deadline::after(timeout))?.ready())
    }

    /// Waits for the next completion event until `stopper` is stopped (from
    /// another thread) or `timeout` passes (`None`: no limit).
    ///
    /// A stopped wait reads nothing from the channel, so no event is lost;
    /// a stop made before the call ends it at once.
    ///
    /// # Errors
    /// As [`get_cq_event`](CompChannel::get_cq_event).
    pub fn wait_cq_event(&self, stopper: &Stopper, timeout: Option<Duration>) -> Result<Wait<Cq>> {
        self.inner.read(
            Some(stopper),
            timeout.map_or(Deadline::Never, Deadline::after),
        )
    }

    /// The context the channel belongs to.
    #[must_use]
    pub fn context(&self) -> Context {
        Context {
            inner: Arc::clone(&self.inner.ctx),
        }
    }
}

handle! {
    CompChannel(ChannelInner), what = "completion channel",
    /// Destroys the channel now (`ibv_destroy_comp_channel()`). Fails while
    /// CQs use it.
    fn destroy = "ibv_destroy_comp_channel"
}

impl std::os::fd::AsRawFd for CompChannel {
    /// The channel fd's number (see [`CompChannel::fd`], which also gives
    /// it, and why it is not handed out as a `BorrowedFd`).
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.inner.fd())
    }
}

impl Describe for ChannelInner {
    fn describe(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("fd", &self.fd());
    }
}
