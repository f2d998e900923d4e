//! Acquisitions as the tests spell them again and again: a lock, a read or
//! write side, or a permit, with a lease and an acquire time, taken or
//! tried. Each is the public builder chain it names, nothing more, so a
//! test that calls one still exercises the public API.

use std::time::Duration;

use lockattr::{LockError, LockGuard, Locker};

/// The lock `name` of `locker`, with a lease of `expire`, waiting up to
/// `wait`: the outcome.
pub async fn try_take(
    locker: &Locker,
    name: &str,
    expire: Duration,
    wait: Duration,
) -> Result<LockGuard, LockError> {
    locker
        .lock(name)
        .expire(expire)
        .acquire_timeout(wait)
        .acquire()
        .await
}

/// [`try_take`], which must succeed.
pub async fn take(locker: &Locker, name: &str, expire: Duration, wait: Duration) -> LockGuard {
    try_take(locker, name, expire, wait)
        .await
        .unwrap_or_else(|e| panic!("taking {name}: {e}"))
}

/// The lock `name` with a lease of `expire`, when it is free now (no wait).
pub async fn take_now(locker: &Locker, name: &str, expire: Duration) -> LockGuard {
    take(locker, name, expire, Duration::ZERO).await
}

/// [`try_take`] for a sync caller.
pub fn try_take_blocking(
    locker: &Locker,
    name: &str,
    expire: Duration,
    wait: Duration,
) -> Result<LockGuard, LockError> {
    locker
        .lock(name)
        .expire(expire)
        .acquire_timeout(wait)
        .acquire_blocking()
}

/// [`take`] for a sync caller.
pub fn take_blocking(locker: &Locker, name: &str, expire: Duration, wait: Duration) -> LockGuard {
    try_take_blocking(locker, name, expire, wait).unwrap_or_else(|e| panic!("taking {name}: {e}"))
}

/// The read side of read-write lock `name`, lease `expire`, waiting up to
/// `wait`: the outcome.
pub async fn try_read(
    locker: &Locker,
    name: &str,
    expire: Duration,
    wait: Duration,
) -> Result<LockGuard, LockError> {
    locker
        .read_lock(name)
        .expire(expire)
        .acquire_timeout(wait)
        .acquire()
        .await
}

/// The write side of read-write lock `name`, lease `expire`, waiting up to
/// `wait`: the outcome.
pub async fn try_write(
    locker: &Locker,
    name: &str,
    expire: Duration,
    wait: Duration,
) -> Result<LockGuard, LockError> {
    locker
        .write_lock(name)
        .expire(expire)
        .acquire_timeout(wait)
        .acquire()
        .await
}

/// A permit of semaphore `name` of `permits`, lease `expire`, waiting up
/// to `wait`: the outcome.
pub async fn try_permit(
    locker: &Locker,
    name: &str,
    permits: u32,
    expire: Duration,
    wait: Duration,
) -> Result<LockGuard, LockError> {
    locker
        .semaphore(name, permits)
        .expire(expire)
        .acquire_timeout(wait)
        .acquire()
        .await
}
