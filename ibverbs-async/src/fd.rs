//! The event file descriptors: switched to non-blocking mode once, then read
//! after `poll(2)` says they are readable.
//!
//! Both `ibv_get_async_event(3)` and `ibv_get_cq_event(3)` show this pattern
//! in their examples: set `O_NONBLOCK` on the fd with `fcntl`, `poll` it, then
//! call the getter, which then fails with `EAGAIN` instead of blocking when
//! another thread took the event first. Blocking gets are built on it, so
//! that several threads may wait on one fd, each event reaching exactly one
//! of them.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::errno::Errno as NixErrno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd as NixEventFd};

use crate::error::{from_nix, Result};

/// Puts `fd` in non-blocking mode (`fcntl(F_SETFL, flags | O_NONBLOCK)`).
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> Result<()> {
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(|e| from_nix("fcntl(F_GETFL)", e))?;
    let flags = OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK;
    fcntl(fd, FcntlArg::F_SETFL(flags)).map_err(|e| from_nix("fcntl(F_SETFL)", e))?;
    Ok(())
}

/// How a stoppable wait ended.
#[derive(Debug)]
#[must_use = "a wait may end without a value: match on it"]
pub enum Wait<T> {
    /// The value waited for.
    Ready(T),
    /// The timeout passed first.
    TimedOut,
    /// [`Stopper::stop`] was called (before or during the wait).
    Stopped,
}

impl<T> Wait<T> {
    /// The value, if the wait got one.
    #[must_use]
    pub fn ready(self) -> Option<T> {
        match self {
            Wait::Ready(v) => Some(v),
            Wait::TimedOut | Wait::Stopped => None,
        }
    }

    /// Whether the wait was stopped.
    #[must_use]
    pub fn is_stopped(&self) -> bool {
        matches!(self, Wait::Stopped)
    }
}

/// A handle that ends blocking waits from another thread:
/// [`Context::wait_async_event`](crate::Context::wait_async_event) and
/// [`CompChannel::wait_cq_event`](crate::CompChannel::wait_cq_event) poll its
/// `eventfd(2)` beside the event fd and return [`Wait::Stopped`] once
/// [`stop`](Stopper::stop) was called.
///
/// Clones share one eventfd. A stop is sticky: every wait given the stopper,
/// now or later, returns [`Wait::Stopped`] until [`reset`](Stopper::reset).
/// No event is read by a stopped wait, so none is lost.
///
/// ```no_run
/// # fn main() -> ibverbs_async::Result<()> {
/// use ibverbs_async::{Context, Stopper, Wait};
/// let ctx = Context::open("rxe0")?;
/// let stopper = Stopper::new()?;
/// let reader = {
///     let (ctx, stopper) = (ctx.clone(), stopper.clone());
///     std::thread::spawn(move || loop {
///         match ctx.wait_async_event(&stopper, None)? {
///             Wait::Ready(event) => println!("{event}"),
///             Wait::TimedOut => continue,
///             Wait::Stopped => return Ok::<_, ibverbs_async::Error>(()),
///         }
///     })
/// };
/// stopper.stop()?;
/// reader.join().unwrap()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Stopper {
    fd: Arc<NixEventFd>,
}

impl Stopper {
    /// A new stopper, not stopped (`eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)`).
    ///
    /// # Errors
    /// [`Error::System`](crate::Error::System) when `eventfd` fails (out of
    /// file descriptors).
    pub fn new() -> Result<Stopper> {
        let fd =
            NixEventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
                .map_err(|e| from_nix("eventfd", e))?;
        Ok(Stopper { fd: Arc::new(fd) })
    }

    /// Stops every wait given this stopper (or a clone), current and later.
    ///
    /// # Errors
    /// [`Error::System`](crate::Error::System) when the eventfd cannot be
    /// written (its counter is full: stopped about 2^64 times without a
    /// reset).
    pub fn stop(&self) -> Result<()> {
        match self.fd.write(1) {
            Ok(_) | Err(NixErrno::EAGAIN) => Ok(()),
            Err(e) => Err(from_nix("write(eventfd)", e)),
        }
    }

    /// Clears a stop, so that waits block again.
    ///
    /// # Errors
    /// [`Error::System`](crate::Error::System) when the eventfd cannot be
    /// read.
    pub fn reset(&self) -> Result<()> {
        match self.fd.read() {
            Ok(_) | Err(NixErrno::EAGAIN) => Ok(()),
            Err(e) => Err(from_nix("read(eventfd)", e)),
        }
    }

    /// Whether [`stop`](Stopper::stop) was called since the last reset.
    ///
    /// # Errors
    /// [`Error::System`](crate::Error::System) when `poll` fails.
    pub fn is_stopped(&self) -> Result<bool> {
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(n) => Ok(n > 0),
            Err(e) => Err(from_nix("poll", e)),
        }
    }
}

impl Stopper {
    /// The eventfd, to poll for readability beside other fds (readable
    /// means stopped), as an [`EventFd`]: like the event fds, it is not
    /// handed out as a `BorrowedFd`, through which safe code could clear
    /// `O_NONBLOCK` on it, after which [`reset`](Stopper::reset) of a
    /// stopper not stopped would block for ever.
    #[must_use]
    pub fn fd(&self) -> EventFd<'_> {
        EventFd::new(self.fd.as_fd())
    }
}

impl AsRawFd for Stopper {
    /// The eventfd's number (see [`Stopper::fd`]).
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_fd().as_raw_fd()
    }
}

impl std::fmt::Debug for Stopper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stopper")
            .field("fd", &self.fd.as_fd().as_raw_fd())
            .finish()
    }
}

/// An event fd of the crate (a context's async fd, a completion channel's
/// fd, a [`Stopper`]'s eventfd), handed out to be polled for readability
/// only: by `poll(2)`, `epoll(7)`, or a reactor such as `mio`'s
/// `SourceFd`.
///
/// It gives the raw number ([`AsRawFd`]), not a
/// [`BorrowedFd`]: with a `BorrowedFd`, safe code could duplicate it and
/// `read` an event behind libibverbs' back (the kernel then counts it
/// reported, libibverbs never acknowledges it, and the next
/// `ibv_destroy_qp`/`ibv_destroy_cq` of its object blocks for ever), or
/// clear `O_NONBLOCK` on the shared file description, after which a
/// non-blocking get blocks. Making it an fd again takes `unsafe`, where
/// the caller promises to only wait for readability.
#[derive(Debug, Clone, Copy)]
pub struct EventFd<'a> {
    fd: RawFd,
    _owner: std::marker::PhantomData<BorrowedFd<'a>>,
}

impl<'a> EventFd<'a> {
    pub(crate) fn new(fd: BorrowedFd<'a>) -> Self {
        EventFd {
            fd: fd.as_raw_fd(),
            _owner: std::marker::PhantomData,
        }
    }

    /// Waits until the fd is readable or `timeout` passes (`None`: no
    /// limit); returns whether it is readable. A readable fd means an event
    /// may be there: read it with the owner's non-blocking get.
    ///
    /// # Errors
    /// [`Error::System`](crate::Error::System) when `poll` fails.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> Result<bool> {
        // SAFETY: the fd is open as long as 'a (the owner is borrowed); it
        // is only polled.
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd) };
        Ok(matches!(
            wait_readable(fd, None, timeout.map_or(Deadline::Never, Deadline::after))?,
            Wait::Ready(())
        ))
    }
}

impl AsRawFd for EventFd<'_> {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

/// When a wait ends.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Deadline {
    /// Wait until the fd is readable.
    Never,
    /// Give up at this instant.
    At(Instant),
}

impl Deadline {
    pub(crate) fn after(timeout: Duration) -> Deadline {
        match Instant::now().checked_add(timeout) {
            Some(at) => Deadline::At(at),
            None => Deadline::Never,
        }
    }

    /// The poll timeout until the deadline, rounded up to whole milliseconds
    /// so that a wait never ends just before the deadline and spins; `None`
    /// once it has passed.
    fn remaining(self) -> Option<PollTimeout> {
        match self {
            Deadline::Never => Some(PollTimeout::NONE),
            Deadline::At(at) => {
                let left = at.checked_duration_since(Instant::now())?;
                if left.is_zero() {
                    return None;
                }
                let ms = left.as_nanos().div_ceil(1_000_000);
                Some(PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX))
            }
        }
    }
}

/// Waits until `fd` is readable, `stopper` is stopped (checked first) or
/// the deadline passes. `EINTR` restarts the wait with the time left. A
/// deadline that has passed (a zero timeout) still looks at the fds once,
/// without waiting: the answer is whether they are ready now, never a
/// timeout reported without looking.
pub(crate) fn wait_readable(
    fd: BorrowedFd<'_>,
    stopper: Option<&Stopper>,
    deadline: Deadline,
) -> Result<Wait<()>> {
    loop {
        let (timeout, last) = match deadline.remaining() {
            Some(timeout) => (timeout, false),
            None => (PollTimeout::ZERO, true),
        };
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        let mut both;
        let fds: &mut [PollFd<'_>] = match stopper {
            None => &mut fds,
            Some(s) => {
                both = [
                    PollFd::new(s.fd.as_fd(), PollFlags::POLLIN),
                    PollFd::new(fd, PollFlags::POLLIN),
                ];
                &mut both
            }
        };
        match poll(fds, timeout) {
            Ok(0) if last => return Ok(Wait::TimedOut),
            Ok(0) => {}
            Ok(_) => {
                let stopped = stopper.is_some() && fds[0].any().unwrap_or(false);
                // POLLERR/POLLHUP also end the wait: the read that follows
                // reports the error.
                return Ok(if stopped {
                    Wait::Stopped
                } else {
                    Wait::Ready(())
                });
            }
            Err(NixErrno::EINTR) => {}
            Err(errno) => return Err(from_nix("poll", errno)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    #[test]
    fn wait_readable_times_out_then_sees_data() {
        let (r, w) = nix::unistd::pipe().unwrap();
        set_nonblocking(r.as_fd()).unwrap();
        let flags = fcntl(r.as_fd(), FcntlArg::F_GETFL).unwrap();
        assert!(OFlag::from_bits_retain(flags).contains(OFlag::O_NONBLOCK));

        let ready = |w: Wait<()>| matches!(w, Wait::Ready(()));
        let start = Instant::now();
        let t = wait_readable(r.as_fd(), None, Deadline::after(Duration::from_millis(50)));
        assert!(matches!(t.unwrap(), Wait::TimedOut));
        assert!(start.elapsed() >= Duration::from_millis(50));
        // A zero timeout returns at once.
        let t = wait_readable(r.as_fd(), None, Deadline::after(Duration::ZERO));
        assert!(matches!(t.unwrap(), Wait::TimedOut));

        std::fs::File::from(w).write_all(b"x").unwrap();
        assert!(ready(
            wait_readable(r.as_fd(), None, Deadline::Never).unwrap()
        ));
        // A zero timeout, or one already past, still says the fd is
        // readable: it looks once without waiting.
        let t = wait_readable(r.as_fd(), None, Deadline::after(Duration::ZERO));
        assert!(ready(t.unwrap()));
        let past = Deadline::At(Instant::now() - Duration::from_millis(1));
        assert!(ready(wait_readable(r.as_fd(), None, past).unwrap()));
        let t = wait_readable(r.as_fd(), None, Deadline::after(Duration::from_secs(5)));
        assert!(ready(t.unwrap()));
    }

    #[test]
    fn a_stopper_ends_a_blocked_wait_from_another_thread() {
        let (r, _w) = nix::unistd::pipe().unwrap();
        let stopper = Stopper::new().unwrap();
        assert!(!stopper.is_stopped().unwrap());
        let remote = stopper.clone();
        let start = Instant::now();
        let waiter = std::thread::spawn(move || {
            wait_readable(r.as_fd(), Some(&remote), Deadline::Never).map(|w| w.is_stopped())
        });
        std::thread::sleep(Duration::from_millis(50));
        stopper.stop().unwrap();
        assert!(waiter.join().unwrap().unwrap());
        assert!(start.elapsed() >= Duration::from_millis(50));
        // Sticky until reset.
        assert!(stopper.is_stopped().unwrap());
        stopper.reset().unwrap();
        assert!(!stopper.is_stopped().unwrap());
    }

    #[test]
    fn remaining_rounds_up() {
        let d = Deadline::after(Duration::from_micros(1500));
        let ms: i32 = d.remaining().unwrap().into();
        assert!((1..=2).contains(&ms), "{ms}");
        assert_eq!(Deadline::Never.remaining(), Some(PollTimeout::NONE));
        let past = Deadline::At(Instant::now() - Duration::from_millis(1));
        assert!(past.remaining().is_none());
    }
}
