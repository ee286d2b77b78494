//! The suite that holds the Rust side against C: cross-crate tests, the
//! `pingpong` and `asyncwatch` programs and the benchmarks.
