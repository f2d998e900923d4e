//! What the tests of the deployments (Redlock nodes, sets, clusters,
//! sentinels, replicas, ACL users) spell again and again: starting nodes,
//! a Redlock over fresh nodes, ACL users, and the public builder chains
//! that take a lock or a set with the defaults `takes.rs` does not cover
//! (no lease, or no acquire time, given). Each acquisition helper is the
//! builder chain it names, nothing more.
//!
//! Standard library, lockattr, redis, tokio and the workspace's test
//! support only, so that a test file without `mod support` (as `tls.rs`)
//! can include it: `#[path = "support/deployments.rs"] mod deployments;`.

#![allow(dead_code)] // each test file uses a part of this module

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockattr::{LockError, LockGuard, LockSetGuard, Locker, LockerBuilder, RedisAddr};
use tokio::task::JoinHandle;

use lockattr_test_support::RedisServer;

/// What an acquisition of one lock, a side or a permit returns.
pub type Outcome = Result<LockGuard, LockError>;

/// `n` redis-servers of our own, each with the default settings.
pub fn start_nodes(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

/// A lock server, and a store server for the test's own counters (kept
/// without a TTL: the store's audit allows every key).
pub fn lock_server_and_store() -> (RedisServer, RedisServer) {
    let server = RedisServer::start();
    let store = RedisServer::start();
    store.allow_untimed("*");
    (server, store)
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
    no_delay_redlock(nodes.iter().map(RedisServer::url))
        .build()
        .unwrap()
}

/// `redis://user:password@127.0.0.1:<port>/`: `server` as the ACL user
/// `user`.
pub fn user_url(server: &RedisServer, user: &str, password: &str) -> String {
    format!("redis://{user}:{password}@127.0.0.1:{}/", server.port)
}

/// Sets `key` to `value` on `server` (`SET`), as another client would.
pub fn set_key(server: &RedisServer, key: &str, value: impl redis::ToRedisArgs) {
    let () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query(&mut server.client())
        .unwrap();
}

/// Deletes `key` on `server` (`DEL`), behind the back of whoever holds it.
pub fn del(server: &RedisServer, key: &str) {
    let () = redis::cmd("DEL")
        .arg(key)
        .query(&mut server.client())
        .unwrap();
}

/// The README's ACL rule set for a Locker with the default prefix: the
/// commands the library needs, on its keys and channels, and nothing else.
pub const README_RULES: &[&str] = &[
    "on",
    "resetkeys",
    "~lockattr:*",
    "resetchannels",
    "&lockattr:*",
    "-@all",
    "+evalsha",
    "+eval",
    "+script|load",
    "+ping",
    "+select",
    "+subscribe",
    "+unsubscribe",
    "+get",
    "+set",
    "+del",
    "+incr",
    "+pexpire",
    "+pttl",
    "+time",
    "+rpush",
    "+lpop",
    "+lrem",
    "+hset",
    "+hget",
    "+hdel",
    "+hexists",
    "+hgetall",
    "+publish",
];

/// What read-write locks need beyond [`README_RULES`] (the deployments
/// page lists them).
pub const RW_RULES: &[&str] = &[
    "+exists",
    "+lindex",
    "+zadd",
    "+zrem",
    "+zremrangebyscore",
    "+zcard",
    "+zrange",
    "+smembers",
    "+srem",
];

/// Creates `user` with `password` and the [`README_RULES`] on `server`.
pub fn readme_user(server: &RedisServer, user: &str, password: &str) {
    let mut command = redis::cmd("ACL");
    command.arg("SETUSER").arg(user).arg(format!(">{password}"));
    for rule in README_RULES {
        command.arg(*rule);
    }
    let () = command.query(&mut server.client()).expect("ACL SETUSER");
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
pub async fn try_lock(locker: &Locker, name: &str, wait: Duration) -> Outcome {
    locker.lock(name).acquire_timeout(wait).acquire().await
}

/// [`try_lock`], which must fail: its error.
pub async fn lock_error(locker: &Locker, name: &str, wait: Duration) -> LockError {
    try_lock(locker, name, wait).await.unwrap_err()
}

/// The lock `name` with a lease of `expire` and the default acquire time:
/// the outcome.
pub async fn try_hold_for(locker: &Locker, name: &str, expire: Duration) -> Outcome {
    locker.lock(name).expire(expire).acquire().await
}

/// [`try_hold_for`], which must succeed.
pub async fn hold_for(locker: &Locker, name: &str, expire: Duration) -> LockGuard {
    try_hold_for(locker, name, expire).await.unwrap()
}

/// The read side of read-write lock `name` with the default lease,
/// waiting up to `wait`: the outcome.
pub async fn try_read_lock(locker: &Locker, name: &str, wait: Duration) -> Outcome {
    locker.read_lock(name).acquire_timeout(wait).acquire().await
}

/// The read side of read-write lock `name` with a lease of `expire`,
/// renewed, and the default acquire time: the outcome.
pub async fn try_renewed_read(locker: &Locker, name: &str, expire: Duration) -> Outcome {
    let request = locker.read_lock(name).expire(expire).renew(true);
    request.acquire().await
}

/// The write side of read-write lock `name` with the default lease,
/// waiting up to `wait`: the outcome.
pub async fn try_write_lock(locker: &Locker, name: &str, wait: Duration) -> Outcome {
    locker
        .write_lock(name)
        .acquire_timeout(wait)
        .acquire()
        .await
}

/// A permit of semaphore `name` of `permits` with the default lease,
/// waiting up to `wait`: the outcome.
pub async fn try_semaphore(locker: &Locker, name: &str, permits: u32, wait: Duration) -> Outcome {
    let request = locker.semaphore(name, permits).acquire_timeout(wait);
    request.acquire().await
}

/// The lock `name` with a lease of `expire`, renewed, and the default
/// acquire time: the outcome.
pub async fn try_renewed(locker: &Locker, name: &str, expire: Duration) -> Outcome {
    let request = locker.lock(name).expire(expire).renew(true);
    request.acquire().await
}

/// [`try_renewed`], which must succeed.
pub async fn renewed(locker: &Locker, name: &str, expire: Duration) -> LockGuard {
    try_renewed(locker, name, expire).await.unwrap()
}

/// The lock `name` with the default lease and acquire time, kept at least
/// `hold` (a release within it leaves the lock for what remains), which
/// must be taken.
pub async fn held_at_least(locker: &Locker, name: &str, hold: Duration) -> LockGuard {
    let request = locker.lock(name).hold_at_least(hold);
    request.acquire().await.unwrap()
}

/// Releases `guard`, which must succeed: when the release began.
pub async fn release_now(guard: LockGuard) -> Instant {
    let at = Instant::now();
    guard.release().await.unwrap();
    at
}

/// The set `names` with a lease of `expire`, renewed, and the default
/// acquire time, which must be taken.
pub async fn renewed_set(
    locker: &Locker,
    names: &[impl AsRef<str>],
    expire: Duration,
) -> LockSetGuard {
    let request = locker.lock_all(names).expire(expire).renew(true);
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

/// A task that runs `acquisition`: its outcome, and when it came.
fn spawn_timed<T: Send + 'static>(
    acquisition: impl Future<Output = T> + Send + 'static,
) -> JoinHandle<(T, Instant)> {
    tokio::spawn(async move {
        let outcome = acquisition.await;
        (outcome, Instant::now())
    })
}

/// The names, owned (for a task).
fn owned(names: &[impl AsRef<str>]) -> Vec<String> {
    names.iter().map(|n| n.as_ref().to_owned()).collect()
}

/// A task of (a clone of) `locker` that waits up to `wait` for the lock
/// `name` (default lease): its outcome, and when it came.
pub fn spawn_try_lock(
    locker: &Locker,
    name: &str,
    wait: Duration,
) -> JoinHandle<(Outcome, Instant)> {
    let (locker, name) = (locker.clone(), name.to_owned());
    spawn_timed(async move { try_lock(&locker, &name, wait).await })
}

/// A task of (a clone of) `locker` that waits up to `wait` for the set
/// `names` (default lease): its outcome, and when it came.
pub fn spawn_try_set(
    locker: &Locker,
    names: &[impl AsRef<str>],
    wait: Duration,
) -> JoinHandle<(Result<LockSetGuard, LockError>, Instant)> {
    let (locker, names) = (locker.clone(), owned(names));
    spawn_timed(async move { try_set(&locker, &names, wait).await })
}

/// A task of (a clone of) `locker` that waits up to `wait` for the set
/// `names` with a lease of `expire`: its outcome, and when it came.
pub fn spawn_take_set(
    locker: &Locker,
    names: &[impl AsRef<str>],
    expire: Duration,
    wait: Duration,
) -> JoinHandle<(Result<LockSetGuard, LockError>, Instant)> {
    let (locker, names) = (locker.clone(), owned(names));
    spawn_timed(async move { try_take_set(&locker, &names, expire, wait).await })
}

/// What `task` returns, waited for at most `within`: fails with `what`
/// when it does not finish in time, or with its panic.
pub async fn joined<T>(task: JoinHandle<T>, within: Duration, what: &str) -> T {
    tokio::time::timeout(within, task)
        .await
        .expect(what)
        .unwrap()
}

/// [`joined`] for each of `tasks` in turn.
pub async fn join_within(tasks: Vec<JoinHandle<()>>, within: Duration, what: &str) {
    for task in tasks {
        joined(task, within, what).await;
    }
}

/// Who is inside each of a few names, for tasks that contend for them:
/// a count per name, and the overlaps seen (each entry into a name that
/// someone was inside already). Its clones share the counts.
#[derive(Clone)]
pub struct Inside {
    names: Arc<Vec<AtomicUsize>>,
    overlaps: Arc<AtomicUsize>,
}

impl Inside {
    /// Counts for `n` names, nobody inside.
    pub fn new(n: usize) -> Inside {
        Inside {
            names: Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect()),
            overlaps: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Enters the names `which` (their indexes), awaits `pause` inside,
    /// and leaves them.
    pub async fn stay(&self, which: &[usize], pause: impl Future<Output = ()>) {
        for &i in which {
            if self.names[i].fetch_add(1, Ordering::SeqCst) > 0 {
                self.overlaps.fetch_add(1, Ordering::SeqCst);
            }
        }
        pause.await;
        for &i in which {
            self.names[i].fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// [`stay`](Self::stay) in every name.
    pub async fn stay_in_all(&self, pause: impl Future<Output = ()>) {
        let all: Vec<usize> = (0..self.names.len()).collect();
        self.stay(&all, pause).await;
    }

    /// The overlaps seen so far.
    pub fn overlaps(&self) -> usize {
        self.overlaps.load(Ordering::SeqCst)
    }
}

/// Tasks that take sets in crossed orders: task `t` takes the set
/// `orders[t]` through `lockers[t % lockers.len()]` `rounds` times, each
/// time waiting up to `wait` for it, yielding once inside and releasing
/// it. Fails when a task does not finish within `within` (a deadlock);
/// returns the overlaps seen on the names (see [`Inside`]).
pub async fn crossed_sets(
    lockers: &[Locker],
    orders: Vec<Vec<String>>,
    rounds: usize,
    wait: Duration,
    within: Duration,
) -> usize {
    let inside = Inside::new(orders[0].len());
    let mut tasks = Vec::new();
    for (t, order) in orders.into_iter().enumerate() {
        let locker = lockers[t % lockers.len()].clone();
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = try_set(&locker, &order, wait).await.unwrap();
                inside.stay_in_all(tokio::task::yield_now()).await;
                guard.release().await.unwrap();
            }
        }));
    }
    join_within(tasks, within, "deadlock: a task did not finish").await;
    inside.overlaps()
}
