//! What the attribute, observability and torture tests spell again and
//! again: acquisitions the builder chains of `support::takes` do not cover
//! (the default lease, a renewed or capped lease, a lock set), a waiting
//! task, a key deleted from outside, a loss awaited, the bounds of a wait;
//! and what their annotated functions share: the counting function
//! (`counted!`), the application error, the plain lock `mixed`. Each is the
//! public call it names, nothing more.

use std::time::Duration;

use lockattr::{LockError, LockGuard, LockSetGuard, Locker};
use tokio::task::JoinHandle;

use super::RedisServer;

/// The lock `name` with the default lease, waiting up to `wait`: the
/// outcome.
pub async fn try_wait(locker: &Locker, name: &str, wait: Duration) -> Result<LockGuard, LockError> {
    locker.lock(name).acquire_timeout(wait).acquire().await
}

/// [`try_wait`] for a sync caller.
pub fn try_wait_blocking(
    locker: &Locker,
    name: &str,
    wait: Duration,
) -> Result<LockGuard, LockError> {
    locker.lock(name).acquire_timeout(wait).acquire_blocking()
}

/// A task of `locker` that waits up to `wait` for the lock `name` (default
/// lease): its outcome.
pub fn spawn_wait(
    locker: Locker,
    name: &str,
    wait: Duration,
) -> JoinHandle<Result<LockGuard, LockError>> {
    let name = name.to_owned();
    tokio::spawn(async move { locker.lock(&name).acquire_timeout(wait).acquire().await })
}

/// The guard of `outcome`; panics, naming `what`, if it is an error.
fn taken<G>(outcome: Result<G, LockError>, what: &str) -> G {
    outcome.unwrap_or_else(|e| panic!("taking {what}: {e}"))
}

/// The lock `name` with a lease of `expire`, with the default acquire
/// time; it must be taken.
pub async fn take_leased(locker: &Locker, name: &str, expire: Duration) -> LockGuard {
    let builder = locker.lock(name).expire(expire);
    taken(builder.acquire().await, name)
}

/// The lock `name` with a lease of `expire`, renewed while held; it must
/// be taken.
pub async fn renewed(locker: &Locker, name: &str, expire: Duration) -> LockGuard {
    let builder = locker.lock(name).expire(expire).renew(true);
    taken(builder.acquire().await, name)
}

/// [`renewed`] for a sync caller.
pub fn renewed_blocking(locker: &Locker, name: &str, expire: Duration) -> LockGuard {
    let builder = locker.lock(name).expire(expire).renew(true);
    taken(builder.acquire_blocking(), name)
}

/// The lock `name` with a lease of `expire`, renewed for at most
/// `renew_for`; it must be taken.
pub async fn capped(
    locker: &Locker,
    name: &str,
    expire: Duration,
    renew_for: Duration,
) -> LockGuard {
    let builder = locker.lock(name).expire(expire).renew_for(renew_for);
    taken(builder.acquire().await, name)
}

/// The lock set `names` with the default lease, waiting up to `wait`: the
/// outcome.
pub async fn try_take_all(
    locker: &Locker,
    names: &[&str],
    wait: Duration,
) -> Result<LockSetGuard, LockError> {
    locker.lock_all(names).acquire_timeout(wait).acquire().await
}

/// A task of `locker` that waits up to `wait` for the lock set `names`
/// (default lease): its outcome.
pub fn spawn_wait_all(
    locker: Locker,
    names: &[&str],
    wait: Duration,
) -> JoinHandle<Result<LockSetGuard, LockError>> {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    tokio::spawn(async move {
        locker
            .lock_all(&names)
            .acquire_timeout(wait)
            .acquire()
            .await
    })
}

/// The lock set `names` with a lease of `expire`, renewed while held; it
/// must be taken.
pub async fn renewed_all(locker: &Locker, names: &[&str], expire: Duration) -> LockSetGuard {
    let builder = locker.lock_all(names).expire(expire).renew(true);
    taken(builder.acquire().await, &format!("{names:?}"))
}

/// Deletes `key` from outside, as an operator (or a bug) would.
pub fn del(server: &RedisServer, key: &str) {
    let _: () = redis::cmd("DEL")
        .arg(key)
        .query(&mut server.client())
        .unwrap();
}

/// Waits up to `within` for what `lost` (a guard's `lost()`) reports:
/// the error; panics with `what` if it does not come.
pub async fn lost_within(
    within: Duration,
    lost: impl Future<Output = LockError>,
    what: &str,
) -> LockError {
    tokio::time::timeout(within, lost).await.expect(what)
}

/// Asserts that `took` is at least `least` and less than `below`; `what`
/// names the call that took it.
pub fn assert_took(took: Duration, least: Duration, below: Duration, what: &str) {
    assert!(
        took >= least,
        "{what}: gave up after {took:?}, before {least:?}"
    );
    assert!(took < below, "{what}: took {took:?}, {below:?} or more");
}

/// How long a test waits for a guard's loss to be reported: 5 s.
pub const LOSS_WAIT: Duration = Duration::from_secs(5);

/// Asserts that within 5 s the lock `name` has a queue and `server` one
/// pub/sub client: its waiter queued and subscribed to release notices.
pub fn assert_queued_and_subscribed(server: &RedisServer, name: &str) {
    let queue = super::keys::lock(name).queue;
    let ready = super::eventually(Duration::from_secs(5), || {
        server.exists(&queue) && server.pubsub_clients() == 1
    });
    assert!(ready.is_some(), "the waiter never queued and subscribed");
}

/// Declares the function `[async] fn f($locker: &Locker, $id: u32, $runs:
/// &AtomicU32) -> Result<u32, $err>`, as written, under the attribute
/// given, `#[redis_lock(...)]`: its body counts its run in `$runs` and
/// returns `Ok($id)`. The caller names the parameters, so that the
/// attribute's `{id}` and `locker = locker` find them.
#[allow(unused_macros)]
macro_rules! counted {
    (#[$($attr:tt)*] $($head:ident)+ ($locker:ident, $id:ident, $runs:ident) -> $err:ty) => {
        #[$($attr)*]
        $($head)+(
            $locker: &::lockattr::Locker,
            $id: u32,
            $runs: &::std::sync::atomic::AtomicU32,
        ) -> Result<u32, $err> {
            $runs.fetch_add(1, ::std::sync::atomic::Ordering::SeqCst);
            Ok($id)
        }
    };
}
#[allow(unused_imports)]
pub(crate) use counted;

/// An application error of annotated functions: a lock failure (through
/// `From<LockError>`), a parse failure (what their `?` passes on), or a
/// refusal of their own.
#[derive(Debug)]
pub enum AppError {
    Lock(LockError),
    Parse(std::num::ParseIntError),
    Refused,
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(e: std::num::ParseIntError) -> Self {
        AppError::Parse(e)
    }
}

/// Under the plain lock `mixed` (for a test that takes it inside a read
/// hold or a permit of the same name): whether its own key is held.
#[lockattr::redis_lock(name = "mixed", locker = locker)]
pub async fn plain_lock(locker: &Locker, server: &RedisServer) -> Result<bool, super::BodyError> {
    Ok(server.exists(&super::lock_key("mixed")))
}

/// Spawns `n` tokio tasks, task `t` running what `task(t)` makes, then
/// waits for each in turn; a task that panicked fails the caller.
pub async fn all_tasks<F>(n: usize, mut task: impl FnMut(usize) -> F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let tasks: Vec<_> = (0..n).map(|t| tokio::spawn(task(t))).collect();
    for running in tasks {
        running.await.unwrap();
    }
}

/// Waits up to 2 s until `key` has a time to live of at most `hold_ms`
/// (and is there): whether it came to that, and its PTTL then, in ms.
pub fn pttl_within(server: &RedisServer, key: &str, hold_ms: i64) -> (Option<Duration>, i64) {
    let set = super::eventually(Duration::from_secs(2), || {
        let left = server.pttl(key);
        left > 0 && left <= hold_ms
    });
    (set, server.pttl(key))
}
