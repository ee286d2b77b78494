//! Raw FFI to libfabric (OFI, the OpenFabrics Interfaces).
//!
//! The bindings are generated at build time by bindgen from the headers
//! installed on the build machine, found with pkg-config. Every `static
//! inline` function of those headers (`fi_close`, `fi_eq_read`,
//! `fi_cq_read`, `fi_trywait`, `ibv_poll_cq`, ...) is reached through a C
//! shim that bindgen writes and that is compiled against the same headers, so
//! no inline body is ported to Rust by hand and none can drift from the
//! installed library. Headers: `rdma/fabric.h`, `fi_errno.h`, `fi_domain.h`,
//! `fi_eq.h`, `fi_cm.h`, `fi_endpoint.h`, `fi_rma.h`, `fi_tagged.h` of
//! libfabric 1.17 or newer (2.x included); everything is in [`fabric`].
//!
//! The package is `ofi-sys` (the names `libfabric` and `libfabric-sys` on
//! crates.io belong to an unrelated project); its library is named
//! `libfabric_sys`, so Rust code writes `libfabric_sys::fabric::...`. It
//! declares `links = "fabric"`: cargo refuses a second crate in one build
//! that links libfabric too. libibverbs is bound by `libibverbs-sys`.
//!
//! Constants carry the types C uses them with: capability, mode and
//! operation flags are `u64`, `FI_MR_*` are `c_int` (like
//! `fi_domain_attr::mr_mode`), and every error code is in
//! [`fabric::errno`] as a `c_int`. The function-like macros `FI_VERSION`,
//! `FI_MAJOR`, `FI_MINOR`, `FI_VERSION_GE` and `FI_VERSION_LT` are
//! [`const fn`s](fabric::FI_VERSION). Types that `libc` defines (`iovec`,
//! `pollfd`, `timespec`, `pthread_mutex_t`, ...) are `libc`'s.
//!
//! This crate is `unsafe` to use by nature; `libfabric-safe` is the safe
//! layer over it.
//!
//! # Building
//! Needs pkg-config, libclang and the development package:
//! `apt-get install pkg-config libclang-dev libfabric-dev` (Fedora/RHEL:
//! `pkgconf-pkg-config clang-devel libfabric-devel`). A missing one stops
//! the build with a message naming the package to install, the version
//! found and the version required.
//!
//! With `DOCS_RS` set (as on docs.rs), the checked-in bindings in
//! `src/pregenerated/` are documented and nothing is linked. Regenerate them
//! from the installed headers with
//! `OFI_SYS_REGENERATE=1 cargo build -p ofi-sys`.
#![no_std]
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case)]
#![allow(clippy::all, rustdoc::all, missing_docs, unsafe_op_in_unsafe_fn)]

/// libfabric: `rdma/fabric.h` and the headers it is used with.
pub mod fabric {
    #![allow(clippy::undocumented_unsafe_blocks, clippy::pedantic)]
    include!(concat!(env!("OUT_DIR"), "/fabric.rs"));
    include!(concat!(env!("OUT_DIR"), "/fabric_errno.rs"));

    /// `FI_VERSION(major, minor)`: the version number libfabric compares.
    #[must_use]
    pub const fn FI_VERSION(major: u32, minor: u32) -> u32 {
        (major << 16) | minor
    }

    /// `FI_MAJOR(version)`.
    #[must_use]
    pub const fn FI_MAJOR(version: u32) -> u32 {
        version >> 16
    }

    /// `FI_MINOR(version)`.
    #[must_use]
    pub const fn FI_MINOR(version: u32) -> u32 {
        version & 0xFFFF
    }

    /// `FI_VERSION_GE(v1, v2)`: `v1` is `v2` or newer.
    #[must_use]
    pub const fn FI_VERSION_GE(v1: u32, v2: u32) -> bool {
        FI_MAJOR(v1) > FI_MAJOR(v2)
            || (FI_MAJOR(v1) == FI_MAJOR(v2) && FI_MINOR(v1) >= FI_MINOR(v2))
    }

    /// `FI_VERSION_LT(v1, v2)`: `v1` is older than `v2`.
    #[must_use]
    pub const fn FI_VERSION_LT(v1: u32, v2: u32) -> bool {
        !FI_VERSION_GE(v1, v2)
    }

    /// The API version of the headers these bindings were generated from:
    /// `FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)`. Request this version
    /// from `fi_getinfo`.
    pub const HEADER_VERSION: u32 = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);

    /// The version of the libfabric loaded at run time (`fi_version()`).
    ///
    /// When it is older than [`HEADER_VERSION`], `fi_getinfo` with
    /// `HEADER_VERSION` fails with `-FI_ENOSYS`.
    #[must_use]
    pub fn runtime_version() -> u32 {
        // SAFETY: fi_version(3) takes no arguments and only returns the
        // library's version; it may be called at any time.
        unsafe { fi_version() }
    }
}

/// The README's examples, run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
