//! Compile-time tests of `#[redis_lock]` and `#[derive(LockKey)]`.
//!
//! `tests/ui/fail` holds one mistake per file, with the expected compiler
//! output next to it in a `.stderr` file. Regenerate those with
//! `TRYBUILD=overwrite cargo test -p lockattr-macros --test ui`
//! and read every change. The code that must compile is in
//! `tests/expansions/`, built with the workspace, so that trybuild only
//! checks here (no second full build of the dependencies).

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
}
