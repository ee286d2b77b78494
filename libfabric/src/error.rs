//! Errors: the fabric errno, its text and the call that failed.
//!
//! All return-code conversion of the crate happens in this module.

use libfabric_sys::fabric as sys;
use std::borrow::Cow;
use std::ffi::{c_int, CStr};
use std::fmt;
use std::io;

/// A libfabric error code: the positive `FI_E*` value of `fi_errno.h` (a
/// call returns it negated).
///
/// Any value is kept, including those the headers do not name, so nothing a
/// newer library returns is lost; the associated constants name the values
/// of the headers.
#[repr(transparent)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(c_int);

macro_rules! errnos {
    ($( $(#[$doc:meta])* $name:ident = $raw:ident, )*) => {
        impl Errno {
            $( $(#[$doc])* pub const $name: Errno = Errno(sys::errno::$raw); )*

            /// The constant's name of a value the headers name.
            fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( sys::errno::$raw => Some(stringify!($name)), )*
                    _ => None,
                }
            }
        }
    };
}

errnos! {
    /// `FI_EPERM`
    PERM = FI_EPERM,
    /// `FI_ENOENT`
    NOENT = FI_ENOENT,
    /// `FI_EINTR`
    INTR = FI_EINTR,
    /// `FI_EIO`
    IO = FI_EIO,
    /// `FI_E2BIG`
    TOOBIG = FI_E2BIG,
    /// `FI_EBADF`
    BADF = FI_EBADF,
    /// `FI_EAGAIN`: nothing to read now, or resources temporarily unavailable.
    AGAIN = FI_EAGAIN,
    /// `FI_ENOMEM`
    NOMEM = FI_ENOMEM,
    /// `FI_EACCES`
    ACCES = FI_EACCES,
    /// `FI_EFAULT`
    FAULT = FI_EFAULT,
    /// `FI_EBUSY`: the object still has objects bound to it.
    BUSY = FI_EBUSY,
    /// `FI_ENODEV`
    NODEV = FI_ENODEV,
    /// `FI_EINVAL`
    INVAL = FI_EINVAL,
    /// `FI_EMFILE`
    MFILE = FI_EMFILE,
    /// `FI_ENOSPC`
    NOSPC = FI_ENOSPC,
    /// `FI_ENOSYS`: not implemented, or the runtime is older than the API requested.
    NOSYS = FI_ENOSYS,
    /// `FI_ENOMSG`
    NOMSG = FI_ENOMSG,
    /// `FI_ENODATA`: no provider matches the hints.
    NODATA = FI_ENODATA,
    /// `FI_EOVERFLOW`
    OVERFLOW = FI_EOVERFLOW,
    /// `FI_EMSGSIZE`
    MSGSIZE = FI_EMSGSIZE,
    /// `FI_ENOPROTOOPT`
    NOPROTOOPT = FI_ENOPROTOOPT,
    /// `FI_EOPNOTSUPP`
    OPNOTSUPP = FI_EOPNOTSUPP,
    /// `FI_EADDRINUSE`
    ADDRINUSE = FI_EADDRINUSE,
    /// `FI_EADDRNOTAVAIL`
    ADDRNOTAVAIL = FI_EADDRNOTAVAIL,
    /// `FI_ENETDOWN`
    NETDOWN = FI_ENETDOWN,
    /// `FI_ENETUNREACH`
    NETUNREACH = FI_ENETUNREACH,
    /// `FI_ECONNABORTED`
    CONNABORTED = FI_ECONNABORTED,
    /// `FI_ECONNRESET`
    CONNRESET = FI_ECONNRESET,
    /// `FI_ENOBUFS`
    NOBUFS = FI_ENOBUFS,
    /// `FI_EISCONN`
    ISCONN = FI_EISCONN,
    /// `FI_ENOTCONN`: the connection is gone.
    NOTCONN = FI_ENOTCONN,
    /// `FI_ESHUTDOWN`
    SHUTDOWN = FI_ESHUTDOWN,
    /// `FI_ETIMEDOUT`
    TIMEDOUT = FI_ETIMEDOUT,
    /// `FI_ECONNREFUSED`: the peer rejected the connection.
    CONNREFUSED = FI_ECONNREFUSED,
    /// `FI_EHOSTDOWN`
    HOSTDOWN = FI_EHOSTDOWN,
    /// `FI_EHOSTUNREACH`
    HOSTUNREACH = FI_EHOSTUNREACH,
    /// `FI_EALREADY`
    ALREADY = FI_EALREADY,
    /// `FI_EINPROGRESS`
    INPROGRESS = FI_EINPROGRESS,
    /// `FI_EREMOTEIO`
    REMOTEIO = FI_EREMOTEIO,
    /// `FI_ECANCELED`: the operation was cancelled (for example flushed by a shutdown).
    CANCELED = FI_ECANCELED,
    /// `FI_EKEYREJECTED`
    KEYREJECTED = FI_EKEYREJECTED,
    /// `FI_EOTHER`
    OTHER = FI_EOTHER,
    /// `FI_ETOOSMALL`: the buffer given is too small.
    TOOSMALL = FI_ETOOSMALL,
    /// `FI_EOPBADSTATE`
    OPBADSTATE = FI_EOPBADSTATE,
    /// `FI_EAVAIL`: an error entry is waiting to be read with `read_err`.
    AVAIL = FI_EAVAIL,
    /// `FI_EBADFLAGS`
    BADFLAGS = FI_EBADFLAGS,
    /// `FI_ENOEQ`
    NOEQ = FI_ENOEQ,
    /// `FI_EDOMAIN`
    DOMAIN = FI_EDOMAIN,
    /// `FI_ENOCQ`
    NOCQ = FI_ENOCQ,
    /// `FI_ECRC`
    CRC = FI_ECRC,
    /// `FI_ETRUNC`: the receive buffer was too small for the message.
    TRUNC = FI_ETRUNC,
    /// `FI_ENOKEY`
    NOKEY = FI_ENOKEY,
    /// `FI_ENOAV`
    NOAV = FI_ENOAV,
    /// `FI_EOVERRUN`: the queue overran and entries were lost.
    OVERRUN = FI_EOVERRUN,
    /// `FI_ENORX`
    NORX = FI_ENORX,
}

impl Errno {
    /// The error of a positive `FI_E*` value (a negated return code).
    #[inline]
    #[must_use]
    pub const fn from_raw_os_error(raw: c_int) -> Self {
        Errno(raw)
    }

    /// The positive `FI_E*` value.
    #[inline]
    #[must_use]
    pub const fn raw_os_error(self) -> c_int {
        self.0
    }

    /// The error a negative return code carries; one below `-c_int::MAX`
    /// (which no libfabric code is) is kept as `c_int::MAX`.
    #[inline(always)]
    const fn from_negative(ret: isize) -> Self {
        let raw = ret.unsigned_abs();
        if raw > c_int::MAX as usize {
            Errno(c_int::MAX)
        } else {
            Errno(raw as c_int)
        }
    }

    /// The return code of a call that failed with this error (the value
    /// negated).
    #[inline(always)]
    pub(crate) const fn to_ret(self) -> isize {
        -(self.0 as isize)
    }

    /// The closest [`io::ErrorKind`].
    #[must_use]
    pub fn kind(self) -> io::ErrorKind {
        use io::ErrorKind as K;
        match self {
            Errno::AGAIN => K::WouldBlock,
            Errno::INTR => K::Interrupted,
            Errno::NOMEM => K::OutOfMemory,
            Errno::INVAL | Errno::BADFLAGS => K::InvalidInput,
            Errno::NOENT | Errno::NODATA => K::NotFound,
            Errno::PERM | Errno::ACCES => K::PermissionDenied,
            Errno::ADDRINUSE => K::AddrInUse,
            Errno::ADDRNOTAVAIL => K::AddrNotAvailable,
            Errno::CONNREFUSED => K::ConnectionRefused,
            Errno::CONNRESET => K::ConnectionReset,
            Errno::CONNABORTED => K::ConnectionAborted,
            Errno::NOTCONN | Errno::SHUTDOWN => K::NotConnected,
            Errno::TIMEDOUT => K::TimedOut,
            Errno::NOSYS | Errno::OPNOTSUPP => K::Unsupported,
            _ => K::Other,
        }
    }
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
    #[must_use]
    pub fn text(self) -> Cow<'static, str> {
        // fi_strerror takes either sign (src/fabric.c 1484-1485 in 1.17).
        let raw = self.0.checked_abs().unwrap_or(c_int::MAX);
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

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "Errno::{name}"),
            None => write!(f, "Errno({})", self.0),
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.text(), self.0)
    }
}

impl From<Errno> for io::ErrorKind {
    fn from(e: Errno) -> Self {
        e.kind()
    }
}

/// Everything a call of this crate can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A libfabric call returned an error code.
    #[error("{call}: {errno}")]
    Call {
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
    InvalidArgument(Cow<'static, str>),
    /// An object was closed explicitly while other objects still use it.
    #[error("{object} is still in use by {users} other handle(s); it is closed when the last one is dropped")]
    InUse {
        /// What was closed.
        object: ObjectKind,
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
        /// What it must share with the call's objects.
        scope: ObjectScope,
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
    /// A counter wait ended because the counter's error count changed
    /// while it waited (`-FI_EAVAIL`): an operation the counter counts
    /// completed in error, or [`Counter::add_err`](crate::Counter::add_err)
    /// or [`set_err`](crate::Counter::set_err) was called.
    #[error("{call}: the counter's error count changed while waiting (now {errors})")]
    CounterError {
        /// The call that waited.
        call: &'static str,
        /// The error count when the wait ended.
        errors: u64,
    },
    /// The provider or the domain does not offer what the call needs, or
    /// this crate does not wrap it (for example a wait fd of a counter:
    /// libfabric's util counters answer `FI_GETWAIT` with `-FI_ENOSYS`; an
    /// atomic operation `fi_atomicvalid` refuses; memory registration keys
    /// longer than 8 bytes).
    #[error("{call}: {reason}")]
    Unsupported {
        /// The call that was refused.
        call: &'static str,
        /// What the provider lacks.
        reason: &'static str,
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
    #[must_use]
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Call { errno, .. } | Error::Completion { errno, .. } => Some(*errno),
            Error::NoProvider { .. } => Some(Errno::NODATA),
            _ => None,
        }
    }

    /// Whether a libfabric call asked to be retried later (`FI_EAGAIN`): for
    /// a post, the queue is full; read completions and post again.
    #[must_use]
    pub fn is_again(&self) -> bool {
        self.errno() == Some(Errno::AGAIN)
    }

    /// The error of `call` failing with `errno`.
    pub(crate) fn call(call: &'static str, errno: Errno) -> Self {
        Error::Call { call, errno }
    }

    /// The error of `call` returning `ret`, which is not its success value:
    /// the error a negative code carries, `FI_EOTHER` for any other.
    pub(crate) fn from_ret(call: &'static str, ret: impl Ret) -> Self {
        Error::call(call, classify(ret).err().unwrap_or(Errno::OTHER))
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

/// What an object given to a call must share with the call's own objects,
/// which an [`Error::ForeignObject`] names.
///
/// A fieldless enum rather than a string, so that an [`Error`] stays five
/// words: a read's `Result` then holds the error beside the largest event
/// under one tag, which a read's fast path stores once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ObjectScope {
    /// The same fabric.
    Fabric,
    /// The same domain.
    Domain,
    /// The same provider.
    Provider,
}

impl fmt::Display for ObjectScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjectScope::Fabric => "fabric",
            ObjectScope::Domain => "domain",
            ObjectScope::Provider => "provider",
        })
    }
}

/// The kind of object an [`Error::InUse`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ObjectKind {
    /// A [`Fabric`](crate::Fabric).
    Fabric,
    /// A [`Domain`](crate::Domain).
    Domain,
    /// An [`EventQueue`](crate::EventQueue).
    EventQueue,
    /// A [`CompletionQueue`](crate::CompletionQueue).
    CompletionQueue,
    /// A [`Counter`](crate::Counter).
    Counter,
    /// An [`AddressVector`](crate::AddressVector).
    AddressVector,
    /// A [`WaitSet`](crate::wait::WaitSet).
    WaitSet,
    /// A [`PollSet`](crate::poll::PollSet).
    PollSet,
    /// An [`Endpoint`](crate::Endpoint).
    Endpoint,
    /// A [`PassiveEndpoint`](crate::PassiveEndpoint).
    PassiveEndpoint,
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjectKind::Fabric => "fabric",
            ObjectKind::Domain => "domain",
            ObjectKind::EventQueue => "event queue",
            ObjectKind::CompletionQueue => "completion queue",
            ObjectKind::Counter => "counter",
            ObjectKind::AddressVector => "address vector",
            ObjectKind::WaitSet => "wait set",
            ObjectKind::PollSet => "poll set",
            ObjectKind::Endpoint => "endpoint",
            ObjectKind::PassiveEndpoint => "passive endpoint",
        })
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> Self {
        let kind = match &e {
            Error::Call { errno, .. } => errno.kind(),
            Error::NoProvider { .. } => io::ErrorKind::NotFound,
            Error::BufferTooSmall { .. }
            | Error::InvalidArgument(_)
            | Error::ForeignObject { .. }
            | Error::State { .. }
            | Error::TooLarge { .. } => io::ErrorKind::InvalidInput,
            Error::MissingCapability { .. } | Error::Unsupported { .. } => {
                io::ErrorKind::Unsupported
            }
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

/// The result of a call that takes an object and, when it fails, hands it
/// back with the error, so that nothing is lost: `close` (the object, still
/// open), posts of a buffer (the buffer, unchanged) and
/// [`ConnRequest::reject`](crate::ConnRequest::reject) (the request, still
/// unanswered, when it was refused before reaching the provider).
pub type Handback<T> = std::result::Result<(), (T, Error)>;

/// Lets `?` turn a failed [`Handback`] into the error alone (dropping what
/// it handed back).
impl<T: fmt::Debug> From<(T, Error)> for Error {
    fn from((_, e): (T, Error)) -> Self {
        e
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A raw return code of a libfabric call: an `int` or an `ssize_t`,
/// negative for a negated `FI_E*` value.
pub(crate) trait Ret: Copy {
    /// The code as `ssize_t`, which holds every `int`.
    fn widen(self) -> isize;
}

impl Ret for c_int {
    #[inline(always)]
    fn widen(self) -> isize {
        self as isize
    }
}

impl Ret for isize {
    #[inline(always)]
    fn widen(self) -> isize {
        self
    }
}

/// What a return code says: its value when it is not negative (a length,
/// a count, 0 for success), else the error it carries. Compare with
/// `Err(Errno::AGAIN)` and the like to single out a code.
#[inline(always)]
pub(crate) fn classify(ret: impl Ret) -> std::result::Result<usize, Errno> {
    let ret = ret.widen();
    if ret >= 0 {
        Ok(ret as usize)
    } else {
        Err(Errno::from_negative(ret))
    }
}

/// Whether a return code is `-FI_EAGAIN` (nothing to read): one compare,
/// for the read paths' first test.
#[inline(always)]
pub(crate) fn is_again(ret: isize) -> bool {
    ret == Errno::AGAIN.to_ret()
}

/// Whether a return code is `-FI_EAVAIL`: an error entry is next.
#[inline(always)]
pub(crate) fn is_avail(ret: isize) -> bool {
    ret == Errno::AVAIL.to_ret()
}

/// Whether a return code is `-FI_EINTR`: a signal handled on the thread
/// ended a blocking call early. libfabric hands the interruption of the
/// system call it blocks in up as is (`util_wait_fd_run`,
/// `prov/util/src/util_wait.c` 396-407 in 1.17, which retries only in
/// debug builds; sockets' `fi_poll_fd`, `src/common.c` 151-160), and
/// `epoll_wait(2)` and
/// `poll(2)` are never restarted, `SA_RESTART` or not. Every blocking call
/// of the crate takes it as a wait cut short and waits on for the time
/// left.
#[inline(always)]
pub(crate) fn is_interrupted(ret: isize) -> bool {
    ret == Errno::INTR.to_ret()
}

/// Checks a libfabric return code: 0 (or positive) is success.
#[inline]
pub(crate) fn check(call: &'static str, ret: impl Ret) -> Result<()> {
    match classify(ret) {
        Ok(_) => Ok(()),
        Err(errno) => Err(Error::call(call, errno)),
    }
}

/// Checks a libfabric return that is a length or count, or a negated errno.
#[inline]
pub(crate) fn check_len(call: &'static str, ret: impl Ret) -> Result<usize> {
    classify(ret).map_err(|errno| Error::call(call, errno))
}

/// A provider error number as the `fi_*_strerror` calls may be given it.
/// Providers negate it (`fi_strerror` takes either sign,
/// `src/fabric.c` 1484-1485 in 1.17, which util's `ofi_eq_strerror` and
/// `ofi_cq_strerror` call; sockets' `sock_cq_strerror` negates it
/// itself), which overflows in C for `i32::MIN`, the one value changed
/// (to `-i32::MAX`, whose text is the same: neither is a known code).
pub(crate) fn provider_errno(prov_errno: i32) -> i32 {
    prov_errno.max(-i32::MAX)
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
