//! Release, extend and reacquire, async and blocking: they act only while the
//! guard still owns the lock, answer `NotOwned` otherwise, and never delete,
//! extend or revive another owner's lock.
mod support;

use std::time::Duration;

use lockattr::{LockError, Locker};
use support::lockers::setup;
use support::{keys, lock_key};

const KEY: &str = "lockattr:{r}";

fn assert_not_owned(err: &LockError, name: &str) {
    match err {
        LockError::NotOwned { name: n } => assert_eq!(n, name),
        other => panic!("expected NotOwned, got {other:?}"),
    }
    assert!(err.is_not_owned());
    assert!(err.to_string().contains(name), "{err}");
}

#[tokio::test]
async fn release_frees_the_lock() {
    let (server, locker) = setup();
    let guard = locker
        .lock("r")
        .expire(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    assert!(server.exists(KEY));
    guard.release().await.unwrap();
    assert!(!server.exists(KEY), "the key is gone when release returns");
    // And it can be taken at once.
    locker
        .lock("r")
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[test]
fn release_blocking_frees_the_lock() {
    let (server, locker) = setup();
    let guard = locker
        .lock("r")
        .expire(Duration::from_secs(30))
        .acquire_blocking()
        .unwrap();
    assert!(server.exists(KEY));
    guard.release_blocking().unwrap();
    assert!(!server.exists(KEY));
    // An async-acquired guard released the blocking way, from a plain thread.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let guard = rt.block_on(locker.lock("r").acquire()).unwrap();
    drop(rt);
    guard.release_blocking().unwrap();
    assert!(!server.exists(KEY));
}

#[tokio::test]
async fn release_after_expiry_is_not_owned() {
    let (server, locker) = setup();
    let guard = locker
        .lock("r")
        .expire(Duration::from_millis(100))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!server.exists(KEY));
    let err = guard.release().await.unwrap_err();
    assert_not_owned(&err, "r");
    assert!(!server.exists(KEY), "nothing was written back");
}

#[test]
fn release_blocking_after_expiry_is_not_owned() {
    let (_server, locker) = setup();
    let guard = locker
        .lock("r")
        .expire(Duration::from_millis(100))
        .acquire_blocking()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let err = guard.release_blocking().unwrap_err();
    assert_not_owned(&err, "r");
}

#[tokio::test]
async fn release_never_deletes_another_owners_lock() {
    let (server, locker) = setup();
    let other_locker = Locker::new(server.url()).unwrap();
    let stale = locker
        .lock("r")
        .expire(Duration::from_millis(100))
        .acquire()
        .await
        .unwrap();
    let stale_blocking = locker
        .lock("r2")
        .expire(Duration::from_millis(100))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let owner = other_locker
        .lock("r")
        .expire(Duration::from_secs(30))
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await
        .unwrap();
    let owner2 = other_locker
        .lock("r2")
        .expire(Duration::from_secs(30))
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await
        .unwrap();
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
    let guard = locker
        .lock("r")
        .expire(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    guard.extend(Duration::from_secs(10)).await.unwrap();
    let pttl = server.pttl(KEY);
    // About 2 s left + 10 s added.
    assert!((10_500..=12_000).contains(&pttl), "PTTL {pttl}");
    guard.extend(Duration::from_secs(10)).await.unwrap();
    let pttl = server.pttl(KEY);
    assert!((20_500..=22_000).contains(&pttl), "PTTL {pttl}");
    guard.release().await.unwrap();
}

#[test]
fn extend_blocking_adds_to_the_lease() {
    let (server, locker) = setup();
    let guard = locker
        .lock("r")
        .expire(Duration::from_secs(2))
        .acquire_blocking()
        .unwrap();
    guard.extend_blocking(Duration::from_secs(10)).unwrap();
    let pttl = server.pttl(KEY);
    assert!((10_500..=12_000).contains(&pttl), "PTTL {pttl}");
    guard.release_blocking().unwrap();
}

#[tokio::test]
async fn reacquire_resets_the_lease_to_expire() {
    let (server, locker) = setup();
    let guard = locker
        .lock("r")
        .expire(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    // Run the lease down from outside, then reset it.
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(KEY)
        .arg(800)
        .query(&mut server.client())
        .unwrap();
    assert!(server.pttl(KEY) <= 800);
    guard.reacquire().await.unwrap();
    let pttl = server.pttl(KEY);
    assert!((4_000..=5_000).contains(&pttl), "PTTL {pttl}");
    // Reacquire sets, it does not add: a second call keeps it at most `expire`.
    guard.reacquire().await.unwrap();
    let pttl = server.pttl(KEY);
    assert!((4_000..=5_000).contains(&pttl), "PTTL {pttl}");
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
    let guard = locker
        .lock("r")
        .expire(Duration::from_secs(5))
        .acquire_blocking()
        .unwrap();
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(KEY)
        .arg(800)
        .query(&mut server.client())
        .unwrap();
    guard.reacquire_blocking().unwrap();
    let pttl = server.pttl(KEY);
    assert!((4_000..=5_000).contains(&pttl), "PTTL {pttl}");
    guard.release_blocking().unwrap();
}

#[tokio::test]
async fn extend_and_reacquire_after_expiry_do_not_revive() {
    let (server, locker) = setup();
    let guard = locker
        .lock("r")
        .expire(Duration::from_millis(100))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_not_owned(
        &guard.extend(Duration::from_secs(10)).await.unwrap_err(),
        "r",
    );
    assert!(!server.exists(KEY), "extend revived an expired lock");
    assert_not_owned(&guard.reacquire().await.unwrap_err(), "r");
    assert!(!server.exists(KEY), "reacquire revived an expired lock");
    let guard = tokio::task::spawn_blocking(move || {
        assert_not_owned(
            &guard.extend_blocking(Duration::from_secs(10)).unwrap_err(),
            "r",
        );
        assert_not_owned(&guard.reacquire_blocking().unwrap_err(), "r");
        guard
    })
    .await
    .unwrap();
    assert!(!server.exists(KEY));
    assert_not_owned(&guard.release().await.unwrap_err(), "r");
}

#[tokio::test]
async fn extend_and_reacquire_never_touch_another_owners_lock() {
    let (server, locker) = setup();
    let stale = locker
        .lock("r")
        .expire(Duration::from_millis(100))
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let owner = locker
        .lock("r")
        .expire(Duration::from_secs(3))
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await
        .unwrap();
    let token = server.get(KEY).unwrap();

    assert_not_owned(
        &stale.extend(Duration::from_secs(60)).await.unwrap_err(),
        "r",
    );
    assert_not_owned(&stale.reacquire().await.unwrap_err(), "r");
    let stale = tokio::task::spawn_blocking(move || {
        assert_not_owned(
            &stale.extend_blocking(Duration::from_secs(60)).unwrap_err(),
            "r",
        );
        assert_not_owned(&stale.reacquire_blocking().unwrap_err(), "r");
        stale
    })
    .await
    .unwrap();

    let pttl = server.pttl(KEY);
    assert!(pttl <= 3_000, "another owner's lease was extended: {pttl}");
    assert_eq!(server.get(KEY), Some(token));
    drop(stale);
    owner.release().await.unwrap();
}

#[tokio::test]
async fn extend_by_zero_is_refused() {
    let (server, locker) = setup();
    let guard = locker
        .lock("r")
        .expire(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    let err = guard.extend(Duration::ZERO).await.unwrap_err();
    assert!(matches!(err, LockError::InvalidInput { .. }), "{err:?}");
    assert!(server.pttl(KEY) > 3_000);
    guard.release().await.unwrap();
}

#[tokio::test]
async fn guard_reports_its_lock() {
    let (_server, locker) = setup();
    let guard = locker
        .lock("named lock")
        .expire(Duration::from_secs(7))
        .acquire()
        .await
        .unwrap();
    assert_eq!(guard.name(), "named lock");
    assert_eq!(guard.expire(), Duration::from_secs(7));
    assert!(guard.fencing_token() >= 1);
    let debug = format!("{guard:?}");
    assert!(debug.contains("named lock"), "{debug}");
    guard.release().await.unwrap();
}
