//! Asynchronous events and completion-channel events on tokio (feature
//! `tokio`).
//!
//! Both types register a duplicate of the (non-blocking) event fd with
//! tokio's reactor through [`AsyncFd`], and follow its ready-guard
//! protocol: wait until the fd is readable, read with
//! [`try_io`](::tokio::io::unix::AsyncFdReadyGuard::try_io), which clears
//! the readiness only when the read found the fd empty (`EAGAIN`). An fd
//! that still holds events is read again without waiting, so no event is
//! left behind an edge-triggered notification, and a waiting task uses no
//! CPU.
//!
//! The fd is duplicated so that several of these values (on one runtime or
//! several) can exist for one context or channel: each registration is its
//! own, and each event still reaches exactly one reader.

use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;
use futures_core::Stream;

use crate::channel::CompChannel;
use crate::context::Context;
use crate::cq::Cq;
use crate::error::{Error, Result};
use crate::event::{try_read, AsyncEvent, AsyncEventInfo};

fn register(fd: std::os::fd::BorrowedFd<'_>) -> Result<AsyncFd<OwnedFd>> {
    let dup = fd.try_clone_to_owned().map_err(|e| Error::Sys {
        call: "fcntl(F_DUPFD_CLOEXEC)",
        errno: nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
    })?;
    // SAFETY: `dup` is an open fd owned by the AsyncFd from here on: it
    // stays open, names the same file description, and `as_raw_fd` returns
    // it, until the AsyncFd is dropped (AsyncFd::register_with_interest).
    unsafe { AsyncFd::register_with_interest(dup, Interest::READABLE) }.map_err(|e| Error::Sys {
        call: "epoll_ctl",
        errno: nix::errno::Errno::from_raw(e.into_parts().1.raw_os_error().unwrap_or(libc::EIO)),
    })
}

fn reactor_error(e: std::io::Error) -> Error {
    Error::Sys {
        call: "tokio reactor",
        errno: nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
    }
}

/// Reads one value inside `try_io`: `Err(WouldBlock)` when the fd is empty,
/// so that the guard clears readiness; everything else passes through.
fn as_io<T>(r: Result<Option<T>>) -> std::io::Result<Result<T>> {
    match r {
        Ok(Some(v)) => Ok(Ok(v)),
        Ok(None) => Err(std::io::ErrorKind::WouldBlock.into()),
        Err(e) => Ok(Err(e)),
    }
}

/// A context's asynchronous events on tokio.
///
/// ```no_run
/// # async fn run() -> ibverbs_async::Result<()> {
/// use ibverbs_async::{tokio::AsyncEvents, Context};
/// let ctx = Context::open("rxe0")?;
/// let events = AsyncEvents::new(&ctx)?;
/// loop {
///     let event = events.next().await?;
///     println!("{event}");
///     event.ack();
/// }
/// # }
/// ```
// Send + Sync from its fields: tokio's AsyncFd and a Send + Sync handle.
pub struct AsyncEvents {
    // Dropped first: deregisters and closes the duplicate fd before the
    // context (and its own fd) may go.
    fd: AsyncFd<OwnedFd>,
    ctx: Context,
}

impl AsyncEvents {
    /// Registers the context's event fd with the current tokio runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime with the IO driver enabled (as
    /// [`AsyncFd::new`]).
    pub fn new(ctx: &Context) -> Result<AsyncEvents> {
        Ok(AsyncEvents {
            fd: register(ctx.inner.async_fd())?,
            ctx: ctx.clone(),
        })
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Waits for the next asynchronous event.
    ///
    /// # Cancel safety
    /// Cancel safe: an event is read only in the poll that returns it.
    /// Several tasks may wait at once; each event reaches one of them.
    pub async fn next(&self) -> Result<AsyncEvent<'_>> {
        loop {
            let mut guard = self.fd.readable().await.map_err(reactor_error)?;
            if let Ok(r) = guard.try_io(|_| as_io(try_read(&self.ctx))) {
                return r.map_err(reactor_error)?;
            }
        }
    }

    /// Waits for the next asynchronous event, acknowledges it at once and
    /// returns a copy of it. Cancel safe.
    pub async fn next_info(&self) -> Result<AsyncEventInfo> {
        self.next().await.map(AsyncEvent::ack)
    }

    /// Polls for the next asynchronous event, for hand-written futures. Only
    /// the waker of the most recent call is woken (as
    /// [`AsyncFd::poll_read_ready`]).
    pub fn poll_next_event(&self, cx: &mut TaskContext<'_>) -> Poll<Result<AsyncEvent<'_>>> {
        loop {
            let mut guard = match self.fd.poll_read_ready(cx) {
                Poll::Ready(Ok(guard)) => guard,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(reactor_error(e))),
                Poll::Pending => return Poll::Pending,
            };
            if let Ok(r) = guard.try_io(|_| as_io(try_read(&self.ctx))) {
                return Poll::Ready(r.map_err(reactor_error).and_then(|r| r));
            }
        }
    }
}

/// A stream of acknowledged events: each item is read, acknowledged and
/// copied out (see [`AsyncEvents::next_info`]). It never ends.
impl Stream for AsyncEvents {
    type Item = Result<AsyncEventInfo>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut()
            .poll_next_event(cx)
            .map(|r| Some(r.map(AsyncEvent::ack)))
    }
}

impl std::fmt::Debug for AsyncEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncEvents")
            .field("context", &self.ctx)
            .field("fd", &self.fd.get_ref().as_fd())
            .finish()
    }
}

/// A completion channel's events on tokio: each yields the [`Cq`] that has
/// new completions (re-arm it with [`Cq::req_notify`], then poll it).
///
/// ```no_run
/// # async fn run() -> ibverbs_async::Result<()> {
/// use ibverbs_async::{tokio::CqEvents, Context, WorkCompletion};
/// let ctx = Context::open("rxe0")?;
/// let channel = ctx.create_comp_channel()?;
/// let cq = ctx.create_cq_with_channel(64, &channel, 0)?;
/// cq.req_notify(false)?;
/// let events = CqEvents::new(&channel)?;
/// let cq = events.next().await?;
/// cq.req_notify(false)?;
/// let mut wc = [WorkCompletion::default(); 16];
/// let n = cq.poll(&mut wc)?;
/// # let _ = n; Ok(()) }
/// ```
// Send + Sync from its fields: tokio's AsyncFd and a Send + Sync handle.
pub struct CqEvents {
    fd: AsyncFd<OwnedFd>,
    channel: CompChannel,
}

impl CqEvents {
    /// Registers the channel's fd with the current tokio runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime with the IO driver enabled.
    pub fn new(channel: &CompChannel) -> Result<CqEvents> {
        Ok(CqEvents {
            fd: register(channel.inner.fd())?,
            channel: channel.clone(),
        })
    }

    /// The channel.
    pub fn channel(&self) -> &CompChannel {
        &self.channel
    }

    /// Waits for the next completion event and returns its CQ.
    ///
    /// # Cancel safety
    /// Cancel safe; several tasks may wait at once.
    pub async fn next(&self) -> Result<Cq> {
        loop {
            let mut guard = self.fd.readable().await.map_err(reactor_error)?;
            if let Ok(r) = guard.try_io(|_| as_io(self.channel.inner.try_read())) {
                return r.map_err(reactor_error)?;
            }
        }
    }

    /// Polls for the next completion event, for hand-written futures.
    pub fn poll_next_cq(&self, cx: &mut TaskContext<'_>) -> Poll<Result<Cq>> {
        loop {
            let mut guard = match self.fd.poll_read_ready(cx) {
                Poll::Ready(Ok(guard)) => guard,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(reactor_error(e))),
                Poll::Pending => return Poll::Pending,
            };
            if let Ok(r) = guard.try_io(|_| as_io(self.channel.inner.try_read())) {
                return Poll::Ready(r.map_err(reactor_error).and_then(|r| r));
            }
        }
    }
}

/// A never-ending stream of the CQs that have new completions.
impl Stream for CqEvents {
    type Item = Result<Cq>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_next_cq(cx).map(Some)
    }
}

impl std::fmt::Debug for CqEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqEvents")
            .field("channel", &self.channel)
            .finish()
    }
}
