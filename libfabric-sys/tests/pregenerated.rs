//! The bindings checked in for docs.rs (`src/pregenerated/`) are the ones
//! the headers they were generated from produce. `src/pregenerated/VERSION`
//! names those headers' versions; this check runs against the same
//! versions (the project's CI runs it with the distribution's libfabric)
//! and fails, naming both, against any other. After a header update, run
//! `LIBFABRIC_SYS_REGENERATE=1 cargo build -p libfabric-sys`.
//!
//! Not shipped in the package: it is the project's own check.

fn recorded(pkg: &str) -> String {
    let text = include_str!("../src/pregenerated/VERSION");
    text.lines()
        .find_map(|l| l.strip_prefix(pkg)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("src/pregenerated/VERSION names no {pkg} version"))
        .to_string()
}

fn compare(pkg: &str, installed: &str, names: &[&str]) {
    let recorded = recorded(pkg);
    assert_eq!(
        installed, recorded,
        "the checked-in bindings come from {pkg} {recorded}, the installed headers are \
         {installed}: run this check against {recorded}, or regenerate"
    );
    for name in names {
        let generated = std::fs::read_to_string(concat!(env!("OUT_DIR"), "/").to_string() + name)
            .unwrap_or_else(|e| panic!("{name} was not generated: {e}"));
        let checked_in = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("src/pregenerated")
                .join(name),
        )
        .unwrap_or_else(|e| panic!("src/pregenerated/{name} is missing: {e}"));
        assert!(
            generated == checked_in,
            "src/pregenerated/{name} differs from the bindings {pkg} {installed}'s headers \
             produce; refresh it with `LIBFABRIC_SYS_REGENERATE=1 cargo build -p libfabric-sys`"
        );
    }
    println!("compared the checked-in bindings with {pkg} {installed}'s headers: identical");
}

#[cfg(feature = "fabric")]
#[test]
fn fabric_bindings_are_current() {
    compare(
        "libfabric",
        env!("LIBFABRIC_SYS_FABRIC_PKG_VERSION"),
        &["fabric.rs", "fabric_errno.rs"],
    );
}

#[cfg(feature = "verbs")]
#[test]
fn verbs_bindings_are_current() {
    compare(
        "libibverbs",
        env!("LIBFABRIC_SYS_VERBS_PKG_VERSION"),
        &["verbs.rs"],
    );
}
