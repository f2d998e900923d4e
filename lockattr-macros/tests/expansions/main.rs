//! The expansions of `#[redis_lock]` and `#[derive(LockKey)]` that must
//! compile: annotated code of every form, one module a file of
//! `tests/expansions/`, each under `#![deny(warnings, ...)]` so that no lint
//! fires on the user's code. Each module's `main` touches what it defines
//! and never reaches Redis (futures are made, not run; sync calls sit behind
//! `if false`).
//!
//! They are compiled here, with the workspace's own build of the facade,
//! rather than as trybuild `pass` cases: trybuild then only checks
//! (`tests/ui.rs`, the mistakes), with no second full build of the
//! dependencies.

mod attributes;
mod control_flow;
mod durations;
mod free_functions;
mod generics;
#[rustfmt::skip] // written as users write them
mod hold_at_least;
mod hygiene;
mod lockers;
mod lockset;
mod methods;
mod names;
#[rustfmt::skip] // written as users write them
mod one_line_bodies;
mod options_lease;
#[rustfmt::skip] // written as users write them
mod renew_for;
mod rwlocks;
mod semaphores;
mod send;
mod tracing_instrument;
mod traits;

#[test]
fn every_expansion_compiles_and_runs() {
    attributes::main();
    control_flow::main();
    durations::main();
    free_functions::main();
    generics::main();
    hold_at_least::main();
    hygiene::main();
    lockers::main();
    lockset::main();
    methods::main();
    names::main();
    one_line_bodies::main();
    options_lease::main();
    renew_for::main();
    rwlocks::main();
    semaphores::main();
    send::main();
    tracing_instrument::main();
    traits::main();
}
