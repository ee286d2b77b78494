//! The bindings checked in for docs.rs (`src/pregenerated/`) are the ones
//! the headers they were generated from produce. `src/pregenerated/VERSION`
//! names those headers' version; the check compares against the same
//! version and fails, naming both, against any other. It is the project's
//! own check (not shipped in the package): its CI runs it with the
//! distribution's libraries (`cargo test -- --ignored bindings_are_current`).

include!(concat!(env!("OUT_DIR"), "/pregenerated_check.rs"));

#[test]
#[ignore = "needs the exact library version src/pregenerated/VERSION names; the project's CI runs it"]
fn bindings_are_current() {
    assert_pregenerated_current();
}
