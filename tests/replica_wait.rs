//! Grants that wait for replicas (`LockerBuilder::min_replicas`): against a
//! real master and replica, every grant of every kind is held by the
//! replica when the caller is told, a replica that does not acknowledge
//! (frozen with SIGSTOP) fails the grant and leaves nothing held, a
//! renewal or an extension it never acknowledged does not count, and the
//! frozen replica stalls nothing but the grants that wait for it.
//!
//! The failovers themselves are in `replica_loss.rs` (without the setting)
//! and `replica_failover.rs` (with it).

use crate::support;

use std::time::{Duration, Instant};

use lockattr::{LockError, Locker};
use support::cluster::Cluster;
use support::deployments::{
    cycle, hold_for, lock_error, renewed, spawn_try_lock, try_hold_for, try_lock, try_read_lock,
    try_semaphore, try_set, try_write_lock,
};
use support::replicas::ReplicaPair;
use support::waiters::spawn_waiter;
use support::{RedisServer, eventually, keys, lock_key};

/// A Locker of `url` whose grants wait for `min_replicas` replicas, each
/// for at most `replica_timeout`: the outcome of `build()`.
fn replica_locker(
    url: String,
    min_replicas: u32,
    replica_timeout: Duration,
) -> Result<Locker, LockError> {
    Locker::builder(url)
        .min_replicas(min_replicas)
        .replica_timeout(replica_timeout)
        .build()
}

/// A master and one replica in sync with it.
type Pair = ReplicaPair;

/// A Locker of the pair's master whose grants wait for `min_replicas`
/// replicas, 100 ms at most.
trait Replicated {
    fn locker(&self, min_replicas: u32) -> Locker;
}

impl Replicated for Pair {
    fn locker(&self, min_replicas: u32) -> Locker {
        replica_locker(self.master.url(), min_replicas, Duration::from_millis(100)).unwrap()
    }
}

/// The keys that hold something on `server`: the lock keys, without the
/// fence counters and a semaphore's record of its number of permits (which
/// outlive a release on purpose).
fn holders(server: &RedisServer) -> Vec<String> {
    server
        .held_locks()
        .into_iter()
        .filter(|k| !k.ends_with(":sem:permits"))
        .collect()
}

/// What one kind's acquisition holds: its guard, kept until dropped.
type Held = Box<dyn std::any::Any + Send>;

/// Each kind, taken once by `locker` with a short acquire time: the guard
/// and the lock keys to look for, or the error.
async fn take_each_kind(
    locker: &Locker,
) -> Vec<(&'static str, Result<(Held, Vec<String>), LockError>)> {
    let wait = Duration::from_millis(600);
    let one = |guard: lockattr::LockGuard, keys: Vec<String>| (Box::new(guard) as Held, keys);
    vec![
        (
            "lock",
            try_lock(locker, "r-lock", wait)
                .await
                .map(|g| one(g, vec![lock_key("r-lock")])),
        ),
        (
            "read",
            try_read_lock(locker, "r-read", wait)
                .await
                .map(|g| one(g, vec![])),
        ),
        (
            "write",
            try_write_lock(locker, "r-write", wait)
                .await
                .map(|g| one(g, vec![])),
        ),
        (
            "permit",
            try_semaphore(locker, "r-permit", 2, wait)
                .await
                .map(|g| one(g, vec![])),
        ),
        (
            "set",
            try_set(locker, &["r-set-a", "r-set-b"], wait)
                .await
                .map(|g| {
                    let keys = vec![lock_key("r-set-a"), lock_key("r-set-b")];
                    (Box::new(g) as Held, keys)
                }),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kinds_grant_is_on_the_replica_when_the_caller_is_told() {
    let pair = Pair::lagging(Duration::from_millis(150));
    // The link lags: without the setting, a grant is not on the replica
    // yet when its caller is told.
    let unwaited = pair.locker(0).lock("r-unwaited").acquire().await.unwrap();
    assert!(
        !pair.replica.exists(&lock_key("r-unwaited")),
        "the replication link does not lag"
    );
    unwaited.release().await.unwrap();
    let locker = replica_locker(pair.master.url(), 1, Duration::from_secs(2)).unwrap();
    let mut guards = Vec::new();
    for (kind, outcome) in take_each_kind(&locker).await {
        let (guard, keys) = outcome.unwrap_or_else(|e| panic!("{kind}: {e}"));
        guards.push(guard);
        for key in keys {
            // Read at once: no waiting for the replication to catch up.
            assert!(
                pair.replica.exists(&key),
                "{kind}: {key} is not on the replica"
            );
        }
    }
    // Every lock key on the master is on the replica already.
    let on_master = pair.master.held_locks();
    assert!(on_master.len() >= 5, "{on_master:?}");
    let on_replica = pair.replica.held_locks();
    for key in &on_master {
        assert!(on_replica.contains(key), "{key} only on the master");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_fails_every_kinds_grant_and_leaves_nothing_held() {
    let pair = Pair::start();
    let locker = pair.locker(1);
    pair.replica.freeze();
    let started = Instant::now();
    for (kind, outcome) in take_each_kind(&locker).await {
        match outcome {
            Err(LockError::Replicas {
                acknowledged,
                wanted,
                ref server,
                ..
            }) => {
                assert_eq!((acknowledged, wanted), (0, 1), "{kind}");
                assert!(server.contains(&pair.master.port.to_string()), "{server}");
                let message = outcome.unwrap_err().to_string();
                assert!(message.contains("replica"), "{kind}: {message}");
                assert!(message.contains("min_replicas"), "{kind}: {message}");
            }
            Err(e) => panic!("{kind}: not the replicas' error: {e}"),
            Ok((_, keys)) => panic!("{kind}: granted without the replica: {keys:?}"),
        }
    }
    // Each acquisition tried again while its acquire time lasted.
    assert!(
        started.elapsed() >= Duration::from_millis(5 * 600),
        "{:?}",
        started.elapsed()
    );
    // What the master granted was given back (in the background for the
    // last attempt, on the shared connection: the replica is not needed).
    let freed = eventually(Duration::from_secs(5), || holders(&pair.master).is_empty());
    assert!(
        freed.is_some(),
        "left held on the master: {:?}",
        holders(&pair.master)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_min_replicas_a_frozen_replica_changes_nothing() {
    let pair = Pair::start();
    let locker = pair.locker(0);
    pair.replica.freeze();
    for (kind, outcome) in take_each_kind(&locker).await {
        outcome.unwrap_or_else(|e| panic!("{kind}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_counts_only_once_the_replica_has_it() {
    let pair = Pair::start();
    let holder = pair.locker(1);
    let waiter = pair.locker(1);
    let guard = holder.lock("r-handed").acquire().await.unwrap();
    let first = guard.fencing_token();
    let waiting = spawn_try_lock(&waiter, "r-handed", Duration::from_secs(30));
    // The waiter is queued.
    let queued = eventually(Duration::from_secs(5), || {
        pair.master.exists(&keys::lock("r-handed").queue)
    });
    assert!(queued.is_some());
    pair.replica.freeze();
    guard.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !waiting.is_finished(),
        "the waiter started on a grant the replica never saw"
    );
    let thawed = Instant::now();
    pair.replica.thaw();
    let (handed, at) = waiting.await.unwrap();
    let handed = handed.unwrap();
    assert!(at >= thawed);
    let token = handed.fencing_token();
    assert!(token > first, "{token} after {first}");
    assert!(pair.replica.exists(&lock_key("r-handed")));
    handed.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_the_replica_never_acknowledged_do_not_count() {
    let pair = Pair::start();
    let locker = pair.locker(1);
    let guard = renewed(&locker, "r-renewed", Duration::from_millis(800)).await;
    pair.replica.freeze();
    let frozen = Instant::now();
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await;
    let lost = lost.expect("the guard never turned lost");
    assert!(lost.is_lost(), "{lost}");
    // Lost when the last acknowledged lease ended (the master went on
    // renewing: without the replicas' count it would not be lost at all).
    assert!(
        frozen.elapsed() <= Duration::from_secs(3),
        "{:?}",
        frozen.elapsed()
    );
    // The master itself kept renewing: its lease was not what counted.
    assert!(pair.master.exists(&lock_key("r-renewed")));
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_the_replica_never_acknowledged_is_refused_and_the_old_lease_stands() {
    let pair = Pair::start();
    let locker = pair.locker(1);
    let guard = hold_for(&locker, "r-extended", Duration::from_millis(800)).await;
    pair.replica.freeze();
    let err = guard.extend(Duration::from_secs(30)).await.unwrap_err();
    assert!(err.is_replicas(), "{err}");
    // The master applied it; the guard does not count it.
    assert!(pair.master.pttl(&lock_key("r-extended")) > 10_000);
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await;
    assert!(lost.expect("the guard never turned lost").is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_stalls_nothing_but_the_grants_that_wait_for_it() {
    let pair = Pair::start();
    let locker = replica_locker(pair.master.url(), 1, Duration::from_secs(4)).unwrap();
    let held = locker.lock("r-held").acquire().await.unwrap();
    pair.replica.freeze();
    let stalled = spawn_waiter(
        &locker,
        "r-stalled",
        Duration::from_secs(10),
        Duration::from_secs(5),
    );
    // Let the stalled grant's WAIT block its connection.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    locker.ping().await.unwrap();
    held.release().await.unwrap();
    let plain = Locker::new(pair.master.url()).unwrap();
    for _ in 0..20 {
        cycle(&plain, "r-other").await;
    }
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "a ping, a release and 20 locks without replicas took {took:?} behind the frozen replica"
    );
    assert!(
        !stalled.is_finished(),
        "the grant did not wait for the replica"
    );
    pair.replica.thaw();
    let guard = stalled.await.unwrap().0.unwrap();
    assert!(pair.replica.exists(&lock_key("r-stalled")));
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_replicas_than_the_master_has_fail_with_both_counts_and_leave_nothing() {
    let pair = Pair::start();
    let locker = pair.locker(2);
    let err = lock_error(&locker, "r-two", Duration::from_millis(300)).await;
    match &err {
        LockError::Replicas {
            acknowledged,
            wanted,
            ..
        } => assert_eq!((*acknowledged, *wanted), (1, 2), "{err}"),
        e => panic!("{e}"),
    }
    assert!(err.to_string().contains("1 of the 2 replica"), "{err}");
    let freed = eventually(Duration::from_secs(5), || holders(&pair.master).is_empty());
    assert!(freed.is_some(), "{:?}", holders(&pair.master));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_replica_settings_are_refused_before_anything_is_written() {
    let server = RedisServer::start();
    let zero = replica_locker(server.url(), 1, Duration::ZERO).unwrap_err();
    assert!(zero.to_string().contains("replica timeout"), "{zero}");
    let absurd = replica_locker(server.url(), 1, Duration::from_secs(3600)).unwrap_err();
    assert!(absurd.to_string().contains("is the unit right"), "{absurd}");
    let redlock = Locker::redlock_builder([server.url(), server.url(), server.url()])
        .min_replicas(1)
        .build()
        .unwrap_err();
    assert!(redlock.to_string().contains("Redlock"), "{redlock}");
    // A lease too short for the replica timeout: refused before Redis.
    let locker = replica_locker(server.url(), 1, Duration::from_millis(500)).unwrap();
    let short = try_hold_for(&locker, "r-short", Duration::from_millis(600))
        .await
        .unwrap_err();
    assert!(short.to_string().contains("replica_timeout"), "{short}");
    // A master without replicas: nothing acknowledges, nothing is kept.
    let alone = lock_error(&locker, "r-alone", Duration::ZERO).await;
    assert!(alone.is_replicas(), "{alone}");
    let freed = eventually(Duration::from_secs(5), || holders(&server).is_empty());
    assert!(freed.is_some(), "{:?}", holders(&server));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_without_replicas_acknowledges_nothing() {
    let cluster = Cluster::start();
    let seeds = cluster.urls();
    let locker = Locker::cluster_builder(seeds)
        .min_replicas(1)
        .replica_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let err = lock_error(&locker, "r-cluster", Duration::from_millis(300)).await;
    assert!(err.is_replicas(), "{err}");
    let master = &cluster.nodes[cluster.master_of(&lock_key("r-cluster"))];
    let freed = eventually(Duration::from_secs(5), || {
        !master.exists(&lock_key("r-cluster"))
    });
    assert!(freed.is_some());
    // The same Locker without the setting takes it.
    let plain = Locker::cluster(cluster.urls()).unwrap();
    cycle(&plain, "r-cluster").await;
}
