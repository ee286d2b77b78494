//! Errors: the fabric errno, its text and the call that failed.
//!
//! All return-code conversion of the crate happens in this module.

use libfabric_sys::fabric as sys;
use std::borrow::Cow;
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
    /// The error's text: `fi_strerror` for libfabric's own codes
    /// (`FI_ERRNO_OFFSET` and up, static strings in libfabric), and the C
    /// library's `strerror_r` for the system codes below them.
    ///
    /// `fi_strerror` itself is not used for system codes: it returns
    /// `strerror(3)`'s result, which for a value glibc does not know is a
    /// per-thread buffer that the next such call frees (libfabric 1.17
    /// `src/fabric.c` 1487-1488), so it cannot be borrowed.
    pub fn text(self) -> Cow<'static, str> {
        // fi_strerror takes either sign (src/fabric.c 1484-1485 in 1.17).
        let raw = self.raw().checked_abs().unwrap_or(c_int::MAX);
        if raw >= sys::FI_ERRNO_OFFSET {
            // SAFETY: fi_strerror(3): for values from FI_ERRNO_OFFSET up,
            // libfabric returns an entry of its static `errstr` table (the
            // last entry for values past the table), never a buffer.
            let text = unsafe { CStr::from_ptr(sys::fi_strerror(raw)) };
            return Cow::Borrowed(text.to_str().unwrap_or("(non-UTF-8 error text)"));
        }
        let mut buf = [0 as std::ffi::c_char; 128];
        // SAFETY: strerror_r (the XSI version the libc crate binds) writes
        // at most buf.len() bytes, NUL-terminated, into our buffer.
        let ret = unsafe { libc::strerror_r(raw, buf.as_mut_ptr(), buf.len()) };
        if ret != 0 {
            return Cow::Owned(format!("Unknown error {raw}"));
        }
        // SAFETY: strerror_r succeeded, so buf holds a NUL-terminated string.
        let text = unsafe { CStr::from_ptr(buf.as_ptr()) };
        Cow::Owned(text.to_string_lossy().into_owned())
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
    /// An object of another fabric, domain or provider was given where
    /// the call needs one of the same (binding it would make the provider
    /// follow pointers of another provider's structures).
    #[error("{call}: the {what} belongs to another {scope}")]
    ForeignObject {
        /// The call that was refused.
        call: &'static str,
        /// What was given.
        what: &'static str,
        /// `"fabric"`, `"domain"` or `"provider"`.
        scope: &'static str,
    },
    /// A call made before what it needs is bound or enabled, or in a state
    /// where the provider would crash or misbehave (for example `fi_listen`
    /// with no event queue bound, a send with no completion queue for
    /// transmits, a second event queue bound to an endpoint).
    #[error("{call}: {reason}")]
    State {
        /// The call that was refused.
        call: &'static str,
        /// What is missing or wrong.
        reason: &'static str,
    },
    /// The endpoint's `fi_info` does not grant a capability the call needs.
    #[error("{call} needs the capability {needed:?}, which the endpoint was not given")]
    MissingCapability {
        /// The call that was refused.
        call: &'static str,
        /// The capability it needs.
        needed: crate::info::Caps,
    },
    /// A size, length or count over what the call or the provider allows.
    #[error("{what}: {given} is over the limit of {limit}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// The largest value allowed.
        limit: usize,
        /// The value given.
        given: usize,
    },
    /// Memory for a buffer could not be allocated.
    #[error("could not allocate {bytes} bytes for {what}")]
    OutOfMemory {
        /// What the memory was for.
        what: &'static str,
        /// How many bytes were asked for.
        bytes: usize,
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
    /// An operation completed in error: an error completion, handed back by
    /// a call that returns one completion (such as
    /// [`CompletionQueue::wait_one`](crate::CompletionQueue::wait_one)).
    /// Its buffer went back to its pool.
    #[error("an operation ({flags:?}) completed in error: {errno} (provider error {prov_errno})")]
    Completion {
        /// The error.
        errno: Errno,
        /// The provider's own error number.
        prov_errno: i32,
        /// The completion flags of the failed operation.
        flags: crate::cq::CompletionFlags,
    },
    /// A blocking call's timeout passed with nothing to return.
    #[error("{call}: the timeout passed")]
    TimedOut {
        /// The call that waited.
        call: &'static str,
    },
}

impl Error {
    /// The fabric error code, when a libfabric call failed.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Fabric { errno, .. } | Error::Completion { errno, .. } => Some(*errno),
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

    /// The error of an error completion.
    pub(crate) fn completion(e: &crate::cq::CqError<'_>) -> Self {
        Error::Completion {
            errno: e.err,
            prov_errno: e.prov_errno,
            flags: e.flags,
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
            Error::BufferTooSmall { .. }
            | Error::InvalidArgument(_)
            | Error::ForeignObject { .. }
            | Error::State { .. }
            | Error::TooLarge { .. } => io::ErrorKind::InvalidInput,
            Error::MissingCapability { .. } => io::ErrorKind::Unsupported,
            Error::OutOfMemory { .. } => io::ErrorKind::OutOfMemory,
            Error::UnsupportedWait { .. } | Error::RuntimeTooOld { .. } => {
                io::ErrorKind::Unsupported
            }
            Error::System { source, .. } => source.kind(),
            Error::Completion { errno, .. } => (*errno).into(),
            Error::TimedOut { .. } => io::ErrorKind::TimedOut,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

/// The largest queue, address vector or pool size this crate passes to a
/// provider: verbs takes CQ depths as `int` (`ibv_create_cq`'s `cqe`), and
/// the util queues round sizes up to a power of two in 64 bits
/// (`roundup_power_of_two`, libfabric `include/ofi.h`), which wraps to 0
/// above 2^63 and then writes past a tiny allocation.
pub const MAX_QUEUE_SIZE: usize = i32::MAX as usize;

/// Refuses a size over [`MAX_QUEUE_SIZE`].
pub(crate) fn check_queue_size(what: &'static str, given: usize) -> Result<()> {
    if given > MAX_QUEUE_SIZE {
        return Err(Error::TooLarge {
            what,
            limit: MAX_QUEUE_SIZE,
            given,
        });
    }
    Ok(())
}

/// Plain integers, for which all-zero bytes are a valid value.
pub(crate) trait Zeroable: Copy {}
impl Zeroable for u8 {}
impl Zeroable for u64 {}

/// A zeroed boxed slice of `len` elements (`calloc`-like: the pages are not
/// touched), or [`Error::OutOfMemory`] instead of aborting the process when
/// the allocation fails or its size overflows.
pub(crate) fn try_zeroed<T: Zeroable>(what: &'static str, len: usize) -> Result<Box<[T]>> {
    let oom = || Error::OutOfMemory {
        what,
        bytes: len.saturating_mul(std::mem::size_of::<T>()),
    };
    if len == 0 {
        return Ok(Box::default());
    }
    let layout = std::alloc::Layout::array::<T>(len).map_err(|_| oom())?;
    // SAFETY: the layout has a non-zero size (len > 0, T is not zero-sized).
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<T>();
    if p.is_null() {
        return Err(oom());
    }
    // SAFETY: p points to len zeroed elements allocated by the global
    // allocator with Layout::array::<T>(len), which is the layout a
    // Box<[T]> of len elements is freed with; zero is a valid T (Zeroable).
    Ok(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, len)) })
}

/// What a failed `close` hands back: the object, still open, and why.
pub type CloseResult<T> = std::result::Result<(), (T, Error)>;

/// Lets `?` turn a failed `close` into the error alone (dropping the handle
/// it handed back).
impl<T: fmt::Debug> From<(T, Error)> for Error {
    fn from((_, e): (T, Error)) -> Self {
        e
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
    // One byte less than the buffer: providers copy with strncpy, which
    // leaves no NUL when the text fills the length given (verbs'
    // `vrb_cq_strerror`, `prov/verbs/src/verbs_cq.c` 392 in 1.17), and the
    // last byte stays 0.
    let p = call(text.as_mut_ptr(), text.len() - 1);
    if p.is_null() {
        return String::new();
    }
    // SAFETY: fi_eq(3)/fi_cq(3): the strerror calls return a NUL-terminated
    // string, either the buffer given (at most len bytes written, and its
    // last byte is still 0) or the provider's own (static, or strerror's
    // per-thread buffer, as verbs' EQ returns, which nothing on this thread
    // overwrites before the copy below).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The negated `FI_EAGAIN` as `ssize_t`, as read calls return it.
pub(crate) const EAGAIN: isize = -(sys::errno::FI_EAGAIN as isize);
/// The negated `FI_ETIMEDOUT` as `ssize_t`.
pub(crate) const ETIMEDOUT: isize = -(sys::errno::FI_ETIMEDOUT as isize);
/// The negated `FI_ECANCELED` as `ssize_t`.
pub(crate) const ECANCELED: isize = -(sys::errno::FI_ECANCELED as isize);
/// The negated `FI_EAVAIL` as `ssize_t`.
pub(crate) const EAVAIL: isize = -(sys::errno::FI_EAVAIL as isize);
