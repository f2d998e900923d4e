//! Every duration is bounded where it enters the API: an absurd one is
//! refused with `InvalidInput` before anything is sent, and nothing of it
//! reaches Redis (where a script that fails halfway keeps its writes).
mod support;

use std::time::Duration;

use lockattr::{LockError, Locker, MAX_ACQUIRE_TIMEOUT, MAX_EXPIRE, MAX_TIMEOUT};
use support::lockers::setup;
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
    let holder = locker
        .lock("q")
        .expire(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    for wait in [
        Duration::from_millis(100_000_000_000_000_000),
        MAX_ACQUIRE_TIMEOUT + Duration::from_millis(1),
    ] {
        let err = locker
            .lock("q")
            .acquire_timeout(wait)
            .acquire()
            .await
            .unwrap_err();
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
    locker
        .lock("q")
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// The longest acquire timeout is accepted, and so is `Duration::MAX`
/// ("as long as allowed"); both queue with a bounded time to live.
#[tokio::test]
async fn the_longest_acquire_timeouts_are_accepted() {
    let (server, locker) = setup();
    for (name, wait) in [("w1", MAX_ACQUIRE_TIMEOUT), ("w2", Duration::MAX)] {
        let holder = locker
            .lock(name)
            .expire(Duration::from_millis(300))
            .acquire()
            .await
            .unwrap();
        // Of another Locker, so that it queues in Redis.
        let other = Locker::new(server.url()).unwrap();
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
    let guard = default
        .lock("x")
        .expire(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
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
    let guard = short
        .lock("y")
        .expire(Duration::from_secs(50))
        .acquire()
        .await
        .unwrap();
    let err = guard.extend(Duration::from_secs(61)).await.unwrap_err();
    assert_invalid(&err, "lease extension");
    // 50 s left + 20 s would be 70 s: more than the max lease of 60 s.
    let err = guard.extend(Duration::from_secs(20)).await.unwrap_err();
    assert_invalid(&err, "lease extension");
    assert!(err.to_string().contains("max_lease (60s)"), "{err}");
    let pttl = server.pttl(&lock_key("y"));
    assert!((40_000..=50_000).contains(&pttl), "PTTL {pttl}");
    assert!(!guard.is_lost(), "a refused extension loses nothing");
    // Within the max lease it goes through.
    guard.extend(Duration::from_secs(5)).await.unwrap();
    let pttl = server.pttl(&lock_key("y"));
    assert!((45_000..=55_000).contains(&pttl), "PTTL {pttl}");
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
    let err = locker
        .lock("tiny")
        .expire(Duration::from_micros(999))
        .acquire()
        .await
        .unwrap_err();
    assert_invalid(&err, "expire");
    assert!(server.keys("lockattr:*").is_empty());
    let guard = locker
        .lock("tiny")
        .expire(Duration::from_millis(1_500))
        .acquire()
        .await
        .unwrap();
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
