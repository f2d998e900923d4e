//! Helpers of the runtime's single-server test files (acquire, release,
//! drop, timeout, outage...): the builder chains they spell again and again
//! where `takes` has none (no acquire time, or no lease, of their own), a
//! task that takes a lock, and a few reads and asserts on a lock's keys.
//! Each helper makes the public calls it names, nothing more.

use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use lockattr::{LockError, LockGuard, Locker};

use super::{RedisServer, eventually, keys, lock_key};

/// What an acquisition returns: a guard or the error.
pub type Outcome = Result<LockGuard, LockError>;

/// The lock `name` with a lease of `expire`, waiting the Locker's default
/// acquire time: the outcome.
pub async fn try_leased(locker: &Locker, name: &str, expire: Duration) -> Outcome {
    locker.lock(name).expire(expire).acquire().await
}

/// [`try_leased`] for a sync caller.
pub fn try_leased_blocking(locker: &Locker, name: &str, expire: Duration) -> Outcome {
    locker.lock(name).expire(expire).acquire_blocking()
}

/// [`try_leased`], which must succeed.
pub async fn take_leased(locker: &Locker, name: &str, expire: Duration) -> LockGuard {
    try_leased(locker, name, expire)
        .await
        .unwrap_or_else(|e| panic!("taking {name}: {e}"))
}

/// [`take_leased`] for a sync caller.
pub fn take_leased_blocking(locker: &Locker, name: &str, expire: Duration) -> LockGuard {
    try_leased_blocking(locker, name, expire).unwrap_or_else(|e| panic!("taking {name}: {e}"))
}

/// The lock `name` (default lease), waiting up to `wait`: the outcome.
pub async fn try_wait(locker: &Locker, name: &str, wait: Duration) -> Outcome {
    locker.lock(name).acquire_timeout(wait).acquire().await
}

/// [`try_wait`] for a sync caller.
pub fn try_wait_blocking(locker: &Locker, name: &str, wait: Duration) -> Outcome {
    locker.lock(name).acquire_timeout(wait).acquire_blocking()
}

/// One attempt at the lock `name` (default lease, acquire time zero): the
/// outcome.
pub async fn attempt(locker: &Locker, name: &str) -> Outcome {
    try_wait(locker, name, Duration::ZERO).await
}

/// [`attempt`] for a sync caller.
pub fn attempt_blocking(locker: &Locker, name: &str) -> Outcome {
    try_wait_blocking(locker, name, Duration::ZERO)
}

/// Takes the lock `name` (default lease), waiting up to `wait` (it must be
/// taken), and releases it.
pub async fn take_and_release(locker: &Locker, name: &str, wait: Duration) {
    try_wait(locker, name, wait)
        .await
        .unwrap_or_else(|e| panic!("taking {name}: {e}"))
        .release()
        .await
        .unwrap();
}

/// Takes the lock `name` in one [`attempt`] (it must be free) and releases
/// it.
pub async fn take_and_release_now(locker: &Locker, name: &str) {
    take_and_release(locker, name, Duration::ZERO).await;
}

/// A task of `locker` that takes the lock `name` with a lease of `expire`
/// (waiting the Locker's default acquire time): its outcome.
pub fn spawn_leased(
    locker: &Locker,
    name: &str,
    expire: Duration,
) -> tokio::task::JoinHandle<Outcome> {
    let (locker, name) = (locker.clone(), name.to_owned());
    tokio::spawn(async move { locker.lock(&name).expire(expire).acquire().await })
}

/// A task of `locker` that takes the lock `name` (lease `expire`, waiting up
/// to `wait`): its outcome.
pub fn spawn_take(
    locker: &Locker,
    name: &str,
    expire: Duration,
    wait: Duration,
) -> tokio::task::JoinHandle<Outcome> {
    let (locker, name) = (locker.clone(), name.to_owned());
    tokio::spawn(async move {
        locker
            .lock(&name)
            .expire(expire)
            .acquire_timeout(wait)
            .acquire()
            .await
    })
}

/// What the waiter task `waiter` (of [`super::waiters::spawn_waiter`])
/// returned: its outcome and when it came. Fails the test when `what` (the
/// waiter) has not returned within `within`.
pub async fn joined(
    waiter: tokio::task::JoinHandle<(Outcome, Instant)>,
    within: Duration,
    what: &str,
) -> (Outcome, Instant) {
    tokio::time::timeout(within, waiter)
        .await
        .unwrap_or_else(|e| panic!("{what} hangs: {e}"))
        .unwrap()
}

/// Waits up to `within` until the key of the lock `name` is gone from
/// `server`; true when it went.
pub fn freed_within(server: &RedisServer, name: &str, within: Duration) -> bool {
    eventually(within, || !server.exists(&lock_key(name))).is_some()
}

/// Asserts that the key of the lock `name` is gone from `server` within
/// `within` (`why`: the message otherwise).
pub fn assert_freed_within(server: &RedisServer, name: &str, within: Duration, why: &str) {
    assert!(freed_within(server, name, within), "{why}");
}

/// Writes `value` under `key` on `server` with a PTTL of `px` ms (`SET key
/// value PX px`), as another owner would.
pub fn set_px(server: &RedisServer, key: &str, value: &str, px: u64) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(px)
        .query(&mut server.client())
        .unwrap();
}

/// Three redis-servers of our own, started one after the other: the nodes
/// of a Redlock.
pub fn three_servers() -> [RedisServer; 3] {
    [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ]
}

/// A Redlock over `nodes` that does not hold back nodes it sees restarted
/// (`delay_restarted_nodes(false)`), otherwise with the default settings.
pub fn redlock_of<I>(nodes: I) -> Locker
where
    I: IntoIterator,
    I::Item: lockattr::RedisAddr,
{
    Locker::redlock_builder(nodes)
        .delay_restarted_nodes(false)
        .build()
        .unwrap()
}

/// Waits up to 2 s until `key` on `server` has some time left, at most
/// `hold_ms` (what a release within a hold leaves): whether it came to
/// that, and the PTTL (ms) read right after.
pub fn wait_for_hold_left(server: &RedisServer, key: &str, hold_ms: i64) -> (bool, i64) {
    let set = eventually(Duration::from_secs(2), || {
        let left = server.pttl(key);
        left > 0 && left <= hold_ms
    });
    (set.is_some(), server.pttl(key))
}

/// The fencing counter of the lock `name` on `server` (it must be there).
pub fn fence_of(server: &RedisServer, name: &str) -> u64 {
    server
        .get(&keys::lock(name).fence)
        .expect("the fencing counter")
        .parse()
        .expect("a number")
}

/// Asserts that the PTTL of `key` on `server` is within `range` (ms).
pub fn assert_pttl(server: &RedisServer, key: &str, range: RangeInclusive<i64>) {
    let pttl = server.pttl(key);
    assert!(range.contains(&pttl), "PTTL {pttl}");
}

/// Asserts that less than `bound` has passed since `start` (the message
/// says how long it was).
pub fn assert_within(start: Instant, bound: Duration) {
    assert!(start.elapsed() < bound, "{:?}", start.elapsed());
}
