//! Compile-time tests of `#[redis_lock]` and `#[derive(LockKey)]`.
//!
//! `tests/ui/pass` holds annotated code that must compile without warnings
//! (it is never run, so no Redis server is needed); `tests/ui/fail` holds one
//! mistake per file, with the expected compiler output next to it in a
//! `.stderr` file. Regenerate those with
//! `TRYBUILD=overwrite cargo test -p lockattr-macros --test ui`
//! and read every change.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    t.compile_fail("tests/ui/fail/*.rs");
}
