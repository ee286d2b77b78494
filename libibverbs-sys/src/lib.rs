//! Raw FFI to rdma-core's libibverbs (`infiniband/verbs.h`).
//!
//! The bindings are generated at build time by bindgen from the headers
//! installed on the build machine, found with pkg-config. Every `static
//! inline` function of `verbs.h` (`ibv_poll_cq`, `ibv_post_send`,
//! `ibv_req_notify_cq`, `___ibv_query_port`, ...) is reached through a C
//! shim that bindgen writes and that is compiled against the same header,
//! so no inline body is ported to Rust by hand and none can drift from the
//! installed library. Types that `libc` defines (`pthread_mutex_t`, ...)
//! are `libc`'s.
//!
//! The crate declares `links = "ibverbs"`: cargo refuses a second crate in
//! one build that links libibverbs too. This crate is `unsafe` to use by
//! nature; `ibverbs-async` is a safe layer over it.
//!
//! # Building
//! Needs pkg-config, libclang and the development package:
//! `apt-get install pkg-config libclang-dev libibverbs-dev` (Fedora/RHEL:
//! `pkgconf-pkg-config clang-devel rdma-core-devel`). A missing one stops
//! the build with a message naming the package to install.
//!
//! With `DOCS_RS` set (as on docs.rs), the checked-in bindings in
//! `src/pregenerated/` are documented and nothing is linked. Regenerate them
//! from the installed headers with
//! `LIBIBVERBS_SYS_REGENERATE=1 cargo build -p libibverbs-sys`.
#![no_std]
#![allow(non_upper_case_globals, non_camel_case_types, non_snake_case)]
#![allow(clippy::all, rustdoc::all, missing_docs, unsafe_op_in_unsafe_fn)]
#![allow(clippy::undocumented_unsafe_blocks, clippy::pedantic)]

include!(concat!(env!("OUT_DIR"), "/verbs.rs"));

/// The README's examples, run as doctests.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
