//! The runtime of [`lockattr`](https://docs.rs/lockattr): distributed locks on
//! Redis with random owner tokens, fencing tokens, and release on every exit.
//!
//! Use it through the `lockattr` crate, which adds the `#[redis_lock]`
//! attribute and `#[derive(LockKey)]`.
//!
//! ```no_run
//! # use lockattr_runtime as lockattr; // the doctest builds without the facade
//! use lockattr::Locker;
//!
//! # fn main() -> Result<(), lockattr::LockError> {
//! let locker = Locker::new("redis://127.0.0.1:6379/")?;
//! let guard = locker.lock("report").acquire_blocking()?;
//! // ... only one process at a time gets here ...
//! guard.release_blocking()?;
//! # Ok(()) }
//! ```
//!
//! # Tracing and metrics
//!
//! The library reports through [`tracing`](https://docs.rs/tracing), every
//! span and event under the target `lockattr`: `RUST_LOG=info,lockattr=debug`
//! (with tracing-subscriber's `EnvFilter`) shows them all. They are built by
//! tracing's macros, so with no subscriber, or one that filters them out, no
//! field is formatted. Fields carry lock names, fencing tokens, durations
//! and errors; never an owner token (it can delete the lock) nor a password.
//!
//! | span | level | fields | covers |
//! |---|---|---|---|
//! | `acquire` | DEBUG | `lock` (the name); when it ends, `waited_ms` and `outcome` | one acquisition: [`LockBuilder::acquire`], [`acquire_blocking`](LockBuilder::acquire_blocking), or an annotated function's, from the call to its result |
//! | `hold` | DEBUG | `lock`, `fencing_token` | the body of a `#[redis_lock]` function: an async body is instrumented (the span is entered at each poll), a sync one runs inside it |
//!
//! `outcome` is `acquired`, `handed_over` (a release handed the lock to this
//! waiter and told it so), `timeout`, `error`, or `cancelled` (the caller
//! dropped the future). A hand-over whose notice was lost on the way is found
//! by the waiter's next check and counts as `acquired`. A nested call that
//! re-enters a lock its caller holds acquires nothing: it has a `hold` span,
//! no `acquire` span.
//!
//! A lock set ([`Locker::lock_all`], `name = [..]`) has the same spans: one
//! `acquire` whose `lock` lists its names in the order they are taken in
//! (`account:1, account:2`), ending `acquired` (a set takes all its names
//! in one last attempt, never by a hand-over), `timeout`, `error` or
//! `cancelled`; and a `hold` span whose `lock` lists the names and
//! `fencing_tokens` their tokens in the same order (`12, 7`: text, so a
//! field of its own). A lost name is a loss event of that name.
//!
//! The spans are DEBUG because there is one per lock taken and one per
//! locked call: the detail of a request's trace, not news. A service that
//! logs at INFO sees none of them, and pays nothing for them. What needs
//! attention is a WARN event:
//!
//! | event message | level | fields | when |
//! |---|---|---|---|
//! | `lock handed over by its releasing holder` | DEBUG | `lock`, `fencing_token`, `waited_ms` | a waiter was handed the lock (inside its `acquire` span) |
//! | `lock lost: <why>` | WARN | `lock`, `reason` (`expired`, `unrenewed`, `taken`, `renew_for`) | a guard first sees its lock lost: a renewal or an extension finds it gone or taken, its lease runs out, or its release finds it no longer its own; once per guard |
//! | `lock renewal stopped: ...` | INFO | `lock`, `renew_for_ms`, `left_ms` | renewal stopped because [`renew_for`](LockBuilder::renew_for) has passed since the lock was taken; the lease runs out `left_ms` later unless released first; once per guard |
//! | `could not renew the lock; retrying` | DEBUG | `lock`, `error` | a renewal of the lock failed; it is retried while the lease lasts |
//! | `could not renew locks; retrying` | WARN | `error`, `leases` | the first failed renewal round of an outage (`lock renewals reach Redis again` at INFO when it ends) |
//! | `lock force-unlocked` | WARN | `lock`, `holder`, `forced_by` (the forcing Locker's [label](LockerBuilder::label)), `host`, `pid` | [`Locker::force_unlock`] freed a held lock |
//! | `semaphore permit force-released` | WARN | `lock` (the semaphore), `fencing_token`, `holder`, `forced_by`, `host`, `pid` | [`Locker::force_unlock_permit`] freed a held permit |
//!
//! Events of other failures (a release that could not be sent, a waiter
//! that cannot reach Redis) carry `error`, and `lock` where there is one.
//!
//! ## Metrics (the `metrics` feature)
//!
//! With the `metrics` feature the library records through the
//! [`metrics`](https://docs.rs/metrics) facade (0.24): install a recorder
//! (a Prometheus exporter, for one) and these appear. Without the feature
//! the `metrics` crate is not a dependency and nothing is recorded.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `lockattr_acquisitions_total` | counter | `lock` | locks acquired (hand-overs included) |
//! | `lockattr_acquire_timeouts_total` | counter | `lock` | acquisitions that gave up: the lock stayed held for the whole acquire timeout |
//! | `lockattr_losses_total` | counter | `lock`, `reason` | guards that found their lock lost (`expired`, `unrenewed`, `taken`, `renew_for`, as the event) |
//! | `lockattr_handovers_total` | counter | `lock` | locks handed by a release to a waiting caller |
//! | `lockattr_renewal_failures_total` | counter | `lock` | renewals of a lease that failed (every retry counts) |
//! | `lockattr_wait_seconds` | histogram | `lock`, `outcome` | time spent in an acquisition, by its outcome (as the `acquire` span's) |
//! | `lockattr_hold_seconds` | histogram | `lock` | time from acquiring a lock to releasing it or dropping its guard (what a [`hold_at_least`](LockBuilder::hold_at_least) keeps of it after that is not counted) |
//! | `lockattr_held_locks` | gauge | `lock` | locks this process holds now |
//! | `lockattr_waiting_tasks` | gauge | `lock` | callers in an acquisition now (waiting for a busy lock, or on their first try) |
//!
//! The `lock` label is the lock's kind, never its full name: one series per
//! order id would swamp any metrics store.
//! - `#[redis_lock(name = "order:{order_id}")]`: the name template as
//!   written, `order:{order_id}`.
//! - `#[redis_lock]` naming the lock from a value (`name = <expression>`,
//!   or the first argument's `LockKey`): the function's path, as
//!   `module_path!()` and the function's name (`my_app::billing::settle`),
//!   since the value can name any number of locks.
//! - [`Locker::lock`]: what [`LockBuilder::kind`] says, or else the name's
//!   part before its first `:` (`order` for `order:7`), or the whole name
//!   when it has none. Callers whose names have no `:` and are many
//!   (`lock(user_id.to_string())`) must set `kind`.
//! - A lock set: one label for its acquisition and every name it holds.
//!   `name = ["account:{from}", "account:{to}"]`: the names as written,
//!   `[account:{from}, account:{to}]`; [`Locker::lock_all`]:
//!   [`LockSetBuilder::kind`], or else its names' kinds sorted without
//!   repeats, in brackets (`[account]`, `[account, order]`). A set counts
//!   one acquisition and one wait, in a series of its own (see
//!   [`LockSetBuilder::kind`] for why); each name it holds counts in
//!   `lockattr_held_locks` and `lockattr_hold_seconds`.
//!
//! A nested call that re-enters its caller's lock records nothing: it
//! acquires nothing and releases nothing.
//!
//! # Features
//!
//! None is on by default: a `redis://` URL needs no feature. The `lockattr`
//! crate has the same features and passes them on.
//!
#![doc = document_features::document_features!()]
#![forbid(unsafe_code)]

mod address;
mod backend;
mod default;
mod error;
mod guard;
mod hold;
mod holder;
mod inner;
mod inspect;
mod io;
mod key;
mod layout;
mod lease;
mod listing;
mod local;
mod locker;
mod lockset;
mod lockset_guard;
mod lost;
mod observe;
mod reentry;
mod request;
mod rwlock;
mod semaphore;
mod semaphore_inspect;
mod sync;
mod wait;
mod watchdog;

#[doc(hidden)]
pub mod __private;

/// The key layout (`layout.rs`) for the workspace's tests, so that they
/// compute every key name instead of spelling it. Not a public API: it may
/// change in any release.
#[doc(hidden)]
pub mod __layout;

/// The redis crate (redis-rs 1.x) this crate is built on, for
/// [`redis::ConnectionInfo`] and [`redis::IntoConnectionInfo`] of the same
/// version as the one [`RedisAddr`] takes.
pub use redis;

pub use address::RedisAddr;
pub use default::{default_locker, init, set_default};
pub use error::LockError;
pub use error::LostReason;
pub use guard::LockGuard;
pub use holder::Holder;
pub use inspect::{LockInfo, LockKind, ReaderInfo};
pub use key::LockKey;
pub use layout::MAX_PERMITS;
pub use listing::Listing;
pub use locker::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_FENCE_RETENTION, DEFAULT_PREFIX, DEFAULT_REDLOCK_MAX_LEASE,
    DEFAULT_REPLICA_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT, Fairness, Locker, LockerBuilder, MAX_EXPIRE,
    MAX_TIMEOUT,
};
pub use lockset::{LockSetBuilder, MAX_SET_NAMES};
pub use lockset_guard::LockSetGuard;
pub use request::{DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_EXPIRE, LockBuilder, MAX_ACQUIRE_TIMEOUT};
pub use semaphore_inspect::{PermitInfo, SemaphoreInfo};
