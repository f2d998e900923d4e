//! Waiters: a name's queue in Redis, read or waited for, and a task that
//! waits for a lock.

use std::time::{Duration, Instant};

use lockattr::{LockError, LockGuard, Locker};

use super::{RedisServer, eventually};

/// How long [`queued`] waits for a queue to reach its length.
pub const QUEUE_WAIT: Duration = Duration::from_secs(10);

/// The number of tokens queued under `queue` (a `keys::lock(name).queue`,
/// `keys::rw(name).queue`...), read over `con`.
pub fn queue_len(con: &mut redis::Connection, queue: &str) -> usize {
    redis::cmd("LLEN").arg(queue).query(con).expect("LLEN")
}

/// The tokens queued under `queue`, oldest first.
pub fn queue_tokens(server: &RedisServer, queue: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(queue)
        .arg(0)
        .arg(-1)
        .query(&mut server.client())
        .expect("LRANGE")
}

/// Waits up to [`QUEUE_WAIT`] until `queue` holds `n` tokens (a reply that
/// is an error counts as not yet); true when it did.
pub fn queued(server: &RedisServer, queue: &str, n: usize) -> bool {
    eventually(QUEUE_WAIT, || {
        redis::cmd("LLEN")
            .arg(queue)
            .query::<usize>(&mut server.client())
            .is_ok_and(|len| len == n)
    })
    .is_some()
}

/// A task of `locker` that waits for the lock `name` (lease `expire`, for
/// at most `wait`): its outcome, and when it came.
pub fn spawn_waiter(
    locker: &Locker,
    name: &str,
    expire: Duration,
    wait: Duration,
) -> tokio::task::JoinHandle<(Result<LockGuard, LockError>, Instant)> {
    let (locker, name) = (locker.clone(), name.to_owned());
    tokio::spawn(async move {
        let outcome = locker
            .lock(&name)
            .expire(expire)
            .acquire_timeout(wait)
            .acquire()
            .await;
        (outcome, Instant::now())
    })
}
