//! `LockBuilder::renew_for`: a cap on renewal. The lease is renewed as with
//! `renew(true)` until `renew_for` has passed since the lock was taken;
//! then renewal stops, the lease runs out on its own (within one more
//! lease), and the guard turns lost with `LostReason::RenewFor`. A release
//! before or after the cap (while the lease lasts) releases as usual;
//! `extend` is not capped; bad caps are refused at acquire.
//!
//! Leases here are 1 s, caps 1.5 s: renewals at about 0.33 s, 0.67 s, 1 s
//! and 1.33 s, the last one keeping the lock until about 2.33 s. Bounds are
//! generous; nothing here measures speed.

use crate::support;

use std::time::{Duration, Instant};

use lockattr::{LockError, LostReason};
use support::asserts::lost_reason;
use support::lockers::setup;
use support::wakeups::{hold_capped, hold_capped_blocking};
use support::{RedisServer, eventually, lock_key, stranger_takes};

const LEASE: Duration = Duration::from_secs(1);
const CAP: Duration = Duration::from_millis(1500);
/// The guard is lost by then (the cap plus a lease, plus slack).
const LOST_BY: Duration = Duration::from_secs(4);

/// Renewed past the first lease (held at 1.3 s, with time left in Redis),
/// then lost with `RenewFor` after the cap and within a lease of it; the
/// key is gone, another Locker takes the lock, the late release is
/// `NotOwned`.
#[tokio::test]
async fn renewal_stops_at_the_cap_and_the_guard_is_lost() {
    let (server, locker) = setup();
    let start = Instant::now();
    let guard = hold_capped(&locker, "capped", LEASE, CAP).await;
    assert!(guard.is_renewed(), "renew_for turns renewal on");
    tokio::time::sleep_until((start + Duration::from_millis(1300)).into()).await;
    let pttl = server.pttl(&lock_key("capped"));
    assert!(
        pttl > 0,
        "PTTL {pttl} at 1.3 s: not renewed past its 1 s lease"
    );
    assert!(!guard.is_lost());
    assert!(stranger_takes(&server, "capped").is_err());

    let lost = tokio::time::timeout(LOST_BY, guard.lost())
        .await
        .expect("not lost within 4 s of the 1.5 s cap");
    let at = start.elapsed();
    assert_eq!(lost_reason(&lost), Some(LostReason::RenewFor), "{lost}");
    assert!(lost.to_string().contains("renew_for"), "{lost}");
    assert!(
        at >= CAP,
        "lost {at:?} after the acquisition, before the cap"
    );
    assert!(at < CAP + LEASE + Duration::from_secs(2), "lost {at:?}");

    assert!(
        eventually(Duration::from_secs(2), || !server
            .exists(&lock_key("capped")))
        .is_some(),
        "the key outlived the guard's lease"
    );
    stranger_takes(&server, "capped").unwrap();
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotOwned { .. })
    ));
}

/// The same through the blocking API: `lost_blocking` sees the loss.
#[test]
fn blocking_renewal_stops_at_the_cap() {
    let (server, locker) = setup();
    let start = Instant::now();
    let guard = hold_capped_blocking(&locker, "capped:sync", LEASE, CAP);
    std::thread::sleep(
        (start + Duration::from_millis(1300)).saturating_duration_since(Instant::now()),
    );
    assert!(server.pttl(&lock_key("capped:sync")) > 0, "not renewed");
    assert!(guard.lost_blocking(Duration::ZERO).is_none());
    let lost = guard
        .lost_blocking(LOST_BY)
        .expect("not lost within 4 s of the cap");
    assert_eq!(lost_reason(&lost), Some(LostReason::RenewFor));
    assert!(start.elapsed() >= CAP);
    assert!(
        eventually(Duration::from_secs(2), || !server
            .exists(&lock_key("capped:sync")))
        .is_some()
    );
    stranger_takes(&server, "capped:sync").unwrap();
    drop(guard);
}

/// Asserts that the lock `name` is free: its key is gone, and another
/// Locker takes it at once.
fn assert_free(server: &RedisServer, name: &str) {
    assert!(!server.exists(&lock_key(name)));
    stranger_takes(server, name).unwrap();
}

/// A release before the cap frees the lock at once.
#[tokio::test]
async fn a_release_before_the_cap_releases_at_once() {
    let (server, locker) = setup();
    let guard = hold_capped(&locker, "early", LEASE, CAP).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    guard.release().await.unwrap();
    assert_free(&server, "early");
}

/// After the cap, while the lease still lasts, a release is the usual one:
/// `Ok`, and the key is gone at once.
#[tokio::test]
async fn a_release_after_the_cap_within_the_lease_releases() {
    let (server, locker) = setup();
    let start = Instant::now();
    let guard = hold_capped(&locker, "late", LEASE, Duration::from_millis(700)).await;
    // Renewals at about 0.33 s and 0.67 s: held until about 1.67 s.
    tokio::time::sleep_until((start + Duration::from_millis(1000)).into()).await;
    assert!(!guard.is_lost());
    assert!(server.exists(&lock_key("late")));
    guard.release().await.unwrap();
    assert_free(&server, "late");
}

/// `extend` is not capped: after the cap it still raises the lease, and the
/// guard holds until that lease ends (renewal stays stopped).
#[tokio::test]
async fn extend_after_the_cap_is_not_capped() {
    let (server, locker) = setup();
    let start = Instant::now();
    let guard = hold_capped(&locker, "extended", LEASE, Duration::from_millis(500)).await;
    tokio::time::sleep_until((start + Duration::from_millis(800)).into()).await;
    guard.extend(Duration::from_secs(3)).await.unwrap();
    let pttl = server.pttl(&lock_key("extended"));
    assert!(pttl > 2000, "PTTL {pttl} after extending by 3 s");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!guard.is_lost(), "lost within the extended lease");
    assert!(server.exists(&lock_key("extended")));
    let lost = tokio::time::timeout(LOST_BY, guard.lost())
        .await
        .expect("the extended lease runs out: renewal stayed stopped");
    assert_eq!(lost_reason(&lost), Some(LostReason::RenewFor));
}

/// The message of an `InvalidInput`; panics on anything else.
fn invalid(outcome: Result<lockattr::LockGuard, LockError>) -> String {
    match outcome {
        Err(e @ LockError::InvalidInput { .. }) => e.to_string(),
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

/// Bad caps are refused at acquire, with what to do; nothing is written.
#[test]
fn bad_caps_are_invalid_input() {
    let (server, locker) = setup();
    for cap in [Duration::ZERO, Duration::from_micros(999)] {
        let text = invalid(locker.lock("bad").renew_for(cap).acquire_blocking());
        assert!(text.contains("renew_for"), "{text}");
        assert!(text.contains("leave `renew_for` out"), "{text}");
    }
    let month = Duration::from_secs(31 * 24 * 3600);
    let text = invalid(locker.lock("bad").renew_for(month).acquire_blocking());
    assert!(text.contains("30 days"), "{text}");
    let off = locker
        .lock("bad")
        .renew(false)
        .renew_for(Duration::from_secs(60));
    let text = invalid(off.acquire_blocking());
    assert!(text.contains("renew(false)"), "{text}");
    // `renew(true)` with a cap is fine.
    locker
        .lock("ok")
        .renew(true)
        .renew_for(Duration::from_secs(60))
        .acquire_blocking()
        .unwrap()
        .release_blocking()
        .unwrap();
    assert!(server.keys("*bad*").is_empty());
}
