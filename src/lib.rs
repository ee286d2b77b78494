//! The suite that holds the Rust side against C: cross-crate tests, the
//! `pingpong`, `asyncwatch` and `rc_pingpong` programs and the benchmarks.
//!
//! The repository's README follows; its Rust examples run as doctests.
#![doc = include_str!("../README.md")]
