//! Every duration is bounded where it enters the API: an absurd one is
//! refused with `InvalidInput` before anything is sent, and nothing of it
//! reaches Redis (where a script that fails halfway keeps its writes).
use crate::support;

use std::time::Duration;

use lockattr::{LockError, Locker, MAX_ACQUIRE_TIMEOUT, MAX_EXPIRE, MAX_TIMEOUT};
use support::lockers::{self, setup};
use support::outages::{assert_pttl, take_and_release_now, take_leased, try_leased, try_wait};
use support::{keys, lock_key};

fn assert_invalid(err: &LockError, what: &str) {
    match err {
        LockError::InvalidInput { what: w, .. } => assert_eq!(*w, what, "{err}"),
        other => panic!("expected InvalidInput about {what}, got {other:?}"),
    }
}

/// An acquire timeout of 10^17 ms was sent to Redis, where its PEXPIRE
/// failed after RPUSH and HSET had queued the caller: queue keys without a
/// time to live, and the next release handed the lock to that phantom, so
/// the next caller found it held. Now it is refused before anything is sent.
#[tokio::test]
async fn an_absurd_acquire_timeout_is_refused_and_queues_nothing() {
    let (server, locker) = setup();
    let holder = take_leased(&locker, "q", Duration::from_secs(30)).await;
    for wait in [
        Duration::from_millis(100_000_000_000_000_000),
        MAX_ACQUIRE_TIMEOUT + Duration::from_millis(1),
    ] {
        let err = try_wait(&locker, "q", wait).await.unwrap_err();
        assert_invalid(&err, "acquire timeout");
        assert!(err.to_string().contains("2592000s"), "{err}");
    }
    assert_eq!(
        server.keys("lockattr:{q}:*"),
        vec!["lockattr:{q}:fence".to_string()],
        "nothing was queued"
    );
    holder.release().await.unwrap();
    // The lock is free, not handed to a phantom waiter.
    take_and_release_now(&locker, "q").await;
}

/// The longest acquire timeout is accepted, and so is `Duration::MAX`
/// ("as long as allowed"); both queue with a bounded time to live.
#[tokio::test]
async fn the_longest_acquire_timeouts_are_accepted() {
    let (server, locker) = setup();
    for (name, wait) in [("w1", MAX_ACQUIRE_TIMEOUT), ("w2", Duration::MAX)] {
        let holder = take_leased(&locker, name, Duration::from_millis(300)).await;
        // Of another Locker, so that it queues in Redis.
        let other = lockers::locker(&server);
        let waiter = other.lock(name).acquire_timeout(wait).acquire();
        let watch = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let ttl = server.pttl(&keys::lock(name).queue);
            assert!(
                ttl > 0 && u128::try_from(ttl).unwrap() <= MAX_ACQUIRE_TIMEOUT.as_millis(),
                "queue PTTL {ttl}"
            );
        };
        let (guard, ()) = tokio::join!(waiter, watch);
        guard.unwrap().release().await.unwrap();
        assert!(holder.release().await.unwrap_err().is_not_owned());
    }
}

/// An extension longer than the Locker's max lease, or one that would
/// leave more than it on the lease, is refused and changes nothing.
#[tokio::test]
async fn an_extension_beyond_the_max_lease_is_refused() {
    let (server, default) = setup();
    let guard = take_leased(&default, "x", Duration::from_secs(10)).await;
    let err = guard
        .extend(MAX_EXPIRE + Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_invalid(&err, "lease extension");
    assert!(err.to_string().contains("max_lease"), "{err}");
    assert!(server.pttl(&lock_key("x")) <= 10_000);
    guard.release().await.unwrap();

    let short = Locker::builder(server.url())
        .max_lease(Duration::from_secs(60))
        .build()
        .unwrap();
    let guard = take_leased(&short, "y", Duration::from_secs(50)).await;
    let err = guard.extend(Duration::from_secs(61)).await.unwrap_err();
    assert_invalid(&err, "lease extension");
    // 50 s left + 20 s would be 70 s: more than the max lease of 60 s.
    let err = guard.extend(Duration::from_secs(20)).await.unwrap_err();
    assert_invalid(&err, "lease extension");
    assert!(err.to_string().contains("max_lease (60s)"), "{err}");
    assert_pttl(&server, &lock_key("y"), 40_000..=50_000);
    assert!(!guard.is_lost(), "a refused extension loses nothing");
    // Within the max lease it goes through.
    guard.extend(Duration::from_secs(5)).await.unwrap();
    assert_pttl(&server, &lock_key("y"), 45_000..=55_000);
    let blocking = tokio::task::spawn_blocking(move || {
        let err = guard.extend_blocking(Duration::from_secs(30)).unwrap_err();
        assert_invalid(&err, "lease extension");
        guard
    })
    .await
    .unwrap();
    blocking.release().await.unwrap();
}

/// Less than a millisecond is no lease and no extension: Redis counts whole
/// milliseconds.
#[tokio::test]
async fn leases_and_extensions_under_a_millisecond_are_refused() {
    let (server, locker) = setup();
    let err = try_leased(&locker, "tiny", Duration::from_micros(999))
        .await
        .unwrap_err();
    assert_invalid(&err, "expire");
    assert!(server.keys("lockattr:*").is_empty());
    let guard = take_leased(&locker, "tiny", Duration::from_millis(1_500)).await;
    let err = guard.extend(Duration::from_micros(999)).await.unwrap_err();
    assert_invalid(&err, "lease extension");
    guard.release().await.unwrap();
}

/// The Locker's timeouts and retention have maxima too.
#[test]
fn absurd_locker_settings_are_refused() {
    let url = "redis://127.0.0.1:1/";
    let too_long = MAX_TIMEOUT + Duration::from_millis(1);
    let err = Locker::builder(url).connect_timeout(too_long).build();
    assert_invalid(&err.unwrap_err(), "connect timeout");
    let err = Locker::builder(url).response_timeout(Duration::MAX).build();
    assert_invalid(&err.unwrap_err(), "response timeout");
    let nodes = [
        "redis://127.0.0.1:1/",
        "redis://127.0.0.1:2/",
        "redis://127.0.0.1:3/",
    ];
    let err = Locker::redlock_builder(nodes)
        .node_timeout(too_long)
        .build();
    assert_invalid(&err.unwrap_err(), "node timeout");
    let err = Locker::cluster_builder([url])
        .response_timeout(too_long)
        .build();
    assert_invalid(&err.unwrap_err(), "response timeout");
    let err = Locker::builder(url)
        .fence_retention(MAX_EXPIRE + Duration::from_secs(1))
        .build();
    assert_invalid(&err.unwrap_err(), "fence retention");
    // The maxima themselves are fine.
    Locker::builder(url)
        .connect_timeout(MAX_TIMEOUT)
        .response_timeout(MAX_TIMEOUT)
        .fence_retention(MAX_EXPIRE)
        .build()
        .unwrap();
    Locker::builder(url)
        .fence_retention(Duration::ZERO)
        .build()
        .unwrap();
}
