//! What the type system rules out, checked by compiling code that breaks
//! the rules and expecting the compiler to refuse it.

#[test]
fn rules_enforced_at_compile_time() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}

#[cfg(feature = "tokio")]
#[test]
fn tokio_rules_enforced_at_compile_time() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui-tokio/*.rs");
}
