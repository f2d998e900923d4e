//! Grants that wait for replicas (`LockerBuilder::min_replicas`), under
//! load and when the replicas do not acknowledge: a renewed lease is
//! renewed in time however many grants wait for their replicas, and a grant
//! the replicas did not acknowledge is given back before its caller hears
//! of it (nothing stays held on the master, even when the process exits at
//! once), and the error says so.

use crate::support;

use std::time::{Duration, Instant};

use lockattr::{LockError, Locker};
use support::deployments::{lock_error, try_read_lock, try_semaphore, try_set, try_write_lock};
use support::proxy::Proxy;
use support::replicas::ReplicaPair;
use support::{child_test, eventually, lock_key, wait_child};

/// A master and one replica in sync with it.
type Pair = ReplicaPair;

/// A Locker of the pair's master whose grants wait for one replica, 100 ms
/// at most.
trait OneReplica {
    fn locker(&self) -> Locker;
}

impl OneReplica for Pair {
    fn locker(&self) -> Locker {
        replica_locker(&self.master.url())
    }
}

/// A Locker of `url` whose grants wait for one replica, 100 ms at most.
fn replica_locker(url: &str) -> Locker {
    Locker::builder(url)
        .min_replicas(1)
        .replica_timeout(Duration::from_millis(100))
        .build()
        .unwrap()
}

#[test]
fn a_renewed_lease_survives_fifty_sync_callers_on_other_names() {
    let pair = Pair::lagging(Duration::from_millis(10));
    let locker = pair.locker();
    let guard = locker
        .lock("t-renewed")
        .expire(Duration::from_millis(600))
        .renew(true)
        .acquire_blocking()
        .unwrap();
    // 50 threads take and release locks of their own, every one a grant
    // that waits for the replica, on the library's I/O thread.
    let until = Instant::now() + Duration::from_secs(3);
    let callers: Vec<_> = (0..50)
        .map(|i| {
            let locker = locker.clone();
            std::thread::spawn(move || {
                let name = format!("t-other-{i}");
                while Instant::now() < until {
                    let taken = locker
                        .lock(&name)
                        .acquire_timeout(Duration::from_millis(500))
                        .acquire_blocking();
                    // Not what this test is about: only the renewals are.
                    if let Ok(taken) = taken {
                        let _ = taken.release_blocking();
                    }
                }
            })
        })
        .collect();
    for caller in callers {
        caller.join().unwrap();
    }
    assert!(
        guard.lost_blocking(Duration::ZERO).is_none(),
        "the renewed guard was lost behind the grants"
    );
    assert!(!guard.is_lost());
    assert!(pair.master.exists(&lock_key("t-renewed")));
    guard.release_blocking().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_the_replica_did_not_acknowledge_is_given_back_before_the_error() {
    let pair = Pair::start();
    let locker = pair.locker();
    let mut master = pair.master.client();
    pair.replica.freeze();
    // One attempt each, and attempts tried again for a while.
    for (i, wait) in [Duration::ZERO, Duration::from_millis(250)]
        .into_iter()
        .cycle()
        .take(8)
        .enumerate()
    {
        let name = format!("t-unacked-{i}");
        let err = lock_error(&locker, &name, wait).await;
        // Read at once: the give-back is not left to a background task.
        let held: bool = redis::cmd("EXISTS")
            .arg(lock_key(&name))
            .query(&mut master)
            .unwrap();
        assert!(err.is_replicas(), "{err}");
        assert!(!held, "{name} still held on the master when told: {err}");
        let message = err.to_string();
        assert!(message.contains("given back"), "{message}");
    }
    // Every other kind too: nothing held on the master when told.
    let wait = Duration::ZERO;
    let outcomes = [
        ("read", try_read_lock(&locker, "t-read", wait).await.err()),
        (
            "write",
            try_write_lock(&locker, "t-write", wait).await.err(),
        ),
        (
            "permit",
            try_semaphore(&locker, "t-permit", 2, wait).await.err(),
        ),
        (
            "set",
            try_set(&locker, &["t-set-a", "t-set-b"], wait).await.err(),
        ),
    ];
    for (kind, err) in outcomes {
        let err = err.unwrap_or_else(|| panic!("{kind}: granted without the replica"));
        let held: Vec<String> = redis::cmd("KEYS")
            .arg("lockattr:*")
            .query::<Vec<String>>(&mut master)
            .unwrap()
            .into_iter()
            .filter(|k| !k.ends_with(":fence") && !k.ends_with(":sem:permits"))
            .collect();
        assert!(err.is_replicas(), "{kind}: {err}");
        assert!(held.is_empty(), "{kind}: still held when told: {held:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_that_cannot_be_confirmed_is_reported_with_until_when_it_may_hold() {
    let pair = Pair::start();
    // The Locker reaches the master through a proxy that stalls every
    // connection that sends the give-back (a release, the only request
    // that names the lock's channel when nobody waits).
    let front = Proxy::start(pair.master.port);
    let locker = Locker::builder(front.url())
        .min_replicas(1)
        .replica_timeout(Duration::from_millis(100))
        .response_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    pair.replica.freeze();
    front.stall_matching(b"{t-stuck}:wake");
    let expire = Duration::from_secs(20);
    let err = locker
        .lock("t-stuck")
        .expire(expire)
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await
        .unwrap_err();
    let told = std::time::SystemTime::now();
    let key = lock_key("t-stuck");
    assert!(pair.master.exists(&key), "the give-back was not stalled");
    match &err {
        LockError::Replicas {
            held_until: Some(until),
            ..
        } => {
            // Until the end of the lease the grant asked for, at most.
            let left = until.duration_since(told).unwrap_or_default();
            assert!(left > Duration::from_secs(15) && left <= expire, "{left:?}");
        }
        e => panic!("not a Replicas error with an end: {e}"),
    }
    let message = err.to_string();
    assert!(message.contains("could not be given back"), "{message}");
    assert!(!message.contains("nothing is held"), "{message}");
    // Once the master is reached again, the give-back still runs.
    front.resume();
    let freed = eventually(Duration::from_secs(10), || !pair.master.exists(&key));
    assert!(freed.is_some(), "left held: {} ms", pair.master.pttl(&key));
}

/// The child of [`a_process_that_exits_right_after_the_error_leaves_nothing_held`]:
/// takes `t-one-shot` (a lease of 20 s, one attempt) on the master named by
/// `TRUTH_URL`, prints the error, and exits at once. Nothing without it.
#[test]
fn one_shot_child() {
    let Ok(url) = std::env::var("TRUTH_URL") else {
        return;
    };
    let outcome = replica_locker(&url)
        .lock("t-one-shot")
        .expire(Duration::from_secs(20))
        .acquire_timeout(Duration::ZERO)
        .acquire_blocking();
    match outcome {
        Err(e @ LockError::Replicas { .. }) => println!("REPLICAS {e}"),
        Err(e) => println!("OTHER {e}"),
        Ok(_) => println!("GRANTED"),
    }
    std::process::exit(0);
}

#[test]
fn a_process_that_exits_right_after_the_error_leaves_nothing_held() {
    let pair = Pair::start();
    pair.replica.freeze();
    for _ in 0..3 {
        let child = child_test("one_shot_child", &[("TRUTH_URL", &pair.master.url())])
            .spawn()
            .expect("spawn the child test");
        let output = wait_child(child, Duration::from_secs(60));
        let said = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(said.contains("REPLICAS"), "{said}");
        let key = lock_key("t-one-shot");
        assert!(
            !pair.master.exists(&key),
            "left held for {} ms more by a process that is gone",
            pair.master.pttl(&key)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_for_a_free_name_hear_of_the_replicas_not_of_another_owner() {
    let pair = Pair::start();
    let (a, b) = (pair.locker(), pair.locker());
    pair.replica.freeze();
    let wait = Duration::from_millis(400);
    for round in 0..3 {
        let name = format!("t-both-{round}");
        let (x, y) = tokio::join!(lock_error(&a, &name, wait), lock_error(&b, &name, wait));
        for err in [x, y] {
            let message = err.to_string();
            assert!(
                err.is_replicas() || (err.is_timeout() && message.contains("replica")),
                "{message}"
            );
            assert!(!message.contains("another owner"), "{message}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contender_refused_by_a_grant_nobody_acknowledged_hears_of_the_replicas() {
    let pair = Pair::start();
    let locker = pair.locker();
    pair.replica.freeze();
    // Another contender's grant, written after the replica froze: the
    // replica never acknowledged it, so it never counted for anyone.
    let name = "t-unacked-holder";
    let _: () = redis::cmd("SET")
        .arg(lock_key(name))
        .arg("another contender's token")
        .arg("PX")
        .arg(10_000)
        .query(&mut pair.master.client())
        .unwrap();
    let err = lock_error(&locker, name, Duration::from_millis(300)).await;
    let message = err.to_string();
    assert!(err.is_replicas(), "{message}");
    assert!(!message.contains("another owner"), "{message}");
}
