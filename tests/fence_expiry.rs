//! Nothing of a lock stays in Redis long after its last lease ended: the
//! fencing counter expires `fence_retention` after it (the lock key and the
//! queue keys already expired with the lease and the wait). Fencing tokens
//! still increase across the counter's expiry, and under a `volatile-*`
//! eviction policy a full Redis evicts old counters instead of refusing
//! new locks.
use crate::support;

use std::time::Duration;

use lockattr::Locker;
use support::lockers::setup;
use support::waiters::spawn_waiter;
use support::wakeups::{hold, hold_renewed};
use support::{RedisServer, eventually, keys, lock_key};

const RETENTION: Duration = Duration::from_millis(300);

fn locker(server: &RedisServer, retention: Duration) -> Locker {
    Locker::builder(server.url())
        .fence_retention(retention)
        .build()
        .unwrap()
}

/// Asserts that every key under the default prefix has a time to live of
/// at most `most` ms; how many there are.
fn assert_all_expire_within(server: &RedisServer, most: i64) -> usize {
    let mut con = server.client();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("lockattr:*")
        .query(&mut con)
        .unwrap();
    let mut pipe = redis::pipe();
    for key in &keys {
        pipe.cmd("PTTL").arg(key);
    }
    let ttls: Vec<i64> = pipe.query(&mut con).unwrap();
    for (key, ttl) in keys.iter().zip(ttls) {
        // -2: expired since KEYS listed it; 0: about to.
        assert!(
            ttl == -2 || (0..=most).contains(&ttl),
            "{key} has PTTL {ttl} ms (at most {most} expected)"
        );
    }
    keys.len()
}

/// 2,000 names: half released, half left to run out (a crashed holder),
/// and a few handed over from a holder to a waiter. A moment after the
/// last lease plus the retention, Redis holds no key of any of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_outlives_the_last_lease_by_more_than_the_retention() {
    let server = RedisServer::start();
    let locker = locker(&server, RETENTION);
    let lease = Duration::from_millis(500);
    let mut abandoned = Vec::new();
    for n in 0..2_000 {
        let guard = hold(&locker, &format!("order:{n}"), lease).await;
        if n % 2 == 0 {
            guard.release().await.unwrap();
        } else {
            abandoned.push(guard);
        }
    }
    // Hand-overs: a waiter (of another Locker, so that it queues in Redis)
    // queued behind a holder gets the lock from its release (the counter is
    // incremented there, with the waiter's lease).
    let other = self::locker(&server, RETENTION);
    for n in 0..10 {
        let name = format!("handed:{n}");
        let holder = hold(&locker, &name, lease).await;
        let waiter = spawn_waiter(&other, &name, lease, Duration::from_secs(5));
        assert!(
            eventually(Duration::from_secs(5), || server
                .exists(&keys::lock(&name).queue))
            .is_some()
        );
        holder.release().await.unwrap();
        waiter.await.unwrap().0.unwrap().release().await.unwrap();
    }
    let most = i64::try_from((lease + RETENTION).as_millis()).unwrap();
    assert_all_expire_within(&server, most);
    assert!(
        eventually(Duration::from_secs(20), || server
            .keys("lockattr:*")
            .is_empty())
        .is_some(),
        "keys left: {:?}",
        server
            .keys("lockattr:*")
            .into_iter()
            .take(5)
            .collect::<Vec<_>>()
    );
    // The abandoned guards' releases find nothing to release, and write
    // nothing back.
    for guard in abandoned.drain(..100) {
        assert!(guard.release().await.unwrap_err().is_not_owned());
    }
    assert!(server.keys("lockattr:*").is_empty());
}

/// With the default retention, a released lock leaves only its counter,
/// expiring within a minute.
#[tokio::test]
async fn by_default_a_counter_goes_within_a_minute_of_the_release() {
    let (server, locker) = setup();
    let guard = hold(&locker, "job", Duration::from_secs(3600)).await;
    let ttl = server.pttl(&keys::lock("job").fence);
    assert!((3_600_000..=3_660_000).contains(&ttl), "held: PTTL {ttl}");
    guard.release().await.unwrap();
    assert_eq!(server.keys("lockattr:*"), vec!["lockattr:{job}:fence"]);
    let ttl = server.pttl(&keys::lock("job").fence);
    assert!((1..=60_000).contains(&ttl), "released: PTTL {ttl}");
}

/// A counter that expired starts again from the server's clock, so the
/// next token is still larger than every one before.
#[tokio::test]
async fn tokens_keep_increasing_across_the_counters_expiry() {
    let server = RedisServer::start();
    let locker = locker(&server, Duration::from_millis(50));
    let mut last = 0;
    for round in 0..5 {
        // A few acquisitions while the counter lives...
        for _ in 0..3 {
            let guard = locker.lock("t").acquire().await.unwrap();
            assert!(guard.fencing_token() > last, "round {round}");
            last = guard.fencing_token();
            guard.release().await.unwrap();
        }
        // ...then the counter expires.
        assert!(
            eventually(Duration::from_secs(10), || !server
                .exists(&keys::lock("t").fence))
            .is_some(),
            "the counter did not expire"
        );
    }
    let guard = locker.lock("t").acquire().await.unwrap();
    assert!(guard.fencing_token() > last);
    guard.release().await.unwrap();
}

/// Under `maxmemory-policy volatile-lru`, a Redis full of counters of
/// locks no longer in use evicts them (they have a time to live) instead
/// of refusing the next acquisition with OOM.
#[tokio::test]
async fn old_counters_are_evicted_under_volatile_lru() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let locker = locker(&server, Duration::from_secs(3600));
    for n in 0..5_000 {
        let guard = hold(&locker, &format!("order:{n}"), Duration::from_secs(10)).await;
        guard.release().await.unwrap();
    }
    let counters = assert_all_expire_within(&server, 3_600_000);
    assert_eq!(counters, 5_000);
    // Redis evicts the least recently used key with a TTL, and a held
    // lock's key has one too. Its LRU clock counts whole seconds: counters
    // written in the same second as the new lock tie with it, and a tie
    // may evict the lock instead of a counter. Two seconds apart, every
    // counter is older than the new lock.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let mut con = server.client();
    let info: String = redis::cmd("INFO").arg("memory").query(&mut con).unwrap();
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    // Below what the counters use: nothing more fits unless some go.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used - 200_000)
        .query(&mut con)
        .unwrap();
    let guard = locker
        .lock("new-order")
        .acquire()
        .await
        .expect("a full Redis evicts old counters and takes the lock");
    assert!(server.exists(&lock_key("new-order")));
    guard.release().await.unwrap();
    assert!(
        server.keys("lockattr:*").len() < counters,
        "no counter was evicted"
    );
}

/// A lock renewed far past its first lease plus the retention keeps its
/// counter: the operator still sees the holder's own fencing token, and a
/// forced unlock that names it frees that holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_lock_keeps_its_counter_and_its_token() {
    let server = RedisServer::start();
    let locker = locker(&server, RETENTION);
    let guard = hold_renewed(&locker, "renewed", Duration::from_millis(400)).await;
    // Five leases plus the retention later, the watchdog still holds it.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert!(!guard.is_lost());
    let fence = server.pttl(&keys::lock("renewed").fence);
    assert!(
        fence > 300,
        "the counter runs out under its holder: PTTL {fence}"
    );
    let seen = locker.inspect("renewed").await.unwrap().unwrap();
    assert_eq!(seen.fencing_token, guard.fencing_token());
    assert!(
        locker
            .force_unlock_if("renewed", guard.fencing_token())
            .await
            .unwrap(),
        "the holder's own token did not free it"
    );
    assert_eq!(locker.inspect("renewed").await.unwrap(), None);
}

/// A lock taken again soon after a release, with a lease longer than its
/// counter has left, makes the counter outlive that lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retaken_lock_keeps_its_counter_for_its_whole_lease() {
    let server = RedisServer::start();
    let locker = locker(&server, Duration::from_millis(600));
    let first = locker.lock("again").acquire().await.unwrap();
    first.release().await.unwrap();
    // The counter has about 0.6 s left; the next lease is 3 s.
    let guard = hold(&locker, "again", Duration::from_secs(3)).await;
    let fence = server.pttl(&keys::lock("again").fence);
    assert!(
        fence >= 3_000,
        "the counter expires before the lease ends: PTTL {fence}"
    );
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let seen = locker.inspect("again").await.unwrap().unwrap();
    assert_eq!(seen.fencing_token, guard.fencing_token());
    guard.release().await.unwrap();
}

/// The operator reads a holder's fencing token from the holder's own
/// value: with the counter gone (evicted, or deleted by hand), `inspect`
/// still shows it, and a forced unlock that names it frees that holder.
#[tokio::test]
async fn the_operator_finds_a_holder_by_its_own_token_without_the_counter() {
    let server = RedisServer::start();
    let locker = locker(&server, RETENTION);
    let guard = locker.lock("gone").acquire().await.unwrap();
    let mut con = server.client();
    let _: () = redis::cmd("DEL")
        .arg(keys::lock("gone").fence)
        .query(&mut con)
        .unwrap();
    let seen = locker.inspect("gone").await.unwrap().unwrap();
    assert_eq!(seen.fencing_token, guard.fencing_token());
    assert!(
        !locker
            .force_unlock_if("gone", guard.fencing_token() + 1)
            .await
            .unwrap()
    );
    assert!(
        locker
            .force_unlock_if("gone", guard.fencing_token())
            .await
            .unwrap()
    );
    assert!(guard.release().await.unwrap_err().is_not_owned());
}
