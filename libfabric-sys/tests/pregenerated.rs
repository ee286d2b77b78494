//! The bindings checked in for docs.rs (`src/pregenerated/`) are the ones
//! this machine's headers produce. When the installed headers change, run
//! `LIBFABRIC_SYS_REGENERATE=1 cargo build -p libfabric-sys`.

fn compare(name: &str) {
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
        "src/pregenerated/{name} differs from the bindings generated from the installed headers; \
         refresh it with `LIBFABRIC_SYS_REGENERATE=1 cargo build -p libfabric-sys`"
    );
}

#[cfg(feature = "fabric")]
#[test]
fn fabric_bindings_are_current() {
    compare("fabric.rs");
    compare("fabric_errno.rs");
}

#[cfg(feature = "verbs")]
#[test]
fn verbs_bindings_are_current() {
    compare("verbs.rs");
}
