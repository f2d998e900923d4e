//! Row 13, many names: grants that wait for a replica, from many tasks of
//! one process at once, the replica behind a link that adds about 5 ms
//! each way (the tests' TCP proxy, on its own master and replica started
//! for this part).
//!
//! - Healthy: `TASKS` tasks, each on a name of its own, acquire + release
//!   in a loop for one block with `min_replicas(1)`, then one with
//!   `min_replicas(0)` (same servers, same run): grants per second, p50 and
//!   p99 of the acquisition, and the failures by kind.
//! - Frozen replica (SIGSTOP): each task tries once, with an acquire time
//!   of `FROZEN_ACQUIRE`: the failures that are `Replicas`, and how long a
//!   failure took.

use std::time::{Duration, Instant};

use lockattr::{LockError, Locker};

use crate::proxy::Proxy;
use crate::servers::{RedisServer, info_field, query, wait_calls};
use crate::util::{quantile, us};
use crate::{EXPIRE, Plan, Res};

/// Tasks, each on a name of its own.
pub const TASKS: usize = 150;
/// Added to the replication link, each way.
pub const LINK_DELAY: Duration = Duration::from_millis(5);
/// The acquire time of the frozen part.
pub const FROZEN_ACQUIRE: Duration = Duration::from_millis(300);

/// One setting's block: `[_; 2]` by `min_replicas` (0, 1) in [`Batch`].
#[derive(Debug, Default, Clone)]
pub struct Block {
    /// Acquisitions granted per second.
    pub grants_per_s: f64,
    /// Acquisition time, p50 and p99, µs.
    pub p50_us: f64,
    pub p99_us: f64,
    /// Failed acquisitions: `Connection` errors, and any other error.
    pub connection_errors: u64,
    pub other_errors: u64,
}

/// The figures of this part.
#[derive(Debug, Default, Clone)]
pub struct Batch {
    /// By `min_replicas` (0, 1).
    pub blocks: [Block; 2],
    /// WAIT calls the master ran in the `min_replicas(1)` block.
    pub wait_calls: u64,
    /// Frozen replica: tries, `Replicas` failures among them, and how long
    /// a failure took (p50, max), µs.
    pub frozen_tries: u64,
    pub frozen_failures: u64,
    pub frozen_replicas: u64,
    pub frozen_fail_p50_us: f64,
    pub frozen_fail_max_us: f64,
}

/// Runs this part.
pub async fn run(plan: &Plan) -> Res<Batch> {
    let sync = [
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
    ];
    let master = RedisServer::start(&sync)?;
    let link = Proxy::start(master.port);
    let port = link.port().to_string();
    let mut args = vec!["--replicaof", "127.0.0.1", &port];
    args.extend(sync);
    let replica = RedisServer::start(&args)?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while info_field(
        &query(replica.port, &["INFO", "replication"])?,
        "master_link_status",
    )
    .as_deref()
        != Some("up")
    {
        if Instant::now() > deadline {
            return Err("the proxied replica did not sync within 20 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    link.set_delay(LINK_DELAY);
    let block = if plan.quick {
        Duration::from_secs(1)
    } else {
        Duration::from_secs(3)
    };
    let mut out = Batch::default();
    for n in [0, 1] {
        let locker = Locker::builder(master.url.as_str())
            .min_replicas(n)
            .build()?;
        let waits = wait_calls(master.port)?;
        out.blocks[n as usize] = healthy(&locker, n, block).await;
        if n == 1 {
            out.wait_calls = wait_calls(master.port)?.saturating_sub(waits);
        }
    }
    let locker = Locker::builder(master.url.as_str())
        .min_replicas(1)
        .build()?;
    signal(replica.pid(), "-STOP")?;
    let frozen = frozen(&locker).await;
    signal(replica.pid(), "-CONT")?;
    let failed: Vec<f64> = frozen
        .iter()
        .filter_map(|(e, t)| e.as_ref().map(|_| *t))
        .collect();
    out.frozen_tries = frozen.len() as u64;
    out.frozen_failures = failed.len() as u64;
    out.frozen_replicas = frozen
        .iter()
        .filter(|(e, _)| matches!(e, Some(LockError::Replicas { .. })))
        .count() as u64;
    out.frozen_fail_p50_us = quantile(&failed, 0.5);
    out.frozen_fail_max_us = quantile(&failed, 1.0);
    Ok(out)
}

/// One block of `TASKS` tasks taking and releasing their own names.
async fn healthy(locker: &Locker, n: u32, block: Duration) -> Block {
    let end = Instant::now() + block;
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let locker = locker.clone();
            let name = format!("bench:replica-batch:r{n}:{i}");
            tokio::spawn(async move {
                let (mut took, mut connection, mut other) = (Vec::new(), 0, 0);
                while Instant::now() < end {
                    let started = Instant::now();
                    match locker.lock(&name).expire(EXPIRE).acquire().await {
                        Ok(guard) => {
                            took.push(us(started.elapsed()));
                            drop(guard.release().await);
                        }
                        Err(LockError::Connection { .. }) => connection += 1,
                        Err(_) => other += 1,
                    }
                }
                (took, connection, other)
            })
        })
        .collect();
    let (mut took, mut out) = (Vec::new(), Block::default());
    for task in tasks {
        if let Ok((t, connection, other)) = task.await {
            took.extend(t);
            out.connection_errors += connection;
            out.other_errors += other;
        }
    }
    out.grants_per_s = took.len() as f64 / block.as_secs_f64();
    out.p50_us = quantile(&took, 0.5);
    out.p99_us = quantile(&took, 0.99);
    out
}

/// Each task's one try with the replica frozen: its error, if any, and
/// how long it took, µs.
async fn frozen(locker: &Locker) -> Vec<(Option<LockError>, f64)> {
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let locker = locker.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let name = format!("bench:replica-batch:frozen:{i}");
                let outcome = locker
                    .lock(&name)
                    .expire(EXPIRE)
                    .acquire_timeout(FROZEN_ACQUIRE)
                    .acquire()
                    .await;
                (outcome.err(), us(started.elapsed()))
            })
        })
        .collect();
    let mut out = Vec::new();
    for task in tasks {
        if let Ok(outcome) = task.await {
            out.push(outcome);
        }
    }
    out
}

/// Sends `signal` (`-STOP`, `-CONT`) to process `pid`.
fn signal(pid: u32, signal: &str) -> Res<()> {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()?;
    if !status.success() {
        return Err(format!("kill {signal} {pid} failed").into());
    }
    Ok(())
}
