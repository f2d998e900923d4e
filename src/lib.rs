//! Distributed locks on Redis, as one attribute.
//!
//! ```no_run
//! use lockattr::{redis_lock, LockError};
//!
//! #[redis_lock(name = "order:{order_id}", expire = 30, acquire_time = 5)]
//! async fn pay(order_id: u64, amount: u64) -> Result<u64, LockError> {
//!     // Only one caller in the whole deployment runs this for a given order.
//!     Ok(amount)
//! }
//!
//! # #[tokio::main] async fn main() -> Result<(), LockError> {
//! lockattr::init("redis://127.0.0.1:6379/")?; // once, at start-up
//! pay(7, 100).await?;
//! # Ok(()) }
//! ```
//!
//! `#[redis_lock]` rewrites the function: it takes the lock (waiting up to
//! `acquire_time` while someone else holds it), runs the body, and releases
//! the lock on every way out: a value, `return`, `?`, a panic, or a future
//! dropped mid-body. When the lock cannot be had the body does not run and
//! the function returns `Err(LockError::Timeout { .. }.into())`. When the
//! lock is lost while the body runs (its lease ran out, or Redis lost it),
//! the body runs to its end and the function returns
//! `Err(LockError::Lost { .. }.into())` instead of the body's `Ok`, saying
//! when and why (see [`on_lost`](#long-work-renewal-and-the-lost-signal)).
//!
//! # Options
//!
//! | option | value | default |
//! |---|---|---|
//! | `name` | `"text"`; a format string capturing arguments, `"order:{order_id}"` (each capture must name an argument); or any expression whose value implements [`LockKey`] (`name = key_for(user, n + 1)`); or an array of these (see [Several names at once](#several-names-at-once)) | the first argument's [`LockKey`] (`self` included); the function's path when it has no arguments |
//! | `expire` | the lease: seconds (`30`, `0.5`), a string with a unit (`"250ms"`, `"1.5s"`, `"2m"`, `"1h"`; units ns, us, ms, s, m, h), or any `Duration` expression; not zero | 10 s |
//! | `acquire_time` | how long to wait while someone else holds the lock, same forms; `0` makes exactly one attempt | 10 s |
//! | `locker` | an expression that coerces to `&Locker`, evaluated per call; it may use the arguments (`locker = &self.locks`) | the process default ([`init`], [`set_default`]) |
//! | `guard` | a name to bind the held `&LockGuard` to inside the body (`guard = g`, then `g.fencing_token()`, `g.is_lost()`) | none |
//! | `renew` | renew the lease every `expire / 3` while the body runs (`renew`, `renew = true`), so `expire` only bounds how long a crashed holder blocks others; see [Long work](#long-work-renewal-and-the-lost-signal) | off |
//! | `renew_for` | renew, but for at most this long after the lock was taken; then the lease runs out on its own and the guard turns lost (`on_lost` applies). Same forms as `expire`; turns `renew` on; not zero, not over 30 days, not with `renew = false`; see [Capping renewal](#capping-renewal-renew_for) | renew for as long as the body runs |
//! | `on_lost` | what happens when the lock is lost mid-body: `"error"` (the body runs to its end, then the function returns `Err(LockError::Lost { .. }.into())` instead of an `Ok`), `"abort"` (async only: the body is dropped at its next `.await`) or `"ignore"` (the body's result is returned; the loss is only a WARN event and `is_lost()`); see [Long work](#long-work-renewal-and-the-lost-signal) | `"error"` |
//! | `reentrant` | async: `false` makes a nested call on a lock the call chain holds wait like a stranger. Sync: `true` (or `reentrant` alone) re-enters a lock that a sync call with `reentrant` holds on the same thread, counted per thread, and only the outermost call releases; another thread never re-enters. Not for sync functions called from rayon or any pool that runs other jobs on a thread blocked in `join`; see [Reentrancy](#reentrancy) | `true` for an `async fn` (nested calls go straight in, only the outermost releases), `false` for a sync one |
//! | `hold_at_least` | keep the lock at least this long after it was taken, even when the body finishes sooner (ShedLock's `lockAtLeastFor`); same forms as `expire`, not zero, no longer than the lease (`expire`, or 10 s when it is not given); see [Scheduled jobs](#scheduled-jobs) | none |
//! | `permits` | a semaphore of this many permits instead of a lock: an integer literal from 1 to 256, or a `u32` expression; not with `reentrant`; see [Semaphores](#semaphores) | none: a lock |
//! | `mode` | a side of a read-write lock instead of a lock: `"read"` (held with other readers, never with a writer) or `"write"` (held alone); a string literal; not with `permits`, several names or `reentrant` (a read-write lock is never re-entered: a nested call takes a hold of its own); see [Read-write locks](#read-write-locks) | none: a lock |
//!
//! Literal durations and format strings are checked at compile time;
//! `docs/options.md` in the repository lists every mistake the attribute
//! refuses, and explains scheduled jobs and how names are formed.
//!
//! The function must return `Result<T, E>` with `E: From<LockError>`.
//!
//! # Several names at once
//!
//! `name = [..]` takes every name or none, so callers locking the same
//! names in different orders cannot deadlock; the guard is a
//! [`LockSetGuard`] with each name's own fencing token. The builder is
//! [`Locker::lock_all`]. One server, Redis Cluster and Redlock all take
//! sets; see "Several names at once" in `docs/kinds.md` for fairness,
//! reentrancy and how each deployment takes them.
//!
//! ```no_run
//! use lockattr::{redis_lock, LockError};
//!
//! #[redis_lock(name = ["account:{from}", "account:{to}"], expire = 30, guard = g)]
//! async fn transfer(from: u64, to: u64, amount: u64) -> Result<u64, LockError> {
//!     let _to_token = g.fencing_token_of(&format!("account:{to}"));
//!     Ok(amount)
//! }
//! ```
//!
//! # Naming locks from values
//!
//! ```no_run
//! use lockattr::{redis_lock, LockError, LockKey};
//!
//! #[derive(LockKey)]
//! #[lock_key(prefix = "account")]
//! struct Account {
//!     #[lock_key]
//!     id: u64,
//!     balance: i64,
//! }
//!
//! impl Account {
//!     #[redis_lock] // the lock "account:<id>", from self
//!     fn withdraw(&mut self, amount: i64) -> Result<(), LockError> {
//!         self.balance -= amount;
//!         Ok(())
//!     }
//! }
//! ```
//!
//! # Long work: renewal and the lost signal
//!
//! A lease is a bet on how long the body takes. With `renew`, the lease is
//! kept alive while the body runs: every `expire / 3` it is raised back to
//! `expire` (one task per [`Locker`] renews all its locks, several per round
//! trip), and renewal stops before the function returns. `expire` then only
//! says how soon the lock of a crashed process frees itself.
//!
//! A lock can still be lost mid-body: a renewal finds the key deleted or
//! taken (a Redis restart without persistence, a failover, an operator), no
//! renewal gets through for a whole lease (Redis down or frozen), or, without
//! `renew`, the lease simply runs out. The guard notices
//! ([`LockGuard::is_lost`], [`LockGuard::lost`]); `on_lost` says what the
//! function does about it:
//!
//! | `on_lost` | the body | the function returns |
//! |---|---|---|
//! | `"error"` (the default) | runs to its end | `Err(LockError::Lost { .. }.into())` instead of an `Ok`; a body's own `Err` is kept |
//! | `"abort"` (async only) | is dropped at its next `.await` once the loss is seen (within `expire / 3` with `renew`) | `Err(LockError::Lost { .. }.into())` |
//! | `"ignore"` | runs to its end | the body's result; the loss is only a WARN event and [`LockGuard::is_lost`] |
//!
//! The error says when the lock was lost (`lost_after`, counted from when
//! it was taken), why (`reason`), and, after a body that ran to its end,
//! for how long the body ran on without it (`ran_on`); a loss first found
//! by the release after the body (a lock deleted under a body that does not
//! renew) counts as lost at that release. It reaches the caller the way an
//! acquire error does, so it needs no other return type:
//! `Result<T, E>` with `E: From<LockError>`.
//!
//! `"abort"` stops work that has become unsafe, but only at an `.await`, and
//! it drops the body half-way, like any cancelled future: use it for work
//! that is safe to cancel. `"error"` never interrupts the body and tells the
//! caller afterwards, when the damage, if any, is done. `"ignore"` is for a
//! body that watches for the loss itself (`guard = g`, then `g.lost()`) and
//! reports it in its own result. Neither can undo a
//! write made after the lease ended and before the loss was seen: only the
//! storage can refuse such a write, by checking the fencing token (see
//! `docs/guarantees.md`, and `examples/fencing.rs`).
//!
//! ```no_run
//! use lockattr::{redis_lock, LockError};
//!
//! #[redis_lock(name = "reindex:{shard}", expire = 15, renew, on_lost = "abort")]
//! async fn reindex(shard: u32) -> Result<(), LockError> {
//!     // May take an hour; stopped at the next .await if the lock goes.
//!     Ok(())
//! }
//! ```
//!
//! ## Capping renewal: `renew_for`
//!
//! `renew` keeps a lock for as long as the body runs, so a body stuck on a
//! call that never returns holds it forever. `renew_for` bounds that:
//! renewal goes on as with `renew` (which it turns on), but stops once
//! `renew_for` has passed since the lock was taken; the lease then runs out
//! on its own (at most one `expire` later), the guard turns lost with
//! [`LostReason::RenewFor`], and `on_lost` applies: `"abort"` drops the
//! body, `"error"` (the default) turns its `Ok` into `Err(Lost)`.
//!
//! ```no_run
//! use lockattr::{redis_lock, LockError};
//!
//! #[redis_lock(name = "import:{feed}", expire = 30, renew_for = "1h", on_lost = "abort")]
//! async fn import(feed: u32) -> Result<(), LockError> {
//!     // Renewed for up to an hour; a hung import gives the lock up about
//!     // 30 s after that, and is dropped at its next .await.
//!     Ok(())
//! }
//! ```
//!
//! A body that ends sooner releases as usual, also after the cap while the
//! lease still lasts. [`LockGuard::extend`] is not capped: an explicit
//! extension still raises the lease after `renew_for` (renewal stays
//! stopped). A reentrant nested call's `renew_for` changes nothing: the
//! lease keeps the cap of the call that took it (or none), and the nested
//! call starts no renewal of its own. `renew_for = 0`, under a millisecond,
//! over 30 days, or with `renew = false` (nothing to cap) are compile
//! errors; a `Duration` expression is checked when the function is called.
//! The builder's [`LockBuilder::renew_for`] does the same by hand.
//!
//! ```compile_fail
//! #[lockattr::redis_lock(name = "import", renew = false, renew_for = "1h")] // nothing to cap
//! fn import() -> Result<(), lockattr::LockError> { Ok(()) }
//! ```
//!
//! # Scheduled jobs
//!
//! A job every replica runs on a timer should run once per period. Name
//! the lock after the period and make one attempt (`acquire_time = 0`):
//! the first replica runs the job, the others skip it. A quick job would
//! release the lock before a replica whose timer fires a little late asks
//! for it, and that replica would run it again; `hold_at_least`
//! (ShedLock's `lockAtLeastFor`) keeps the lock until at least that long
//! after the request that took it was sent:
//!
//! ```no_run
//! use lockattr::{redis_lock, LockError};
//!
//! #[redis_lock(name = "report:{minute}", expire = 60, hold_at_least = 30, acquire_time = 0)]
//! async fn build_report(minute: u64) -> Result<(), LockError> {
//!     // once per minute across the replicas, however fast it is
//!     Ok(())
//! }
//! ```
//!
//! Every way out of the body still releases the lock, as an expiry at
//! that moment: a release before the hold has passed sets the lock's time
//! left to what remains of the hold, by Redis's clock, and the lock then
//! expires (waiters are told when, and take it then); a release after that
//! is the usual one. With `renew`, renewal runs while the body does and
//! stops at the release. The hold must fit in the lease (`expire`, 10 s by
//! default), so a replica that crashes holding the lock keeps it that long
//! too; a longer literal hold is a compile error, and a longer `Duration`
//! expression is refused with [`LockError::InvalidInput`] when the function
//! is called. A reentrant nested call with a hold of its own keeps the
//! lock that long after it entered, and never shortens the outer call's
//! hold. The builder's [`LockBuilder::hold_at_least`] does the same by
//! hand; `examples/scheduled.rs` runs three replicas with skewed clocks.
//!
//! ```compile_fail
//! #[lockattr::redis_lock(name = "report", expire = 30, hold_at_least = 45)] // longer than the lease
//! fn report() -> Result<(), lockattr::LockError> { Ok(()) }
//! ```
//!
//! # Reentrancy
//!
//! An async annotated function called while its caller already holds the
//! same lock (same Redis, same key prefix, same name) goes straight in: no
//! round trip, no deadlock, the same guard and fencing token, and only the
//! outermost call releases.
//!
//! ```no_run
//! use lockattr::{redis_lock, LockError};
//!
//! #[redis_lock(name = "account:{id}")]
//! async fn transfer(id: u64, to: u64, amount: u64) -> Result<(), LockError> {
//!     withdraw(id, amount).await?; // the same lock: re-entered, not waited for
//!     Ok(())
//! }
//!
//! #[redis_lock(name = "account:{id}")]
//! async fn withdraw(id: u64, amount: u64) -> Result<(), LockError> {
//!     Ok(())
//! }
//! ```
//!
//! "The caller" is the call chain, and it is not the thread: a task moves
//! between threads at every `.await`, and one thread takes turns running
//! many tasks, so a lock held "by the thread" would let an unrelated task on
//! it walk into the critical section. Nor is it simply the task (`join!`
//! runs two branches in one task). The held locks travel with the body's
//! future instead: code awaited inside the body sees them, however deep; a
//! task it spawns does not, and waits for the lock like anyone else. A
//! nested call on a lock that was lost meanwhile returns
//! `Err(LockError::Lost { .. })` without running.
//!
//! The nested call's own `expire` and `renew` still count, as they would
//! for a lock of its own. When its `expire` (10 s if not given) is longer
//! than the held lease has left, the lease is first raised to it: one round
//! trip, only then; asking for less changes nothing. With `renew`, a lease
//! its outer call does not renew is renewed while the nested body runs (as
//! the outer call's lease would be with `renew`: back to its `expire`,
//! every third of it), and is the outer call's again, unrenewed, once the
//! nested call returns or is dropped.
//!
//! **Synchronous functions re-enter only when asked to.** A thread waiting
//! inside a locked body still runs other code: rayon's `par_iter` and `join`
//! run other jobs of the pool on the waiting thread (work stealing), and so
//! can other pools. To that thread a job that wants the same lock looks
//! exactly like a nested call, and letting it in would run two critical
//! sections of one lock at once. So by default a sync annotated function
//! called while the lock is held, from a sync body or from an async one,
//! waits for it like any other caller, and returns
//! `Err(LockError::Timeout { .. })` after its `acquire_time`.
//!
//! `reentrant = true` (or `reentrant` alone) opts a sync function in, as
//! parking_lot's `ReentrantMutex` does for a thread: a lock that a sync call
//! with `reentrant` holds is re-entered by a nested sync call with
//! `reentrant` *on the same thread*, at once, with the same guard, lease and
//! fencing token, and no round trip. Nested calls are counted per thread;
//! only the outermost call releases, however the nested ones end (a value,
//! `return`, `?`, a panic caught in the body), and a panic in the outermost
//! body releases as always. Another thread never re-enters: a thread the
//! body spawns, or any other, waits like a stranger. Both calls must ask: a
//! lock held by a sync call without `reentrant` (or by an async body) is
//! not re-entered by a sync call, nor a lock held by a sync call re-entered
//! by one without it. The nested call's own `expire`, `renew` and
//! `hold_at_least` count as on the async path, and a lock lost meanwhile is
//! not re-entered (`Err(LockError::Lost { .. })`). Sets (`name = [..]`)
//! re-enter the same way.
//!
//! ```no_run
//! use lockattr::{redis_lock, LockError};
//!
//! #[redis_lock(name = "account:{id}", reentrant = true)]
//! fn transfer(id: u64, amount: u64) -> Result<(), LockError> {
//!     withdraw(id, amount)?; // the same lock, on this thread: re-entered
//!     Ok(())
//! }
//!
//! #[redis_lock(name = "account:{id}", reentrant = true)]
//! fn withdraw(id: u64, amount: u64) -> Result<(), LockError> {
//!     Ok(())
//! }
//! ```
//!
//! **The work-stealing hazard.** Reentry per thread cannot tell a nested
//! call from another job that the thread runs while it waits. With rayon
//! (`join`, `scope`, `par_iter` and everything built on them), or any pool
//! that runs other jobs on a thread blocked in `join`, a job for the same
//! lock may run on the thread that holds it, mid-body, and would re-enter
//! the lock while the first critical section is only half done. Do not put
//! `reentrant = true` on sync functions that are called from such pools, or
//! whose locked bodies wait on one; keep those non-reentrant (they then wait
//! for the lock, and time out), or make them `async`.
//!
//! `reentrant = false` turns reentry off for one async function: it takes
//! the lock like a stranger would, so a nested call waits for itself until
//! its `acquire_time` ends, as with a non-reentrant lock (what a sync
//! function does by default). Guards taken with [`Locker::lock`] are not
//! seen by annotated functions. A semaphore (`permits`) or a read-write
//! lock (`mode`) is never re-entered; `reentrant` with either is a compile
//! error:
//!
//! ```compile_fail
//! #[lockattr::redis_lock(name = "gpu", permits = 4, reentrant)] // a semaphore is never re-entered
//! fn train() -> Result<(), lockattr::LockError> { Ok(()) }
//! ```
//!
//! # Semaphores
//!
//! `permits = N` lets up to N calls hold the name at once, each with its
//! own guard, lease and fencing token; waiters are served in order and
//! woken by releases. [`Locker::semaphore`] is the builder form. Every
//! caller of one name must give the same N ([`LockError::PermitsMismatch`]
//! otherwise); a semaphore is never re-entered; one server and a Redis
//! Cluster are supported, a Redlock Locker refuses semaphores.
//!
//! ```no_run
//! use lockattr::{LockError, Locker, redis_lock};
//! use std::time::Duration;
//!
//! #[redis_lock(name = "gpu", permits = 4, expire = 30, renew)]
//! async fn train(job: u64) -> Result<(), LockError> {
//!     Ok(()) // at most 4 of these run at once
//! }
//!
//! # async fn by_hand(locker: &Locker) -> Result<(), LockError> {
//! let permit = locker
//!     .semaphore("gpu", 4)
//!     .expire(Duration::from_secs(30))
//!     .acquire()
//!     .await?;
//! permit.release().await?;
//! # Ok(()) }
//! ```
//!
//! # Read-write locks
//!
//! `mode = "read"` lets any number of calls hold the name at once, none
//! while a `mode = "write"` call holds it; a writer is alone. The rest of
//! the attribute is a lock's: the name, `expire`, `renew`, `renew_for`,
//! `hold_at_least`, `on_lost`, `guard` and `locker` work as they do there,
//! on sync and async functions. [`Locker::read_lock`] and
//! [`Locker::write_lock`] are the builder forms. A writer's guard has a
//! fencing token of its own; a reader's is the last write's. A read-write
//! hold is never re-entered: a nested call takes a hold of its own, so a
//! writer that reads its own name in a nested call waits on itself (call an
//! un-annotated function from the body instead). One server and a Redis
//! Cluster are supported, a Redlock Locker refuses read-write locks.
//!
//! ```no_run
//! use lockattr::{LockError, redis_lock};
//!
//! #[redis_lock(name = "catalog:{shop}", mode = "read", expire = 30, renew)]
//! async fn show(shop: u64, item: u64) -> Result<(), LockError> {
//!     Ok(()) // with other readers of this shop's catalog, never with a writer
//! }
//!
//! #[redis_lock(name = "catalog:{shop}", mode = "write", expire = 30, guard = g)]
//! fn reprice(shop: u64) -> Result<u64, LockError> {
//!     Ok(g.fencing_token()) // alone: no reader, no other writer
//! }
//! ```
//!
//! `mode` takes `"read"` or `"write"` only, and not with `permits`, several
//! names or `reentrant`; a near miss names the mode meant:
//!
//! ```compile_fail
//! #[lockattr::redis_lock(name = "catalog", mode = "shared")] // did you mean `mode = "read"`?
//! fn show() -> Result<(), lockattr::LockError> { Ok(()) }
//! ```
//!
//! # Redlock, Redis Cluster, Sentinel, TLS
//!
//! `locker = ...` takes any [`Locker`]: one server ([`Locker::new`]),
//! independent masters locked by majority ([`Locker::redlock`]), a
//! Redis Cluster ([`Locker::cluster`]) or the master of a Sentinel group
//! ([`Locker::sentinel`], which follows failovers). The attribute and the
//! guard do not change. Servers are URLs or `redis::ConnectionInfo`s
//! ([`RedisAddr`]); `rediss://` URLs need the `tls-rustls` or
//! `tls-native-tls` feature, and
//! [`tls_root_ca`](LockerBuilder::tls_root_ca) /
//! [`tls_client_auth`](LockerBuilder::tls_client_auth) set a private CA and
//! a client certificate.
//!
//! ```no_run
//! use lockattr::{redis_lock, LockError, Locker};
//! use std::sync::LazyLock;
//!
//! static REDLOCK: LazyLock<Locker> = LazyLock::new(|| {
//!     Locker::redlock(["redis://10.0.0.1/", "redis://10.0.0.2/", "redis://10.0.0.3/"])
//!         .expect("valid URLs")
//! });
//!
//! #[redis_lock(name = "invoice:{id}", locker = &REDLOCK, expire = 30)]
//! async fn bill(id: u64) -> Result<(), LockError> {
//!     Ok(())
//! }
//! ```
//!
//! A Redlock asks all nodes at once, so an acquisition costs about one
//! round trip; a dead or frozen node costs at most the
//! [node timeout](LockerBuilder::node_timeout). A node that restarted less
//! than a lease ago does not vote
//! ([`delay_restarted_nodes`](LockerBuilder::delay_restarted_nodes)).
//! Its fencing tokens are the largest counter of the granting majority,
//! written back to that majority when the counters differ, so they keep
//! increasing from one owner to the next; "Fencing on Redlock" in
//! `docs/deployments.md` says why a single node's counter would not, and
//! what the tokens assume.
//!
//! # Tracing and metrics
//!
//! Every acquisition is an `acquire` span (DEBUG, target `lockattr`) with
//! the lock's name and, when it ends, `waited_ms` and `outcome`
//! (`acquired`, `handed_over`, `timeout`, `error`, `cancelled`); the body
//! of an annotated function runs in a `hold` span with `lock` and
//! `fencing_token`; a loss, a forced unlock and failing renewals are WARN
//! events. With the `metrics` feature, counters, histograms and gauges
//! (`lockattr_acquisitions_total`, `lockattr_wait_seconds`,
//! `lockattr_held_locks`, ...) go to the `metrics` facade, labelled `lock`
//! by the name template (`"order:{order_id}"`), never by the full name;
//! [`LockBuilder::kind`] sets that label for locks taken with
//! [`Locker::lock`]. The
//! [runtime crate's documentation](https://docs.rs/lockattr-runtime/latest/lockattr_runtime/#tracing-and-metrics)
//! lists every span, event, field and metric; `docs/operations.md` shows
//! how to read them in production.
//!
//! # Features
//!
//! None is on by default: a `redis://` URL needs no feature.
//!
#![doc = document_features::document_features!()]
//!
//! # The code the attribute stands for
//!
//! ```no_run
//! # use lockattr::{LockError, Locker};
//! # use std::time::Duration;
//! # fn pay_body(order_id: u64) -> Result<(), LockError> { Ok(()) }
//! fn pay(order_id: u64) -> Result<(), LockError> {
//!     let locker: &Locker = lockattr::default_locker()?;
//!     let _guard = locker
//!         .lock(format!("order:{order_id}"))
//!         .expire(Duration::from_secs(30))
//!         .acquire_timeout(Duration::from_secs(5))
//!         .acquire_blocking()?;
//!     pay_body(order_id) // the guard's Drop releases the lock
//! }
//! ```
//!
//! Mistakes are compile errors at the offending token:
//!
//! ```compile_fail
//! #[lockattr::redis_lock(name = "order:{order_id}", expire = 0)] // `expire` cannot be zero
//! fn pay(order_id: u64) -> Result<(), lockattr::LockError> { Ok(()) }
//! ```
#![forbid(unsafe_code)]

/// Takes a Redis lock around a function's body: the lock is taken before
/// the body runs and released on every way out (a value, `return`, `?`, a
/// panic, a future dropped mid-body).
///
/// A lock lost while the body runs makes the function return
/// `Err(LockError::Lost { .. }.into())` once the body ends, instead of its
/// `Ok`; `on_lost = "ignore"` returns the body's result instead, and
/// `on_lost = "abort"` drops an async body at its next `.await` (see
/// [Long work](crate#long-work-renewal-and-the-lost-signal)).
///
/// ```no_run
/// #[lockattr::redis_lock(name = "report:{day}", expire = "2m", acquire_time = 0)]
/// fn build_report(day: u32) -> Result<(), lockattr::LockError> {
///     Ok(()) // one process at a time builds a given day's report
/// }
/// ```
///
/// # Options
///
/// Every option may be left out; `#[redis_lock]` alone names the lock from
/// the first argument's [`LockKey`]. The [crate documentation](crate#options)
/// has the table with every accepted form.
///
/// - `name`: the lock's name: `"text"`, a format string over the arguments
///   (`"order:{order_id}"`, checked at compile time), an expression whose
///   value implements [`LockKey`], or `[..]` of these to take several names,
///   all or none ([Several names at once](crate#several-names-at-once)).
/// - `expire`: the lease, after which a crashed holder's lock frees itself:
///   seconds (`30`, `0.5`), `"250ms"`/`"2m"`, or a `Duration`. Default 10 s.
/// - `acquire_time`: how long to wait while the lock is busy; `0` makes one
///   attempt. Same forms. Default 10 s.
/// - `locker`: the [`Locker`] to use (`locker = &self.locks`). Default: the
///   process's, from [`init`] or [`set_default`].
/// - `guard`: binds the held guard to a name inside the body
///   (`guard = g`, then `g.fencing_token()`).
/// - `renew`, `renew_for`: keep the lease alive while the body runs (for at
///   most `renew_for`); see [Long work](crate#long-work-renewal-and-the-lost-signal).
/// - `on_lost`: what a lock lost mid-body does to the body and to the result;
///   see [Long work](crate#long-work-renewal-and-the-lost-signal).
/// - `reentrant`: whether a nested call re-enters a lock its caller holds:
///   yes by default for an `async fn`, opt-in for a sync one; see
///   [Reentrancy](crate#reentrancy).
/// - `hold_at_least`: keep the lock at least this long, for jobs run on a
///   timer ([Scheduled jobs](crate#scheduled-jobs)).
/// - `permits = N`: a semaphore of N permits instead of a lock
///   ([Semaphores](crate#semaphores)).
/// - `mode = "read"` / `"write"`: a side of a read-write lock instead of a
///   lock ([Read-write locks](crate#read-write-locks)).
///
/// # Errors
///
/// The function must return `Result<T, E>` with `E: From<LockError>`. Besides
/// the body's own errors, it returns `Err(e.into())` with `e` a
/// [`LockError`]:
///
/// - [`Timeout`](LockError::Timeout): the lock stayed busy for the whole
///   `acquire_time`.
/// - [`Connection`](LockError::Connection) or [`Redis`](LockError::Redis):
///   Redis could not be reached in time, or refused the request (ACL rules,
///   a foreign value at the lock's key, a read-only replica).
/// - [`NotConfigured`](LockError::NotConfigured): no `locker = ...` and no
///   process default ([`init`], [`set_default`]).
/// - [`InvalidInput`](LockError::InvalidInput): a value only known at run
///   time was refused: a `Duration` expression out of range, an empty name.
/// - [`NoQuorum`](LockError::NoQuorum) (Redlock),
///   [`Replicas`](LockError::Replicas) (with
///   [`min_replicas`](LockerBuilder::min_replicas)),
///   [`PermitsMismatch`](LockError::PermitsMismatch) (`permits`),
///   [`UnexpectedReply`](LockError::UnexpectedReply) (a reply of a shape
///   this version does not expect), or [`Runtime`](LockError::Runtime) (the
///   library's I/O thread is gone): nothing is held.
/// - [`Lost`](LockError::Lost): the lock was lost while the body ran, as
///   `on_lost` says (see [Long work](crate#long-work-renewal-and-the-lost-signal)).
///
/// In every case but `Lost`, the body did not run. A release that fails
/// after the body is logged (a WARN event), not returned: the lease frees
/// the lock when it runs out.
pub use lockattr_macros::redis_lock;

/// Derives [`LockKey`] from the fields marked `#[lock_key]`.
///
/// The name is the prefix followed by each marked field's key, in order,
/// joined by `:`. In a field's key, `\` is written `\\` and `:` is written
/// `\:`, so that different values always name different locks
/// (`tenant = "acme:prod", id = "7"` is `doc:acme\:prod:7`, not the name of
/// `tenant = "acme", id = "prod:7"`); integers are written as they are.
///
/// The prefix is `#[lock_key(prefix = "...")]` on the type, written as
/// given: two types with one prefix share their locks. Without it, the
/// prefix is the type's path: `module_path!()`, `::` and the type's name
/// (`shop::billing::Account:1`), so that `billing::Account` and
/// `auth::Account` name different locks; moving or renaming the type then
/// renames its locks, so give a `prefix` to names that must outlive a
/// refactoring.
///
/// ```
/// use lockattr::LockKey;
///
/// #[derive(LockKey)]
/// #[lock_key(prefix = "seat")]
/// struct Seat { #[lock_key] row: u32, #[lock_key] number: u32, holder: String }
///
/// let seat = Seat { row: 5, number: 12, holder: "ann".into() };
/// assert_eq!(seat.lock_key(), "seat:5:12");
///
/// #[derive(LockKey)]
/// #[lock_key(prefix = "doc")]
/// struct Doc { #[lock_key] tenant: String, #[lock_key] id: String }
///
/// let doc = Doc { tenant: "acme:prod".into(), id: "7".into() };
/// assert_eq!(doc.lock_key(), r"doc:acme\:prod:7");
///
/// #[derive(LockKey)]
/// struct Invoice { #[lock_key] number: u32 }
///
/// assert_eq!(Invoice { number: 9 }.lock_key(), format!("{}::Invoice:9", module_path!()));
/// ```
pub use lockattr_macros::LockKey;

#[doc(inline)]
pub use lockattr_runtime::{
    DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_EXPIRE, DEFAULT_FENCE_RETENTION,
    DEFAULT_PREFIX, DEFAULT_REDLOCK_MAX_LEASE, DEFAULT_REPLICA_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT,
    Fairness, Holder, Listing, LockBuilder, LockError, LockGuard, LockInfo, LockKey, LockKind,
    LockSetBuilder, LockSetGuard, Locker, LockerBuilder, LostReason, MAX_ACQUIRE_TIMEOUT,
    MAX_EXPIRE, MAX_SET_NAMES, MAX_TIMEOUT, ReaderInfo, RedisAddr, default_locker, init,
    set_default,
};

/// Semaphores (`permits = N`, [`Locker::semaphore`]): the most permits one may have.
#[doc(inline)]
pub use lockattr_runtime::MAX_PERMITS;

/// The redis crate (redis-rs 1.x) lockattr is built on: name
/// `lockattr::redis::ConnectionInfo` to hand a Locker an address your
/// configuration already holds (see [`RedisAddr`]).
pub use lockattr_runtime::redis;

#[doc(hidden)]
pub use lockattr_runtime::__layout;
#[doc(hidden)]
pub use lockattr_runtime::__private;

/// The README's Rust snippets, compiled as doctests so that they keep
/// compiling (`cargo test --doc -p lockattr`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
