//! `LockerBuilder::fairness`: who gets a lock released while others wait.
//!
//! With `Fairness::Fifo` (the default) every release hands the lock to the
//! oldest waiter. With `Fairness::Bounded(t)` a release leaves the lock free
//! for newcomers while the oldest waiter has waited less than `t`, tells
//! that waiter to try, and hands over first come, first served once it has
//! waited longer. Against a real redis-server; a waiter that must not hear
//! release notices reaches Redis through a proxy that stalls SUBSCRIBE, so
//! it only asks Redis on its own once-a-second check and the order of
//! events is not left to chance.

use crate::support;

use std::time::{Duration, Instant};

use lockattr::{Fairness, LockError, LockGuard, Locker};
use support::lockers::setup;
use support::outages::joined;
use support::proxy::Proxy;
use support::takes::try_take;
use support::waiters::{queue_len, queued, spawn_waiter};
use support::{RedisServer, keys, lock_key};

const LONG: Duration = Duration::from_secs(30);
const PATIENT: Duration = Duration::from_secs(20);

fn bounded(server: &RedisServer, time: Duration) -> Locker {
    Locker::builder(server.url())
        .fairness(Fairness::Bounded(time))
        .build()
        .unwrap()
}

/// Releases `holder` and at once asks for the lock again without waiting.
async fn release_and_take_back(
    locker: &Locker,
    holder: LockGuard,
    name: &str,
) -> Option<LockGuard> {
    holder.release().await.unwrap();
    match try_take(locker, name, LONG, Duration::ZERO).await {
        Ok(guard) => Some(guard),
        Err(LockError::Timeout { .. }) => None,
        Err(e) => panic!("taking the lock back failed: {e}"),
    }
}

async fn waiter_behind_silent_notices(
    server: &RedisServer,
    name: &str,
) -> (
    Proxy,
    tokio::task::JoinHandle<(Result<LockGuard, LockError>, Instant)>,
) {
    let proxy = Proxy::start(server.port);
    proxy.stall_matching(b"SUBSCRIBE");
    let waiters = Locker::new(proxy.url()).unwrap();
    let waiter = spawn_waiter(&waiters, name, LONG, PATIENT);
    assert!(
        queued(server, &keys::lock(name).queue, 1),
        "the waiter never queued"
    );
    (proxy, waiter)
}

/// First come, first served: a holder that releases and asks again at once
/// finds the lock handed to the waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_hands_the_lock_to_the_waiter_before_the_releaser_can_take_it_back() {
    let (server, locker) = setup();
    let holder = locker.lock("fifo").expire(LONG).acquire().await.unwrap();
    let (_proxy, waiter) = waiter_behind_silent_notices(&server, "fifo").await;
    assert!(
        release_and_take_back(&locker, holder, "fifo")
            .await
            .is_none()
    );
    let (outcome, _) = joined(waiter, Duration::from_secs(10), "the waiter").await;
    outcome.unwrap().release().await.unwrap();
}

/// Bounded: while the oldest waiter has waited less than the bound, the
/// releasing process takes its lock straight back and the waiter keeps its
/// place; once it has waited longer, the next release hands the lock to it
/// and the releaser has to wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_lets_the_releaser_back_in_until_the_oldest_waiter_waited_the_bound() {
    let server = RedisServer::start();
    let locker = bounded(&server, Duration::from_secs(1));
    let holder = locker.lock("slice").expire(LONG).acquire().await.unwrap();
    let (_proxy, waiter) = waiter_behind_silent_notices(&server, "slice").await;
    let queued_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let holder = release_and_take_back(&locker, holder, "slice")
        .await
        .expect("the releaser could not take the lock back within the bound");
    assert_eq!(
        queue_len(&mut server.client(), &keys::lock("slice").queue),
        1,
        "the waiter lost its place"
    );
    // Past the bound (and between the waiter's once-a-second checks).
    tokio::time::sleep_until((queued_at + Duration::from_millis(1_500)).into()).await;
    assert!(
        release_and_take_back(&locker, holder, "slice")
            .await
            .is_none(),
        "the releaser took the lock back though the waiter had waited past the bound"
    );
    let (outcome, _) = joined(waiter, Duration::from_secs(10), "the waiter").await;
    let guard = outcome.unwrap();
    assert!(server.owner(&lock_key("slice")).is_some());
    guard.release().await.unwrap();
}

/// Bounded, with no newcomer: the release tells the oldest waiter to try,
/// and it takes the lock at once (well before its once-a-second check).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_release_with_nobody_barging_reaches_the_oldest_waiter_at_once() {
    let server = RedisServer::start();
    let holders = bounded(&server, Duration::from_secs(1));
    let waiters = bounded(&server, Duration::from_secs(1));
    // The second waiter of another Locker, so that it queues in Redis too.
    let others = bounded(&server, Duration::from_secs(1));
    let holder = holders.lock("try").expire(LONG).acquire().await.unwrap();
    let first = spawn_waiter(&waiters, "try", LONG, PATIENT);
    assert!(queued(&server, &keys::lock("try").queue, 1));
    let second = spawn_waiter(&others, "try", LONG, PATIENT);
    assert!(queued(&server, &keys::lock("try").queue, 2));
    // Subscribed by now (a SUBSCRIBE on loopback), and well before the
    // first waiter's next check.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released_at = Instant::now();
    holder.release().await.unwrap();
    let (outcome, at) = joined(first, Duration::from_secs(10), "the first waiter").await;
    let guard = outcome.unwrap();
    let late = at.duration_since(released_at);
    assert!(
        late < Duration::from_millis(600),
        "the oldest waiter took the free lock {late:?} after the release"
    );
    // The second waiter is still queued, and gets it next.
    assert_eq!(queue_len(&mut server.client(), &keys::lock("try").queue), 1);
    guard.release().await.unwrap();
    let (outcome, _) = joined(second, Duration::from_secs(10), "the second waiter").await;
    outcome.unwrap().release().await.unwrap();
    assert!(!server.exists(&keys::lock("try").queue));
}

#[test]
fn a_bound_outside_a_millisecond_to_a_second_is_refused() {
    for bad in [
        Duration::ZERO,
        Duration::from_micros(999),
        Duration::from_millis(1_001),
    ] {
        let err = Locker::builder("redis://127.0.0.1:1/")
            .fairness(Fairness::Bounded(bad))
            .build()
            .unwrap_err();
        assert!(
            matches!(&err, LockError::InvalidInput { .. }) && err.to_string().contains("Fifo"),
            "{bad:?}: {err}"
        );
    }
}
