//! The duration forms of `expire` and `acquire_time` are really applied: the
//! lease's PTTL seen from outside inside the body, and the `waited` of the
//! Timeout a busy lock gives; integers, floats, strings with units, and
//! `Duration` expressions (constants and arguments, evaluated per call).

use crate::support;

use std::time::{Duration, Instant};

use lockattr::{LockError, Locker, LostReason, redis_lock};
use support::attrs::{assert_took, take_leased};
use support::lockers::setup;
use support::{RedisServer, lock_key};

fn pttl_of(server: &RedisServer, name: &str) -> Result<i64, LockError> {
    Ok(server.pttl(&lock_key(name)))
}

#[redis_lock(name = "d:ms", expire = "1500ms", locker = locker)]
fn expire_1500ms(locker: &Locker, server: &RedisServer) -> Result<i64, LockError> {
    pttl_of(server, "d:ms")
}

#[redis_lock(name = "d:int", expire = 2, locker = locker)]
fn expire_2(locker: &Locker, server: &RedisServer) -> Result<i64, LockError> {
    pttl_of(server, "d:int")
}

#[redis_lock(name = "d:float", expire = 1.25, locker = locker)]
async fn expire_1_25(locker: &Locker, server: &RedisServer) -> Result<i64, LockError> {
    pttl_of(server, "d:float")
}

#[redis_lock(name = "d:secs", expire = "2.5s", locker = locker)]
async fn expire_2_5s(locker: &Locker, server: &RedisServer) -> Result<i64, LockError> {
    pttl_of(server, "d:secs")
}

#[redis_lock(name = "d:minutes", expire = "2m", locker = locker)]
fn expire_2m(locker: &Locker, server: &RedisServer) -> Result<i64, LockError> {
    pttl_of(server, "d:minutes")
}

const LEASE: Duration = Duration::from_millis(2750);

#[redis_lock(name = "d:const", expire = LEASE, locker = locker)]
fn expire_const(locker: &Locker, server: &RedisServer) -> Result<i64, LockError> {
    pttl_of(server, "d:const")
}

#[redis_lock(name = "d:expr", expire = Duration::from_millis(1800), locker = locker)]
async fn expire_expr(locker: &Locker, server: &RedisServer) -> Result<i64, LockError> {
    pttl_of(server, "d:expr")
}

#[redis_lock(name = "d:arg", expire = lease, locker = locker)]
fn expire_arg(locker: &Locker, server: &RedisServer, lease: Duration) -> Result<i64, LockError> {
    pttl_of(server, "d:arg")
}

#[redis_lock(name = "d:default", locker = locker)]
fn expire_default(locker: &Locker, server: &RedisServer) -> Result<i64, LockError> {
    pttl_of(server, "d:default")
}

/// `pttl` is in (expire - 500 ms, expire].
fn assert_lease(pttl: i64, expire_ms: i64, what: &str) {
    assert!(
        pttl > expire_ms - 500 && pttl <= expire_ms,
        "{what}: PTTL inside the body was {pttl} ms, expected ({}, {expire_ms}]",
        expire_ms - 500
    );
}

#[tokio::test]
async fn expire_forms_set_the_lease() {
    let (server, locker) = setup();
    assert_lease(expire_1500ms(&locker, &server).unwrap(), 1500, "\"1500ms\"");
    assert_lease(expire_2(&locker, &server).unwrap(), 2000, "2");
    assert_lease(expire_1_25(&locker, &server).await.unwrap(), 1250, "1.25");
    assert_lease(
        expire_2_5s(&locker, &server).await.unwrap(),
        2500,
        "\"2.5s\"",
    );
    assert_lease(expire_2m(&locker, &server).unwrap(), 120_000, "\"2m\"");
    assert_lease(expire_const(&locker, &server).unwrap(), 2750, "LEASE const");
    assert_lease(
        expire_expr(&locker, &server).await.unwrap(),
        1800,
        "Duration expr",
    );
    assert_lease(
        expire_arg(&locker, &server, Duration::from_millis(1300)).unwrap(),
        1300,
        "argument 1300 ms",
    );
    assert_lease(
        expire_arg(&locker, &server, Duration::from_secs(4)).unwrap(),
        4000,
        "argument 4 s",
    );
    assert_lease(expire_default(&locker, &server).unwrap(), 10_000, "default");
    assert!(server.held_locks().is_empty());
}

#[redis_lock(name = "w", expire = 30, acquire_time = "300ms", locker = locker)]
fn wait_300ms(locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "w", expire = 30, acquire_time = 0.4, locker = locker)]
async fn wait_0_4(locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "w", expire = 30, acquire_time = wait, locker = locker)]
async fn wait_arg(locker: &Locker, wait: Duration) -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "w", expire = 30, acquire_time = Duration::from_millis(250), locker = locker)]
fn wait_expr(locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

/// The Timeout reports the configured acquire time, and the call waited at
/// least that long (bounded generously above).
fn assert_waited(result: Result<(), LockError>, took: Duration, expected: Duration) {
    match result {
        Err(LockError::Timeout { name, waited }) => {
            assert_eq!(name, "w");
            assert_eq!(waited, expected);
        }
        other => panic!("expected Timeout after {expected:?}, got {other:?}"),
    }
    assert_took(
        took,
        expected,
        expected + Duration::from_secs(3),
        "the call",
    );
}

#[tokio::test]
async fn acquire_time_forms_set_the_wait() {
    let (server, locker) = setup();
    let _held = take_leased(
        &Locker::new(server.url()).unwrap(),
        "w",
        Duration::from_secs(30),
    )
    .await;

    let start = Instant::now();
    let r = wait_300ms(&locker);
    assert_waited(r, start.elapsed(), Duration::from_millis(300));

    let start = Instant::now();
    let r = wait_0_4(&locker).await;
    assert_waited(r, start.elapsed(), Duration::from_millis(400));

    for ms in [150, 600] {
        let start = Instant::now();
        let r = wait_arg(&locker, Duration::from_millis(ms)).await;
        assert_waited(r, start.elapsed(), Duration::from_millis(ms));
    }

    let start = Instant::now();
    let r = wait_expr(&locker);
    assert_waited(r, start.elapsed(), Duration::from_millis(250));
}

/// A short lease really frees the lock by itself: a body that outlives it
/// lets another caller in (and then its own release leaves that caller's
/// lock alone; the call returns `Err(Lost)`).
#[redis_lock(name = "short", expire = "300ms", acquire_time = 0, locker = locker)]
fn outlives_its_lease(locker: &Locker, other: &Locker) -> Result<bool, LockError> {
    std::thread::sleep(Duration::from_millis(600));
    let taken = other
        .lock("short")
        .acquire_timeout(Duration::ZERO)
        .expire(std::time::Duration::from_secs(30))
        .acquire_blocking();
    Ok(taken.map(std::mem::forget).is_ok())
}

#[test]
fn a_short_lease_expires_on_its_own() {
    let (server, locker) = setup();
    let other = Locker::new(server.url()).unwrap();
    let lost = outlives_its_lease(&locker, &other).expect_err("a lost lock reported Ok");
    assert!(
        matches!(
            lost,
            LockError::Lost {
                reason: LostReason::Expired,
                ..
            }
        ),
        "{lost:?}"
    );
    // The other owner's lock was left alone by the late release.
    assert!(
        server.exists(&lock_key("short")),
        "the late release deleted another owner's lock"
    );
    assert!(server.pttl(&lock_key("short")) > 20_000);
}
