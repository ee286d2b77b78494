//! Waiting, per fi_poll(3): wait objects, the wait fd of a queue,
//! `FI_WAIT_POLLFD` sets, `fi_trywait` over several queues, wait sets, and
//! [`Waiter`], which runs the whole trywait / block / drain loop.

use crate::error::{check, classify, Errno, Error, Handback, ObjectKind, Result};
use crate::fabric::{Fabric, FabricInner};
use crate::fid::{close_last, OwnedFid};
use crate::progress::{ProgressLock, ProgressRead};
use libfabric_sys::fabric as sys;
use std::ffi::c_void;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

/// How a queue blocks (`enum fi_wait_obj`).
///
/// # Default wait objects
/// [`EqAttr::new`](crate::eq::EqAttr::new) and
/// [`CqAttr::new`](crate::cq::CqAttr::new) ask for the first wait object
/// of `FI_WAIT_FD`, `FI_WAIT_UNSPEC` and `FI_WAIT_NONE` the provider opens,
/// so that a queue can block ([`EventQueue::sread`](crate::EventQueue::sread),
/// [`Waiter`], the tokio queues) unless the provider has nothing to block
/// on. What that gives, measured with libfabric 1.17, 1.22 and 2.1:
///
/// | provider | event queue | completion queue |
/// |---|---|---|
/// | tcp, tcp;ofi_rxm, sockets | `Fd` | `Fd` |
/// | udp;ofi_rxd | `Fd` | `Fd`; `sread` blocks, but rxd gives no wait fd (`FI_GETWAIT`: `-FI_ENOSYS`), so no [`Waiter`] or tokio |
/// | shm | `Fd` | `None`: shm refuses `FI_WAIT_FD` and resolves `FI_WAIT_UNSPEC` to `FI_WAIT_YIELD` (`prov/shm/src/smr_cq.c` 149-151 in 1.17), whose waits ignore their timeout, so the crate refuses it: poll with `read` |
/// | verbs | `Fd` | `Fd` (its completion channel) |
/// | rxm over sockets (`sockets;ofi_rxm`) | `Fd` | `Fd`, but `fi_enable` of an endpoint bound to it fails with `-FI_EINVAL` (rxm adds the sockets queue's fd to its own wait set, `rxm_ep_msg_cq_open`, `prov/rxm/src/rxm_ep.c` 1140-1160 in 1.17): ask for `WaitObj::None` |
///
/// Ask for [`WaitObj::None`] explicitly for queues that are only polled:
/// a provider may then skip signalling a wait object on each entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WaitObj {
    /// `FI_WAIT_NONE`: no blocking reads; poll with `read`.
    None,
    /// `FI_WAIT_UNSPEC`: the provider chooses. libfabric 1.17's tcp gives an
    /// event queue a fd, but a completion queue an `FI_WAIT_POLLFD` set
    /// (`prov/tcp/src/tcpx_cq.c` 285-289), which [`Waiter`] and the tokio
    /// queues do not take: ask for [`WaitObj::Fd`] to use them. The wait
    /// object in force is [`Waitable::wait_obj`].
    Unspec,
    /// `FI_WAIT_SET`: the queue signals a [`WaitSet`]. Deprecated by
    /// libfabric 2.0 with wait sets (`#[deprecated]` when built against
    /// 2.x headers).
    #[cfg_attr(
        libfabric_2,
        deprecated(note = "libfabric 2.x deprecates wait sets: use WaitObj::Fd and Waiter")
    )]
    Set,
    /// `FI_WAIT_FD`: a file descriptor that becomes readable.
    Fd,
    /// `FI_WAIT_MUTEX_COND`: a pthread mutex and condition variable.
    /// Deprecated by libfabric 2.0 (`#[deprecated]` when built against 2.x
    /// headers).
    #[cfg_attr(
        libfabric_2,
        deprecated(note = "libfabric 2.x deprecates FI_WAIT_MUTEX_COND: use WaitObj::Fd")
    )]
    MutexCond,
    /// `FI_WAIT_YIELD`: blocking reads spin with `sched_yield`. Refused by
    /// this crate's queues: libfabric's util implementation ignores the
    /// timeout, so an `sread` with one would never return.
    Yield,
    /// `FI_WAIT_POLLFD`: a set of fds to poll, which may change.
    PollFd,
    /// A raw `enum fi_wait_obj` value. The attribute builders and
    /// [`WaitSet::open`] turn a value libfabric names into its variant
    /// (`Other(0)` is [`WaitObj::None`], `Other(2)` is [`WaitObj::Set`]),
    /// so every check applies to it; a value libfabric does not name is
    /// refused with [`Error::UnsupportedWait`] before any C call. Queues
    /// report it only for a wait object a newer provider resolved to.
    Other(u32),
}

impl WaitObj {
    pub(crate) fn raw(self) -> sys::fi_wait_obj {
        match self {
            WaitObj::None => sys::FI_WAIT_NONE,
            WaitObj::Unspec => sys::FI_WAIT_UNSPEC,
            WaitObj::Set => sys::FI_WAIT_SET,
            WaitObj::Fd => sys::FI_WAIT_FD,
            WaitObj::MutexCond => sys::FI_WAIT_MUTEX_COND,
            WaitObj::Yield => sys::FI_WAIT_YIELD,
            WaitObj::PollFd => sys::FI_WAIT_POLLFD,
            WaitObj::Other(v) => v,
        }
    }

    pub(crate) fn from_raw(raw: sys::fi_wait_obj) -> Self {
        match raw {
            sys::FI_WAIT_NONE => WaitObj::None,
            sys::FI_WAIT_UNSPEC => WaitObj::Unspec,
            sys::FI_WAIT_SET => WaitObj::Set,
            sys::FI_WAIT_FD => WaitObj::Fd,
            sys::FI_WAIT_MUTEX_COND => WaitObj::MutexCond,
            sys::FI_WAIT_YIELD => WaitObj::Yield,
            sys::FI_WAIT_POLLFD => WaitObj::PollFd,
            other => WaitObj::Other(other),
        }
    }

    /// The named variant of a raw value given as `Other`: `Other(0)` is
    /// `None`, `Other(2)` is `Set`, and so on. Every wait object that
    /// enters the crate goes through this, so that no check comparing
    /// variants can be passed by spelling a value as a number.
    #[inline]
    pub(crate) fn normalized(self) -> Self {
        Self::from_raw(self.raw())
    }

    /// The wait object a queue or wait set is opened with: normalised, and
    /// refused with [`Error::UnsupportedWait`] when the crate cannot let a
    /// provider use it: a value libfabric does not name (the provider
    /// would read it as whatever its switch falls into), or
    /// `FI_WAIT_YIELD`, whose util wait ignores its timeout
    /// (`util_wait_yield_run`, `prov/util/src/util_wait.c` 592-611 in 1.17:
    /// an `sread` with a timeout never returned on shm).
    pub(crate) fn checked(self, queue: &'static str) -> Result<Self> {
        match self.normalized() {
            WaitObj::Other(_) => Err(Error::UnsupportedWait {
                queue,
                requested: self,
                reason: "libfabric names no such wait object",
            }),
            WaitObj::Yield => Err(Error::UnsupportedWait {
                queue,
                requested: self,
                reason: "FI_WAIT_YIELD waits ignore their timeout in libfabric's util code",
            }),
            known => Ok(known),
        }
    }

    /// Whether `sread` may block on a queue with this wait object (as the
    /// provider resolved it): only the objects a blocking read can wait on
    /// with a timeout. Anything else, a value the crate does not name
    /// included, is refused.
    pub(crate) fn can_sread(self) -> bool {
        matches!(
            self,
            WaitObj::Unspec | WaitObj::Fd | WaitObj::MutexCond | WaitObj::PollFd
        )
    }
}

/// The longest wait one call takes: `i32::MAX` milliseconds (24.8 days),
/// the most an `int` timeout says.
const LONGEST_ONE_WAIT: Duration = Duration::from_millis(i32::MAX as u64);

/// Refuses `queue` (an event or completion queue) on a wait set where
/// the provider signals a set through a socket pair that fills up
/// (`quirks::wait_set_fills_up`, sockets): each entry writes a byte that
/// only the set's wait drains, and the writer blocks for good once it is
/// full.
pub(crate) fn refuse_a_filling_set(queue: &'static str, provider: &str) -> Result<()> {
    if crate::quirks::wait_set_fills_up(provider) {
        return Err(Error::UnsupportedWait {
            queue,
            requested: WaitObj::Set,
            reason: "sockets writes a byte per entry into the set's blocking socket pair, which only a wait drains: its writers then block for good",
        });
    }
    Ok(())
}

/// Whether `timeout` is longer than one call can wait
/// ([`timeout_ms`] gives it as `i32::MAX`): a call that returns on that
/// timeout waits on for the time left rather than report it.
#[inline]
pub(crate) fn beyond_one_wait(timeout: Option<Duration>) -> bool {
    timeout.is_some_and(|t| t > LONGEST_ONE_WAIT)
}

/// The milliseconds of a libfabric wait for `timeout`: [`timeout_ms`],
/// and one more unless it is 0 or for ever. libfabric times its waits on
/// a millisecond clock whose readings it truncates (`ofi_timeout_time`
/// and `ofi_adjust_timeout`, `include/ofi.h` 384-396 in 1.22, which
/// `ofi_eq_sread` and the util waits loop on: `util_eq.c` 184-193), so
/// that a wait may end up to a millisecond before its timeout: measured,
/// an `fi_eq_sread` of 2 ms (a 1.5 ms timeout rounded up) ended after
/// 1.08 ms. With the millisecond added it ends after its timeout.
#[inline]
pub(crate) fn provider_timeout_ms(timeout: Option<Duration>) -> i32 {
    match timeout_ms(timeout) {
        ms @ (-1 | 0) => ms,
        ms => ms.saturating_add(1),
    }
}

/// Converts a timeout to the milliseconds `poll(2)` takes (-1: forever),
/// rounded up, at most `i32::MAX` (see [`beyond_one_wait`]).
#[inline]
pub(crate) fn timeout_ms(timeout: Option<Duration>) -> i32 {
    match timeout {
        None => -1,
        Some(t) => {
            // Round up so that a short non-zero timeout does not become 0
            // (whole seconds are whole milliseconds: no 128-bit division).
            let ms = t
                .as_secs()
                .saturating_mul(1000)
                .saturating_add(u64::from(t.subsec_nanos().div_ceil(1_000_000)));
            i32::try_from(ms).unwrap_or(i32::MAX)
        }
    }
}

/// What [`trywait`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum TryWait {
    /// Every queue is empty and its wait object armed: it is now safe to
    /// block on the wait fds.
    MayBlock,
    /// Some queue has entries (`-FI_EAGAIN`): read them before blocking.
    EventsPending,
}

/// Queues that can be waited on: [`EventQueue`](crate::EventQueue),
/// [`CompletionQueue`](crate::CompletionQueue) and
/// [`Counter`](crate::Counter) (fi_poll(3) lists counters beside the
/// queues). Sealed.
pub trait Waitable: sealed::Sealed {
    /// The queue's `struct fid`.
    #[doc(hidden)]
    fn wait_fid(&self) -> *mut sys::fid;
    /// The fabric the queue belongs to.
    #[doc(hidden)]
    fn fabric_ptr(&self) -> *const ();
    /// The fabric the queue belongs to, as a handle.
    #[doc(hidden)]
    fn fabric(&self) -> Fabric;
    /// The queue's wait object, as the provider resolved it.
    fn wait_obj(&self) -> WaitObj;
    /// The `fid_eq` of an event queue that a wait looks at once more
    /// before it blocks (see [`eq_has_entries`]); `None` for any other
    /// queue, and for an event queue that needs no such look.
    #[doc(hidden)]
    fn event_queue(&self) -> Option<*mut sys::fid_eq> {
        None
    }
    /// The lock that a call running the provider's progress on this queue
    /// holds shared (a completion queue's or a counter's: see
    /// `CqInner::lifecycle`).
    /// Only the crate can call it (the token): a lock held from outside
    /// could keep an endpoint's close waiting.
    #[doc(hidden)]
    fn progress_lock(&self, _: sealed::Token) -> Option<&ProgressLock> {
        None
    }
    /// Whether the queue may be used from any thread (`FI_THREAD_SAFE`;
    /// see the [`threading`](crate::threading) module). Only the crate
    /// calls it.
    #[doc(hidden)]
    fn thread_safe(&self, _: sealed::Token) -> bool {
        true
    }
    /// `fi_control(FI_GETWAIT)` for an `FI_WAIT_FD` queue: the fd that becomes
    /// readable when the queue may have entries, borrowed from the queue, as
    /// a [`WaitFd`] to poll for readiness.
    ///
    /// Block on it only after [`trywait`] said [`TryWait::MayBlock`].
    ///
    /// # Errors
    /// [`Error::WrongWaitMode`] for a queue whose wait object is not a fd;
    /// [`Error::Call`] when `fi_control(FI_GETWAIT)` fails, or with
    /// `FI_EBADF` when it gives no fd.
    fn wait_fd(&self) -> Result<WaitFd<'_>> {
        let actual = self.wait_obj();
        if actual != WaitObj::Fd {
            return Err(Error::WrongWaitMode {
                call: "fi_control(FI_GETWAIT)",
                needed: "FI_WAIT_FD or FI_WAIT_UNSPEC resolved to a fd",
                actual,
            });
        }
        let mut fd: RawFd = -1;
        // SAFETY: fi_control(3)/fi_eq(3): FI_GETWAIT on an FI_WAIT_FD queue
        // writes the fd into the int pointed to.
        let ret = unsafe {
            sys::fi_control(
                self.wait_fid(),
                sys::FI_GETWAIT as i32,
                (&mut fd as *mut RawFd).cast::<c_void>(),
            )
        };
        check("fi_control(FI_GETWAIT)", ret)?;
        if fd < 0 {
            return Err(Error::call("fi_control(FI_GETWAIT)", Errno::BADF));
        }
        Ok(WaitFd {
            fd,
            _queue: std::marker::PhantomData,
        })
    }
}

/// A queue's wait fd, to poll or epoll for readability, borrowed from the
/// queue (it stays open as long as the queue does).
///
/// It gives only the raw number ([`AsRawFd`]), not a
/// [`BorrowedFd`](std::os::fd::BorrowedFd): the fd belongs to the provider,
/// and reading it, changing its flags or its epoll set (for libfabric's
/// util wait objects it is an epoll fd holding the provider's own signal
/// fds; for the sockets provider the read end of its signal pipe) would
/// lose wake-ups the provider counts on, a hang for every waiter. Turning
/// the number into a usable fd takes `unsafe`, where the caller promises to
/// only wait for readability.
#[derive(Debug, Clone, Copy)]
pub struct WaitFd<'q> {
    fd: RawFd,
    _queue: std::marker::PhantomData<&'q ()>,
}

impl WaitFd<'_> {
    /// A fd the caller got from its queue, borrowed for the lifetime the
    /// caller ties it to.
    pub(crate) fn borrowed(fd: RawFd) -> Self {
        WaitFd {
            fd,
            _queue: std::marker::PhantomData,
        }
    }
}

impl AsRawFd for WaitFd<'_> {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

pub(crate) mod sealed {
    pub trait Sealed {}
    /// Only this crate can make one: a public trait method that takes it
    /// cannot be called from outside (`CompletionEntry::take_context`).
    #[derive(Debug, Clone, Copy)]
    pub struct Token(pub(crate) ());
}

/// When a timed blocking call began, on the coarse monotonic clock: what
/// the call needs to wait on for the time left if a signal cuts its wait
/// short (`-FI_EINTR`). The coarse clock is read through the vDSO without
/// the precise clock's conversion, at a fraction of its cost, on the path
/// of every timed wait; its error, at most one tick (`clock_getres`), is
/// added to the time left, so that a wait cut short never ends before its
/// timeout.
pub(crate) struct Started(Option<libc::timespec>);

/// The coarse monotonic clock.
#[inline(always)]
fn coarse_now() -> libc::timespec {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes the time into the timespec given;
    // CLOCK_MONOTONIC_COARSE exists on every Linux since 2.6.32 (on a
    // failure the zero time stays, and the time left is the whole timeout).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut now) };
    now
}

/// A `timespec` of the coarse clock as a duration (its nanoseconds are
/// below a second, its seconds not negative; otherwise zero).
fn since_epoch(t: libc::timespec) -> Duration {
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0).min(999_999_999),
    )
}

impl Started {
    /// Now, for a wait of `timeout` (`None`: for ever, no clock read).
    #[inline(always)]
    pub(crate) fn now(timeout: Option<Duration>) -> Self {
        Started(timeout.map(|_| coarse_now()))
    }

    /// The time left of `timeout`, the one the wait began with, rounded up
    /// by the clock's tick (`None`: for ever).
    #[cold]
    pub(crate) fn left(&self, timeout: Option<Duration>) -> Option<Duration> {
        let (start, timeout) = (self.0?, timeout?);
        let mut tick = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: clock_getres(2) writes the resolution into the timespec.
        unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut tick) };
        let spent = since_epoch(coarse_now()).saturating_sub(since_epoch(start));
        Some(
            timeout
                .saturating_sub(spent)
                .saturating_add(since_epoch(tick))
                .min(timeout),
        )
    }
}

/// A deadline for a wait in slices.
pub(crate) struct Deadline(Option<std::time::Instant>);

impl Deadline {
    pub(crate) fn after(timeout: Option<Duration>) -> Self {
        Deadline(timeout.and_then(|t| std::time::Instant::now().checked_add(t)))
    }

    /// The time left, for the next blocking read (`None`: for ever).
    pub(crate) fn left(&self) -> Option<Duration> {
        self.0
            .map(|d| d.saturating_duration_since(std::time::Instant::now()))
    }

    /// The next slice of a wait that blocks at most `max` at a time.
    pub(crate) fn slice(&self, max: Duration) -> Duration {
        self.left().map_or(max, |left| left.min(max))
    }

    /// Whether the deadline passed.
    pub(crate) fn passed(&self) -> bool {
        self.0.is_some_and(|d| std::time::Instant::now() >= d)
    }

    /// [`Error::TimedOut`] once passed.
    pub(crate) fn check(&self, call: &'static str) -> Result<()> {
        if self.passed() {
            return Err(Error::TimedOut { call });
        }
        Ok(())
    }
}

/// Opens a queue with the default wait object: `FI_WAIT_FD` where the
/// provider has it, else `FI_WAIT_UNSPEC`, else `FI_WAIT_NONE` (the table
/// at [`WaitObj`]). `open` opens with the wait object given.
///
/// `fd_given` remembers, for the parent (a domain's queues or counters),
/// that the provider gave an `FI_WAIT_FD` one before: a refusal after
/// that is a limit reached, not a wait object the provider lacks, and is
/// reported rather than answered with a queue of another wait object (tcp
/// from 1.18 adds each such queue's epoll fd to the domain's progress
/// epoll set, `xnet_cntr_open` / `xnet_cq_open` in `prov/tcp/src/xnet_cq.c`
/// of 1.22, and the kernel refuses that after about 500).
#[cold]
pub(crate) fn open_with_default_wait<Q>(
    fd_given: Option<&std::sync::atomic::AtomicBool>,
    open: impl Fn(WaitObj) -> Result<Q>,
) -> Result<Q> {
    use std::sync::atomic::Ordering::Relaxed;
    for wait in [WaitObj::Fd, WaitObj::Unspec] {
        match open(wait) {
            Err(Error::UnsupportedWait {
                queue, requested, ..
            }) if wait == WaitObj::Fd && fd_given.is_some_and(|f| f.load(Relaxed)) => {
                return Err(Error::UnsupportedWait {
                    queue,
                    requested,
                    reason: "the provider gave this domain FI_WAIT_FD ones before and refuses one now: a limit reached (tcp from 1.18: the kernel's limit on nested epoll sets, about 500 per domain); close some, or ask for FI_WAIT_NONE",
                });
            }
            Err(Error::UnsupportedWait { .. }) => continue,
            Ok(q) => {
                if wait == WaitObj::Fd {
                    if let Some(f) = fd_given {
                        f.store(true, Relaxed);
                    }
                }
                return Ok(q);
            }
            other => return other,
        }
    }
    open(WaitObj::None)
}

/// The wait object a provider wrote back into the attributes of a queue
/// it opened (the queue is closed by the caller on error): a provider may
/// resolve `FI_WAIT_UNSPEC` in place, and shm resolves it to
/// `FI_WAIT_YIELD` (`smr_cq_open`, `prov/shm/src/smr_cq.c` 149-151 in
/// 1.17), whose util waits ignore their timeout: an `sread` on such a
/// queue never returned. That is refused like an explicit `FI_WAIT_YIELD`.
pub(crate) fn resolved_wait_obj(
    queue: &'static str,
    requested: WaitObj,
    written: sys::fi_wait_obj,
) -> Result<WaitObj> {
    match WaitObj::from_raw(written) {
        WaitObj::Yield => Err(Error::UnsupportedWait {
            queue,
            requested,
            reason: "the provider resolved it to FI_WAIT_YIELD, whose waits ignore their timeout",
        }),
        WaitObj::Other(_) => Ok(requested),
        resolved => Ok(resolved),
    }
}

/// The refusal of `FI_WAIT_UNSPEC` for a `queue` of a fabric that opens it
/// as `FI_WAIT_YIELD` ([`crate::quirks::opens_unspec_waits_as_yield`]).
#[cold]
pub(crate) fn unspec_is_yield(queue: &'static str) -> Error {
    Error::UnsupportedWait {
        queue,
        requested: WaitObj::Unspec,
        reason: "the provider (shm) opens FI_WAIT_UNSPEC as FI_WAIT_YIELD, whose waits ignore \
                 their timeout: ask for WaitObj::Fd",
    }
}

/// Queries `FI_GETWAITOBJ`: which wait object the provider really uses.
pub(crate) fn query_wait_obj(fid: *mut sys::fid, requested: WaitObj) -> WaitObj {
    if matches!(requested, WaitObj::None | WaitObj::Set) {
        // A queue on a wait set answers with the set's object; to the
        // application it is a FI_WAIT_SET queue.
        return requested;
    }
    let mut obj: sys::fi_wait_obj = 0;
    // SAFETY: FI_GETWAITOBJ writes an enum fi_wait_obj to the pointer.
    let ret = unsafe {
        sys::fi_control(
            fid,
            sys::FI_GETWAITOBJ as i32,
            (&mut obj as *mut sys::fi_wait_obj).cast(),
        )
    };
    if ret == 0 {
        WaitObj::from_raw(obj)
    } else {
        requested
    }
}

/// Whether an event queue has an entry, without taking it (`fi_eq_read`
/// with `FI_PEEK`): the second look that every wait in this crate takes
/// after `fi_trywait` said "may block" and before it blocks.
///
/// libfabric's tcp provider from 1.19 (at least to 2.6) checks an EQ empty
/// under its lock in `fi_trywait`, releases the lock, and only then resets
/// the wait fd (`xnet_trywait`, `prov/tcp/src/xnet_progress.c` 1638-1643 in
/// 1.22): an `fi_eq_write` in between is queued but its wake-up erased, so
/// trywait says "may block" with an event queued and the fd never becomes
/// readable. An event written before the reset is in the queue by the time
/// trywait returns, and this look finds it; one written after it raises the
/// fd again. Its CQs check and reset under one lock (1628-1633) and need no
/// second look.
///
/// Only libfabric from 1.18 on needs it. In 1.17, tcp, rxm and the other
/// util providers trywait through `ofi_trywait` (`prov/tcp/src/tcpx_fabric.c`
/// 50), whose `util_wait_fd_try` resets the wait fd before it looks at the
/// queue (`prov/util/src/util_wait.c` 343-363), so an event written at any
/// point either is seen or raises the fd again; sockets' trywait touches
/// nothing (`prov/sockets/src/sock_fabric.c` 196-200) and its EQ fd stays
/// raised while the queue holds events (`sock_eq.c` 246, `dlistfd`). The
/// waits of this crate take the second look when [`eq_second_look_needed`]
/// says so.
#[cfg(not(libfabric_unpatched_trywait))]
#[inline]
pub(crate) fn eq_has_entries(eq: *mut sys::fid_eq) -> bool {
    let mut event = 0u32;
    let mut scratch = [0u64; 8];
    // SAFETY: fi_eq_read(3) with FI_PEEK on an open EQ (borrowed by the
    // caller): it copies at most len bytes of the next entry into scratch and
    // leaves the entry queued.
    let ret = unsafe {
        sys::fi_eq_read(
            eq,
            &mut event,
            scratch.as_mut_ptr().cast(),
            std::mem::size_of_val(&scratch),
            sys::FI_PEEK,
        )
    };
    classify(ret) != Err(Errno::AGAIN)
}

/// Whether the libfabric loaded may erase an EQ's wake-up inside
/// `fi_trywait` (see [`eq_has_entries`]): 1.18 and newer, where tcp's own
/// trywait checks the queue before it resets the fd. Asked once per
/// process (`fi_version`).
#[inline]
pub(crate) fn eq_second_look_needed() -> bool {
    static NEEDED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *NEEDED.get_or_init(|| {
        // 1.18 is the first version whose tcp was not checked; the newer
        // ones (1.19 to 2.6) are known to erase the wake-up.
        libfabric_sys::fabric::runtime_version() >= sys::FI_VERSION(1, 18)
    })
}

/// The second look switched off, to show the lost wake-up it prevents
/// (tests only: `RUSTFLAGS="--cfg libfabric_unpatched_trywait"`).
#[cfg(libfabric_unpatched_trywait)]
#[inline]
pub(crate) fn eq_has_entries(_eq: *mut sys::fid_eq) -> bool {
    false
}

/// `fi_trywait(fabric, fids, count)` over queues of one fabric.
///
/// Returns [`TryWait::MayBlock`] when it is safe to block on their wait
/// objects, [`TryWait::EventsPending`] when they must be read first. A
/// queue opened with `FI_WAIT_NONE` has nothing to block on and is refused
/// (libfabric itself answers 0, "may block", for it).
///
/// # Errors
/// [`Error::WrongWaitMode`] for a queue opened with `FI_WAIT_NONE`;
/// [`Error::InvalidArgument`] for a queue of another fabric;
/// [`Error::State`] for a completion queue of rxm, rxd or shm once an
/// endpoint bound to it closed; [`Error::Call`] when `fi_trywait` fails.
#[doc(alias = "fi_trywait")]
#[inline]
pub fn trywait(fabric: &Fabric, queues: &[&dyn Waitable]) -> Result<TryWait> {
    const STACK: usize = 16;
    if queues.len() > STACK {
        return trywait_many(fabric, queues);
    }
    let mut stack = [std::mem::MaybeUninit::<*mut sys::fid>::uninit(); STACK];
    // The usual case, at most one completion queue (one progress lock), is
    // told apart on the way.
    let mut lock: Option<&ProgressLock> = None;
    let mut locks = 0;
    for (slot, q) in stack.iter_mut().zip(queues) {
        slot.write(checked_fid(fabric, *q)?);
        if let Some(l) = q.progress_lock(sealed::Token(())) {
            if !lock.is_some_and(|first| ptr::eq(first, l)) {
                lock = Some(l);
                locks += 1;
            }
        }
    }
    // SAFETY: the first queues.len() slots were written above.
    let fids = unsafe { std::slice::from_raw_parts_mut(stack.as_mut_ptr().cast(), queues.len()) };
    let fabric = fabric.inner.fid.as_ptr();
    match (lock, locks) {
        (None, _) => trywait_raw(fabric, fids),
        (Some(lock), 1) => {
            let _guard = wait_guard(lock, "fi_trywait")?;
            trywait_raw(fabric, fids)
        }
        _ => {
            let mut all = [None; STACK];
            for (slot, q) in all.iter_mut().zip(queues) {
                *slot = q.progress_lock(sealed::Token(()));
            }
            with_progress_guards(&mut all[..queues.len()], || {
                refuse_poisoned(
                    "fi_trywait",
                    queues.iter().map(|q| q.progress_lock(sealed::Token(()))),
                )?;
                trywait_raw(fabric, fids)
            })
        }
    }
}

/// Takes a queue's progress lock shared for a wait (see
/// `ProgressLock::read_for_wait`), refused when waits on the queue became
/// unsafe (`ProgressLock::set_poisoned`): one test, with the lock's own.
#[inline(always)]
pub(crate) fn wait_guard<'l>(
    lock: &'l ProgressLock,
    call: &'static str,
) -> Result<ProgressRead<'l>> {
    let guard = lock.read_for_wait();
    if guard.noted().poisoned() {
        return Err(wait_poisoned(call));
    }
    Ok(guard)
}

/// Refuses a wait on a queue whose wait object the provider left unsafe
/// (see `ProgressLock::set_poisoned`), given the queues' progress locks.
/// Called holding them.
#[inline]
pub(crate) fn refuse_poisoned<'a>(
    call: &'static str,
    mut locks: impl Iterator<Item = Option<&'a ProgressLock>>,
) -> Result<()> {
    if locks.any(|l| l.is_some_and(ProgressLock::is_poisoned)) {
        return Err(wait_poisoned(call));
    }
    Ok(())
}

#[cold]
fn wait_poisoned(call: &'static str) -> Error {
    Error::State {
        call,
        reason: "an endpoint bound to this completion queue or counter closed or failed to enable, and its provider (rxm, rxd, shm) leaves a callback into it in the wait object (a wait would read freed memory): read without waiting, or open a new one",
    }
}

/// The error of a read, wait or poll that would run the provider's
/// progress over an endpoint that failed to enable (see
/// `Endpoint::enable`).
#[cold]
pub(crate) fn refused_progress(call: &'static str) -> Error {
    Error::State {
        call,
        reason: "an endpoint bound to this completion queue or counter failed to enable, and the provider runs it in the progress of what it is bound to (rxm and shm crash): close that endpoint first",
    }
}

/// Past this many locks, [`with_progress_guards`] holds its guards in a
/// vector rather than on the stack (one frame per lock).
const GUARDS_ON_STACK: usize = 16;

/// Runs `f` holding the progress locks in `locks` shared, each once, in
/// address order (the order in which endpoints take them exclusively, so
/// that no two threads wait for each other; and a second shared
/// acquisition of one lock on a thread could wait behind an exclusive
/// one). Sorts `locks` in place; no allocation.
#[inline]
pub(crate) fn with_progress_guards<R>(
    locks: &mut [Option<&ProgressLock>],
    f: impl FnOnce() -> R,
) -> R {
    match locks {
        // Event queues only: nothing to hold.
        [] => return f(),
        [lock] => {
            let _guard = lock.map(|l| l.read());
            return f();
        }
        _ => {}
    }
    sort_progress_locks(locks);
    hold_sorted_progress_guards(locks, f)
}

/// Puts `locks` in the order [`with_progress_guards`] takes them.
fn sort_progress_locks(locks: &mut [Option<&ProgressLock>]) {
    locks.sort_unstable_by_key(|l| l.map_or(0, |l| l as *const ProgressLock as usize));
}

/// [`with_progress_guards`] of locks already sorted
/// ([`sort_progress_locks`]).
fn hold_sorted_progress_guards<R>(locks: &[Option<&ProgressLock>], f: impl FnOnce() -> R) -> R {
    if locks.len() > GUARDS_ON_STACK {
        return hold_progress_guards_in_vec(locks, f);
    }
    hold_progress_guards(locks, f)
}

/// Many locks (a poll set or wait set of thousands of members): their
/// guards in a vector, so that the stack does not grow with their count.
#[cold]
fn hold_progress_guards_in_vec<R>(locks: &[Option<&ProgressLock>], f: impl FnOnce() -> R) -> R {
    let mut guards = Vec::with_capacity(locks.len());
    let mut last: Option<&ProgressLock> = None;
    for lock in locks.iter().flatten() {
        // Sorted: a lock given twice is next to itself, taken once.
        if last.is_some_and(|l| ptr::eq(l, *lock)) {
            continue;
        }
        guards.push(lock.read());
        last = Some(lock);
    }
    let r = f();
    drop(guards);
    r
}

fn hold_progress_guards<R>(locks: &[Option<&ProgressLock>], f: impl FnOnce() -> R) -> R {
    for (at, lock) in locks.iter().enumerate() {
        let Some(lock) = *lock else { continue };
        let _guard = lock.read();
        // The rest, which holds no lock equal to this one (sorted).
        let rest = &locks[at + 1..];
        let skip = rest
            .iter()
            .take_while(|l| l.is_some_and(|l| ptr::eq(l, lock)))
            .count();
        return hold_progress_guards(&rest[skip..], f);
    }
    f()
}

/// The fid of a queue fi_trywait may be given, or why not.
#[inline(always)]
fn checked_fid(fabric: &Fabric, q: &dyn Waitable) -> Result<*mut sys::fid> {
    if !ptr::eq(q.fabric_ptr(), Arc::as_ptr(&fabric.inner).cast()) {
        return Err(foreign_queue());
    }
    if q.wait_obj() == WaitObj::None {
        return Err(no_wait_object());
    }
    Ok(q.wait_fid())
}

#[cold]
fn foreign_queue() -> Error {
    Error::InvalidArgument("fi_trywait: every queue must belong to the fabric given".into())
}

#[cold]
fn no_wait_object() -> Error {
    Error::WrongWaitMode {
        call: "fi_trywait",
        needed: "any wait object but FI_WAIT_NONE",
        actual: WaitObj::None,
    }
}

#[cold]
fn trywait_many(fabric: &Fabric, queues: &[&dyn Waitable]) -> Result<TryWait> {
    let fids = queues
        .iter()
        .map(|q| checked_fid(fabric, *q))
        .collect::<Result<Vec<_>>>();
    let mut fids = fids?;
    let mut locks: Vec<_> = queues
        .iter()
        .map(|q| q.progress_lock(sealed::Token(())))
        .collect();
    with_progress_guards(&mut locks, || {
        refuse_poisoned(
            "fi_trywait",
            queues.iter().map(|q| q.progress_lock(sealed::Token(()))),
        )?;
        trywait_raw(fabric.inner.fid.as_ptr(), &mut fids)
    })
}

#[inline]
pub(crate) fn trywait_raw(
    fabric: *mut sys::fid_fabric,
    fids: &mut [*mut sys::fid],
) -> Result<TryWait> {
    trywait_outcome(trywait_call(fabric, fids))
}

/// `fi_trywait`'s return value.
#[inline(always)]
fn trywait_call(fabric: *mut sys::fid_fabric, fids: &mut [*mut sys::fid]) -> i32 {
    // SAFETY: fi_poll(3): fids is an array of count open EQ/CQ fids of this
    // fabric (their owners are borrowed by the caller).
    unsafe { sys::fi_trywait(fabric, fids.as_mut_ptr(), fids.len() as i32) }
}

/// What `fi_trywait` returned, as a [`TryWait`].
#[inline(always)]
fn trywait_outcome(ret: i32) -> Result<TryWait> {
    if ret == 0 {
        return Ok(TryWait::MayBlock);
    }
    if classify(ret as isize) == Err(Errno::AGAIN) {
        Ok(TryWait::EventsPending)
    } else {
        check("fi_trywait", ret).map(|()| TryWait::MayBlock)
    }
}

/// What [`Waiter::wait`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Wake {
    /// Some queue may have entries: read every queue until it is empty
    /// before waiting again.
    Ready,
    /// The timeout passed with nothing to read.
    TimedOut,
}

/// The whole wait loop of fi_poll(3) for a set of `FI_WAIT_FD` queues of one
/// fabric: `fi_trywait`, then `poll(2)` on their fds with a timeout, so that
/// no wake-up is lost and nothing spins.
///
/// Use: `loop { waiter.wait(t)?; drain every queue until empty }`.
///
/// One provider's wait fd is readable with nothing to read: libfabric
/// 1.17's tcp leaves a message that arrived before any receive was posted
/// in its socket (`tcpx_op_msg`, `prov/tcp/src/tcpx_progress.c` 439-441),
/// and the completion queue's wait fd (an epoll set of the
/// endpoints' sockets, level-triggered) stays readable until a receive
/// takes it. Every wait then returns [`Wake::Ready`] at once, as that
/// provider's own `fi_cq_sread` returns at once (the same loop in C spins
/// alike). Keep receives posted ahead of the peer's sends there; 1.18 and
/// later (measured on 1.22 and 2.1) wait as they should.
///
/// ```
/// use libfabric::{info::{getinfo, Hints}, eq::{EqAttr, EventBuf}, wait::{WaitObj, Waiter, Wake}, EventQueue, Fabric};
/// use std::time::Duration;
/// let list = getinfo(&Hints::new().provider("tcp").node("127.0.0.1"))?;
/// let fabric = Fabric::open(list.first().unwrap())?;
/// let eq = EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::Fd).write(true))?;
/// let mut waiter = Waiter::new(&[&eq])?;
/// assert_eq!(waiter.wait(Some(Duration::from_millis(10)))?, Wake::TimedOut);
/// eq.write_notify(eq.fid(), 7, 42)?;
/// assert_eq!(waiter.wait(Some(Duration::from_secs(1)))?, Wake::Ready);
/// # Ok::<(), libfabric::Error>(())
/// ```
pub struct Waiter<'q> {
    /// The queues' fids and progress locks.
    set: TryWaitSet<'q>,
    /// The event queues among them, looked at once more before blocking
    /// where the libfabric loaded needs it ([`eq_second_look_needed`]).
    eqs: Vec<*mut sys::fid_eq>,
    pollfds: Vec<libc::pollfd>,
}

// SAFETY: the raw fid pointers name queues borrowed for 'q, which are Sync
// (FI_THREAD_SAFE: `Waiter::new` refuses the queues of serialized domains);
// the Waiter only passes them to thread-safe calls.
unsafe impl Send for Waiter<'_> {}

impl std::fmt::Debug for Waiter<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiter")
            .field("queues", &self.set.fids.len())
            .finish()
    }
}

impl<'q> Waiter<'q> {
    /// Collects the fids and wait fds of `queues`, which must all be
    /// `FI_WAIT_FD` queues of one fabric.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no queue at all (nothing could ever
    /// wake a wait without a timeout) or a queue of another fabric;
    /// [`Error::WrongWaitMode`] for a queue without a wait fd.
    pub fn new(queues: &[&'q dyn Waitable]) -> Result<Self> {
        let Some(first) = queues.first() else {
            return Err(Error::InvalidArgument(
                "Waiter: no queue to wait on (a wait without a timeout would never return)".into(),
            ));
        };
        let fabric = &first.fabric();
        let mut eqs = Vec::new();
        let mut pollfds = Vec::with_capacity(queues.len());
        for q in queues {
            if !ptr::eq(q.fabric_ptr(), Arc::as_ptr(&fabric.inner).cast()) {
                return Err(Error::InvalidArgument(
                    "Waiter: every queue must belong to one fabric".into(),
                ));
            }
            if !q.thread_safe(sealed::Token(())) {
                // The Waiter is Send: its trywait could run on another
                // thread than the one all handles of the domain live on.
                return Err(Error::InvalidArgument(
                    "Waiter: a queue or counter of a FI_THREAD_DOMAIN or FI_THREAD_COMPLETION \
                     domain cannot be waited on by a Waiter (which may move to another \
                     thread): use trywait and its wait fd, or sread, on the domain's thread"
                        .into(),
                ));
            }
            let fd = q.wait_fd()?;
            eqs.extend(q.event_queue());
            pollfds.push(libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        Ok(Waiter {
            set: TryWaitSet::new(fabric, queues)?,
            eqs,
            pollfds,
        })
    }

    /// Waits until some queue may have entries, or the timeout passes
    /// (`None`: forever). Returns at once when `fi_trywait` finds entries.
    ///
    /// The blocking path is `fi_trywait`, one `ppoll(2)` on the wait fds,
    /// and the caller's drain; no clock is read: the kernel counts the
    /// time left down across interruptions by signals.
    ///
    /// # Errors
    /// [`Error::State`] for a completion queue of rxm, rxd or shm once an
    /// endpoint bound to it closed; [`Error::Call`] when `fi_trywait` fails;
    /// [`Error::System`] when `ppoll` fails (other than by a signal).
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<Wake> {
        // ppoll(2): the Linux system call writes the time not slept back
        // into its timeout (glibc's wrapper hides that with a copy, so the
        // system call is made directly). A timeout too long for a
        // timespec is clamped to centuries.
        let mut left = timeout.map(|t| libc::timespec {
            tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: t.subsec_nanos() as _,
        });
        loop {
            let pending = self.trywait()?;
            if pending == TryWait::EventsPending {
                return Ok(Wake::Ready);
            }
            // About to block: look at the event queues once more where the
            // libfabric loaded needs it (see eq_has_entries: a wake-up tcp
            // erased in fi_trywait).
            if !self.eqs.is_empty() && self.eqs.iter().any(|&eq| eq_has_entries(eq)) {
                return Ok(Wake::Ready);
            }
            let left_ptr = left
                .as_mut()
                .map_or(ptr::null_mut(), |t| t as *mut libc::timespec);
            // SAFETY: ppoll(2) on pollfds, a valid array of nfds entries
            // whose fds are borrowed from the queues for 'q (it writes
            // their revents); left_ptr is NULL (no timeout) or a valid
            // timespec it updates; no signal mask.
            let n = unsafe {
                libc::syscall(
                    libc::SYS_ppoll,
                    self.pollfds.as_mut_ptr(),
                    self.pollfds.len() as libc::nfds_t,
                    left_ptr,
                    ptr::null::<libc::sigset_t>(),
                    std::mem::size_of::<libc::sigset_t>(),
                )
            };
            if n > 0 {
                return Ok(Wake::Ready);
            }
            if n == 0 {
                return Ok(Wake::TimedOut);
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::system("ppoll", err));
            }
            if left.is_some_and(|t| t.tv_sec == 0 && t.tv_nsec == 0) {
                return Ok(Wake::TimedOut);
            }
        }
    }

    /// `fi_trywait` on the waiter's queues, without blocking: the first
    /// step of [`wait`](Self::wait), for a loop of its own. See
    /// [`TryWaitSet::trywait`].
    ///
    /// # Errors
    /// As [`TryWaitSet::trywait`].
    #[doc(alias = "fi_trywait")]
    #[inline]
    pub fn trywait(&mut self) -> Result<TryWait> {
        self.set.trywait()
    }
}

/// Queues of one fabric that `fi_trywait` is called on again and again,
/// checked once: the prepared form of [`trywait`], which checks its queues
/// on every call, as a C loop builds its fid array once. Each
/// [`trywait`](Self::trywait) is `fi_trywait` and, with completion queues
/// or counters, their progress locks. Unlike [`Waiter`], it needs no wait
/// fd (rxd's completion queues have none) and takes the queues of any
/// threading model; it borrows the queues, and is not `Send`.
///
/// ```
/// use libfabric::{info::{getinfo, Hints}, eq::{EqAttr, EqRead, EventBuf}, wait::{TryWait, TryWaitSet, WaitObj}, EventQueue, Fabric};
/// let list = getinfo(&Hints::new().provider("tcp").node("127.0.0.1"))?;
/// let fabric = Fabric::open(list.first().unwrap())?;
/// let eq = EventQueue::open(&fabric, &EqAttr::new().wait(WaitObj::Fd).write(true))?;
/// let mut set = TryWaitSet::new(&fabric, &[&eq])?;
/// assert_eq!(set.trywait()?, TryWait::MayBlock);
/// eq.write_notify(eq.fid(), 7, 42)?;
/// assert_eq!(set.trywait()?, TryWait::EventsPending);
/// assert!(matches!(eq.read(&mut EventBuf::new())?, EqRead::Event(_)));
/// # Ok::<(), libfabric::Error>(())
/// ```
pub struct TryWaitSet<'q> {
    /// Kept open as long as the set: with no queue given, nothing else
    /// would keep the fabric that `fi_trywait` is called on.
    _fabric: Arc<FabricInner>,
    /// `fabric`'s `fid_fabric`, kept beside it.
    fabric_fid: *mut sys::fid_fabric,
    fids: Vec<*mut sys::fid>,
    /// What each call holds around `fi_trywait`.
    guards: TryWaitGuards<'q>,
    _queues: std::marker::PhantomData<&'q dyn Waitable>,
}

/// The progress locks of a [`TryWaitSet`]'s queues, sorted by shape when
/// the set is made. A byte tells the shapes apart (one compare), not a
/// niche in a vector's capacity (several).
#[repr(u8)]
enum TryWaitGuards<'q> {
    /// One completion queue or counter: its lock, which also says whether
    /// waits on it are refused (`ProgressLock::set_poisoned`). The usual
    /// shape, tag 0 (one test).
    One(&'q ProgressLock),
    /// Event queues only: no lock to hold.
    None,
    /// Several locks, sorted when the set is made (see
    /// [`with_progress_guards`]).
    Many(Vec<Option<&'q ProgressLock>>),
}

impl std::fmt::Debug for TryWaitSet<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TryWaitSet")
            .field("queues", &self.fids.len())
            .finish()
    }
}

impl<'q> TryWaitSet<'q> {
    /// Checks `queues` for `fi_trywait` on `fabric`, as [`trywait`] does on
    /// each call, and keeps their fids.
    ///
    /// # Errors
    /// [`Error::WrongWaitMode`] for a queue opened with `FI_WAIT_NONE`;
    /// [`Error::InvalidArgument`] for a queue of another fabric.
    pub fn new(fabric: &Fabric, queues: &[&'q dyn Waitable]) -> Result<Self> {
        let mut fids = Vec::with_capacity(queues.len());
        let mut locks: Vec<Option<&'q ProgressLock>> = Vec::new();
        for q in queues {
            fids.push(checked_fid(fabric, *q)?);
            if let Some(lock) = q.progress_lock(sealed::Token(())) {
                locks.push(Some(lock));
            }
        }
        let guards = match locks.as_slice() {
            [] => TryWaitGuards::None,
            [Some(lock)] => TryWaitGuards::One(lock),
            _ => {
                sort_progress_locks(&mut locks);
                TryWaitGuards::Many(locks)
            }
        };
        Ok(TryWaitSet {
            fabric_fid: fabric.inner.fid.as_ptr(),
            _fabric: fabric.inner.clone(),
            fids,
            guards,
            _queues: std::marker::PhantomData,
        })
    }

    /// `fi_trywait` on the queues: [`TryWait::MayBlock`] when it is safe to
    /// block on their wait objects, [`TryWait::EventsPending`] when they
    /// must be read first.
    ///
    /// # Errors
    /// [`Error::State`] for a completion queue of rxm, rxd or shm once an
    /// endpoint bound to it closed; [`Error::Call`] when `fi_trywait` fails.
    #[doc(alias = "fi_trywait")]
    #[inline]
    pub fn trywait(&mut self) -> Result<TryWait> {
        let ret = match &mut self.guards {
            TryWaitGuards::None => trywait_call(self.fabric_fid, &mut self.fids),
            TryWaitGuards::One(lock) => {
                let _guard = wait_guard(lock, "fi_trywait")?;
                trywait_call(self.fabric_fid, &mut self.fids)
            }
            TryWaitGuards::Many(locks) => {
                let (fabric, fids) = (self.fabric_fid, &mut self.fids);
                hold_sorted_progress_guards(locks, || {
                    refuse_poisoned("fi_trywait", locks.iter().copied())?;
                    Ok::<_, Error>(trywait_call(fabric, fids))
                })?
            }
        };
        trywait_outcome(ret)
    }
}

/// The fds of an `FI_WAIT_POLLFD` queue (`struct fi_wait_pollfd`), kept up
/// to date by [`PollFdSet::refresh`], which follows the `change_index` /
/// `-FI_ETOOSMALL` protocol of fi_control(3) and grows instead of failing.
///
/// # These sets cannot be blocked on
/// libfabric's tcp provider keeps a fd of these sets readable whether or
/// not the queue has anything: in 1.17 the util set's internal signal,
/// which every change of the set raises and only libfabric's own wait
/// resets (`src/common.c` 1527 and 1702), in 1.22 its progress fd. A poll
/// over the set returns at once, and leaving that fd out would miss the
/// completions it also announces. So this crate runs no wait loop over
/// these sets ([`Waiter`] and the tokio queues take `FI_WAIT_FD` queues
/// only and refuse these with [`Error::WrongWaitMode`]): open queues with
/// [`WaitObj::Fd`] to block on them, or block in `sread`, which waits
/// inside the provider.
///
/// The set borrows the queues it is refreshed from (`'q`): it cannot
/// poll after one of them closed, when every fd of the queue's own is
/// closed too. The fds are the provider's, and on some providers they
/// include the sockets of the endpoints bound to the queue (tcp of 1.17):
/// the provider takes a closed endpoint's socket out of the set only at
/// its next wait on the queue, so until a refresh after that wait the set
/// may hold a number the close freed, and a poll may report the readiness
/// of a file that took the number since (the set only polls; nothing is
/// read or written through its fds). As after any wake-up, read the queue
/// to know whether it has entries.
#[derive(Debug, Default)]
pub struct PollFdSet<'q> {
    fds: Vec<libc::pollfd>,
    change_index: u64,
    /// The queue of the last refresh (its `struct fid`), whose change
    /// index `change_index` is: 0 before the first refresh.
    source: usize,
    _queues: std::marker::PhantomData<&'q ()>,
}

impl<'q> PollFdSet<'q> {
    /// An empty set.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// The fds to poll, with the events libfabric asks for.
    pub fn fds(&mut self) -> &mut [libc::pollfd] {
        &mut self.fds
    }

    /// `poll(2)` on the set's fds; returns how many are ready.
    ///
    /// # Errors
    /// [`Error::System`] when `poll` fails (other than by a signal, which
    /// is retried for the time left).
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<usize> {
        // A signal restarts the wait for the time left, not the whole
        // timeout: under signals arriving faster than the timeout, a poll
        // given the whole of it again each time never returned.
        let deadline = Deadline::after(timeout);
        let mut wait = timeout;
        loop {
            // SAFETY: fds is a valid array of len pollfd entries; the fds
            // belong to the queues the set was refreshed from, which it
            // borrows (open: their fds are not closed).
            let n = unsafe {
                libc::poll(
                    self.fds.as_mut_ptr(),
                    self.fds.len() as libc::nfds_t,
                    timeout_ms(wait),
                )
            };
            if n >= 0 {
                // Nothing ready when only the longest wait one poll takes
                // passed: on for the time left.
                if n == 0 && beyond_one_wait(wait) && !deadline.passed() {
                    wait = deadline.left();
                    continue;
                }
                return Ok(n as usize);
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                return Err(Error::system("poll", err));
            }
            if deadline.passed() {
                return Ok(0);
            }
            wait = deadline.left();
        }
    }

    /// The provider's change index at the last refresh.
    #[must_use]
    pub fn change_index(&self) -> u64 {
        self.change_index
    }

    /// Re-reads the set from `queue` (an `FI_WAIT_POLLFD` queue). Returns
    /// whether it changed since the last refresh (always, when that
    /// refresh was from another queue).
    ///
    /// # Errors
    /// [`Error::WrongWaitMode`] for a queue not opened with
    /// `FI_WAIT_POLLFD`; [`Error::Call`] when `fi_control(FI_GETWAIT)` fails
    /// (other than with `FI_ETOOSMALL`, on which the set grows).
    pub fn refresh(&mut self, queue: &'q dyn Waitable) -> Result<bool> {
        let actual = queue.wait_obj();
        if actual != WaitObj::PollFd {
            return Err(Error::WrongWaitMode {
                call: "fi_control(FI_GETWAIT, fi_wait_pollfd)",
                needed: "FI_WAIT_POLLFD",
                actual,
            });
        }
        loop {
            let capacity = self.fds.capacity().max(4);
            self.fds.clear();
            self.fds.reserve(capacity);
            let mut arg = sys::fi_wait_pollfd {
                change_index: self.change_index,
                nfds: self.fds.capacity(),
                fd: self.fds.as_mut_ptr(),
            };
            // SAFETY: fi_control(3): with FI_WAIT_POLLFD, FI_GETWAIT fills up
            // to nfds pollfd entries at fd and sets nfds and change_index;
            // it returns -FI_ETOOSMALL with nfds set to the size needed.
            let ret = unsafe {
                sys::fi_control(
                    queue.wait_fid(),
                    sys::FI_GETWAIT as i32,
                    (&mut arg as *mut sys::fi_wait_pollfd).cast(),
                )
            };
            if classify(ret) == Err(Errno::TOOSMALL) {
                let needed = arg.nfds.max(capacity + 1);
                self.fds.reserve(needed);
                continue;
            }
            check("fi_control(FI_GETWAIT)", ret)?;
            let n = arg.nfds.min(self.fds.capacity());
            // SAFETY: the provider initialised the first n entries.
            unsafe { self.fds.set_len(n) };
            let source = queue.wait_fid() as usize;
            let changed = source != self.source || arg.change_index != self.change_index;
            self.change_index = arg.change_index;
            self.source = source;
            return Ok(changed);
        }
    }
}

/// An object whose provider progress runs the endpoints bound to it: a
/// completion queue or a counter. The one mechanism that keeps that
/// progress away from an endpoint being enabled or closed (see
/// `CqInner::lifecycle`), shared by the reads, waits, wait sets and poll
/// sets of both.
pub(crate) trait ProgressMember: Send + Sync {
    /// Held shared by every call that runs the object's progress, and
    /// exclusively by an endpoint's enable and close.
    fn lifecycle(&self) -> &ProgressLock;
    /// Whether its progress is refused: an endpoint bound to it failed to
    /// enable on a provider that keeps running it (see `Endpoint::enable`).
    fn progress_refused(&self) -> bool;
    /// Its `struct fid`.
    fn member_fid(&self) -> *mut sys::fid;
    /// The process-unique context it was opened with (what `fi_poll`
    /// reports).
    fn member_id(&self) -> u64;
    /// The domain it was opened on.
    fn member_domain(&self) -> &Arc<crate::domain::DomainInner>;
}

pub(crate) struct WaitSetInner {
    pub(crate) fid: OwnedFid<sys::fid_wait>,
    _fabric: Arc<FabricInner>,
    /// The completion queues and counters that signal the set: `fi_wait`
    /// runs their progress (util `util_wait_fd_try` polls the set's
    /// members, `prov/util/src/util_wait.c` 366, `util_poll.c` 92-110, in
    /// 1.17), so it holds their progress locks like a read does.
    pub(crate) members: std::sync::Mutex<Vec<std::sync::Weak<dyn ProgressMember>>>,
}

impl WaitSetInner {
    /// Records a queue or counter opened on the set.
    pub(crate) fn add_member(&self, member: std::sync::Weak<dyn ProgressMember>) {
        self.members
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(member);
    }
}

/// A wait set (`fi_wait_open`): several queues opened with
/// `FI_WAIT_SET` signal one wait object. Not every provider's queues can
/// join one: event queues cannot on tcp or sockets, completion queues
/// cannot on rxm, rxd, shm or sockets (their opens say why).
///
/// Deprecated by libfabric 2.0 (`fi_wait_open` and `fi_wait` are marked
/// `FI_DEPRECATED_FUNC` in 2.6's headers; they still work on 2.6's tcp),
/// and marked `#[deprecated]` here when the crate is built against 2.x
/// headers. Prefer [`Waiter`] over several queues' wait fds.
#[derive(Clone)]
#[cfg_attr(
    libfabric_2,
    deprecated(note = "libfabric 2.x deprecates wait sets: use Waiter over the queues' wait fds")
)]
pub struct WaitSet {
    pub(crate) inner: Arc<WaitSetInner>,
    kind: WaitObj,
}

impl WaitSet {
    /// `fi_wait_open` with the given wait object (`Fd` or `Unspec`).
    ///
    /// # Errors
    /// [`Error::UnsupportedWait`] for `None`, `Set`, `Yield` (also
    /// `Unspec` on shm, which opens it as `FI_WAIT_YIELD`, and `MutexCond`
    /// on sockets, whose wait on it is undefined behaviour: it waits on the
    /// condition without holding its mutex), a wait object libfabric does
    /// not name, or one the provider refuses; [`Error::Call`] when
    /// `fi_wait_open` fails otherwise.
    #[doc(alias = "fi_wait_open")]
    pub fn open(fabric: &Fabric, wait_obj: WaitObj) -> Result<Self> {
        // Normalised first (Other(0) is None, Other(5) is Yield), so the
        // checks below see what the provider would.
        let wait_obj = wait_obj.checked("wait set")?;
        if matches!(wait_obj, WaitObj::None | WaitObj::Set) {
            return Err(Error::UnsupportedWait {
                queue: "wait set",
                requested: wait_obj,
                reason: "a wait set needs a real wait object",
            });
        }
        if wait_obj == WaitObj::Unspec
            && crate::quirks::opens_unspec_waits_as_yield(&fabric.inner.provider)
        {
            return Err(unspec_is_yield("wait set"));
        }
        if wait_obj == WaitObj::MutexCond
            && crate::quirks::waits_on_unlocked_conditions(&fabric.inner.provider)
        {
            return Err(Error::UnsupportedWait {
                queue: "wait set",
                requested: wait_obj,
                reason: "the provider waits on the condition without its mutex",
            });
        }
        let mut attr = sys::fi_wait_attr {
            wait_obj: wait_obj.raw(),
            flags: 0,
        };
        let mut raw = ptr::null_mut();
        // SAFETY: fi_wait_open(3) reads attr and opens a wait set on the
        // open fabric; OwnedFid closes it before the fabric handle drops.
        let ret = unsafe { sys::fi_wait_open(fabric.inner.fid.as_ptr(), &mut attr, &mut raw) };
        if matches!(
            classify(ret),
            Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP)
        ) {
            return Err(Error::UnsupportedWait {
                queue: "wait set",
                requested: wait_obj,
                reason: "the provider refused it",
            });
        }
        let fid = OwnedFid::opened("fi_wait_open", ret, raw)?;
        // Refused when the provider says it waits by yielding.
        let kind = resolved_wait_obj(
            "wait set",
            wait_obj,
            query_wait_obj(fid.fid(), wait_obj).raw(),
        )?;
        Ok(WaitSet {
            inner: Arc::new(WaitSetInner {
                fid,
                _fabric: fabric.inner.clone(),
                members: std::sync::Mutex::new(Vec::new()),
            }),
            kind,
        })
    }

    /// `fi_wait`: blocks until a queue of the set is signaled, or the
    /// timeout passes. Returns whether it was signaled.
    ///
    /// # Errors
    /// [`Error::State`] when a completion queue of the set is of rxm, rxd or
    /// shm and an endpoint bound to it closed; [`Error::Call`] when `fi_wait`
    /// fails. The timeout is `Ok(false)`, no error.
    #[doc(alias = "fi_wait")]
    pub fn wait(&self, timeout: Option<Duration>) -> Result<bool> {
        // In slices, under the progress locks of the set's completion
        // queues and counters (see WaitSetInner::members), so that an
        // endpoint of one of them can be enabled or closed meanwhile.
        const SLICE: Duration = Duration::from_millis(100);
        let deadline = Deadline::after(timeout);
        loop {
            let remaining = deadline.left();
            let slice = deadline.slice(SLICE);
            let members: Vec<Arc<dyn ProgressMember>> = {
                let mut members = self.inner.members.lock().unwrap_or_else(|e| e.into_inner());
                members.retain(|w| w.strong_count() > 0);
                members
                    .iter()
                    .filter_map(std::sync::Weak::upgrade)
                    .collect()
            };
            let mut locks: Vec<_> = members.iter().map(|m| Some(m.lifecycle())).collect();
            let ret = with_progress_guards(&mut locks, || {
                refuse_poisoned("fi_wait", members.iter().map(|m| Some(m.lifecycle())))?;
                // SAFETY: fi_wait(3) on an open wait set; its members'
                // endpoints are not being enabled or closed (the guards).
                Ok::<_, Error>(unsafe {
                    sys::fi_wait(self.inner.fid.as_ptr(), provider_timeout_ms(Some(slice)))
                })
            })?;
            drop(locks);
            drop(members);
            match classify(ret) {
                Err(Errno::TIMEDOUT | Errno::AGAIN) => {
                    if remaining.is_some_and(|r| r <= slice) {
                        return Ok(false);
                    }
                }
                // A signal handled on this thread ended the slice early
                // (see `is_interrupted`): on for the time left.
                Err(Errno::INTR) => {
                    if deadline.passed() {
                        return Ok(false);
                    }
                }
                _ => return check("fi_wait", ret).map(|()| true),
            }
        }
    }

    /// The wait object the set uses.
    #[must_use]
    pub fn wait_obj(&self) -> WaitObj {
        self.kind
    }

    /// Closes the set now (`fi_close`).
    ///
    /// # Errors
    /// [`Error::InUse`] while queues still use it or other handles exist;
    /// [`Error::Call`] when `fi_close` fails. The set comes back with the
    /// error, still open.
    pub fn close(self) -> Handback<Self> {
        let kind = self.kind;
        close_last(
            self.inner,
            ObjectKind::WaitSet,
            |inner| WaitSet { inner, kind },
            |i| i.fid.close(),
        )
    }

    /// Whether the set was opened on this fabric.
    pub(crate) fn belongs_to(&self, fabric: &Arc<FabricInner>) -> bool {
        Arc::ptr_eq(&self.inner._fabric, fabric)
    }
}

impl std::fmt::Debug for WaitSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitSet")
            .field("wait_obj", &self.kind)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_longer_than_one_call_waits_is_waited_in_parts() {
        let longest = Duration::from_millis(i32::MAX as u64);
        assert_eq!(timeout_ms(Some(longest)), i32::MAX);
        assert!(!beyond_one_wait(Some(longest)));
        let longer = longest + Duration::from_millis(1);
        assert_eq!(timeout_ms(Some(longer)), i32::MAX);
        assert!(beyond_one_wait(Some(longer)));
        assert!(beyond_one_wait(Some(Duration::MAX)));
        assert!(!beyond_one_wait(None));
        assert_eq!(timeout_ms(None), -1);
        // Rounded up: a short wait does not become a poll.
        assert_eq!(timeout_ms(Some(Duration::from_nanos(1))), 1);
        // libfabric's waits get a millisecond more (they may end one early),
        // but a poll stays a poll and for ever stays for ever.
        assert_eq!(provider_timeout_ms(Some(Duration::from_micros(1500))), 3);
        assert_eq!(provider_timeout_ms(Some(Duration::ZERO)), 0);
        assert_eq!(provider_timeout_ms(None), -1);
        assert_eq!(provider_timeout_ms(Some(Duration::MAX)), i32::MAX);
    }
}
