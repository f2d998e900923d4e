//! Redlock against five (or three) independent redis-servers of our own:
//! majority, dead and frozen nodes, restarted empty nodes, fencing across
//! majorities, contention, the attribute, and wake-up on release.

use crate::support;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockattr::{LockError, Locker, redis_lock};
use support::deployments::{
    cycle, fresh_redlock as fresh, hold_for, lock_error, no_delay_redlock, renewed, spawn_try_lock,
    start_nodes as nodes,
};
use support::lockers::urls;
use support::takes::{take, try_take};
use support::{RedisServer, lock_key};

fn holders(nodes: &[RedisServer], name: &str) -> usize {
    nodes
        .iter()
        .filter(|n| n.get(&lock_key(name)).is_some())
        .count()
}

/// Asserts that within 2 s exactly `count` nodes hold `name`; `what` and
/// the count seen otherwise.
fn held_on_within(nodes: &[RedisServer], name: &str, count: usize, what: &str) {
    assert!(
        support::eventually(Duration::from_secs(2), || holders(nodes, name) == count).is_some(),
        "{what}: {}",
        holders(nodes, name)
    );
}

/// Thaws a frozen server even when the test fails, so it can be killed.
struct Thaw<'a>(&'a RedisServer);

impl Drop for Thaw<'_> {
    fn drop(&mut self) {
        self.0.thaw();
    }
}

#[tokio::test]
async fn a_majority_holds_the_lock_and_release_frees_every_node() {
    let nodes = nodes(5);
    let a = fresh(&nodes);
    let b = fresh(&nodes);
    let guard = a.lock("basic").acquire().await.unwrap();
    // Done at a majority: the last nodes take it in the background.
    assert!(holders(&nodes, "basic") >= 3);
    held_on_within(&nodes, "basic", 5, "not held on every node");
    let err = lock_error(&b, "basic", Duration::from_millis(200)).await;
    assert!(err.is_timeout(), "{err}");
    guard.release().await.unwrap();
    assert!(holders(&nodes, "basic") <= 2);
    held_on_within(&nodes, "basic", 0, "not freed on every node");
    cycle(&b, "basic").await;
}

#[test]
fn url_lists_of_every_shape_are_accepted_and_bad_counts_refused() {
    let u: Vec<String> = (1..=3)
        .map(|i| format!("redis://127.0.0.{i}:6390/"))
        .collect();
    let slice: Vec<&str> = u.iter().map(String::as_str).collect();
    assert!(Locker::redlock([&u[0], &u[1], &u[2]]).is_ok());
    assert!(Locker::redlock(&slice[..]).is_ok());
    assert!(Locker::redlock(u.clone()).is_ok());
    for n in [1, 2] {
        let err = Locker::redlock(&u[..n]).unwrap_err();
        assert!(matches!(err, LockError::InvalidInput { .. }), "{err}");
        assert!(err.to_string().contains(&format!("{n} URLs")), "{err}");
    }
    let four: Vec<String> = (1..=4).map(|i| format!("redis://127.0.0.{i}/")).collect();
    let err = Locker::redlock(four).unwrap_err().to_string();
    assert!(err.contains("3, 5 or 7"), "{err}");
    let err = Locker::builder(&u[0])
        .delay_restarted_nodes(false)
        .build()
        .unwrap_err()
        .to_string();
    assert!(err.contains("Redlock"), "{err}");
}

#[tokio::test]
async fn two_dead_nodes_of_five_do_not_matter() {
    let mut nodes = nodes(5);
    nodes[0].kill();
    nodes[1].kill();
    let a = fresh(&nodes);
    let b = fresh(&nodes);
    let start = Instant::now();
    let guard = a.lock("two-dead").acquire().await.unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    let err = lock_error(&b, "two-dead", Duration::from_millis(200)).await;
    assert!(err.is_timeout(), "{err}");
    guard.release().await.unwrap();
    cycle(&b, "two-dead").await;
}

#[tokio::test]
async fn three_dead_nodes_of_five_fail_at_once_with_a_quorum_error() {
    let mut nodes = nodes(5);
    for node in &mut nodes[..3] {
        node.kill();
    }
    let locker = fresh(&nodes);
    let start = Instant::now();
    // One attempt asked for: the error comes at once (a waiter would try
    // again until its acquire time ends; see redlock_faults.rs).
    let err = lock_error(&locker, "three-dead", Duration::ZERO).await;
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert!(err.is_no_quorum() && err.is_connection(), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("3 of 5 needed") && msg.contains("2 of 5 nodes answered"),
        "{msg}"
    );
    assert_eq!(holders(&nodes[3..], "three-dead"), 0, "nothing left held");
}

#[tokio::test]
async fn a_frozen_node_costs_at_most_the_node_timeout() {
    let nodes = nodes(5);
    let build = || {
        no_delay_redlock(urls(&nodes))
            .node_timeout(Duration::from_millis(100))
            .response_timeout(Duration::from_secs(5))
            .build()
            .unwrap()
    };
    let (a, b) = (build(), build());
    a.ping().await.unwrap();
    b.ping().await.unwrap();
    nodes[2].freeze();
    let _thaw = Thaw(&nodes[2]);
    for round in 0..3 {
        let start = Instant::now();
        let guard = a.lock("frozen").acquire().await.unwrap();
        let err = lock_error(&b, "frozen", Duration::ZERO).await;
        assert!(err.is_timeout(), "{err}");
        guard.release().await.unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "round {round}: {:?} with a 5 s response timeout",
            start.elapsed()
        );
    }
}

#[tokio::test]
async fn a_node_restarted_empty_does_not_vote_until_leases_ran_out() {
    // Leases of at most 3 s: nodes vote once they have kept their data
    // that long (a short max_lease keeps the test quick).
    let expire = Duration::from_secs(3);
    let mut nodes = nodes(5);
    let careful = |nodes: &[RedisServer]| {
        Locker::redlock_builder(urls(nodes))
            .max_lease(expire)
            .build()
            .unwrap()
    };
    let holder = careful(&nodes);
    // Connected: each node's restart marker is written now.
    holder.ping().await.unwrap();
    // Old enough to vote: up, and marked, for max_lease.
    tokio::time::sleep(expire + Duration::from_secs(1)).await;
    nodes[3].kill();
    nodes[4].kill();
    let guard = hold_for(&holder, "restart", expire).await;
    let held_at = Instant::now();
    assert_eq!(holders(&nodes[..3], "restart"), 3);
    // One of the holder's three nodes forgets the lock; the two others come back empty.
    nodes[2].restart();
    nodes[3].restart();
    nodes[4].restart();
    let contender = careful(&nodes);
    let err = try_take(&contender, "restart", expire, Duration::from_millis(1500))
        .await
        .unwrap_err();
    assert!(held_at.elapsed() < expire, "the check ran within the lease");
    assert!(err.is_timeout() || err.is_no_quorum(), "{err}");
    // Without the delay, the three empty nodes make a second majority.
    let careless = fresh(&nodes);
    let intruder = try_take(&careless, "restart", expire, Duration::ZERO).await;
    assert!(held_at.elapsed() < expire);
    assert!(intruder.is_ok(), "the option is what keeps exclusion");
    drop(intruder);
    drop(guard);
    // Once the nodes have kept their data for max_lease, the careful Locker gets in.
    let got = take(&contender, "restart", expire, Duration::from_secs(8)).await;
    got.release().await.unwrap();
}

#[tokio::test]
async fn fencing_tokens_increase_when_the_majority_changes() {
    let mut nodes = nodes(5);
    let locker = fresh(&nodes);
    let first = locker.lock("fence").acquire().await.unwrap();
    let t0 = first.fencing_token();
    first.release().await.unwrap();
    nodes[3].kill();
    nodes[4].kill();
    let on_three = locker.lock("fence").acquire().await.unwrap();
    let t1 = on_three.fencing_token();
    on_three.release().await.unwrap();
    for _ in 0..5 {
        cycle(&locker, "fence").await;
    }
    let t2 = {
        let g = locker.lock("fence").acquire().await.unwrap();
        let t = g.fencing_token();
        g.release().await.unwrap();
        t
    };
    // Nodes 0 and 1 leave; 3 and 4 come back behind (empty: their counters
    // start again from their clocks, 0-based counters would be smaller).
    nodes[0].kill();
    nodes[1].kill();
    nodes[3].restart();
    nodes[4].restart();
    let moved = locker.lock("fence").acquire().await.unwrap();
    let t3 = moved.fencing_token();
    moved.release().await.unwrap();
    assert!(t0 < t1 && t1 < t2 && t2 < t3, "{t0} {t1} {t2} {t3}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contention_loses_no_update() {
    let nodes = nodes(5);
    let store = RedisServer::start();
    let lockers = [fresh(&nodes), fresh(&nodes)];
    support::contend(&lockers, &["stress".to_string()], 25, &store).await;
}

#[tokio::test]
async fn renewal_keeps_a_majority_and_notices_when_it_is_gone() {
    let mut nodes = nodes(5);
    // The default node timeout for a 600 ms lease is 10 ms, which a loaded
    // test machine can exceed on one node for a few renewals in a row: its
    // lease then ends there, as it should. This is about the majority.
    let locker = no_delay_redlock(urls(&nodes))
        .node_timeout(Duration::from_millis(150))
        .build()
        .unwrap();
    let guard = renewed(&locker, "renewed", Duration::from_millis(600)).await;
    nodes[0].kill();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!guard.is_lost());
    assert_eq!(holders(&nodes[1..], "renewed"), 4);
    nodes[1].kill();
    nodes[2].kill();
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost within 5 s");
    assert!(lost.is_lost(), "{lost}");
}

#[tokio::test]
async fn a_waiter_gets_the_lock_at_the_release_not_at_expiry() {
    let nodes = nodes(5);
    let (a, b) = (fresh(&nodes), fresh(&nodes));
    let guard = hold_for(&a, "wake", Duration::from_secs(30)).await;
    let waiter = spawn_try_lock(&b, "wake", Duration::from_secs(20));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let (outcome, got) = waiter.await.unwrap();
    drop(outcome.unwrap());
    assert!(
        got - released < Duration::from_secs(1),
        "{:?}",
        got - released
    );
}

static ATTR: AtomicU64 = AtomicU64::new(0);

static ATTR_LOCKER: OnceLock<Locker> = OnceLock::new();

fn attr_locker() -> &'static Locker {
    ATTR_LOCKER.get().expect("set by the test")
}

#[redis_lock(name = "attr:{id}", locker = attr_locker(), expire = 5, acquire_time = 10)]
async fn bump_async(id: u64) -> Result<u64, LockError> {
    let n = ATTR.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(5)).await;
    ATTR.store(n + 1, Ordering::SeqCst);
    Ok(id)
}

#[redis_lock(name = "attr:{id}", locker = attr_locker(), expire = 5, acquire_time = 10)]
fn bump_sync(id: u64) -> Result<u64, LockError> {
    let n = ATTR.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(5));
    ATTR.store(n + 1, Ordering::SeqCst);
    Ok(id)
}

#[test]
fn the_attribute_works_unchanged() {
    let nodes = nodes(3);
    let locker = fresh(&nodes);
    assert!(ATTR_LOCKER.set(locker).is_ok());
    let threads: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(|| (0..10).for_each(|_| assert_eq!(bump_sync(1).unwrap(), 1))))
        .collect();
    let rt = support::multi_thread();
    rt.block_on(async {
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                tokio::spawn(async {
                    for _ in 0..10 {
                        bump_async(1).await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(ATTR.load(Ordering::SeqCst), 80);
}
