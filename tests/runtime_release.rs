//! Release, extend and reacquire, async and blocking: they act only while the
//! guard still owns the lock, answer `NotOwned` otherwise, and never delete,
//! extend or revive another owner's lock.
use crate::support;

use std::time::Duration;

use lockattr::{LockError, LockGuard};
use support::lockers::{self, setup};
use support::outages::{assert_pttl, take_and_release_now, take_leased, take_leased_blocking};
use support::takes::take_now;
use support::{RedisServer, keys, lock_key};

const KEY: &str = "lockattr:{r}";

fn assert_not_owned(err: &LockError, name: &str) {
    match err {
        LockError::NotOwned { name: n } => assert_eq!(n, name),
        other => panic!("expected NotOwned, got {other:?}"),
    }
    assert!(err.is_not_owned());
    assert!(err.to_string().contains(name), "{err}");
}

/// On a blocking thread, asserts that `guard` (of the lock `r`) can neither
/// extend its lease by `by` nor reacquire it (`NotOwned`); the guard back.
async fn blocking_extend_and_reacquire_not_owned(guard: LockGuard, by: Duration) -> LockGuard {
    tokio::task::spawn_blocking(move || {
        assert_not_owned(&guard.extend_blocking(by).unwrap_err(), "r");
        assert_not_owned(&guard.reacquire_blocking().unwrap_err(), "r");
        guard
    })
    .await
    .unwrap()
}

/// Runs the lease of the lock `r` down to 800 ms from outside.
fn run_the_lease_down(server: &RedisServer) {
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(KEY)
        .arg(800)
        .query(&mut server.client())
        .unwrap();
}

#[tokio::test]
async fn release_frees_the_lock() {
    let (server, locker) = setup();
    let guard = take_leased(&locker, "r", Duration::from_secs(30)).await;
    assert!(server.exists(KEY));
    guard.release().await.unwrap();
    assert!(!server.exists(KEY), "the key is gone when release returns");
    // And it can be taken at once.
    take_and_release_now(&locker, "r").await;
}

#[test]
fn release_blocking_frees_the_lock() {
    let (server, locker) = setup();
    let guard = take_leased_blocking(&locker, "r", Duration::from_secs(30));
    assert!(server.exists(KEY));
    guard.release_blocking().unwrap();
    assert!(!server.exists(KEY));
    // An async-acquired guard released the blocking way, from a plain thread.
    let rt = support::current_thread();
    let guard = rt.block_on(locker.lock("r").acquire()).unwrap();
    drop(rt);
    guard.release_blocking().unwrap();
    assert!(!server.exists(KEY));
}

#[tokio::test]
async fn release_after_expiry_is_not_owned() {
    let (server, locker) = setup();
    let guard = take_leased(&locker, "r", Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!server.exists(KEY));
    let err = guard.release().await.unwrap_err();
    assert_not_owned(&err, "r");
    assert!(!server.exists(KEY), "nothing was written back");
}

#[test]
fn release_blocking_after_expiry_is_not_owned() {
    let (_server, locker) = setup();
    let guard = take_leased_blocking(&locker, "r", Duration::from_millis(100));
    std::thread::sleep(Duration::from_millis(300));
    let err = guard.release_blocking().unwrap_err();
    assert_not_owned(&err, "r");
}

#[tokio::test]
async fn release_never_deletes_another_owners_lock() {
    let (server, locker) = setup();
    let other_locker = lockers::locker(&server);
    let stale = take_leased(&locker, "r", Duration::from_millis(100)).await;
    let stale_blocking = take_leased(&locker, "r2", Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let owner = take_now(&other_locker, "r", Duration::from_secs(30)).await;
    let owner2 = take_now(&other_locker, "r2", Duration::from_secs(30)).await;
    let token = server.get(KEY).unwrap();
    let token2 = server.get(&lock_key("r2")).unwrap();

    assert_not_owned(&stale.release().await.unwrap_err(), "r");
    let err = tokio::task::spawn_blocking(move || stale_blocking.release_blocking())
        .await
        .unwrap()
        .unwrap_err();
    assert_not_owned(&err, "r2");

    assert_eq!(server.get(KEY), Some(token));
    assert_eq!(server.get(&lock_key("r2")), Some(token2));
    assert!(server.pttl(KEY) > 25_000);
    // The owner still owns it.
    owner.release().await.unwrap();
    owner2.release().await.unwrap();
}

#[tokio::test]
async fn extend_adds_to_the_lease() {
    let (server, locker) = setup();
    let guard = take_leased(&locker, "r", Duration::from_secs(2)).await;
    guard.extend(Duration::from_secs(10)).await.unwrap();
    // About 2 s left + 10 s added.
    assert_pttl(&server, KEY, 10_500..=12_000);
    guard.extend(Duration::from_secs(10)).await.unwrap();
    assert_pttl(&server, KEY, 20_500..=22_000);
    guard.release().await.unwrap();
}

#[test]
fn extend_blocking_adds_to_the_lease() {
    let (server, locker) = setup();
    let guard = take_leased_blocking(&locker, "r", Duration::from_secs(2));
    guard.extend_blocking(Duration::from_secs(10)).unwrap();
    assert_pttl(&server, KEY, 10_500..=12_000);
    guard.release_blocking().unwrap();
}

#[tokio::test]
async fn reacquire_resets_the_lease_to_expire() {
    let (server, locker) = setup();
    let guard = take_leased(&locker, "r", Duration::from_secs(5)).await;
    // Run the lease down from outside, then reset it.
    run_the_lease_down(&server);
    assert!(server.pttl(KEY) <= 800);
    guard.reacquire().await.unwrap();
    assert_pttl(&server, KEY, 4_000..=5_000);
    // Reacquire sets, it does not add: a second call keeps it at most `expire`.
    guard.reacquire().await.unwrap();
    assert_pttl(&server, KEY, 4_000..=5_000);
    // Same fencing token: reacquire is not a new acquisition.
    assert_eq!(
        server.get(&keys::lock("r").fence),
        Some(guard.fencing_token().to_string())
    );
    guard.release().await.unwrap();
}

#[test]
fn reacquire_blocking_resets_the_lease_to_expire() {
    let (server, locker) = setup();
    let guard = take_leased_blocking(&locker, "r", Duration::from_secs(5));
    run_the_lease_down(&server);
    guard.reacquire_blocking().unwrap();
    assert_pttl(&server, KEY, 4_000..=5_000);
    guard.release_blocking().unwrap();
}

#[tokio::test]
async fn extend_and_reacquire_after_expiry_do_not_revive() {
    let (server, locker) = setup();
    let guard = take_leased(&locker, "r", Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_not_owned(
        &guard.extend(Duration::from_secs(10)).await.unwrap_err(),
        "r",
    );
    assert!(!server.exists(KEY), "extend revived an expired lock");
    assert_not_owned(&guard.reacquire().await.unwrap_err(), "r");
    assert!(!server.exists(KEY), "reacquire revived an expired lock");
    let guard = blocking_extend_and_reacquire_not_owned(guard, Duration::from_secs(10)).await;
    assert!(!server.exists(KEY));
    assert_not_owned(&guard.release().await.unwrap_err(), "r");
}

#[tokio::test]
async fn extend_and_reacquire_never_touch_another_owners_lock() {
    let (server, locker) = setup();
    let stale = take_leased(&locker, "r", Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let owner = take_now(&locker, "r", Duration::from_secs(3)).await;
    let token = server.get(KEY).unwrap();

    assert_not_owned(
        &stale.extend(Duration::from_secs(60)).await.unwrap_err(),
        "r",
    );
    assert_not_owned(&stale.reacquire().await.unwrap_err(), "r");
    let stale = blocking_extend_and_reacquire_not_owned(stale, Duration::from_secs(60)).await;

    let pttl = server.pttl(KEY);
    assert!(pttl <= 3_000, "another owner's lease was extended: {pttl}");
    assert_eq!(server.get(KEY), Some(token));
    drop(stale);
    owner.release().await.unwrap();
}

#[tokio::test]
async fn extend_by_zero_is_refused() {
    let (server, locker) = setup();
    let guard = take_leased(&locker, "r", Duration::from_secs(5)).await;
    let err = guard.extend(Duration::ZERO).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidInput { .. }), "{err:?}");
    assert!(server.pttl(KEY) > 3_000);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn guard_reports_its_lock() {
    let (_server, locker) = setup();
    let guard = take_leased(&locker, "named lock", Duration::from_secs(7)).await;
    assert_eq!(guard.name(), "named lock");
    assert_eq!(guard.expire(), Duration::from_secs(7));
    assert!(guard.fencing_token() >= 1);
    let debug = format!("{guard:?}");
    assert!(debug.contains("named lock"), "{debug}");
    guard.release().await.unwrap();
}
