//! Errors: the fabric errno, its text and the call that failed.
//!
//! All return-code conversion of the crate happens in this module.

use libfabric_sys::fabric as sys;
use std::ffi::{c_int, CStr};
use std::fmt;
use std::io;

macro_rules! errnos {
    ($( $(#[$doc:meta])* $variant:ident = $name:ident, )*) => {
        /// A libfabric error code (`FI_E*` from `fi_errno.h`).
        ///
        /// Values the headers do not name are kept in [`Errno::Unknown`], so
        /// nothing a newer library returns is lost.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum Errno {
            $( $(#[$doc])* $variant, )*
            /// A value this crate does not name.
            Unknown(c_int),
        }

        impl Errno {
            /// The error from a positive `FI_E*` value (a negated return code).
            pub fn from_raw(raw: c_int) -> Self {
                match raw {
                    $( sys::errno::$name => Errno::$variant, )*
                    other => Errno::Unknown(other),
                }
            }

            /// The positive `FI_E*` value.
            pub fn raw(self) -> c_int {
                match self {
                    $( Errno::$variant => sys::errno::$name, )*
                    Errno::Unknown(raw) => raw,
                }
            }
        }
    };
}

errnos! {
    /// `FI_EPERM`
    Perm = FI_EPERM,
    /// `FI_ENOENT`
    NoEnt = FI_ENOENT,
    /// `FI_EINTR`
    Intr = FI_EINTR,
    /// `FI_EIO`
    Io = FI_EIO,
    /// `FI_E2BIG`
    TooBig = FI_E2BIG,
    /// `FI_EBADF`
    BadF = FI_EBADF,
    /// `FI_EAGAIN`: nothing to read now, or resources temporarily unavailable.
    Again = FI_EAGAIN,
    /// `FI_ENOMEM`
    NoMem = FI_ENOMEM,
    /// `FI_EACCES`
    Acces = FI_EACCES,
    /// `FI_EFAULT`
    Fault = FI_EFAULT,
    /// `FI_EBUSY`: the object still has objects bound to it.
    Busy = FI_EBUSY,
    /// `FI_ENODEV`
    NoDev = FI_ENODEV,
    /// `FI_EINVAL`
    Inval = FI_EINVAL,
    /// `FI_EMFILE`
    MFile = FI_EMFILE,
    /// `FI_ENOSPC`
    NoSpc = FI_ENOSPC,
    /// `FI_ENOSYS`: not implemented, or the runtime is older than the API requested.
    NoSys = FI_ENOSYS,
    /// `FI_ENOMSG`
    NoMsg = FI_ENOMSG,
    /// `FI_ENODATA`: no provider matches the hints.
    NoData = FI_ENODATA,
    /// `FI_EOVERFLOW`
    Overflow = FI_EOVERFLOW,
    /// `FI_EMSGSIZE`
    MsgSize = FI_EMSGSIZE,
    /// `FI_ENOPROTOOPT`
    NoProtoOpt = FI_ENOPROTOOPT,
    /// `FI_EOPNOTSUPP`
    OpNotSupp = FI_EOPNOTSUPP,
    /// `FI_EADDRINUSE`
    AddrInUse = FI_EADDRINUSE,
    /// `FI_EADDRNOTAVAIL`
    AddrNotAvail = FI_EADDRNOTAVAIL,
    /// `FI_ENETDOWN`
    NetDown = FI_ENETDOWN,
    /// `FI_ENETUNREACH`
    NetUnreach = FI_ENETUNREACH,
    /// `FI_ECONNABORTED`
    ConnAborted = FI_ECONNABORTED,
    /// `FI_ECONNRESET`
    ConnReset = FI_ECONNRESET,
    /// `FI_ENOBUFS`
    NoBufs = FI_ENOBUFS,
    /// `FI_EISCONN`
    IsConn = FI_EISCONN,
    /// `FI_ENOTCONN`: the connection is gone.
    NotConn = FI_ENOTCONN,
    /// `FI_ESHUTDOWN`
    Shutdown = FI_ESHUTDOWN,
    /// `FI_ETIMEDOUT`
    TimedOut = FI_ETIMEDOUT,
    /// `FI_ECONNREFUSED`: the peer rejected the connection.
    ConnRefused = FI_ECONNREFUSED,
    /// `FI_EHOSTDOWN`
    HostDown = FI_EHOSTDOWN,
    /// `FI_EHOSTUNREACH`
    HostUnreach = FI_EHOSTUNREACH,
    /// `FI_EALREADY`
    Already = FI_EALREADY,
    /// `FI_EINPROGRESS`
    InProgress = FI_EINPROGRESS,
    /// `FI_EREMOTEIO`
    RemoteIo = FI_EREMOTEIO,
    /// `FI_ECANCELED`: the operation was cancelled (for example flushed by a shutdown).
    Canceled = FI_ECANCELED,
    /// `FI_EKEYREJECTED`
    KeyRejected = FI_EKEYREJECTED,
    /// `FI_EOTHER`
    Other = FI_EOTHER,
    /// `FI_ETOOSMALL`: the buffer given is too small.
    TooSmall = FI_ETOOSMALL,
    /// `FI_EOPBADSTATE`
    OpBadState = FI_EOPBADSTATE,
    /// `FI_EAVAIL`: an error entry is waiting to be read with `read_err`.
    Avail = FI_EAVAIL,
    /// `FI_EBADFLAGS`
    BadFlags = FI_EBADFLAGS,
    /// `FI_ENOEQ`
    NoEq = FI_ENOEQ,
    /// `FI_EDOMAIN`
    Domain = FI_EDOMAIN,
    /// `FI_ENOCQ`
    NoCq = FI_ENOCQ,
    /// `FI_ECRC`
    Crc = FI_ECRC,
    /// `FI_ETRUNC`: the receive buffer was too small for the message.
    Trunc = FI_ETRUNC,
    /// `FI_ENOKEY`
    NoKey = FI_ENOKEY,
    /// `FI_ENOAV`
    NoAv = FI_ENOAV,
    /// `FI_EOVERRUN`: the queue overran and entries were lost.
    Overrun = FI_EOVERRUN,
    /// `FI_ENORX`
    NoRx = FI_ENORX,
}

impl Errno {
    /// `fi_strerror`: libfabric's text for this error.
    pub fn text(self) -> &'static str {
        // SAFETY: fi_strerror(3) returns a pointer to a static, NUL-terminated
        // string for any value, known or not.
        let text = unsafe { CStr::from_ptr(sys::fi_strerror(self.raw())) };
        text.to_str().unwrap_or("(non-UTF-8 error text)")
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.text(), self.raw())
    }
}

impl From<Errno> for io::ErrorKind {
    fn from(e: Errno) -> Self {
        use io::ErrorKind as K;
        match e {
            Errno::Again => K::WouldBlock,
            Errno::Intr => K::Interrupted,
            Errno::NoMem => K::OutOfMemory,
            Errno::Inval | Errno::BadFlags => K::InvalidInput,
            Errno::NoEnt | Errno::NoData => K::NotFound,
            Errno::Perm | Errno::Acces => K::PermissionDenied,
            Errno::AddrInUse => K::AddrInUse,
            Errno::AddrNotAvail => K::AddrNotAvailable,
            Errno::ConnRefused => K::ConnectionRefused,
            Errno::ConnReset => K::ConnectionReset,
            Errno::ConnAborted => K::ConnectionAborted,
            Errno::NotConn | Errno::Shutdown => K::NotConnected,
            Errno::TimedOut => K::TimedOut,
            Errno::NoSys | Errno::OpNotSupp => K::Unsupported,
            _ => K::Other,
        }
    }
}

/// Everything a call of this crate can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A libfabric call returned an error code.
    #[error("{call}: {errno}")]
    Fabric {
        /// The C function that failed, such as `"fi_eq_open"`.
        call: &'static str,
        /// The error it returned.
        errno: Errno,
    },
    /// The libfabric loaded at run time is older than the headers this crate
    /// was built against, so `fi_getinfo` cannot honour the API version.
    #[error(
        "the libfabric library loaded at run time is {runtime_major}.{runtime_minor}, older than \
         the headers {header_major}.{header_minor} these bindings were built from; install a newer \
         libfabric or rebuild against the installed headers"
    )]
    RuntimeTooOld {
        /// Runtime major version.
        runtime_major: u32,
        /// Runtime minor version.
        runtime_minor: u32,
        /// Header major version.
        header_major: u32,
        /// Header minor version.
        header_minor: u32,
    },
    /// No provider matched the hints (`fi_getinfo` returned `-FI_ENODATA`).
    #[error("no libfabric provider matches the request ({request}); `fi_info -l` lists the providers installed")]
    NoProvider {
        /// What was asked for, in words.
        request: String,
    },
    /// The queue cannot use the wait object asked for.
    #[error("{queue} cannot use the wait object {requested:?}: {reason}")]
    UnsupportedWait {
        /// `"event queue"` or `"completion queue"`.
        queue: &'static str,
        /// The wait object asked for.
        requested: crate::wait::WaitObj,
        /// Why not.
        reason: &'static str,
    },
    /// A blocking call or wait fd request on a queue whose wait object does
    /// not allow it (for example `sread` on an `FI_WAIT_NONE` queue).
    #[error(
        "{call} needs a wait object of kind {needed}, but the queue was opened with {actual:?}"
    )]
    WrongWaitMode {
        /// The call that was refused.
        call: &'static str,
        /// What it needs.
        needed: &'static str,
        /// The queue's wait object.
        actual: crate::wait::WaitObj,
    },
    /// A buffer passed in is too small.
    #[error("{what}: {needed} bytes are needed, {given} were given")]
    BufferTooSmall {
        /// Which buffer.
        what: &'static str,
        /// Minimum size.
        needed: usize,
        /// Size given.
        given: usize,
    },
    /// An argument is out of range or inconsistent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An object was closed explicitly while other objects still use it.
    #[error("{object} is still in use by {users} other handle(s); it is closed when the last one is dropped")]
    InUse {
        /// What was closed.
        object: &'static str,
        /// How many other handles hold it.
        users: usize,
    },
    /// A system call on a wait fd failed.
    #[error("{call}: {source}")]
    System {
        /// The system call.
        call: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
}

impl Error {
    /// The fabric error code, when a libfabric call failed.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Fabric { errno, .. } => Some(*errno),
            Error::NoProvider { .. } => Some(Errno::NoData),
            _ => None,
        }
    }

    pub(crate) fn fabric(call: &'static str, negative: impl Into<i64>) -> Self {
        let raw = -(negative.into());
        Error::Fabric {
            call,
            errno: Errno::from_raw(c_int::try_from(raw).unwrap_or(c_int::MAX)),
        }
    }

    pub(crate) fn system(call: &'static str, source: impl Into<io::Error>) -> Self {
        Error::System {
            call,
            source: source.into(),
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> Self {
        let kind = match &e {
            Error::Fabric { errno, .. } => (*errno).into(),
            Error::NoProvider { .. } => io::ErrorKind::NotFound,
            Error::BufferTooSmall { .. } | Error::InvalidArgument(_) => io::ErrorKind::InvalidInput,
            Error::UnsupportedWait { .. } | Error::RuntimeTooOld { .. } => {
                io::ErrorKind::Unsupported
            }
            Error::System { source, .. } => source.kind(),
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Checks a libfabric `int` return code: 0 (or positive) is success.
#[inline]
pub(crate) fn check(call: &'static str, ret: c_int) -> Result<()> {
    if ret >= 0 {
        Ok(())
    } else {
        Err(Error::fabric(call, ret))
    }
}

/// Checks a libfabric `ssize_t` return: a length or count, or a negated errno.
#[inline]
pub(crate) fn check_len(call: &'static str, ret: isize) -> Result<usize> {
    if ret >= 0 {
        Ok(ret as usize)
    } else {
        Err(Error::fabric(call, ret as i64))
    }
}

/// Runs a `fi_eq_strerror` / `fi_cq_strerror` call with a text buffer and
/// copies out the string it returns (the buffer, or a static string).
pub(crate) fn provider_text(
    call: impl FnOnce(*mut std::ffi::c_char, usize) -> *const std::ffi::c_char,
) -> String {
    let mut text = [0 as std::ffi::c_char; 256];
    let p = call(text.as_mut_ptr(), text.len());
    if p.is_null() {
        return String::new();
    }
    // SAFETY: fi_eq(3)/fi_cq(3): the strerror calls return a NUL-terminated
    // string, either the buffer given (written at most len bytes, NUL
    // terminated) or a static one; both outlive this copy.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The negated `FI_EAGAIN` as `ssize_t`, as read calls return it.
pub(crate) const EAGAIN: isize = -(sys::errno::FI_EAGAIN as isize);
/// The negated `FI_EAVAIL` as `ssize_t`.
pub(crate) const EAVAIL: isize = -(sys::errno::FI_EAVAIL as isize);
