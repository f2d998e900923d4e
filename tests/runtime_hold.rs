//! `LockBuilder::hold_at_least`: a guard released (or dropped) before the
//! hold has passed leaves the lock held for what remains of it, then the
//! lock expires; after the hold, a release is the usual one. Waiters queued
//! behind such a lock get it when it expires, on one server and on a
//! Redlock, not at the end of the lease they were told of. A hold longer
//! than the lease is refused; a guard that no longer owns the lock changes
//! nothing.

use crate::support;

use std::time::{Duration, Instant};

use lockattr::{LockError, LockGuard, Locker};
use support::lockers::{self, setup};
use support::outages::{attempt, redlock_of, set_px, three_servers, try_wait, wait_for_hold_left};
use support::{RedisServer, eventually, lock_key};

const LEASE: Duration = Duration::from_secs(30);
const HOLD: Duration = Duration::from_secs(2);

/// The lock `name` has what remains of the hold left (taken at `start`),
/// far less than the lease; nobody else can take it until the hold has
/// passed, and then anyone can, at once.
async fn assert_kept_for_the_hold(
    server: &RedisServer,
    locker: &Locker,
    name: &str,
    start: Instant,
) {
    let key = lock_key(name);
    let hold_ms = HOLD.as_millis() as i64;
    let (set, left) = wait_for_hold_left(server, &key, hold_ms);
    assert!(
        set && left > hold_ms - 1_500,
        "PTTL {left} ms: expected what remains of the {hold_ms} ms hold (lease 30 s)"
    );
    let refused = attempt(locker, name).await;
    assert!(
        matches!(refused, Err(LockError::Timeout { .. })),
        "taken during the hold: {refused:?}"
    );
    assert!(
        eventually(Duration::from_secs(5), || !server.exists(&key)).is_some(),
        "still held 5 s later"
    );
    assert!(
        start.elapsed() >= HOLD,
        "given up before the hold had passed"
    );
    attempt(locker, name)
        .await
        .expect("free once the hold has passed")
        .release()
        .await
        .unwrap();
}

/// The request for the lock `name` with a lease of `expire`, held at least
/// `hold`.
fn held_for<'a>(
    locker: &'a Locker,
    name: &str,
    expire: Duration,
    hold: Duration,
) -> lockattr::LockBuilder<'a> {
    locker.lock(name).expire(expire).hold_at_least(hold)
}

fn held<'a>(locker: &'a Locker, name: &str) -> lockattr::LockBuilder<'a> {
    held_for(locker, name, LEASE, HOLD)
}

/// [`held_for`], taken (it must be).
async fn take_held(locker: &Locker, name: &str, expire: Duration, hold: Duration) -> LockGuard {
    held_for(locker, name, expire, hold)
        .acquire()
        .await
        .unwrap()
}

#[tokio::test]
async fn release_within_the_hold_keeps_the_lock() {
    let (server, locker) = setup();
    let start = Instant::now();
    let guard = held(&locker, "b:release").acquire().await.unwrap();
    guard
        .release()
        .await
        .expect("a release within the hold is Ok");
    assert_kept_for_the_hold(&server, &locker, "b:release", start).await;
}

#[tokio::test]
async fn dropped_async_guard_keeps_the_lock() {
    let (server, locker) = setup();
    let start = Instant::now();
    drop(held(&locker, "b:drop").acquire().await.unwrap());
    assert_kept_for_the_hold(&server, &locker, "b:drop", start).await;
}

#[test]
fn blocking_release_and_drop_keep_the_lock() {
    let (server, locker) = setup();
    let rt = support::current_thread();
    for (name, release) in [("b:blocking-release", true), ("b:blocking-drop", false)] {
        let start = Instant::now();
        let guard = held(&locker, name).acquire_blocking().unwrap();
        if release {
            guard.release_blocking().unwrap();
        } else {
            drop(guard);
        }
        // A blocking guard is released when the call returns.
        let left = server.pttl(&lock_key(name));
        assert!(
            left > 0 && left <= HOLD.as_millis() as i64,
            "{name}: PTTL {left} ms right after the release"
        );
        rt.block_on(assert_kept_for_the_hold(&server, &locker, name, start));
    }
}

#[tokio::test]
async fn release_after_the_hold_deletes_the_lock() {
    let (server, locker) = setup();
    let guard = take_held(&locker, "b:after", LEASE, Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    guard.release().await.unwrap();
    assert!(!server.exists(&lock_key("b:after")));
}

#[tokio::test]
async fn no_hold_and_a_zero_hold_release_at_once() {
    let (server, locker) = setup();
    for hold in [None, Some(Duration::ZERO)] {
        let mut request = locker.lock("b:none").expire(LEASE);
        if let Some(hold) = hold {
            request = request.hold_at_least(hold);
        }
        request.acquire().await.unwrap().release().await.unwrap();
        assert!(!server.exists(&lock_key("b:none")), "{hold:?}");
    }
}

#[tokio::test]
async fn a_hold_longer_than_the_lease_is_refused() {
    let (server, locker) = setup();
    let lease = Duration::from_secs(5);
    let refused = held_for(&locker, "b:long", lease, Duration::from_millis(5_001))
        .acquire()
        .await;
    match refused {
        Err(LockError::InvalidInput { what, reason }) => {
            assert_eq!(what, "hold_at_least");
            assert!(reason.contains("expire"), "{reason}");
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    assert!(!server.exists(&lock_key("b:long")), "nothing was taken");
    // As long as the lease is fine.
    let guard = take_held(&locker, "b:long", lease, lease).await;
    guard.release().await.unwrap();
    assert!(server.pttl(&lock_key("b:long")) > 3_000);
}

#[tokio::test]
async fn a_guard_that_lost_its_lock_leaves_it_alone() {
    let (server, locker) = setup();
    let guard = held(&locker, "b:lost").acquire().await.unwrap();
    let key = lock_key("b:lost");
    set_px(&server, &key, "another owner", 10_000);
    let released = guard.release().await;
    assert!(
        matches!(released, Err(LockError::NotOwned { .. })),
        "{released:?}"
    );
    assert_eq!(server.get(&key).as_deref(), Some("another owner"));
    assert!(server.pttl(&key) > 8_000, "the other owner's lease changed");
}

#[tokio::test]
async fn renewal_stops_and_the_rest_of_the_hold_is_left() {
    let (server, locker) = setup();
    let key = lock_key("b:renew");
    // Renewed every 300 ms back to 900 ms; the hold outlives the lease.
    let (lease, hold) = (Duration::from_millis(900), Duration::from_millis(900));
    let guard = held_for(&locker, "b:renew", lease, hold)
        .renew(true)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    guard.release().await.unwrap();
    let left = server.pttl(&key);
    assert!(
        left > 0 && left <= 400,
        "PTTL {left} ms: expected what remains of the hold (about 400 ms), not a renewed 900 ms"
    );
    // No renewal after the release: the lock expires with the hold.
    assert!(eventually(Duration::from_secs(2), || !server.exists(&key)).is_some());
}

/// A waiter queued while the lock has 30 s left is told, by the release
/// within the hold, when the lock now ends, and takes it then.
async fn waiter_takes_it_when_the_hold_ends(first: &Locker, second: &Locker, name: &str) {
    let start = Instant::now();
    let guard = take_held(first, name, LEASE, Duration::from_millis(1_500)).await;
    let waiting = {
        let (second, name) = (second.clone(), name.to_owned());
        tokio::spawn(async move {
            let guard = try_wait(&second, &name, Duration::from_secs(20)).await;
            (guard, start.elapsed())
        })
    };
    // Queued behind the 30 s lease.
    tokio::time::sleep(Duration::from_millis(300)).await;
    guard.release().await.unwrap();
    let (taken, after) = waiting.await.unwrap();
    let taken = taken.expect("the waiter got the lock");
    assert!(
        after >= Duration::from_millis(1_500),
        "taken {after:?} after the first acquisition, before its hold passed"
    );
    assert!(
        after < Duration::from_secs(6),
        "taken {after:?} after the first acquisition: the waiter waited for the lease, \
         not the hold"
    );
    taken.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_waiter_gets_the_lock_when_the_hold_ends() {
    let (server, first) = setup();
    let second = lockers::locker(&server);
    waiter_takes_it_when_the_hold_ends(&first, &second, "b:waiter").await;
}

/// Redlock waiters do not queue: they try again at the end of the lease a
/// node reported, or on a notice. The release within the hold sends one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_waiter_gets_the_lock_when_the_hold_ends() {
    let servers = three_servers();
    let urls = lockers::urls(&servers);
    let (first, second) = (redlock_of(&urls), redlock_of(&urls));
    waiter_takes_it_when_the_hold_ends(&first, &second, "b:redlock").await;

    // And each node kept the lock for the hold only.
    let start = Instant::now();
    let guard = held(&first, "b:redlock-nodes").acquire().await.unwrap();
    guard.release().await.unwrap();
    for server in &servers {
        let left = server.pttl(&lock_key("b:redlock-nodes"));
        assert!(
            left > 0 && left <= HOLD.as_millis() as i64,
            "a node's PTTL {left} ms"
        );
    }
    assert!(
        eventually(Duration::from_secs(5), || servers
            .iter()
            .all(|s| !s.exists(&lock_key("b:redlock-nodes"))))
        .is_some()
    );
    assert!(start.elapsed() >= HOLD);
}
