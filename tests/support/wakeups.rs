//! What the wake-up, lease, Locker and exclusion tests spell again and
//! again: a lock held with a lease (plain, renewed, or renewed for a
//! while), an attempt with only an acquire time, a waiter on a plain
//! thread, a spawned waiter released to and awaited with a bound, a
//! server behind a proxy, plain connections, and the few Redis reads and
//! asserts they share. Each acquisition is the public builder chain it
//! names, nothing more, so a test that calls one still exercises the
//! public API.

use std::time::{Duration, Instant};

use lockattr::{LockError, LockGuard, Locker};

/// A spawned waiter's task: its outcome, and when it came (as
/// `support::waiters::spawn_waiter` returns it).
pub type WaiterTask = tokio::task::JoinHandle<(Result<LockGuard, LockError>, Instant)>;

/// The lock `name` of `locker` with a lease of `expire` and the default
/// acquire time (`lock(name).expire(expire).acquire()`), which must succeed.
pub async fn hold(locker: &Locker, name: &str, expire: Duration) -> LockGuard {
    locker
        .lock(name)
        .expire(expire)
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("taking {name}: {e}"))
}

/// [`hold`] for a sync caller (`acquire_blocking`).
pub fn hold_blocking(locker: &Locker, name: &str, expire: Duration) -> LockGuard {
    locker
        .lock(name)
        .expire(expire)
        .acquire_blocking()
        .unwrap_or_else(|e| panic!("taking {name}: {e}"))
}

/// [`hold`] with the watchdog on (`renew(true)`).
pub async fn hold_renewed(locker: &Locker, name: &str, expire: Duration) -> LockGuard {
    locker
        .lock(name)
        .expire(expire)
        .renew(true)
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("taking {name}: {e}"))
}

/// [`hold_renewed`] for a sync caller.
pub fn hold_renewed_blocking(locker: &Locker, name: &str, expire: Duration) -> LockGuard {
    locker
        .lock(name)
        .expire(expire)
        .renew(true)
        .acquire_blocking()
        .unwrap_or_else(|e| panic!("taking {name}: {e}"))
}

/// [`hold`] with renewal capped at `cap` (`renew_for(cap)`).
pub async fn hold_capped(
    locker: &Locker,
    name: &str,
    expire: Duration,
    cap: Duration,
) -> LockGuard {
    locker
        .lock(name)
        .expire(expire)
        .renew_for(cap)
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("taking {name}: {e}"))
}

/// [`hold_capped`] for a sync caller.
pub fn hold_capped_blocking(
    locker: &Locker,
    name: &str,
    expire: Duration,
    cap: Duration,
) -> LockGuard {
    locker
        .lock(name)
        .expire(expire)
        .renew_for(cap)
        .acquire_blocking()
        .unwrap_or_else(|e| panic!("taking {name}: {e}"))
}

/// The lock `name` with the default lease, waiting up to `wait`
/// (`lock(name).acquire_timeout(wait).acquire()`): the outcome.
pub async fn try_within(
    locker: &Locker,
    name: &str,
    wait: Duration,
) -> Result<LockGuard, LockError> {
    locker.lock(name).acquire_timeout(wait).acquire().await
}

/// [`try_within`] for a sync caller.
pub fn try_within_blocking(
    locker: &Locker,
    name: &str,
    wait: Duration,
) -> Result<LockGuard, LockError> {
    locker.lock(name).acquire_timeout(wait).acquire_blocking()
}

/// A plain thread of `locker` that waits for the lock `name` (lease
/// `expire`, for at most `wait`) through `acquire_blocking`: its outcome,
/// and when it came.
pub fn thread_waiter(
    locker: &Locker,
    name: &str,
    expire: Duration,
    wait: Duration,
) -> std::thread::JoinHandle<(Result<LockGuard, LockError>, Instant)> {
    let (locker, name) = (locker.clone(), name.to_owned());
    std::thread::spawn(move || {
        let outcome = locker
            .lock(&name)
            .expire(expire)
            .acquire_timeout(wait)
            .acquire_blocking();
        (outcome, Instant::now())
    })
}

/// Awaits the spawned `waiter` for at most `within` (panicking with
/// `hangs` when it takes longer, or when the task panicked): its outcome,
/// and when it came.
pub async fn finish_within(
    waiter: WaiterTask,
    within: Duration,
    hangs: &str,
) -> (Result<LockGuard, LockError>, Instant) {
    tokio::time::timeout(within, waiter)
        .await
        .expect(hangs)
        .unwrap()
}

/// Releases `holder`, then waits for the spawned `waiter`: its outcome,
/// and how long after the release it came.
pub async fn release_and_join(
    holder: LockGuard,
    waiter: WaiterTask,
) -> (Result<LockGuard, LockError>, Duration) {
    let released_at = Instant::now();
    holder.release().await.unwrap();
    let (outcome, returned_at) = waiter.await.unwrap();
    (outcome, returned_at.duration_since(released_at))
}

/// [`release_and_join`] for a sync caller and a [`thread_waiter`].
pub fn release_and_join_blocking(
    holder: LockGuard,
    waiter: std::thread::JoinHandle<(Result<LockGuard, LockError>, Instant)>,
) -> (Result<LockGuard, LockError>, Duration) {
    let released_at = Instant::now();
    holder.release_blocking().unwrap();
    let (outcome, returned_at) = waiter.join().unwrap();
    (outcome, returned_at.duration_since(released_at))
}

/// [`finish_within`], whose outcome must be the lock: the waiter's guard.
pub async fn served_within(waiter: WaiterTask, within: Duration, hangs: &str) -> LockGuard {
    finish_within(waiter, within, hangs).await.0.unwrap()
}

/// A server of our own, a fault-injecting proxy in front of it, and a
/// Locker (default settings) that reaches the server through the proxy.
pub fn behind_a_proxy() -> (super::RedisServer, super::proxy::Proxy, Locker) {
    let server = super::RedisServer::start();
    let proxy = super::proxy::Proxy::start(server.port);
    let locker = Locker::new(proxy.url()).unwrap();
    (server, proxy, locker)
}

/// A plain (sync) connection to the server at `url`.
pub fn connection(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

/// A multiplexed async connection to the server at `url`.
pub async fn async_connection(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// The end of a run of `calls` increments of the test's own counter
/// `counter` on `server`: none was lost, and no lock is left held.
pub fn assert_all_counted(server: &super::RedisServer, calls: usize) {
    let total: u64 = server.get("counter").unwrap().parse().unwrap();
    assert_eq!(total, calls as u64, "updates were lost");
    assert!(server.held_locks().is_empty());
}

/// [`assert_all_counted`], after asserting that at most one body was ever
/// inside at once (`max_inside`, the most seen, is 1).
pub fn assert_exclusive_run(
    server: &super::RedisServer,
    max_inside: &std::sync::atomic::AtomicUsize,
    calls: usize,
) {
    assert_eq!(
        max_inside.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "two bodies ran at once"
    );
    assert_all_counted(server, calls);
}

/// Creates or changes the Redis user `user` on `server` with the ACL
/// `rules` (`ACL SETUSER user rules...`).
pub fn set_acl_user(server: &super::RedisServer, user: &str, rules: &[&str]) {
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(user)
        .arg(rules)
        .query(&mut server.client())
        .expect("ACL SETUSER");
}

/// The value of the fencing counter of the lock `name` on `server`
/// (which must exist).
pub fn fence_value(server: &super::RedisServer, name: &str) -> u64 {
    server
        .get(&super::keys::lock(name).fence)
        .unwrap()
        .parse()
        .unwrap()
}

/// The keys under the default prefix on `server`, but the fencing
/// counters: what is left of locks, queues and waiters.
pub fn keys_but_fences(server: &super::RedisServer) -> Vec<String> {
    server
        .keys("lockattr:*")
        .into_iter()
        .filter(|k| !k.ends_with(":fence"))
        .collect()
}
