//! Event queues, completion queues and counters as futures, on tokio's
//! reactor (feature `tokio`).
//!
//! Built on the queue's `FI_WAIT_FD` wait fd and `fi_trywait`, following
//! fi_poll(3) exactly: read until the queue is empty, `fi_trywait`, and only
//! then wait for the fd. The readiness that woke a reader is cleared only
//! when that reader, having found the queue empty, is about to wait again
//! and `fi_trywait` has reset the fd and found the queue still empty, and
//! as of when it woke (a readiness raised since stays): an event that
//! arrives at any point produces a new wake-up, and one edge that woke
//! several tasks reading through the same value is not taken from those
//! that find entries. A reader whose trywait finds entries pending (it has
//! reset the fd, taking the edge the others wait for) wakes the queue's
//! other readers waiting for the fd, through any of its wrappers. Readers
//! that wait without tokio ([`Waiter`](crate::wait::Waiter), `sread`) on
//! the same queue are not told: read one queue from one kind of wait.
//! Nothing spins and no wake-up is lost.
//!
//! Except where the provider's fd says readable with nothing to read:
//! libfabric 1.17's tcp keeps a message that arrived before any receive was
//! posted in its socket, and its completion queue's fd stays readable until
//! a receive takes it, so a completion queue future polls again and again
//! meanwhile (see [`Waiter`](crate::wait::Waiter)). Keep receives posted
//! ahead of the peer's sends there.
//!
//! ```
//! use libfabric::{info::{getinfo, Hints}, eq::{EqAttr, Event, EventBuf, EqRead}, tokio::AsyncEventQueue, wait::WaitObj, EventQueue, Fabric};
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
//! # rt.block_on(async {
//! let list = getinfo(&Hints::new().provider("tcp").node("127.0.0.1"))?;
//! let fabric = Fabric::open(list.first().unwrap())?;
//! let eq = EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::Fd).write(true))?;
//! let aeq = AsyncEventQueue::new(eq.clone())?;
//! eq.write_notify(eq.fid(), 5, 6)?;
//! let mut buf = EventBuf::new();
//! assert!(matches!(aeq.read(&mut buf).await?, EqRead::Event(Event::Notify(_))));
//! # Ok::<(), libfabric::Error>(())
//! # }).unwrap();
//! ```

use crate::buffer::BufferPool;
use crate::cntr::Counter;
use crate::conn::{ConnConfig, Connection, Incoming, Listener, Pending};
use crate::cq::{self, Completion, CompletionQueue, CqRead, Format};
use crate::eq::{self, EqRead, EventBuf, EventQueue};
use crate::error::{is_again, is_avail, Error, Result};
use crate::info::Hints;
use crate::wait::{eq_has_entries, trywait_raw, wait_guard, TryWait, Waitable};
use libfabric_sys::fabric as sys;
use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::task::Poll;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::Notify;

/// Registers a duplicate of the queue's wait fd with the current tokio
/// reactor. A duplicate, as ibverbs-async does: tokio's epoll keys a
/// registration by fd number, so registering the queue's own fd a second
/// time (a second async wrapper of one queue, on one runtime or another)
/// failed with `EEXIST`. Each duplicate is its own registration of the
/// same open file, whose readiness every one of them sees; it is only
/// polled, never read, and closed when the wrapper is dropped.
fn register(queue: &dyn Waitable) -> Result<AsyncFd<OwnedFd>> {
    let fd = queue.wait_fd()?.as_raw_fd();
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(Error::InvalidArgument(
            "async queues must be created inside a tokio runtime".into(),
        ));
    }
    // SAFETY: fcntl(2) F_DUPFD_CLOEXEC on the queue's wait fd, open while
    // the queue (borrowed) is; it only creates a new fd.
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(Error::system(
            "fcntl(F_DUPFD_CLOEXEC)",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: `dup` is a new open fd that nothing else owns or closes.
    let dup = unsafe { OwnedFd::from_raw_fd(dup) };
    let registered = without_driver_panic(|| {
        // SAFETY: `dup` is an open fd owned by the AsyncFd from here on: it
        // stays open, names the same open file, and `as_raw_fd` returns
        // it, until the AsyncFd is dropped (AsyncFd::register_with_interest).
        unsafe { AsyncFd::register_with_interest(dup, Interest::READABLE) }
    })
    .ok_or(Error::State {
        call: "tokio AsyncFd::register",
        reason: "the tokio runtime has no I/O driver (build it with enable_io or enable_all)",
    })?;
    registered.map_err(|e| Error::system("tokio AsyncFd::register", e.into_parts().1))
}

/// Runs `f`, which makes a tokio resource of the current runtime: tokio
/// panics when the runtime lacks the driver the resource needs (I/O or
/// time), and has no call that asks first. `None` for that panic (the
/// default panic hook still prints its message); the values `f` owned are
/// dropped by the unwinding.
fn without_driver_panic<T>(f: impl FnOnce() -> T) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok()
}

/// The fd's readiness that woke a reader, kept until that reader is about
/// to wait again (see `wait_ready`).
type Woken<'a> = tokio::io::unix::AsyncFdReadyGuard<'a, OwnedFd>;

/// Blocks (asynchronously) until `queue` may have entries: `fi_trywait`,
/// then the fd's readiness. `woken` is the readiness that woke the caller
/// before, whose reads found the queue empty since; it is cleared only
/// once `fi_trywait` has reset the fd and found the queue empty, just
/// before the wait, and as of when it woke the caller (tokio keeps a
/// readiness raised since): an event from the reset on raises a new edge,
/// which the wait sees. Returns the readiness that woke it now (`woken`,
/// untouched, when entries are pending).
///
/// Cleared as soon as it woke the caller, the readiness of one edge that
/// woke several tasks reading through the same fd could be taken from
/// those that find entries: the one that cleared it reads one entry and
/// returns, another waits with entries queued behind a signal that raises
/// no new edge (the util providers' fd stays signalled until a trywait,
/// `fd_signal_set`; the sockets event queue's until the list is empty).
async fn wait_ready<'a>(
    fd: &'a AsyncFd<OwnedFd>,
    fabric: &SendPtr<sys::fid_fabric>,
    fid: &SendPtr<sys::fid>,
    eq: Option<&SendPtr<sys::fid_eq>>,
    progress: Option<&crate::progress::ProgressLock>,
    woken: Option<Woken<'a>>,
    others: &Notify,
) -> Result<Option<Woken<'a>>> {
    // Other readers of the same queue, through any wrapper, waiting
    // below (`others`, shared by the wrappers): a trywait that
    // finds entries pending has already reset the fd (util
    // `util_wait_fd_try` resets it before it looks, `util_wait.c`), taking
    // the edge that would have woken them, and this reader takes one
    // entry only: they are told to read again. Listened for before this
    // reader's own trywait, so that another's telling in between counts.
    let notified = others.notified();
    let mut notified = std::pin::pin!(notified);
    notified.as_mut().enable();
    // The raw pointers and the progress guard are used only before the
    // first await, in trywait_raw, so the future stays Send.
    let pending = {
        let mut fids = [fid.0];
        let _progress = progress.map(|l| wait_guard(l, "fi_trywait")).transpose()?;
        trywait_raw(fabric.0, &mut fids)?
    };
    if pending == TryWait::EventsPending {
        others.notify_waiters();
        return Ok(woken);
    }
    // About to wait: an event queue is looked at once more (tcp can erase
    // the wake-up of an event written during fi_trywait; see
    // wait::eq_has_entries).
    if eq.is_some_and(|eq| eq_has_entries(eq.0)) {
        others.notify_waiters();
        return Ok(woken);
    }
    if let Some(mut spent) = woken {
        spent.clear_ready();
    }
    let readable = fd.readable();
    let mut readable = std::pin::pin!(readable);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(woken) = readable.as_mut().poll(cx) {
            return Poll::Ready(woken.map(Some));
        }
        // Told by another reader: no readiness to clear later.
        notified.as_mut().poll(cx).map(|()| Ok(None))
    })
    .await
    .map_err(|e| Error::system("tokio readable", e))
}

struct SendPtr<T>(*mut T);
// SAFETY: the pointers name FI_THREAD_SAFE objects kept alive by the queue
// handle held alongside them.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}

/// An [`EventQueue`] opened with `FI_WAIT_FD` (or `FI_WAIT_UNSPEC` resolved
/// to a fd), read with `.await`. Must be created inside a tokio runtime.
pub struct AsyncEventQueue {
    fd: AsyncFd<OwnedFd>,
    eq: EventQueue,
    fabric: SendPtr<sys::fid_fabric>,
    fid: SendPtr<sys::fid>,
}

impl AsyncEventQueue {
    /// Registers the queue's wait fd with the current tokio reactor.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] outside a tokio runtime,
    /// [`Error::State`] in one without its I/O driver (tokio panics there
    /// and has no call that asks first: the panic is caught, so the panic
    /// hook still runs, and a program built with `panic = "abort"` aborts,
    /// as with tokio's own types); the queue's wait-fd
    /// errors; the registration's.
    ///
    pub fn new(eq: EventQueue) -> Result<Self> {
        let fd = register(&eq)?;
        let fabric = SendPtr(eq.inner.fabric.fid.as_ptr());
        let fid = SendPtr(eq.inner.fid.fid());
        Ok(AsyncEventQueue {
            eq,
            fd,
            fabric,
            fid,
        })
    }

    /// The queue.
    #[must_use]
    pub fn get_ref(&self) -> &EventQueue {
        &self.eq
    }

    /// The queue, its wait fd no longer registered with the reactor.
    #[must_use]
    pub fn into_inner(self) -> EventQueue {
        self.eq
    }

    /// The next event or error entry ([`EqRead::Error`]); never
    /// [`EqRead::Empty`].
    ///
    /// # Cancel safety
    /// Cancel safe: an event is only taken from the queue in the poll that
    /// returns it.
    ///
    /// # Errors
    /// As [`EventQueue::read`]; [`Error::Call`] when `fi_trywait` fails;
    /// [`Error::System`] when waiting for the wait fd fails.
    pub async fn read<'b>(&self, buf: &'b mut EventBuf) -> Result<EqRead<'b>> {
        let mut woken = None;
        loop {
            // A queue that always has events must not keep the worker to
            // itself: once the task's budget is spent this yields, before
            // anything is taken from the queue (so it stays cancel safe).
            tokio::task::coop::consume_budget().await;
            let (ret, event) = self.eq.read_raw(buf, 0)?;
            if is_avail(ret) {
                // The error entry; none when another reader took it first,
                // and this one reads on.
                if let Some(read) = buf.read_error(&self.eq.inner)? {
                    return Ok(buf.error(read));
                }
                continue;
            }
            if !is_again(ret) {
                // Neither -FI_EAGAIN nor an error entry: never empty.
                return eq::decode(&self.eq.inner, ret, event, buf, eq::ReadCall::Read);
            }
            woken = self.ready(woken.take()).await?;
        }
    }

    /// Reads the queue until `outcome` makes something of an event.
    pub(crate) async fn read_until<T>(
        &self,
        mut outcome: impl FnMut(EqRead<'_>) -> Option<Result<T>>,
    ) -> Result<T> {
        let mut buf = EventBuf::new();
        loop {
            if let Some(done) = outcome(self.read(&mut buf).await?) {
                return done;
            }
        }
    }

    /// Waits until the queue may have an event, without reading it:
    /// `woken` and the result as in `wait_ready` (the caller read the
    /// queue until empty since `woken` woke it).
    pub(crate) async fn ready<'a>(&'a self, woken: Option<Woken<'a>>) -> Result<Option<Woken<'a>>> {
        let eq = SendPtr(self.eq.as_raw());
        let second_look = self.eq.inner.second_look().then_some(&eq);
        wait_ready(
            &self.fd,
            &self.fabric,
            &self.fid,
            second_look,
            None,
            woken,
            &self.eq.inner.tokio_readers,
        )
        .await
    }
}

/// A [`CompletionQueue`] opened with `FI_WAIT_FD`, read with `.await`.
/// Must be created inside a tokio runtime.
pub struct AsyncCompletionQueue<F: Format> {
    fd: AsyncFd<OwnedFd>,
    cq: CompletionQueue<F>,
    fabric: SendPtr<sys::fid_fabric>,
    fid: SendPtr<sys::fid>,
}

impl<F: Format> AsyncCompletionQueue<F> {
    /// Registers the queue's wait fd with the current tokio reactor.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] outside a tokio runtime,
    /// [`Error::State`] in one without its I/O driver (tokio panics there
    /// and has no call that asks first: the panic is caught, so the panic
    /// hook still runs, and a program built with `panic = "abort"` aborts,
    /// as with tokio's own types); the queue's wait-fd
    /// errors; the registration's.
    ///
    pub fn new(cq: CompletionQueue<F>) -> Result<Self> {
        let fd = register(&cq)?;
        let fabric = SendPtr(cq.inner.domain.fabric.fid.as_ptr());
        let fid = SendPtr(cq.inner.fid.fid());
        Ok(AsyncCompletionQueue {
            cq,
            fd,
            fabric,
            fid,
        })
    }

    /// The queue.
    #[must_use]
    pub fn get_ref(&self) -> &CompletionQueue<F> {
        &self.cq
    }

    /// The queue, its wait fd no longer registered with the reactor.
    #[must_use]
    pub fn into_inner(self) -> CompletionQueue<F> {
        self.cq
    }

    /// At least one completion, or an error completion
    /// ([`CqRead::Error`]); never `Empty`.
    ///
    /// # Cancel safety
    /// Cancel safe: completions are only taken in the poll that returns them.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty `buf` (nothing could ever be
    /// read into it).
    pub async fn read<'b>(&'b self, buf: &'b mut [F::Entry]) -> Result<CqRead<'b, F::Entry>> {
        if buf.is_empty() {
            return Err(Error::InvalidArgument(
                "AsyncCompletionQueue::read: an empty slice has no room for a completion".into(),
            ));
        }
        let mut woken = None;
        loop {
            // As in AsyncEventQueue::read: yield once the budget is spent,
            // before taking anything.
            tokio::task::coop::consume_budget().await;
            let read = CompletionQueue::<F>::read_raw(&self.cq.inner, self.cq.raw, buf)?;
            let ret = read.ret();
            if is_avail(ret) {
                // The error completion; none when another reader took it
                // first, and this one reads on.
                if let Some(e) = self.cq.read_err_owned()? {
                    return Ok(CqRead::Error(Box::new(e)));
                }
                continue;
            }
            // Neither -FI_EAGAIN nor 0 (no completion either) nor an error
            // completion: never empty.
            if !is_again(ret) && ret != 0 {
                let read = cq::decode(read.parts(), buf, "fi_cq_read")?;
                return self.cq.finish(read);
            }
            let progress = Some(self.cq.inner.lifecycle());
            woken = wait_ready(
                &self.fd,
                &self.fabric,
                &self.fid,
                None,
                progress,
                woken.take(),
                &self.cq.inner.tokio_readers,
            )
            .await?;
        }
    }

    /// The next completion, its buffer taken back from `pool`; an error
    /// completion is [`Error::Completion`] (its buffer goes back to its
    /// pool). One completion per call, for simple programs: loops that must
    /// keep up with a NIC read batches with [`read`](Self::read).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`read`](Self::read).
    ///
    /// # Errors
    /// [`Error::Completion`], and the errors of [`read`](Self::read).
    pub async fn next(&self, pool: &BufferPool) -> Result<Completion> {
        let mut entry = [F::Entry::default()];
        loop {
            match self.read(&mut entry).await? {
                CqRead::Completions(c) => return Ok(Completion::take(&c[0], pool)),
                CqRead::Error(e) => return Err(Error::completion(&e)),
                CqRead::Empty | CqRead::TimedOut | CqRead::Signaled => {}
            }
        }
    }
}

/// A [`Listener`] whose connections are awaited.
///
/// ```
/// use libfabric::prelude::*;
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// # rt.block_on(async {
/// let listener = AsyncListener::bind(&Hints::new().provider("tcp").node("127.0.0.1").service(0))?;
/// let hints = Hints::new().provider("tcp").addr(listener.local_addr()?);
/// let (server, client) = tokio::join!(listener.accept(), AsyncConnection::connect(&hints, b""));
/// let (server, client) = (server?, client?);
/// let (sp, cp) = (server.buffer_pool(1, 64)?, client.buffer_pool(1, 64)?);
/// server.recv(sp.take().unwrap())?;
/// let mut buf = cp.take().unwrap();
/// buf[..4].copy_from_slice(b"ping");
/// client.send(buf, 4)?;
/// client.next(&cp).await?;
/// assert_eq!(server.next(&sp).await?.bytes(), b"ping");
/// # Ok::<(), libfabric::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct AsyncListener {
    listener: Listener,
    eq: AsyncEventQueue,
}

impl AsyncListener {
    /// [`Listener::bind`], its queue registered with the current tokio
    /// reactor.
    ///
    /// # Errors
    /// As [`Listener::bind`] and [`AsyncEventQueue::new`].
    pub fn bind(hints: &Hints) -> Result<Self> {
        Self::new(Listener::bind(hints)?)
    }

    /// Registers `listener`'s queue with the current tokio reactor.
    ///
    /// # Errors
    /// As [`AsyncEventQueue::new`].
    pub fn new(listener: Listener) -> Result<Self> {
        let eq = AsyncEventQueue::new(listener.eq().clone())?;
        Ok(AsyncListener { listener, eq })
    }

    /// The address it listens on.
    ///
    /// # Errors
    /// As [`Listener::local_addr`].
    pub fn local_addr(&self) -> Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// The next connection request.
    ///
    /// # Errors
    /// As [`Listener::incoming`].
    pub async fn incoming(&self) -> Result<Incoming> {
        self.eq
            .read_until(|read| self.listener.request_of(read))
            .await
    }

    /// The next connection, accepted with no connection data.
    ///
    /// # Errors
    /// As [`Listener::accept`].
    pub async fn accept(&self) -> Result<AsyncConnection> {
        let pending = self
            .incoming()
            .await?
            .prepare::<cq::Msg>(&ConnConfig::new())?;
        AsyncConnection::establish(pending, &[]).await
    }

    /// The listener.
    #[must_use]
    pub fn get_ref(&self) -> &Listener {
        &self.listener
    }
}

/// A [`Connection`] whose completions and events are awaited.
pub struct AsyncConnection<F: Format = cq::Msg> {
    conn: Connection<F>,
    cq: AsyncCompletionQueue<F>,
    rx_cq: AsyncCompletionQueue<F>,
    eq: AsyncEventQueue,
}

impl AsyncConnection {
    /// [`Connection::connect`], awaiting the connection.
    ///
    /// # Errors
    /// As [`Connection::connect`].
    pub async fn connect(hints: &Hints, data: &[u8]) -> Result<Self> {
        let info = crate::conn::first_info(hints, crate::info::EpType::Msg, false)?;
        let fabric = crate::Fabric::open(&info)?;
        let pending = Connection::prepare(&fabric, &info, &ConnConfig::new())?;
        Self::establish(pending, data).await
    }
}

impl<F: Format> AsyncConnection<F> {
    /// [`Pending::establish`], awaited: connects or accepts with `data`
    /// and awaits `FI_CONNECTED` (up to the configured timeout).
    ///
    /// # Errors
    /// As [`Pending::establish`].
    pub async fn establish(pending: Pending<F>, data: &[u8]) -> Result<Self> {
        let eq = AsyncEventQueue::new(pending.eq.clone())?;
        let cq = AsyncCompletionQueue::new(pending.cq().clone())?;
        let rx_cq = AsyncCompletionQueue::new(pending.rx_cq().clone())?;
        let wait = eq.read_until(|read| pending.outcome(read));
        // The timer is made before anything is sent: a runtime without its
        // time driver refuses the call with nothing started.
        let peer_data = match pending.timeout {
            None => {
                pending.start(data)?;
                wait.await?
            }
            Some(t) => {
                let timed = without_driver_panic(|| ::tokio::time::timeout(t, wait)).ok_or(
                    Error::State {
                        call: "AsyncConnection::establish",
                        reason: "a timeout needs the tokio runtime's time driver (build it with enable_time or enable_all)",
                    },
                )?;
                pending.start(data)?;
                timed.await.map_err(|_| Error::TimedOut {
                    call: "FI_CONNECTED",
                })??
            }
        };
        let conn = pending.finish(peer_data);
        Ok(AsyncConnection {
            conn,
            cq,
            rx_cq,
            eq,
        })
    }

    /// A pool of buffers registered with the connection's domain
    /// ([`Connection::buffer_pool`]).
    ///
    /// # Errors
    /// As [`Connection::buffer_pool`].
    pub fn buffer_pool(&self, count: usize, slot_size: usize) -> Result<BufferPool> {
        self.conn.buffer_pool(count, slot_size)
    }

    /// The next completion of [`cq`](Self::cq), its buffer back from
    /// `pool` ([`AsyncCompletionQueue::next`]), while the connection's event
    /// queue is awaited too: once the connection ended (`FI_SHUTDOWN`, which
    /// some providers report without failing the operations posted), a
    /// wait that finds no completion is [`Error::Call`] with
    /// [`Errno::NOTCONN`](crate::Errno::NOTCONN) rather than a wait for ever (as
    /// [`Connection::wait_one`]).
    ///
    /// # Cancel safety
    /// Cancel safe, as [`AsyncCompletionQueue::read`] and
    /// [`AsyncEventQueue::read`].
    ///
    /// # Errors
    /// As [`AsyncCompletionQueue::next`]; [`Errno::NOTCONN`](crate::Errno::NOTCONN) when the
    /// connection ended, or the errno of an error entry of its event queue.
    pub async fn next(&self, pool: &BufferPool) -> Result<Completion> {
        if self.conn.is_ended() {
            // Ended before: what completed since, or the end again.
            return self.conn.wait_one(pool, Some(std::time::Duration::ZERO));
        }
        let mut completion = std::pin::pin!(self.cq.next(pool));
        let mut ended = std::pin::pin!(self.ended());
        std::future::poll_fn(|cx| {
            use std::future::Future;
            if let std::task::Poll::Ready(done) = completion.as_mut().poll(cx) {
                return std::task::Poll::Ready(done);
            }
            ended.as_mut().poll(cx)
        })
        .await
    }

    /// Awaits the end of the connection on its event queue: always an
    /// error.
    async fn ended(&self) -> Result<Completion> {
        let mut woken = None;
        loop {
            // As the reads: yield once the budget is spent (a trywait that
            // keeps finding events pending would otherwise keep the
            // worker).
            tokio::task::coop::consume_budget().await;
            // The queue is only read once it may have an event: the wait
            // allocates nothing.
            woken = self.eq.ready(woken.take()).await?;
            // Read until empty (or the end).
            self.conn.check_ended()?;
        }
    }

    /// Posts a receive into `buffer` ([`Connection::recv`]).
    ///
    /// # Errors
    /// As [`Connection::recv`]: the buffer comes back with the error.
    pub fn recv(&self, buffer: crate::Buffer) -> crate::error::Handback<crate::Buffer> {
        self.conn.recv(buffer)
    }

    /// Sends the first `len` bytes of `buffer` ([`Connection::send`]).
    ///
    /// # Errors
    /// As [`Connection::send`]: the buffer comes back with the error.
    pub fn send(&self, buffer: crate::Buffer, len: usize) -> crate::error::Handback<crate::Buffer> {
        self.conn.send(buffer, len)
    }

    /// The completion queue of transmits (and of receives, unless the
    /// configuration gave them their own), awaited.
    #[must_use]
    pub fn cq(&self) -> &AsyncCompletionQueue<F> {
        &self.cq
    }

    /// The completion queue of receives, awaited.
    #[must_use]
    pub fn rx_cq(&self) -> &AsyncCompletionQueue<F> {
        &self.rx_cq
    }

    /// The event queue, awaited (for `FI_SHUTDOWN`).
    #[must_use]
    pub fn eq(&self) -> &AsyncEventQueue {
        &self.eq
    }

    /// The connection.
    #[must_use]
    pub fn get_ref(&self) -> &Connection<F> {
        &self.conn
    }

    /// The connection, its queues no longer registered with the reactor.
    #[must_use]
    pub fn into_inner(self) -> Connection<F> {
        self.conn
    }
}

impl<F: Format> std::fmt::Debug for AsyncConnection<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncConnection")
            .field("connection", &self.conn)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for AsyncEventQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncEventQueue")
            .field("queue", &self.eq)
            .finish_non_exhaustive()
    }
}

impl<F: Format> std::fmt::Debug for AsyncCompletionQueue<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncCompletionQueue")
            .field("queue", &self.cq)
            .finish_non_exhaustive()
    }
}

/// A [`Counter`] waited on with `.await`. Must be created inside a tokio
/// runtime.
///
/// [`wait_for`](Self::wait_for) waits in [`Counter::wait`] on tokio's
/// blocking pool, in slices of at most 100 ms, reading the count between
/// them. Not on the counter's wait fd, as the other async queues do: no
/// provider gives counters one (libfabric's util counters answer
/// `FI_GETWAIT` with `-FI_ENOSYS`, and this crate refuses sockets'
/// `FI_WAIT_FD` counters: see the [`cntr`](crate::cntr#providers) module),
/// and tcp's `fi_trywait` from 1.18 on does not look at a counter at all
/// (`xnet_trywait`, `prov/tcp/src/xnet_progress.c` 1645-1654 in 1.22: "the
/// user must read the counter before and after"), so a fd loop would need
/// a second read that no provider could test.
///
/// ```
/// use libfabric::prelude::*;
/// use libfabric::tokio::AsyncCounter;
/// # let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
/// # rt.block_on(async {
/// let info = getinfo(&Hints::new().provider("tcp").node("127.0.0.1"))?.into_iter().next().unwrap();
/// let domain = Domain::open(&Fabric::open(&info)?, &info)?;
/// let counter = AsyncCounter::new(Counter::open(&domain, &CntrAttr::new())?)?;
/// let adder = counter.get_ref().clone();
/// std::thread::spawn(move || adder.add(3));
/// assert!(counter.wait_for(3).await? >= 3);
/// # Ok::<(), libfabric::Error>(())
/// # }).unwrap();
/// ```
pub struct AsyncCounter {
    counter: Counter,
    /// The runtime it was created in, whose blocking pool runs the waits:
    /// as the queues' fds stay registered with the reactor they were
    /// created under, a wait polled elsewhere (another executor, or after
    /// that runtime shut down) still has a pool to ask, or an error.
    runtime: tokio::runtime::Handle,
}

impl AsyncCounter {
    /// Wraps the counter.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] outside a tokio runtime;
    /// [`Error::WrongWaitMode`] for a counter that cannot block
    /// (`FI_WAIT_NONE`, `FI_WAIT_SET`: shm's counters).
    pub fn new(counter: Counter) -> Result<Self> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Err(Error::InvalidArgument(
                "async counters must be created inside a tokio runtime".into(),
            ));
        };
        let actual = counter.inner.wait_obj;
        if !actual.can_sread() {
            return Err(Error::WrongWaitMode {
                call: "AsyncCounter::new",
                needed: "FI_WAIT_FD, FI_WAIT_UNSPEC, FI_WAIT_MUTEX_COND or FI_WAIT_POLLFD",
                actual,
            });
        }
        Ok(AsyncCounter { counter, runtime })
    }

    /// The counter.
    #[must_use]
    pub fn get_ref(&self) -> &Counter {
        &self.counter
    }

    /// The counter.
    #[must_use]
    pub fn into_inner(self) -> Counter {
        self.counter
    }

    /// Waits until the count reaches `threshold` and returns the count
    /// read then.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads the counter. A cancelled wait's blocking
    /// part ends within its slice (100 ms) and holds a handle of the
    /// counter until then, so a [`Counter::close`] right after may still
    /// see [`Error::InUse`].
    ///
    /// # Errors
    /// [`Error::CounterError`] when the error count changed since the call
    /// began; the errors of [`Counter::read`] and [`Counter::wait`];
    /// [`Error::State`] when the blocking pool's task could not run (the
    /// runtime it was created in shut down). The waits run on that
    /// runtime's blocking pool, so the future may be polled anywhere.
    pub async fn wait_for(&self, threshold: u64) -> Result<u64> {
        const SLICE: std::time::Duration = std::time::Duration::from_millis(100);
        let errors = self.counter.read_err()?;
        loop {
            // As in AsyncEventQueue::read: yield once the budget is spent.
            tokio::task::coop::consume_budget().await;
            let count = self.counter.read()?;
            if count >= threshold {
                return Ok(count);
            }
            let now = self.counter.read_err()?;
            if now != errors {
                return Err(Error::CounterError {
                    call: "AsyncCounter::wait_for",
                    errors: now,
                });
            }
            let counter = self.counter.clone();
            let waited = self
                .runtime
                .spawn_blocking(move || counter.wait(threshold, Some(SLICE)))
                .await
                .map_err(|_| Error::State {
                    call: "AsyncCounter::wait_for",
                    reason: "the blocking wait did not run (the runtime is shutting down)",
                })?;
            match waited {
                // Counted by the loop's read; an error count change is
                // told apart there too, against this call's start.
                Ok(()) | Err(Error::TimedOut { .. } | Error::CounterError { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

impl std::fmt::Debug for AsyncCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncCounter")
            .field("counter", &self.counter)
            .finish()
    }
}
