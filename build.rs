//! Compiles the C programs the suite measures the Rust side against:
//! `bench/baselines.c`, built with the `cc` crate against the libfabric
//! headers pkg-config finds (the same ones `ofi-sys` is generated
//! from), and linked into the benchmark and the tests as `libbaselines.a`.
//! The C side needs no libfabric symbol of its own: every call it makes is a
//! `static inline` of the headers; `ofi-sys` links libfabric.
use std::process::exit;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=bench/baselines.c");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");

    if std::env::var_os("DOCS_RS").is_some() {
        // Documentation builds have no native libraries.
        return;
    }

    let fabric = match pkg_config::Config::new()
        .atleast_version("1.17")
        .probe("libfabric")
    {
        Ok(lib) => lib,
        Err(e) => {
            eprintln!(
                "error: the C baselines need libfabric >= 1.17 and its headers, found with \
                 pkg-config.\n  Debian/Ubuntu: apt-get install pkg-config libfabric-dev\n  \
                 Fedora/RHEL:   dnf install pkgconf-pkg-config libfabric-devel\n\n{e}"
            );
            exit(1);
        }
    };

    let mut build = cc::Build::new();
    build
        .file("bench/baselines.c")
        .std("c11")
        .define("_POSIX_C_SOURCE", "200809L")
        .warnings(true)
        .extra_warnings(true)
        .flag_if_supported("-Wno-unused-parameter");
    for dir in &fabric.include_paths {
        build.include(dir);
    }
    // Linked by path into the targets that call it (the benchmark and the
    // tests), not bundled into the library, which does not use it.
    build.cargo_metadata(false).compile("baselines");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let archive = std::path::Path::new(&out).join("libbaselines.a");
    for kind in ["bins", "tests"] {
        println!("cargo:rustc-link-arg-{kind}={}", archive.display());
        // The wake-up baselines run a writer thread.
        println!("cargo:rustc-link-arg-{kind}=-lpthread");
    }
}
