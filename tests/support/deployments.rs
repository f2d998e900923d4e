//! What the tests of the deployments (Redlock nodes, sets, clusters,
//! sentinels, replicas, ACL users) spell again and again: starting nodes,
//! a Redlock over fresh nodes, ACL users, and the public builder chains
//! that take a lock or a set with the defaults `takes.rs` does not cover
//! (no lease, or no acquire time, given). Each acquisition helper is the
//! builder chain it names, nothing more.

use std::time::{Duration, Instant};

use lockattr::{LockError, LockGuard, LockSetGuard, Locker, LockerBuilder, RedisAddr};
use tokio::task::JoinHandle;

use super::RedisServer;
use super::lockers::urls;

/// `n` redis-servers of our own, each with the default settings.
pub fn start_nodes(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

/// A Redlock builder over `urls` with the restarted-node delay off (for
/// fresh nodes, all "young"), for a test to add its settings to.
pub fn no_delay_redlock<I>(urls: I) -> LockerBuilder
where
    I: IntoIterator,
    I::Item: RedisAddr,
{
    Locker::redlock_builder(urls).delay_restarted_nodes(false)
}

/// A Redlock Locker over `nodes` with the restarted-node delay off, the
/// other settings left at their defaults.
pub fn fresh_redlock(nodes: &[RedisServer]) -> Locker {
    no_delay_redlock(urls(nodes)).build().unwrap()
}

/// `redis://user:password@127.0.0.1:<port>/`: `server` as the ACL user
/// `user`.
pub fn user_url(server: &RedisServer, user: &str, password: &str) -> String {
    format!("redis://{user}:{password}@127.0.0.1:{}/", server.port)
}

/// Sends `ACL SETUSER user rules...` to `server`, which must accept it.
pub fn acl_setuser(server: &RedisServer, user: &str, rules: &[&str]) {
    let mut command = redis::cmd("ACL");
    command.arg("SETUSER").arg(user);
    for rule in rules {
        command.arg(*rule);
    }
    let () = command.query(&mut server.client()).expect("ACL SETUSER");
}

/// The lock `name` with the default lease, waiting up to `wait`: the
/// outcome.
pub async fn try_lock(locker: &Locker, name: &str, wait: Duration) -> Result<LockGuard, LockError> {
    locker.lock(name).acquire_timeout(wait).acquire().await
}

/// [`try_lock`], which must fail: its error.
pub async fn lock_error(locker: &Locker, name: &str, wait: Duration) -> LockError {
    try_lock(locker, name, wait).await.unwrap_err()
}

/// The lock `name` with a lease of `expire` and the default acquire time,
/// which must be taken.
pub async fn hold_for(locker: &Locker, name: &str, expire: Duration) -> LockGuard {
    locker.lock(name).expire(expire).acquire().await.unwrap()
}

/// The lock `name` with a lease of `expire`, renewed, and the default
/// acquire time, which must be taken.
pub async fn renewed(locker: &Locker, name: &str, expire: Duration) -> LockGuard {
    let request = locker.lock(name).expire(expire).renew(true);
    request.acquire().await.unwrap()
}

/// Takes the lock `name` with the default lease and acquire time, and
/// releases it; both must succeed.
pub async fn cycle(locker: &Locker, name: &str) {
    let guard = locker.lock(name).acquire().await.unwrap();
    guard.release().await.unwrap();
}

/// The set `names` with the default lease, waiting up to `wait`: the
/// outcome.
pub async fn try_set(
    locker: &Locker,
    names: &[impl AsRef<str>],
    wait: Duration,
) -> Result<LockSetGuard, LockError> {
    locker.lock_all(names).acquire_timeout(wait).acquire().await
}

/// [`try_set`], which must fail: its error.
pub async fn set_error(locker: &Locker, names: &[impl AsRef<str>], wait: Duration) -> LockError {
    try_set(locker, names, wait).await.unwrap_err()
}

/// The set `names` with a lease of `expire` and the default acquire time,
/// which must be taken.
pub async fn hold_set_for(
    locker: &Locker,
    names: &[impl AsRef<str>],
    expire: Duration,
) -> LockSetGuard {
    let request = locker.lock_all(names).expire(expire);
    request.acquire().await.unwrap()
}

/// The set `names` with a lease of `expire`, waiting up to `wait`: the
/// outcome.
pub async fn try_take_set(
    locker: &Locker,
    names: &[impl AsRef<str>],
    expire: Duration,
    wait: Duration,
) -> Result<LockSetGuard, LockError> {
    let request = locker.lock_all(names).expire(expire);
    request.acquire_timeout(wait).acquire().await
}

/// [`try_take_set`], which must succeed.
pub async fn take_set(
    locker: &Locker,
    names: &[impl AsRef<str>],
    expire: Duration,
    wait: Duration,
) -> LockSetGuard {
    try_take_set(locker, names, expire, wait).await.unwrap()
}

/// Takes the set `names` with the default lease and acquire time, and
/// releases it; both must succeed.
pub async fn cycle_set(locker: &Locker, names: &[impl AsRef<str>]) {
    let guard = locker.lock_all(names).acquire().await.unwrap();
    guard.release().await.unwrap();
}

/// A task of (a clone of) `locker` that waits up to `wait` for the lock
/// `name` (default lease): its outcome, and when it came.
pub fn spawn_try_lock(
    locker: &Locker,
    name: &str,
    wait: Duration,
) -> JoinHandle<(Result<LockGuard, LockError>, Instant)> {
    let (locker, name) = (locker.clone(), name.to_owned());
    tokio::spawn(async move {
        let outcome = try_lock(&locker, &name, wait).await;
        (outcome, Instant::now())
    })
}
