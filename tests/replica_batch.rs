//! Group commit of the grants that wait for replicas
//! (`LockerBuilder::min_replicas`): many grants of one process on one
//! master share their `WAIT`s instead of queueing one `WAIT` each behind
//! the others, and a grant whose replicas do not answer in time fails with
//! `LockError::Replicas`, never with a connection error while the master
//! answers.

use crate::support;

use std::time::Duration;

use lockattr::{LockError, Locker};
use support::RedisServer;
use support::deployments::try_lock;
use support::eventually;
use support::proxy::Proxy;

/// A master and one replica that replicates through a proxy (which can
/// add latency to the replication stream and its acknowledgements).
struct Pair {
    master: RedisServer,
    replica: RedisServer,
    /// The replica's link to the master.
    link: Proxy,
}

impl Pair {
    /// Starts the pair and waits until the replica synced.
    fn start() -> Pair {
        let master = RedisServer::start();
        let link = Proxy::start(master.port);
        let port = link.port().to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
        let synced = eventually(Duration::from_secs(20), || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut replica.client())
                .unwrap_or_default();
            info.contains("master_link_status:up")
        });
        assert!(synced.is_some(), "the replica never synced");
        Pair {
            master,
            replica,
            link,
        }
    }

    /// A Locker of the master whose grants wait for one replica.
    fn locker(&self) -> Locker {
        Locker::builder(self.master.url())
            .min_replicas(1)
            .build()
            .unwrap()
    }

    /// How many `WAIT` commands the master ran since its statistics were
    /// last reset.
    fn waits(&self) -> u64 {
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.master.client())
            .unwrap();
        stats
            .lines()
            .find_map(|line| line.strip_prefix("cmdstat_wait:calls="))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |calls| calls.parse().unwrap())
    }

    /// Resets the master's command statistics.
    fn reset_stats(&self) {
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut self.master.client())
            .unwrap();
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        // A frozen replica cannot be audited or killed cleanly.
        self.replica.thaw();
    }
}

/// `tasks` acquisitions at once, each of its own name (`<prefix>-<i>`),
/// each released as soon as it is held: every outcome.
async fn acquire_all(
    locker: &Locker,
    prefix: &str,
    tasks: usize,
    wait: Duration,
) -> Vec<Result<(), LockError>> {
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let locker = locker.clone();
            let name = format!("{prefix}-{i}");
            tokio::spawn(async move {
                let guard = try_lock(&locker, &name, wait).await?;
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
    let pair = Pair::start();
    // The replica acknowledges about 10 ms after a write.
    pair.link.set_delay(Duration::from_millis(5));
    let locker = pair.locker();
    pair.reset_stats();
    let tasks = 50;
    let outcomes = acquire_all(&locker, "batch", tasks, Duration::from_secs(5)).await;
    let failures: Vec<_> = outcomes.iter().filter_map(|o| o.as_ref().err()).collect();
    assert!(failures.is_empty(), "failed: {failures:?}");
    let waits = pair.waits();
    // One WAIT covers every grant whose script ran before it was sent.
    assert!(
        waits < u64::try_from(tasks).unwrap(),
        "{waits} WAITs for {tasks} grants: none was shared"
    );
    assert!(waits >= 1, "no grant waited for the replica");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_fails_every_grant_with_replicas_not_connection() {
    let pair = Pair::start();
    let locker = pair.locker();
    pair.replica.freeze();
    let outcomes = acquire_all(&locker, "frozen", 30, Duration::from_millis(300)).await;
    for outcome in &outcomes {
        match outcome {
            Err(LockError::Replicas { .. }) => {}
            other => panic!("expected a Replicas error, got {other:?}"),
        }
    }
    pair.replica.thaw();
    // Every grant that ran on the master was given back.
    let left = eventually(Duration::from_secs(5), || {
        pair.master.held_locks().is_empty()
    });
    assert!(left.is_some(), "still held: {:?}", pair.master.held_locks());
}
