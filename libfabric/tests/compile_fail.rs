//! Misuse that the type system rules out: each file under tests/ui must fail
//! to compile, with the error recorded next to it.
#[test]
fn misuse_does_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
