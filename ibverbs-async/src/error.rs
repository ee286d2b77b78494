//! The crate's error types and the one place where C return codes become
//! them.
//!
//! libibverbs reports failures in three ways, and each verb documents which:
//! a NULL pointer with `errno` set (`ibv_create_cq`, `ibv_reg_mr`, ...), a
//! positive errno value returned directly (`ibv_destroy_cq`, `ibv_modify_qp`,
//! `ibv_post_send`, ...), or `-1` with `errno` set (`ibv_get_async_event`,
//! `ibv_get_cq_event`). The functions at the bottom of this file
//! ([`check_ptr`], [`check_rc`], [`check_minus_one`], [`check_count`]) are
//! the only places where those conventions are turned into [`Error`].

use std::borrow::Cow;
use std::ffi::CStr;
use std::fmt;
use std::io;

use libc::c_int;

/// Result of every fallible call of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error number (`errno`), as libibverbs and the kernel report it.
///
/// A transparent wrapper of the positive C value rather than a closed enum:
/// providers and newer kernels may return values no header of today names.
/// The associated constants name the values this crate's calls are
/// documented to return.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(c_int);

macro_rules! errno_consts {
    ($($name:ident = $c:ident),* $(,)?) => {
        impl Errno {
            $(
                #[doc = concat!("`", stringify!($c), "`")]
                pub const $name: Errno = Errno(libc::$c);
            )*

            /// The name of the constant for this value, if it has one.
            const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $(libc::$c => Some(stringify!($name)),)*
                    _ => None,
                }
            }
        }
    };
}

errno_consts! {
    PERM = EPERM,
    NOENT = ENOENT,
    INTR = EINTR,
    IO = EIO,
    NXIO = ENXIO,
    BADF = EBADF,
    AGAIN = EAGAIN,
    NOMEM = ENOMEM,
    ACCES = EACCES,
    FAULT = EFAULT,
    BUSY = EBUSY,
    EXIST = EEXIST,
    NODEV = ENODEV,
    INVAL = EINVAL,
    NOSPC = ENOSPC,
    PIPE = EPIPE,
    RANGE = ERANGE,
    NOSYS = ENOSYS,
    NODATA = ENODATA,
    PROTONOSUPPORT = EPROTONOSUPPORT,
    OPNOTSUPP = EOPNOTSUPP,
    ADDRNOTAVAIL = EADDRNOTAVAIL,
    NETUNREACH = ENETUNREACH,
    CONNRESET = ECONNRESET,
    NOBUFS = ENOBUFS,
    NOTCONN = ENOTCONN,
    TIMEDOUT = ETIMEDOUT,
    CONNREFUSED = ECONNREFUSED,
    HOSTUNREACH = EHOSTUNREACH,
    CANCELED = ECANCELED,
}

impl Errno {
    /// The `Errno` of a positive C error number.
    #[must_use]
    pub const fn from_raw_os_error(raw: c_int) -> Errno {
        Errno(raw)
    }

    /// The C error number.
    #[must_use]
    pub const fn raw_os_error(self) -> c_int {
        self.0
    }

    /// The [`io::ErrorKind`] the standard library gives this number.
    #[must_use]
    pub fn kind(self) -> io::ErrorKind {
        io::Error::from_raw_os_error(self.0).kind()
    }

    /// The C library's description of the number (`strerror_r(3)`), e.g.
    /// `"Resource temporarily unavailable"`.
    #[must_use]
    pub fn text(self) -> Cow<'static, str> {
        let mut buf = [0 as libc::c_char; 256];
        // SAFETY: strerror_r(3) (the XSI version, which the libc crate binds
        // on Linux) writes a NUL-terminated message of at most `buflen`
        // bytes into the caller's buffer, which is live and that long; it
        // returns non-zero (and leaves the buffer unspecified) for an
        // unknown number or a buffer too small.
        let rc = unsafe { libc::strerror_r(self.0, buf.as_mut_ptr(), buf.len()) };
        if rc != 0 || buf[0] == 0 {
            return Cow::Owned(format!("Unknown error {}", self.0));
        }
        buf[buf.len() - 1] = 0;
        // SAFETY: the buffer holds a NUL-terminated string (written by
        // strerror_r, and the last byte is NUL in any case).
        let text = unsafe { CStr::from_ptr(buf.as_ptr()) };
        Cow::Owned(text.to_string_lossy().into_owned())
    }

    /// The calling thread's `errno`.
    pub(crate) fn last() -> Errno {
        Errno(io::Error::last_os_error().raw_os_error().unwrap_or(0))
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "Errno::{name}"),
            None => write!(f, "Errno({})", self.0),
        }
    }
}

impl fmt::Display for Errno {
    /// The description and the number, e.g. `Device or resource busy (16)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.text(), self.0)
    }
}

impl std::error::Error for Errno {}

impl From<Errno> for io::Error {
    fn from(errno: Errno) -> io::Error {
        io::Error::from_raw_os_error(errno.0)
    }
}

/// The kind of verbs object an [`Error::InUse`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ObjectKind {
    /// A device context ([`Context`](crate::Context)).
    Context,
    /// A protection domain ([`Pd`](crate::Pd)).
    ProtectionDomain,
    /// A completion queue ([`Cq`](crate::Cq)).
    CompletionQueue,
    /// A completion channel ([`CompChannel`](crate::CompChannel)).
    CompletionChannel,
    /// A queue pair ([`Qp`](crate::Qp)).
    QueuePair,
    /// A shared receive queue ([`Srq`](crate::Srq)).
    SharedReceiveQueue,
    /// A memory region ([`Mr`](crate::Mr)).
    MemoryRegion,
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjectKind::Context => "context",
            ObjectKind::ProtectionDomain => "protection domain",
            ObjectKind::CompletionQueue => "completion queue",
            ObjectKind::CompletionChannel => "completion channel",
            ObjectKind::QueuePair => "queue pair",
            ObjectKind::SharedReceiveQueue => "shared receive queue",
            ObjectKind::MemoryRegion => "memory region",
        })
    }
}

/// An error from libibverbs, from a system call on an event file
/// descriptor, or from checking the arguments of a call.
///
/// Converts into [`std::io::Error`] (with the [`io::ErrorKind`] of the errno
/// where there is one), so `?` works in functions returning `io::Result`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A libibverbs call failed.
    #[error("{call} failed: {errno}")]
    Call {
        /// The verbs function that failed, such as `"ibv_create_cq"`.
        call: &'static str,
        /// The error number it reported.
        errno: Errno,
    },

    /// A system call on an event file descriptor failed (`poll`, `fcntl`,
    /// `eventfd`, registering with the tokio reactor).
    #[error("{call} failed: {source}")]
    System {
        /// The system call.
        call: &'static str,
        /// The error it reported.
        source: io::Error,
    },

    /// An argument libibverbs would reject, found before calling it.
    #[error("invalid argument: {0}")]
    InvalidArgument(Cow<'static, str>),

    /// `close()`/`destroy()` was called while other handles, child objects
    /// or unacknowledged events still hold the object.
    #[error(
        "the {object} is still in use ({users} other user(s): clones, child objects or events)"
    )]
    InUse {
        /// The kind of object.
        object: ObjectKind,
        /// How many other strong holders there were at the time of the call.
        users: usize,
    },

    /// Memory for a buffer could not be allocated (the process is not
    /// aborted: the request is refused).
    #[error("could not allocate {bytes} bytes for {what}")]
    OutOfMemory {
        /// What the memory was for.
        what: &'static str,
        /// How many bytes were asked for.
        bytes: usize,
    },

    /// A count or size larger than the C type or the device can take.
    #[error("{what}: {given} is over the limit of {limit}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// The largest value accepted.
        limit: usize,
        /// The value given.
        given: usize,
    },

    /// A caller's buffer too small for what the call has to write.
    #[error("{what}: a buffer of {given} is too small, {needed} needed")]
    BufferTooSmall {
        /// What the buffer is for.
        what: &'static str,
        /// The size needed.
        needed: usize,
        /// The size given.
        given: usize,
    },

    /// The call is not possible in the current state of the object or of
    /// the program (a queue pair not connected yet, no tokio runtime).
    #[error("{call}: {reason}")]
    State {
        /// The call refused.
        call: &'static str,
        /// Why.
        reason: &'static str,
    },

    /// `ibv_get_device_list` failed with `ENOSYS`: the running kernel has no
    /// RDMA support (no `/sys/class/infiniband_verbs`).
    #[error(
        "no RDMA devices: the kernel has no RDMA support (ENOSYS from ibv_get_device_list); \
         load the RDMA modules (ib_uverbs and a driver such as rdma_rxe) or use a kernel built with them"
    )]
    NoRdmaSupport,

    /// The kernel supports RDMA but no device is registered.
    #[error(
        "no RDMA devices found: the kernel supports RDMA but no device is registered \
         (load a driver, or add a soft-RoCE device with `rdma link add rxe0 type rxe netdev <ifname>`)"
    )]
    NoDevices,

    /// No device has the requested name.
    #[error("no RDMA device named {name:?} (devices present: {available})")]
    NoSuchDevice {
        /// The name asked for.
        name: String,
        /// The names of the devices present, comma separated.
        available: String,
    },

    /// A port number outside `1..=ports`.
    #[error("port {port} out of range: the device has ports 1..={ports}")]
    PortOutOfRange {
        /// The port asked for.
        port: u8,
        /// The number of physical ports of the device.
        ports: u8,
    },

    /// A byte range that does not fit in a memory region.
    #[error("range {offset}..{end} does not fit in {what} of {size} bytes", end = offset.saturating_add(*len))]
    OutOfBounds {
        /// What the range was checked against.
        what: &'static str,
        /// Start of the range.
        offset: usize,
        /// Length of the range.
        len: usize,
        /// Size of the buffer or region.
        size: usize,
    },
}

impl Error {
    /// The errno carried by this error, if it came from libibverbs or the
    /// kernel (or stands for one: `ENOSYS` for [`Error::NoRdmaSupport`],
    /// `ENOMEM` for [`Error::OutOfMemory`], `EBUSY` for [`Error::InUse`]).
    #[must_use]
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Call { errno, .. } => Some(*errno),
            Error::System { source, .. } => source.raw_os_error().map(Errno),
            Error::NoRdmaSupport => Some(Errno::NOSYS),
            Error::OutOfMemory { .. } => Some(Errno::NOMEM),
            Error::InUse { .. } => Some(Errno::BUSY),
            _ => None,
        }
    }

    /// The libibverbs function or system call that failed, if any.
    #[must_use]
    pub fn call(&self) -> Option<&'static str> {
        match self {
            Error::Call { call, .. } | Error::System { call, .. } | Error::State { call, .. } => {
                Some(call)
            }
            Error::NoRdmaSupport => Some("ibv_get_device_list"),
            _ => None,
        }
    }

    /// The [`io::ErrorKind`] that best describes this error.
    #[must_use]
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            Error::NoRdmaSupport => io::ErrorKind::Unsupported,
            Error::NoDevices | Error::NoSuchDevice { .. } => io::ErrorKind::NotFound,
            Error::PortOutOfRange { .. }
            | Error::OutOfBounds { .. }
            | Error::InvalidArgument(_)
            | Error::TooLarge { .. }
            | Error::BufferTooSmall { .. } => io::ErrorKind::InvalidInput,
            Error::InUse { .. } => Errno::BUSY.kind(),
            Error::OutOfMemory { .. } => io::ErrorKind::OutOfMemory,
            Error::State { .. } => io::ErrorKind::Other,
            Error::Call { errno, .. } => errno.kind(),
            Error::System { source, .. } => source.kind(),
        }
    }

    /// An [`Error::InvalidArgument`] with a fixed message.
    pub(crate) const fn invalid(msg: &'static str) -> Error {
        Error::InvalidArgument(Cow::Borrowed(msg))
    }

    /// An [`Error::System`] for a failed system call.
    pub(crate) fn system(call: &'static str, source: io::Error) -> Error {
        Error::System { call, source }
    }
}

impl From<Error> for io::Error {
    /// Wraps the error, keeping its kind; [`io::Error::get_ref`] gives the
    /// [`Error`] back, and with it the errno and the failing call.
    fn from(err: Error) -> io::Error {
        io::Error::new(err.kind(), err)
    }
}

/// The error of a failed `close()`/`destroy()`, which hands the object
/// back: `?` drops the object (which then tries again in its `Drop`) and
/// keeps the error.
impl<T: fmt::Debug> From<(T, Error)> for Error {
    fn from((_, err): (T, Error)) -> Error {
        err
    }
}

/// The calling thread's `errno`, or `EIO` where a call failed without
/// setting it (some providers return NULL without touching errno).
fn last_or_io() -> Errno {
    match Errno::last() {
        Errno(0) => Errno::IO,
        e => e,
    }
}

/// A verb that returns 0 on success and an errno value on failure (some
/// providers return `-errno` or `-1`: both are accepted).
pub(crate) fn check_rc(call: &'static str, rc: c_int) -> Result<()> {
    match rc {
        0 => Ok(()),
        -1 => Err(Error::Call {
            call,
            errno: last_or_io(),
        }),
        rc => Err(Error::Call {
            call,
            errno: Errno(rc.saturating_abs()),
        }),
    }
}

/// A verb that returns a pointer, NULL with `errno` set on failure.
pub(crate) fn check_ptr<T>(call: &'static str, ptr: *mut T) -> Result<std::ptr::NonNull<T>> {
    std::ptr::NonNull::new(ptr).ok_or_else(|| Error::Call {
        call,
        errno: last_or_io(),
    })
}

/// A call that returns 0 on success and -1 with `errno` set on failure
/// (`ibv_get_async_event`, `ibv_get_cq_event`): the errno itself, for the
/// caller to tell `EAGAIN` and `EINTR` from failures.
pub(crate) fn check_minus_one(rc: c_int) -> std::result::Result<(), Errno> {
    if rc == 0 {
        Ok(())
    } else {
        Err(last_or_io())
    }
}

/// A verb that returns a count, or a negative value on failure
/// (`ibv_poll_cq`: "a negative value"; providers return `-errno` or `-1`).
pub(crate) fn check_count(call: &'static str, rc: c_int) -> Result<usize> {
    usize::try_from(rc).map_err(|_| Error::Call {
        call,
        errno: if rc == -1 {
            Errno::IO
        } else {
            Errno(rc.saturating_abs())
        },
    })
}

/// An errno from `nix`, the crate's internal system-call layer.
pub(crate) fn from_nix(call: &'static str, errno: nix::errno::Errno) -> Error {
    Error::system(call, io::Error::from(errno))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rc_conventions() {
        assert!(check_rc("x", 0).is_ok());
        let e = check_rc("ibv_destroy_cq", libc::EBUSY).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::BUSY));
        let e = check_rc("ibv_destroy_cq", -libc::EBUSY).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::BUSY));
        assert_eq!(check_count("ibv_poll_cq", 3).unwrap(), 3);
        let e = check_count("ibv_poll_cq", -libc::EINVAL).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::INVAL));
        assert_eq!(
            check_count("ibv_poll_cq", -1).unwrap_err().errno(),
            Some(Errno::IO)
        );
    }

    #[test]
    fn errno_prints_its_name_text_and_number() {
        assert_eq!(format!("{:?}", Errno::AGAIN), "Errno::AGAIN");
        assert_eq!(
            format!("{:?}", Errno::from_raw_os_error(4000)),
            "Errno(4000)"
        );
        let shown = Errno::BUSY.to_string();
        assert!(shown.ends_with(&format!("({})", libc::EBUSY)), "{shown}");
        assert!(!Errno::BUSY.text().is_empty());
        assert!(Errno::from_raw_os_error(4000).text().contains("4000"));
        assert_eq!(Errno::AGAIN.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(
            io::Error::from(Errno::NOENT).raw_os_error(),
            Some(libc::ENOENT)
        );
        assert_eq!(Errno::from_raw_os_error(5).raw_os_error(), 5);
    }
}
