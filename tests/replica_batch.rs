//! Group commit of the grants that wait for replicas
//! (`LockerBuilder::min_replicas`): many grants of one process on one
//! master share their `WAIT`s instead of queueing one `WAIT` each behind
//! the others, and a grant whose replicas do not answer in time fails with
//! `LockError::Replicas`, never with a connection error while the master
//! answers.

use crate::support;

use std::time::{Duration, Instant};

use lockattr::{LockError, Locker};
use support::deployments::try_lock;
use support::replicas::ReplicaPair;
use support::{RedisServer, eventually};

/// A Locker of the pair's master whose grants wait for one replica.
fn locker(pair: &ReplicaPair) -> Locker {
    Locker::builder(pair.master.url())
        .min_replicas(1)
        .build()
        .unwrap()
}

/// How many `WAIT` commands the master ran since its statistics were last
/// reset.
fn waits(pair: &ReplicaPair) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut pair.master.client())
        .unwrap();
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_wait:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().unwrap())
}

/// Resets the master's command statistics.
fn reset_stats(pair: &ReplicaPair) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut pair.master.client())
        .unwrap();
}

/// `tasks` acquisitions, each of its own name (`<prefix>-<i>`), the i-th
/// started `i * stagger` after the first, each released as soon as it is
/// held: every outcome. With `replica`, each holder first checks that the
/// replica holds its grant.
async fn acquire_all(
    locker: &Locker,
    (prefix, tasks, stagger): (&str, u32, Duration),
    wait: Duration,
    replica: Option<&RedisServer>,
) -> Vec<Result<(), LockError>> {
    let replica = match replica {
        Some(server) => Some(
            redis::Client::open(server.url())
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap(),
        ),
        None => None,
    };
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let locker = locker.clone();
            let name = format!("{prefix}-{i}");
            let replica = replica.clone();
            tokio::spawn(async move {
                tokio::time::sleep(stagger * i).await;
                let guard = try_lock(&locker, &name, wait).await?;
                if let Some(mut replica) = replica {
                    let key = format!("{}{{{name}}}", locker.prefix());
                    let there: Option<String> = redis::cmd("GET")
                        .arg(&key)
                        .query_async(&mut replica)
                        .await
                        .unwrap();
                    assert!(
                        there.is_some(),
                        "{name} was granted before the replica held it"
                    );
                }
                guard.release().await.map(drop)
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for handle in handles {
        outcomes.push(handle.await.unwrap());
    }
    outcomes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_grants_share_their_waits_and_all_succeed() {
    // The replica acknowledges about 10 ms after a write.
    let pair = ReplicaPair::lagging(Duration::from_millis(5));
    let locker = locker(&pair);
    reset_stats(&pair);
    let tasks = 50;
    let wait = Duration::from_secs(5);
    let outcomes = acquire_all(&locker, ("batch", tasks, Duration::ZERO), wait, None).await;
    let failures: Vec<_> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    assert!(failures.is_empty(), "failed: {failures:?}");
    let waits = waits(&pair);
    // One WAIT covers every grant whose script ran before it was sent.
    assert!(
        waits < u64::from(tasks),
        "{waits} WAITs for {tasks} grants: none was shared"
    );
    assert!(waits >= 1, "no grant waited for the replica");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shared_wait_covers_the_grants_it_answers() {
    // The replica holds a write about 20 ms after the master ran it.
    let pair = ReplicaPair::lagging(Duration::from_millis(20));
    let locker = locker(&pair);
    // Grants keep coming while WAITs are in flight: most of them go while
    // another's WAIT is out, and wait for the next one.
    let spread = ("spread", 60, Duration::from_millis(3));
    let wait = Duration::from_secs(5);
    let outcomes = acquire_all(&locker, spread, wait, Some(&pair.replica)).await;
    let failures: Vec<_> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    assert!(failures.is_empty(), "failed: {failures:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_fails_every_grant_with_replicas_not_connection() {
    let pair = ReplicaPair::start();
    let locker = locker(&pair);
    // Held since before the freeze, so that tries of it write nothing: a
    // WAIT that followed only them would count the replica's last answer.
    // By another Locker, so that this one's tries go to Redis.
    let other = Locker::new(pair.master.url()).unwrap();
    let held = try_lock(&other, "frozen-held", Duration::ZERO)
        .await
        .unwrap();
    drop(try_lock(&locker, "warm-up", Duration::ZERO).await.unwrap());
    pair.replica.freeze();
    let acquire_time = Duration::from_millis(300);
    let tries: Vec<_> = (0..4)
        .map(|_| {
            let locker = locker.clone();
            tokio::spawn(async move {
                loop {
                    let busy = try_lock(&locker, "frozen-held", Duration::ZERO).await;
                    assert!(busy.is_err(), "a second holder");
                }
            })
        })
        .collect();
    let started = Instant::now();
    let outcomes = acquire_all(&locker, ("frozen", 30, Duration::ZERO), acquire_time, None).await;
    let took = started.elapsed();
    for t in &tries {
        t.abort();
    }
    for outcome in &outcomes {
        match outcome {
            Err(LockError::Replicas { .. }) => {}
            other => panic!("expected a Replicas error, got {other:?}"),
        }
    }
    // Within the acquire time and one replica timeout (the default
    // 100 ms), with room for a loaded machine: not a replica timeout per
    // grant queued ahead.
    let bound = acquire_time + Duration::from_millis(100) + Duration::from_millis(400);
    assert!(took < bound, "the last failure came after {took:?}");
    pair.replica.thaw();
    held.release().await.unwrap();
    // Every grant that ran on the master was given back.
    let left = eventually(Duration::from_secs(5), || {
        pair.master.held_locks().is_empty()
    });
    assert!(left.is_some(), "still held: {:?}", pair.master.held_locks());
}

/// Why each WAIT of a group commit follows a write of its own connection:
/// a WAIT counts the writes its own connection made, so on a connection
/// that wrote nothing it returns at once, whatever the other connections
/// wrote; after a `PUBLISH` (replicated like any write) it counts them all.
#[test]
fn a_wait_counts_other_connections_writes_only_after_a_write_of_its_own() {
    let pair = ReplicaPair::start();
    let mut writer = pair.master.client();
    let mut waiter = pair.master.client();
    pair.replica.freeze();
    let _: () = redis::cmd("SET")
        .arg("lockattr:probe")
        .arg("1")
        .arg("PX")
        .arg(10_000)
        .query(&mut writer)
        .unwrap();
    let wait = || redis::cmd("WAIT").arg(1).arg(200).clone();
    let blind: i64 = wait().query(&mut waiter).unwrap();
    assert_eq!(
        blind, 1,
        "a WAIT without a write of its own counted the frozen replica"
    );
    let (acked,): (i64,) = redis::pipe()
        .cmd("PUBLISH")
        .arg("lockattr:replicated")
        .arg("")
        .ignore()
        .add_command(wait())
        .query(&mut waiter)
        .unwrap();
    assert_eq!(
        acked, 0,
        "the frozen replica acknowledged a write it never received"
    );
}
