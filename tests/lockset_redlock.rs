//! `Locker::lock_all` on a Redlock of five (or three) redis-servers of our
//! own: each node takes every name or none, a majority holds the set,
//! release frees every node; crossed sets never overlap nor deadlock; a
//! set never keeps part of itself; per-name fencing tokens; wake-up on
//! release; dead, restarted and cancelled cases.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lockattr::{LockError, LockSetGuard, Locker, redis_lock};
use support::deployments::{
    Inside, fresh_redlock as fresh, hold_set_for, join_within, release_now, set_error,
    spawn_try_set, start_nodes as nodes, take_set, try_set,
};
use support::lockers::owners;
use support::{RedisServer, eventually, lock_key};

const LONG: Duration = Duration::from_secs(30);

fn free_everywhere(nodes: &[RedisServer], names: &[&str]) -> bool {
    names
        .iter()
        .all(|name| owners(nodes, name).iter().all(Option::is_none))
}

/// Whether `names` are free on every node within 2 s.
fn freed_within(nodes: &[RedisServer], names: &[&str]) -> bool {
    eventually(Duration::from_secs(2), || free_everywhere(nodes, names)).is_some()
}

// Multi-thread: the releases a majority did not wait for end on this
// runtime while the test polls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_taken_whole_on_every_node_and_released_on_every_node() {
    let nodes = nodes(5);
    let locker = fresh(&nodes);
    let guard = hold_set_for(&locker, &["acct:1", "acct:2"], LONG).await;
    let (one, two) = (owners(&nodes, "acct:1"), owners(&nodes, "acct:2"));
    // On each node, both names or neither, under one owner.
    assert_eq!(one, two);
    let owner = one[0].clone().expect("node 1 took the set");
    assert!(
        one.iter().filter(|o| o.as_deref() == Some(&*owner)).count() >= 3,
        "{one:?}"
    );
    assert!(nodes[0].pttl(&lock_key("acct:1")) > 20_000);
    guard.release().await.unwrap();
    assert!(
        freed_within(&nodes, &["acct:1", "acct:2"]),
        "{:?} {:?}",
        owners(&nodes, "acct:1"),
        owners(&nodes, "acct:2")
    );
}

/// A set is released in one call per node, as it is taken on each node.
/// (Multi-thread: the releases a majority did not wait for end on this
/// runtime while the test polls.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_released_in_one_call_per_node() {
    let nodes = nodes(5);
    let locker = fresh(&nodes);
    let names: Vec<String> = (0..10).map(|i| format!("node:{i}")).collect();
    let scripts_run = || -> Vec<u64> { nodes.iter().map(RedisServer::scripts_run).collect() };
    let guard = hold_set_for(&locker, &names, LONG).await;
    let before = scripts_run();
    guard.release().await.unwrap();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    assert!(
        freed_within(&nodes, &refs),
        "the set is still held somewhere"
    );
    // The releases a majority did not need end in the background.
    let released = eventually(Duration::from_secs(2), || {
        scripts_run()
            .iter()
            .zip(&before)
            .all(|(after, before)| after - before == 1)
    });
    assert!(released.is_some(), "{:?} against {before:?}", scripts_run());
}

#[tokio::test]
async fn fencing_tokens_increase_per_name_across_sets_and_single_locks() {
    let nodes = nodes(5);
    let locker = fresh(&nodes);
    let first = locker.lock_all(["f:a", "f:b"]).acquire().await.unwrap();
    let (a1, b1) = (
        first.fencing_token_of("f:a").unwrap(),
        first.fencing_token_of("f:b").unwrap(),
    );
    first.release().await.unwrap();
    let single = locker.lock("f:a").acquire().await.unwrap();
    let a2 = single.fencing_token();
    assert!(a2 > a1, "{a2} after {a1}");
    single.release().await.unwrap();
    let again = locker.lock_all(["f:b", "f:a"]).acquire().await.unwrap();
    assert!(again.fencing_token_of("f:a").unwrap() > a2);
    assert!(again.fencing_token_of("f:b").unwrap() > b1);
    again.release().await.unwrap();
}

#[tokio::test]
async fn a_set_with_one_name_held_elsewhere_takes_none_of_its_names() {
    let nodes = nodes(5);
    let (mine, other) = (fresh(&nodes), fresh(&nodes));
    let b = other.lock("p:b").expire(LONG).acquire().await.unwrap();
    let err = set_error(&mine, &["p:a", "p:b", "p:c"], Duration::from_millis(200)).await;
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    assert!(
        free_everywhere(&nodes, &["p:a", "p:c"]),
        "a failed set kept a name: {:?} {:?}",
        owners(&nodes, "p:a"),
        owners(&nodes, "p:c")
    );
    b.release().await.unwrap();
    // Free now: taken at once.
    let guard = try_set(&mine, &["p:a", "p:b", "p:c"], Duration::ZERO).await;
    guard.unwrap().release().await.unwrap();
}

/// Two Lockers, four tasks: two lock `{x, y}` and two `{y, x}`, ten times
/// each, with a short hold. Nobody is ever inside twice on a name, and
/// everyone finishes (no deadlock, no starvation within the acquire time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossed_sets_never_overlap_and_never_deadlock() {
    let nodes = nodes(5);
    let lockers = [fresh(&nodes), fresh(&nodes)];
    let inside = Inside::new(2);
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let locker = lockers[t % 2].clone();
            let inside = inside.clone();
            let names = if t < 2 {
                ["c:x", "c:y"]
            } else {
                ["c:y", "c:x"]
            };
            tokio::spawn(async move {
                let (expire, wait) = (Duration::from_secs(5), Duration::from_secs(30));
                for _ in 0..10 {
                    let guard = take_set(&locker, &names, expire, wait).await;
                    let pause = tokio::time::sleep(Duration::from_millis(2));
                    inside.stay_in_all(pause).await;
                    guard.release().await.unwrap();
                }
            })
        })
        .collect();
    join_within(tasks, Duration::from_secs(60), "a contender never finished").await;
    assert_eq!(inside.overlaps(), 0);
    assert!(freed_within(&nodes, &["c:x", "c:y"]));
}

/// A set waiting for a name held for 30 s gets in at its release, not at
/// the end of the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_waiter_wakes_at_the_release_of_any_of_its_names() {
    let nodes = nodes(5);
    let (holder, waiter) = (fresh(&nodes), fresh(&nodes));
    let held = holder.lock("w:b").expire(LONG).acquire().await.unwrap();
    let waiting = spawn_try_set(&waiter, &["w:a", "w:b"], Duration::from_secs(20));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(free_everywhere(&nodes, &["w:a"]), "the waiter holds w:a");
    let released = release_now(held).await;
    let (outcome, taken) = waiting.await.unwrap();
    assert_eq!(outcome.unwrap().names().count(), 2);
    let after = taken.duration_since(released);
    assert!(
        after < Duration::from_secs(2),
        "taken {after:?} after the release"
    );
}

#[tokio::test]
async fn a_minority_down_does_not_stop_a_set_and_a_majority_down_is_no_quorum() {
    let mut nodes = nodes(5);
    let locker = fresh(&nodes);
    locker.ping().await.unwrap();
    nodes[0].kill();
    nodes[1].kill();
    let guard = try_set(&locker, &["d:a", "d:b"], Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(owners(&nodes[2..], "d:a"), owners(&nodes[2..], "d:b"));
    guard.release().await.unwrap();
    nodes[2].kill();
    let err = set_error(&locker, &["d:a", "d:b"], Duration::from_millis(300)).await;
    assert!(matches!(err, LockError::NoQuorum { .. }), "{err:?}");
    assert!(
        free_everywhere(&nodes[3..], &["d:a", "d:b"]),
        "a set without a majority kept its names"
    );
}

/// Nodes that have kept their data for less than the Locker's max lease
/// do not vote for a set either: taken on every node, it is given back,
/// and the error says why.
#[tokio::test]
async fn young_nodes_do_not_vote_for_a_set() {
    let nodes = nodes(3);
    let locker = Locker::redlock_builder(nodes.iter().map(RedisServer::url))
        .max_lease(Duration::from_secs(3600))
        .build()
        .unwrap();
    let err = set_error(&locker, &["y:a", "y:b"], Duration::ZERO).await;
    assert!(matches!(err, LockError::NoQuorum { .. }), "{err:?}");
    assert!(err.to_string().contains("max_lease"), "{err}");
    assert!(freed_within(&nodes, &["y:a", "y:b"]));
}

/// A set waiter whose caller stops waiting leaves nothing behind, and the
/// blocking path takes a set too.
#[test]
fn a_cancelled_set_leaves_nothing_and_the_blocking_path_works() {
    let nodes = nodes(3);
    let locker = fresh(&nodes);
    let runtime = support::multi_thread();
    let held = locker.lock("x:b").expire(LONG).acquire_blocking().unwrap();
    runtime.block_on(async {
        let waiting = try_set(&locker, &["x:a", "x:b"], Duration::from_secs(20));
        assert!(
            tokio::time::timeout(Duration::from_millis(300), waiting)
                .await
                .is_err()
        );
    });
    held.release_blocking().unwrap();
    assert!(freed_within(&nodes, &["x:a", "x:b"]));
    let guard = locker.lock_all(["x:a", "x:b"]).acquire_blocking().unwrap();
    assert_eq!(owners(&nodes, "x:a"), owners(&nodes, "x:b"));
    assert!(owners(&nodes, "x:a").iter().all(Option::is_some));
    guard.release_blocking().unwrap();
}

static ATTR_LOCKER: OnceLock<Locker> = OnceLock::new();

fn attr_locker() -> &'static Locker {
    ATTR_LOCKER.get().expect("set by the test")
}

/// Moves one unit between two accounts on the Redlock, holding both.
#[redis_lock(name = ["acct:{from}", "acct:{to}"], locker = attr_locker(), expire = 5, acquire_time = 20, guard = g)]
async fn transfer(from: u64, to: u64, inside: &AtomicUsize) -> Result<u64, LockError> {
    let g: &LockSetGuard = g;
    let token = g.fencing_token_of(&format!("acct:{from}")).unwrap();
    assert_eq!(
        inside.fetch_add(1, Ordering::SeqCst),
        0,
        "two transfers at once"
    );
    tokio::time::sleep(Duration::from_millis(2)).await;
    inside.fetch_sub(1, Ordering::SeqCst);
    let _ = to;
    Ok(token)
}

/// The attribute on a Redlock Locker: crossed transfers never overlap,
/// and every name is free afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_takes_sets_on_a_redlock() {
    let nodes = nodes(3);
    assert!(ATTR_LOCKER.set(fresh(&nodes)).is_ok());
    let inside = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let inside = inside.clone();
            tokio::spawn(async move {
                let mut tokens = Vec::new();
                for _ in 0..5 {
                    let (from, to) = if t % 2 == 0 { (1, 2) } else { (2, 1) };
                    tokens.push(transfer(from, to, &inside).await.unwrap());
                }
                tokens
            })
        })
        .collect();
    for task in tasks {
        let tokens = task.await.unwrap();
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    }
    assert!(freed_within(&nodes, &["acct:1", "acct:2"]));
}
