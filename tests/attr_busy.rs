//! When the lock is held elsewhere, a `#[redis_lock]` function waits about
//! `acquire_time` (never less), returns `Err(LockError::Timeout { .. }.into())`
//! naming the lock, and does not run its body; `acquire_time = 0` tries once
//! and returns at once; an application error type with `From<LockError>`
//! receives the timeout; a lock freed during the wait is taken.

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lockattr::{LockError, LockGuard, Locker, redis_lock};
use support::asserts::assert_timeout;
use support::attrs::{assert_took, counted};
use support::lockers::setup;

#[derive(Debug)]
enum AppError {
    Lock(LockError),
    #[allow(dead_code)]
    Other(String),
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

counted!(#[redis_lock(name = "busy:{id}", expire = 30, acquire_time = 1, locker = locker)] fn sync_wait_1s(locker, id, runs) -> LockError);
counted!(#[redis_lock(name = "busy:{id}", expire = 30, acquire_time = 1, locker = locker)] async fn async_wait_1s(locker, id, runs) -> AppError);
counted!(#[redis_lock(name = "busy:{id}", expire = 30, acquire_time = 0, locker = locker)] fn sync_try_once(locker, id, runs) -> AppError);
counted!(#[redis_lock(name = "busy:{id}", expire = 30, acquire_time = 0, locker = locker)] async fn async_try_once(locker, id, runs) -> LockError);
counted!(#[redis_lock(name = "busy:{id}", expire = 30, acquire_time = 10, locker = locker)] async fn async_wait_10s(locker, id, runs) -> LockError);

fn hold(locker: &Locker, name: &str) -> LockGuard {
    locker
        .lock(name)
        .expire(Duration::from_secs(30))
        .acquire_timeout(Duration::ZERO)
        .acquire_blocking()
        .unwrap()
}

/// Asserts that a call gave up after about its acquire_time, 1 s (at least
/// that, less than 4 s), and that no body ran.
fn gave_up_after_1s_without_running(took: Duration, runs: &AtomicU32, what: &str) {
    assert_took(took, Duration::from_secs(1), Duration::from_secs(4), what);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "the body ran without the lock"
    );
}

#[test]
fn sync_call_times_out_after_acquire_time_without_running() {
    let (server, locker) = setup();
    // Another Locker (another process, in effect) holds the lock.
    let holder = hold(&Locker::new(server.url()).unwrap(), "busy:1");
    let runs = AtomicU32::new(0);

    let start = Instant::now();
    let err = sync_wait_1s(&locker, 1, &runs).unwrap_err();
    let took = start.elapsed();
    assert_timeout(&err, "busy:1", Duration::from_secs(1));
    gave_up_after_1s_without_running(took, &runs, "sync call");

    // Another name is not affected.
    assert_eq!(sync_wait_1s(&locker, 2, &runs).unwrap(), 2);
    drop(holder);
    assert_eq!(sync_wait_1s(&locker, 1, &runs).unwrap(), 1);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn async_call_times_out_into_the_app_error() {
    let (server, locker) = setup();
    let holder = hold(&Locker::new(server.url()).unwrap(), "busy:1");
    let runs = AtomicU32::new(0);

    let start = Instant::now();
    let err = async_wait_1s(&locker, 1, &runs).await.unwrap_err();
    let took = start.elapsed();
    match &err {
        AppError::Lock(e) => assert_timeout(e, "busy:1", Duration::from_secs(1)),
        other => panic!("expected AppError::Lock(Timeout), got {other:?}"),
    }
    gave_up_after_1s_without_running(took, &runs, "async call");

    holder.release_blocking().unwrap();
    assert_eq!(async_wait_1s(&locker, 1, &runs).await.unwrap(), 1);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[test]
fn acquire_time_zero_tries_once_sync() {
    let (_server, locker) = setup();
    let holder = hold(&locker, "busy:7");
    let runs = AtomicU32::new(0);
    let start = Instant::now();
    let err = sync_try_once(&locker, 7, &runs).unwrap_err();
    let took = start.elapsed();
    match &err {
        AppError::Lock(e) => assert_timeout(e, "busy:7", Duration::ZERO),
        other => panic!("expected AppError::Lock(Timeout), got {other:?}"),
    }
    // One round trip; the bound is generous, the lease is 30 s.
    assert!(
        took < Duration::from_secs(1),
        "acquire_time = 0 took {took:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    drop(holder);
    assert_eq!(sync_try_once(&locker, 7, &runs).unwrap(), 7);
}

#[tokio::test]
async fn acquire_time_zero_tries_once_async() {
    let (_server, locker) = setup();
    let holder = hold(&locker, "busy:7");
    let runs = AtomicU32::new(0);
    let start = Instant::now();
    let err = async_try_once(&locker, 7, &runs).await.unwrap_err();
    let took = start.elapsed();
    assert_timeout(&err, "busy:7", Duration::ZERO);
    assert!(
        took < Duration::from_secs(1),
        "acquire_time = 0 took {took:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    holder.release().await.unwrap();
    assert_eq!(async_try_once(&locker, 7, &runs).await.unwrap(), 7);
}

/// A lock released during the wait is taken: the call does not sit out the
/// whole acquire_time (10 s) nor the holder's lease (30 s).
#[tokio::test]
async fn a_lock_freed_during_the_wait_is_taken() {
    let (_server, locker) = setup();
    let holder = hold(&locker, "busy:9");
    let runs = AtomicU32::new(0);
    let release_at = Instant::now() + Duration::from_millis(300);
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(release_at.saturating_duration_since(Instant::now()));
        holder.release_blocking().unwrap();
    });
    let start = Instant::now();
    assert_eq!(async_wait_10s(&locker, 9, &runs).await.unwrap(), 9);
    let took = start.elapsed();
    releaser.join().unwrap();
    assert!(
        Instant::now() >= release_at,
        "got the lock before the holder released it"
    );
    assert!(
        took < Duration::from_secs(5),
        "took {took:?} although the lock was freed at 300 ms"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// A lock whose holder died (never released) frees itself at the lease's
/// end, and a waiting call then gets it.
#[test]
fn an_expired_lease_lets_the_waiting_call_in() {
    let (server, locker) = setup();
    // An owner that vanished: its lock is just a key with a 500 ms TTL.
    let _: () = redis::cmd("SET")
        .arg(support::lock_key("busy:11"))
        .arg("someone-else")
        .arg("PX")
        .arg(500)
        .query(&mut server.client())
        .unwrap();
    let runs = AtomicU32::new(0);
    let start = Instant::now();
    assert_eq!(sync_wait_1s(&locker, 11, &runs).unwrap(), 11);
    assert!(
        start.elapsed() >= Duration::from_millis(300),
        "the foreign lock was ignored"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
