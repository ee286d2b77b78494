//! Compiles the C programs the suite measures the Rust side against.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
}
