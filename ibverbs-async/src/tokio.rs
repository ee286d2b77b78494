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
use crate::cq::{Cq, WorkCompletion};
use crate::error::{Error, Result};
use crate::event::{try_read, AsyncEvent, AsyncEventInfo, OwnedAsyncEvent};

/// Registers a duplicate of `fd` with the current runtime's reactor, or
/// says why it cannot: no runtime, or one without the IO driver.
fn register(call: &'static str, fd: std::os::fd::BorrowedFd<'_>) -> Result<AsyncFd<OwnedFd>> {
    if ::tokio::runtime::Handle::try_current().is_err() {
        return Err(Error::State {
            call,
            reason: "no tokio runtime: call it from a task or inside Runtime::enter",
        });
    }
    let dup = fd
        .try_clone_to_owned()
        .map_err(|e| Error::system("fcntl(F_DUPFD_CLOEXEC)", e))?;
    // tokio panics (rather than return an error) when the runtime has no IO
    // driver; that panic is turned into an error here. It unwinds out of
    // tokio's registration before anything is registered, and `dup` is
    // closed by the unwinding.
    let registered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        // SAFETY: `dup` is an open fd owned by the AsyncFd from here on: it
        // stays open, names the same file description, and `as_raw_fd`
        // returns it, until the AsyncFd is dropped
        // (AsyncFd::register_with_interest).
        unsafe { AsyncFd::register_with_interest(dup, Interest::READABLE) }
    }));
    match registered {
        Ok(Ok(fd)) => Ok(fd),
        Ok(Err(e)) => Err(Error::system("epoll_ctl", e.into_parts().1)),
        Err(_) => Err(Error::State {
            call,
            reason: "the tokio runtime has no IO driver: build it with enable_io()",
        }),
    }
}

fn reactor_error(e: std::io::Error) -> Error {
    Error::system("tokio reactor", e)
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
///
/// Events to handle elsewhere are taken as [`OwnedAsyncEvent`]s
/// ([`next_owned`](AsyncEvents::next_owned), or the [`Stream`]), which a
/// spawned task can own:
///
/// ```no_run
/// # async fn run() -> ibverbs_async::Result<()> {
/// use ibverbs_async::{tokio::AsyncEvents, Context};
/// let ctx = Context::open("rxe0")?;
/// let events = AsyncEvents::new(&ctx)?;
/// let event = events.next_owned().await?;
/// tokio::spawn(async move {
///     println!("{event}"); // acknowledged when the task drops it
/// });
/// # Ok(()) }
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
    /// # Errors
    /// [`Error::State`] outside a tokio runtime, or in one without the IO
    /// driver (tokio panics there and has no call that asks first: the
    /// panic is caught, so the panic hook still runs, and a program built
    /// with `panic = "abort"` aborts, as with tokio's own types);
    /// [`Error::System`] when the fd cannot be duplicated or registered.
    pub fn new(ctx: &Context) -> Result<AsyncEvents> {
        Ok(AsyncEvents {
            fd: register("AsyncEvents::new", ctx.inner.async_fd())?,
            ctx: ctx.clone(),
        })
    }

    /// The context.
    #[must_use]
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Waits for the next asynchronous event.
    ///
    /// # Cancel safety
    /// Cancel safe: an event is read only in the poll that returns it.
    /// Several tasks may wait at once; each event reaches one of them.
    ///
    /// # Errors
    /// [`Error::Call`] when `ibv_get_async_event` fails, [`Error::System`]
    /// when the reactor does.
    pub async fn next(&self) -> Result<AsyncEvent<'_>> {
        loop {
            let mut guard = self.fd.readable().await.map_err(reactor_error)?;
            if let Ok(r) = guard.try_io(|_| as_io(try_read(&self.ctx))) {
                return r.map_err(reactor_error)?;
            }
        }
    }

    /// Waits for the next asynchronous event and returns it as an
    /// [`OwnedAsyncEvent`], which can be moved into a spawned task. Cancel
    /// safe.
    ///
    /// # Errors
    /// As [`next`](AsyncEvents::next).
    pub async fn next_owned(&self) -> Result<OwnedAsyncEvent> {
        self.next().await.map(AsyncEvent::into_owned)
    }

    /// Waits for the next asynchronous event, acknowledges it at once and
    /// returns a copy of it. Cancel safe.
    ///
    /// # Errors
    /// As [`next`](AsyncEvents::next).
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

/// A never-ending stream of [`OwnedAsyncEvent`]s (see
/// [`AsyncEvents::next_owned`]): each is acknowledged when dropped.
impl Stream for AsyncEvents {
    type Item = Result<OwnedAsyncEvent>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut()
            .poll_next_event(cx)
            .map(|r| Some(r.map(AsyncEvent::into_owned)))
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
/// let events = CqEvents::new(&channel)?;
/// let mut wc = [WorkCompletion::default(); 16];
/// // Arms the CQ, polls, and waits for its event as needed:
/// for wc in events.poll_cq(&cq, &mut wc).await? {
///     println!("{} {:?}", wc.wr_id(), wc.status());
/// }
/// # Ok(()) }
/// ```
// Send + Sync from its fields: tokio's AsyncFd and a Send + Sync handle.
pub struct CqEvents {
    fd: AsyncFd<OwnedFd>,
    channel: CompChannel,
}

impl CqEvents {
    /// Registers the channel's fd with the current tokio runtime.
    ///
    /// # Errors
    /// [`Error::State`] outside a tokio runtime, or in one without the IO
    /// driver (tokio panics there and has no call that asks first: the
    /// panic is caught, so the panic hook still runs, and a program built
    /// with `panic = "abort"` aborts, as with tokio's own types);
    /// [`Error::System`] when the fd cannot be duplicated or registered.
    pub fn new(channel: &CompChannel) -> Result<CqEvents> {
        Ok(CqEvents {
            fd: register("CqEvents::new", channel.inner.fd())?,
            channel: channel.clone(),
        })
    }

    /// The channel.
    #[must_use]
    pub fn channel(&self) -> &CompChannel {
        &self.channel
    }

    /// Waits for the next completion event and returns its CQ.
    ///
    /// # Cancel safety
    /// Cancel safe; several tasks may wait at once.
    ///
    /// # Errors
    /// [`Error::Call`] when `ibv_get_cq_event` fails, [`Error::System`]
    /// when the reactor does.
    pub async fn next(&self) -> Result<Cq> {
        loop {
            let mut guard = self.fd.readable().await.map_err(reactor_error)?;
            // A read wakes every `poll_cq` of the channel
            // (`ChannelInner::try_read`).
            if let Ok(r) = guard.try_io(|_| as_io(self.channel.inner.try_read())) {
                return r.map_err(reactor_error)?;
            }
        }
    }

    /// Waits until `cq` has completions and polls them into `out`; returns
    /// the part of `out` they fill (never empty).
    ///
    /// This is the loop `ibv_get_cq_event(3)` and `ibv_req_notify_cq(3)`
    /// describe, in one call:
    /// 1. poll the CQ; completions found are returned at once;
    /// 2. otherwise arm it (`ibv_req_notify_cq`): only completions added
    ///    *after* arming raise an event, so
    /// 3. poll again: a completion that arrived between the first poll and
    ///    the arming raised no event, and waiting for one would sleep
    ///    forever with a completion in the queue;
    /// 4. still empty: wait for the channel's event, then start over (the
    ///    event may be stale, left from an earlier arming: the loop then
    ///    finds the CQ empty and waits again).
    ///
    /// Each event read is counted against its CQ and acknowledged in
    /// batches of [`CQ_EVENT_ACK_BATCH`](crate::CQ_EVENT_ACK_BATCH)
    /// (`ibv_ack_cq_events(3)` takes a mutex), and before the CQ is
    /// destroyed at the latest. Arming an armed CQ is harmless, so a CQ
    /// left armed by an earlier call costs nothing.
    ///
    /// Several tasks may wait at once, on one CQ or on different CQs of the
    /// channel: an event is read (and acknowledged) by one of them, and
    /// every waiter is then woken to poll its CQ and re-arm it, so an
    /// event read for another task's CQ is never lost. The same holds when
    /// the event is read by any other reader of the channel: another
    /// `CqEvents` of it (on this runtime or another) or a thread in
    /// [`CompChannel::get_cq_event`] and its variants.
    ///
    /// # Cancel safety
    /// Cancel safe: completions are taken from the CQ only in the poll
    /// that returns them; a cancelled call leaves the CQ armed, which is
    /// harmless.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `cq` does not report to this
    /// channel; [`Error::BufferTooSmall`] for an empty `out`; the errors of
    /// [`Cq::poll`], [`Cq::req_notify`] and [`next`](CqEvents::next).
    pub async fn poll_cq<'w>(
        &self,
        cq: &Cq,
        out: &'w mut [WorkCompletion],
    ) -> Result<&'w mut [WorkCompletion]> {
        if out.is_empty() {
            return Err(Error::BufferTooSmall {
                what: "work completions",
                needed: 1,
                given: 0,
            });
        }
        if !cq
            .inner
            .channel
            .as_ref()
            .is_some_and(|c| std::sync::Arc::ptr_eq(c, &self.channel.inner))
        {
            return Err(Error::invalid(
                "the CQ does not report to this completion channel",
            ));
        }
        loop {
            // Registered before the CQ is armed: an event for it that
            // anybody else reads from the channel (another poll_cq or
            // `next`, of this or another `CqEvents`, or a blocking
            // `CompChannel` get) wakes this one, which polls and re-arms.
            let mut read_elsewhere = std::pin::pin!(self.channel.inner.reads.notified());
            read_elsewhere.as_mut().enable();
            let n = cq.poll(out)?.len();
            if n > 0 {
                return Ok(&mut out[..n]);
            }
            cq.req_notify(false)?;
            let n = cq.poll(out)?.len();
            if n > 0 {
                return Ok(&mut out[..n]);
            }
            // Whichever CQ the event names, start over: ours is polled
            // first thing.
            let mut read_here = std::pin::pin!(self.next());
            std::future::poll_fn(|cx| {
                use std::future::Future;
                if let Poll::Ready(read) = read_here.as_mut().poll(cx) {
                    return Poll::Ready(read.map(drop));
                }
                read_elsewhere.as_mut().poll(cx).map(Ok)
            })
            .await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registering_without_a_runtime_or_its_io_driver_is_an_error() {
        let (r, _w) = nix::unistd::pipe().unwrap();
        let err = register("AsyncEvents::new", r.as_fd()).unwrap_err();
        assert!(
            matches!(
                err,
                Error::State {
                    call: "AsyncEvents::new",
                    ..
                }
            ),
            "{err}"
        );

        let no_io = ::tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let guard = no_io.enter();
        let err = register("CqEvents::new", r.as_fd()).unwrap_err();
        assert!(err.to_string().contains("no IO driver"), "{err}");
        drop(guard);

        let rt = ::tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap();
        let _guard = rt.enter();
        register("CqEvents::new", r.as_fd()).unwrap();
    }
}
