//! The event file descriptors: switched to non-blocking mode once, then read
//! after `poll(2)` says they are readable.
//!
//! Both `ibv_get_async_event(3)` and `ibv_get_cq_event(3)` show this pattern
//! in their examples: set `O_NONBLOCK` on the fd with `fcntl`, `poll` it, then
//! call the getter, which then fails with `EAGAIN` instead of blocking when
//! another thread took the event first. Blocking gets are built on it, so
//! that several threads may wait on one fd, each event reaching exactly one
//! of them.

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::error::{Error, Result};

/// Puts `fd` in non-blocking mode (`fcntl(F_SETFL, flags | O_NONBLOCK)`).
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> Result<()> {
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(|errno| Error::Sys {
        call: "fcntl(F_GETFL)",
        errno,
    })?;
    let flags = OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK;
    fcntl(fd, FcntlArg::F_SETFL(flags)).map_err(|errno| Error::Sys {
        call: "fcntl(F_SETFL)",
        errno,
    })?;
    Ok(())
}

/// An event fd of the crate (a context's async fd, a completion channel's
/// fd), handed out to be polled for readability only: by `poll(2)`,
/// `epoll(7)`, or a reactor such as `mio`'s `SourceFd`.
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
    pub fn wait_readable(&self, timeout: Option<Duration>) -> Result<bool> {
        // SAFETY: the fd is open as long as 'a (the owner is borrowed); it
        // is only polled.
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd) };
        wait_readable(fd, timeout.map_or(Deadline::Never, Deadline::after))
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

/// Waits until `fd` is readable or the deadline passes. Returns whether it is
/// readable. `EINTR` restarts the wait with the time left.
pub(crate) fn wait_readable(fd: BorrowedFd<'_>, deadline: Deadline) -> Result<bool> {
    loop {
        let Some(timeout) = deadline.remaining() else {
            return Ok(false);
        };
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(0) => {
                if matches!(deadline, Deadline::Never) {
                    continue;
                }
            }
            // POLLERR/POLLHUP also end the wait: the read that follows
            // reports the error.
            Ok(_) => return Ok(true),
            Err(Errno::EINTR) => {}
            Err(errno) => {
                return Err(Error::Sys {
                    call: "poll",
                    errno,
                })
            }
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

        let start = Instant::now();
        assert!(!wait_readable(r.as_fd(), Deadline::after(Duration::from_millis(50))).unwrap());
        assert!(start.elapsed() >= Duration::from_millis(50));
        // A zero timeout returns at once.
        assert!(!wait_readable(r.as_fd(), Deadline::after(Duration::ZERO)).unwrap());

        std::fs::File::from(w).write_all(b"x").unwrap();
        assert!(wait_readable(r.as_fd(), Deadline::Never).unwrap());
        assert!(wait_readable(r.as_fd(), Deadline::after(Duration::from_secs(5))).unwrap());
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
