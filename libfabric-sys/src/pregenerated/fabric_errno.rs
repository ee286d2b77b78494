/// Every error code of `rdma/fi_errno.h`, as the positive `c_int` that
/// libfabric calls return negated.
pub mod errno {
    #[allow(missing_docs)]
    pub const FI_E2BIG: ::core::ffi::c_int = super::FI_E2BIG as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EACCES: ::core::ffi::c_int = super::FI_EACCES as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EADDRINUSE: ::core::ffi::c_int = super::FI_EADDRINUSE as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EADDRNOTAVAIL: ::core::ffi::c_int = super::FI_EADDRNOTAVAIL as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EAGAIN: ::core::ffi::c_int = super::FI_EAGAIN as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EALREADY: ::core::ffi::c_int = super::FI_EALREADY as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EAVAIL: ::core::ffi::c_int = super::FI_EAVAIL as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EBADF: ::core::ffi::c_int = super::FI_EBADF as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EBADFLAGS: ::core::ffi::c_int = super::FI_EBADFLAGS as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EBUSY: ::core::ffi::c_int = super::FI_EBUSY as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ECANCELED: ::core::ffi::c_int = super::FI_ECANCELED as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ECONNABORTED: ::core::ffi::c_int = super::FI_ECONNABORTED as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ECONNREFUSED: ::core::ffi::c_int = super::FI_ECONNREFUSED as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ECONNRESET: ::core::ffi::c_int = super::FI_ECONNRESET as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ECRC: ::core::ffi::c_int = super::FI_ECRC as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EDOMAIN: ::core::ffi::c_int = super::FI_EDOMAIN as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EFAULT: ::core::ffi::c_int = super::FI_EFAULT as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EHOSTDOWN: ::core::ffi::c_int = super::FI_EHOSTDOWN as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EHOSTUNREACH: ::core::ffi::c_int = super::FI_EHOSTUNREACH as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EINPROGRESS: ::core::ffi::c_int = super::FI_EINPROGRESS as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EINTR: ::core::ffi::c_int = super::FI_EINTR as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EINVAL: ::core::ffi::c_int = super::FI_EINVAL as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EIO: ::core::ffi::c_int = super::FI_EIO as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EISCONN: ::core::ffi::c_int = super::FI_EISCONN as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EKEYREJECTED: ::core::ffi::c_int = super::FI_EKEYREJECTED as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EMFILE: ::core::ffi::c_int = super::FI_EMFILE as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EMSGSIZE: ::core::ffi::c_int = super::FI_EMSGSIZE as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ENETDOWN: ::core::ffi::c_int = super::FI_ENETDOWN as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ENETUNREACH: ::core::ffi::c_int = super::FI_ENETUNREACH as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ENOAV: ::core::ffi::c_int = super::FI_ENOAV as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ENOBUFS: ::core::ffi::c_int = super::FI_ENOBUFS as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ENOCQ: ::core::ffi::c_int = super::FI_ENOCQ as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ENODATA: ::core::ffi::c_int = super::FI_ENODATA as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ENODEV: ::core::ffi::c_int = super::FI_ENODEV as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ENOENT: ::core::ffi::c_int = super::FI_ENOENT as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ENOEQ: ::core::ffi::c_int = super::FI_ENOEQ as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ENOKEY: ::core::ffi::c_int = super::FI_ENOKEY as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ENOMEM: ::core::ffi::c_int = super::FI_ENOMEM as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ENOMSG: ::core::ffi::c_int = super::FI_ENOMSG as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ENOPROTOOPT: ::core::ffi::c_int = super::FI_ENOPROTOOPT as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ENORX: ::core::ffi::c_int = super::FI_ENORX as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ENOSPC: ::core::ffi::c_int = super::FI_ENOSPC as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ENOSYS: ::core::ffi::c_int = super::FI_ENOSYS as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ENOTCONN: ::core::ffi::c_int = super::FI_ENOTCONN as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EOPBADSTATE: ::core::ffi::c_int = super::FI_EOPBADSTATE as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EOPNOTSUPP: ::core::ffi::c_int = super::FI_EOPNOTSUPP as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EOTHER: ::core::ffi::c_int = super::FI_EOTHER as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EOVERFLOW: ::core::ffi::c_int = super::FI_EOVERFLOW as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EOVERRUN: ::core::ffi::c_int = super::FI_EOVERRUN as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EPERM: ::core::ffi::c_int = super::FI_EPERM as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EREMOTEIO: ::core::ffi::c_int = super::FI_EREMOTEIO as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ERRNO_MAX: ::core::ffi::c_int = super::FI_ERRNO_MAX as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ESHUTDOWN: ::core::ffi::c_int = super::FI_ESHUTDOWN as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ETIMEDOUT: ::core::ffi::c_int = super::FI_ETIMEDOUT as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ETOOSMALL: ::core::ffi::c_int = super::FI_ETOOSMALL as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_ETRUNC: ::core::ffi::c_int = super::FI_ETRUNC as ::core::ffi::c_int;
    #[allow(missing_docs)]
    pub const FI_EWOULDBLOCK: ::core::ffi::c_int = super::FI_EWOULDBLOCK as ::core::ffi::c_int;
}
