//! `#[redis_lock]` really holds the lock while the body runs, seen from
//! outside (the Redis key, another acquisition of the same name), and
//! `name = "x"` is the very lock `locker.lock("x")` takes.

use crate::support;

use std::time::Duration;

use lockattr::{LockError, Locker, redis_lock};
use support::lockers::setup;
use support::{RedisServer, lock_key};

/// What the body saw of its own lock.
#[derive(Debug)]
struct Seen {
    key_exists: bool,
    pttl: i64,
    second_acquire: Result<(), LockError>,
}

#[redis_lock(name = "held:sync", expire = 30, acquire_time = 5, locker = locker)]
fn sync_body(locker: &Locker, server: &RedisServer) -> Result<Seen, LockError> {
    let second_acquire = locker
        .lock("held:sync")
        .acquire_timeout(Duration::ZERO)
        .acquire_blocking()
        .map(drop);
    Ok(Seen {
        key_exists: server.exists(&lock_key("held:sync")),
        pttl: server.pttl(&lock_key("held:sync")),
        second_acquire,
    })
}

#[redis_lock(name = "held:async", expire = 30, acquire_time = 5, locker = locker)]
async fn async_body(locker: &Locker, server: &RedisServer) -> Result<Seen, LockError> {
    let second_acquire = locker
        .lock("held:async")
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await
        .map(drop);
    Ok(Seen {
        key_exists: server.exists(&lock_key("held:async")),
        pttl: server.pttl(&lock_key("held:async")),
        second_acquire,
    })
}

fn assert_held(seen: &Seen, name: &str) {
    assert!(seen.key_exists, "the lock key was missing inside the body");
    assert!(
        seen.pttl > 20_000 && seen.pttl <= 30_000,
        "PTTL inside the body was {} ms, expected the 30 s lease",
        seen.pttl
    );
    match &seen.second_acquire {
        Err(LockError::Timeout { name: n, .. }) => assert_eq!(n, name),
        other => panic!("a second acquisition inside the body gave {other:?}, expected Timeout"),
    }
}

#[test]
fn sync_body_runs_under_the_lock() {
    let (server, locker) = setup();
    let seen = sync_body(&locker, &server).unwrap();
    assert_held(&seen, "held:sync");
    assert!(
        !server.exists(&lock_key("held:sync")),
        "the lock outlived the call"
    );
}

#[tokio::test]
async fn async_body_runs_under_the_lock() {
    let (server, locker) = setup();
    let seen = async_body(&locker, &server).await.unwrap();
    assert_held(&seen, "held:async");
    assert!(
        !server.exists(&lock_key("held:async")),
        "the lock outlived the call"
    );
}

/// A separate Locker on the same server (another process, in effect) also
/// finds the lock held while the body runs.
#[redis_lock(name = "held:other-locker", expire = 30, locker = locker)]
fn checked_by_another_locker(locker: &Locker, other: &Locker) -> Result<LockError, LockError> {
    match other
        .lock("held:other-locker")
        .acquire_timeout(Duration::ZERO)
        .acquire_blocking()
    {
        Ok(_) => panic!("another Locker took the lock while the body held it"),
        Err(e) => Ok(e),
    }
}

#[test]
fn another_locker_sees_the_lock_held() {
    let (server, locker) = setup();
    let other = Locker::new(server.url()).unwrap();
    let e = checked_by_another_locker(&locker, &other).unwrap();
    assert!(e.is_timeout(), "{e:?}");
    // Free again afterwards, for anyone.
    other
        .lock("held:other-locker")
        .acquire_timeout(Duration::ZERO)
        .acquire_blocking()
        .expect("free after the call")
        .release_blocking()
        .unwrap();
}

#[redis_lock(name = "x", expire = 30, acquire_time = 0, locker = locker)]
fn named_x(locker: &Locker, runs: &mut u32) -> Result<(), LockError> {
    *runs += 1;
    Ok(())
}

#[redis_lock(name = "x", expire = 30, acquire_time = 0, locker = locker)]
async fn named_x_async(locker: &Locker, runs: &mut u32) -> Result<(), LockError> {
    *runs += 1;
    Ok(())
}

#[test]
fn name_literal_is_the_same_lock_as_locker_lock() {
    let (_server, locker) = setup();
    let mut runs = 0;

    // Held through `locker.lock("x")`: the attribute's lock is busy.
    let guard = locker.lock("x").acquire_blocking().unwrap();
    match named_x(&locker, &mut runs) {
        Err(LockError::Timeout { name, .. }) => assert_eq!(name, "x"),
        other => panic!("expected Timeout while `x` is held, got {other:?}"),
    }
    assert_eq!(runs, 0, "the body ran while `x` was held");
    guard.release_blocking().unwrap();

    // Released: the attribute takes it.
    named_x(&locker, &mut runs).unwrap();
    assert_eq!(runs, 1);
}

#[tokio::test]
async fn name_literal_is_the_same_lock_as_locker_lock_async() {
    let (server, locker) = setup();
    let mut runs = 0;

    let guard = locker.lock("x").acquire().await.unwrap();
    match named_x_async(&locker, &mut runs).await {
        Err(LockError::Timeout { name, .. }) => assert_eq!(name, "x"),
        other => panic!("expected Timeout while `x` is held, got {other:?}"),
    }
    assert_eq!(runs, 0, "the body ran while `x` was held");
    guard.release().await.unwrap();

    named_x_async(&locker, &mut runs).await.unwrap();
    assert_eq!(runs, 1);
    assert!(!server.exists(&lock_key("x")), "the lock outlived the call");
}
