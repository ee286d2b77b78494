//! The crate's error type and the conversion of libibverbs return codes.
//!
//! libibverbs reports failures in three ways, and each verb documents which:
//! a NULL pointer with `errno` set (`ibv_create_cq`, `ibv_reg_mr`, ...), a
//! positive errno value returned directly (`ibv_destroy_cq`, `ibv_modify_qp`,
//! `ibv_post_send`, ...), or `-1` with `errno` set (`ibv_get_async_event`,
//! `ibv_get_cq_event`). The helpers at the bottom of this file are the only
//! places where those conventions are turned into [`Error`].

use std::io;

use nix::errno::Errno;

/// Result of every fallible call of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error from libibverbs or from checking the arguments of a call.
///
/// Converts into [`std::io::Error`] (with the [`io::ErrorKind`] of the errno
/// where there is one), so `?` works in functions returning `io::Result`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
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

    /// A byte range that does not fit in a memory region, or a buffer that is
    /// too small for what was asked.
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

    /// An argument libibverbs would reject, found before calling it.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),

    /// `close()`/`destroy()` was called while other handles, children or
    /// unacknowledged events still hold the object.
    #[error(
        "{object} is still in use ({holders} other holder(s): clones, child objects or events)"
    )]
    InUse {
        /// The kind of object (`"CQ"`, `"context"`, ...).
        object: &'static str,
        /// How many other strong holders there were at the time of the call.
        holders: usize,
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

    /// A libibverbs call failed.
    #[error("{call} failed: {errno} ({desc})", desc = errno.desc())]
    Verbs {
        /// The verbs function that failed, such as `"ibv_create_cq"`.
        call: &'static str,
        /// The error number it reported.
        errno: Errno,
    },

    /// A system call on an event file descriptor failed (`poll`, `fcntl`).
    #[error("{call} on an event file descriptor failed: {errno} ({desc})", desc = errno.desc())]
    Sys {
        /// The system call.
        call: &'static str,
        /// The error number it reported.
        errno: Errno,
    },
}

impl Error {
    /// The errno carried by this error, if it came from libibverbs or the
    /// kernel.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Verbs { errno, .. } | Error::Sys { errno, .. } => Some(*errno),
            Error::NoRdmaSupport => Some(Errno::ENOSYS),
            Error::OutOfMemory { .. } => Some(Errno::ENOMEM),
            _ => None,
        }
    }

    /// The libibverbs function or system call that failed, if any.
    pub fn call(&self) -> Option<&'static str> {
        match self {
            Error::Verbs { call, .. } | Error::Sys { call, .. } => Some(call),
            Error::NoRdmaSupport => Some("ibv_get_device_list"),
            _ => None,
        }
    }

    /// The [`io::ErrorKind`] that best describes this error.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            Error::NoRdmaSupport => io::ErrorKind::Unsupported,
            Error::NoDevices | Error::NoSuchDevice { .. } => io::ErrorKind::NotFound,
            Error::PortOutOfRange { .. }
            | Error::OutOfBounds { .. }
            | Error::InvalidArgument(_) => io::ErrorKind::InvalidInput,
            // The kind of EBUSY (ResourceBusy on current Rust).
            Error::InUse { .. } => io::Error::from_raw_os_error(libc::EBUSY).kind(),
            Error::OutOfMemory { .. } => io::ErrorKind::OutOfMemory,
            Error::Verbs { errno, .. } | Error::Sys { errno, .. } => {
                io::Error::from_raw_os_error(*errno as i32).kind()
            }
        }
    }
}

impl From<Error> for io::Error {
    /// Wraps the error, keeping its kind; [`io::Error::get_ref`] gives the
    /// [`Error`] back, and with it the errno and the failing call.
    fn from(err: Error) -> io::Error {
        io::Error::new(err.kind(), err)
    }
}

/// The calling thread's `errno`, or `EIO` where a verb failed without
/// setting it (some providers return NULL without touching errno).
pub(crate) fn last_errno() -> Errno {
    match Errno::last() {
        Errno::UnknownErrno => Errno::EIO,
        e => e,
    }
}

/// Error for a verb that reported failure through `errno`.
pub(crate) fn verbs_errno(call: &'static str) -> Error {
    Error::Verbs {
        call,
        errno: last_errno(),
    }
}

/// Check a verb that returns 0 on success and an errno value on failure
/// (some providers return `-errno` or `-1`: both are accepted).
pub(crate) fn check_rc(call: &'static str, rc: libc::c_int) -> Result<()> {
    match rc {
        0 => Ok(()),
        -1 => Err(verbs_errno(call)),
        rc => Err(Error::Verbs {
            call,
            errno: Errno::from_raw(rc.abs()),
        }),
    }
}

/// Check a verb that returns a pointer, NULL with `errno` set on failure.
pub(crate) fn check_ptr<T>(call: &'static str, ptr: *mut T) -> Result<std::ptr::NonNull<T>> {
    std::ptr::NonNull::new(ptr).ok_or_else(|| verbs_errno(call))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rc_conventions() {
        assert!(check_rc("x", 0).is_ok());
        let e = check_rc("ibv_destroy_cq", libc::EBUSY).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EBUSY));
        let e = check_rc("ibv_destroy_cq", -libc::EBUSY).unwrap_err();
        assert_eq!(e.errno(), Some(Errno::EBUSY));
    }
}
