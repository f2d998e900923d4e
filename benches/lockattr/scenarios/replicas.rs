//! Row 13: grants that wait for a replica (`LockerBuilder::min_replicas`),
//! lockattr only, on a master with one replica of its own (started by
//! `servers.rs`, in sync before the run): the Locker with `min_replicas(1)`
//! against the same Locker with `min_replicas(0)` (the default, no WAIT).
//!
//! - Uncontended acquire + release: per iteration a raw PING to that
//!   master (the row's unit), an acquire + release with `min_replicas(0)`
//!   and one with `min_replicas(1)`, in an order that rotates every
//!   iteration; medians.
//! - Hand-over across processes: row 3's machinery (`handoff::run_sides`),
//!   its two processes passing a lock of each setting back and forth, the
//!   settings taking turns in blocks; p50 and p99.
//!
//! - Many names at once behind a lagging link: see `replica_batch.rs`.
//!
//! Around each part the master's `cmdstat_wait` calls are read, so the row
//! also shows how many WAITs the setting sent.

use std::time::Duration;

use lockattr::Locker;

use super::handoff::{self, Side};
use super::replica_batch;
use super::{Handoff, Report};
use crate::peers::Deploy;
use crate::servers::{Servers, info_field, query, wait_calls};
use crate::util::{connect, median, timed, us};
use crate::{ACQUIRE_TIMEOUT, EXPIRE, Plan, Res};

/// The `min_replicas` of each side, in the order of the `[_; 2]` figures:
/// the index is the setting.
pub const SETTINGS: [u32; 2] = [0, 1];

/// Row 13's figures; `[_; 2]` by `min_replicas` (0, 1).
#[derive(Debug, Default, Clone)]
pub struct Replicas {
    /// Measured iterations of acquire + release (each runs both settings).
    pub iterations: usize,
    /// Median raw PING to the replicated master, in the same loop: the
    /// row's unit.
    pub rtt_us: f64,
    /// Median acquire + release, µs.
    pub pair_us: [f64; 2],
    /// Hand-over across processes.
    pub handoff: Handoff,
    /// Hand-over rounds of each setting, warm-up included.
    pub handoff_rounds: u64,
    /// WAIT calls the master ran during the acquire + release loop, and
    /// during the hand-over loop.
    pub wait_calls: [u64; 2],
    /// Acquire + release pairs run with `min_replicas(1)`, warm-up included.
    pub waiting_pairs: u64,
    /// `master_link_status` of the replica after the row.
    pub link_status_after: Option<String>,
    /// Many names at once, the replica behind a lagging link.
    pub batch: replica_batch::Batch,
}

impl Replicas {
    /// `min_replicas(1)`'s figure over `min_replicas(0)`'s.
    pub fn ratio(x: [f64; 2]) -> f64 {
        crate::util::ratio(x[1], x[0])
    }
}

/// Row 13.
pub async fn replicas(servers: &Servers, plan: &Plan, report: &mut Report) -> Res<()> {
    let pair = &servers.replicated;
    let url = &pair.master.url;
    let out = &mut report.replicas;

    // Acquire + release, interleaved per iteration with the master's PING.
    let lockers = SETTINGS
        .map(|n| Locker::builder(url.as_str()).min_replicas(n).build())
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    let mut raw = connect(url, Some(Duration::from_secs(5))).await?;
    let names = SETTINGS.map(|n| format!("bench:replicas:uncontended:r{n}"));
    let waits_before = wait_calls(pair.master.port)?;
    // 0: the PING; 1 + n: acquire + release with min_replicas(n).
    let mut samples: [Vec<f64>; 3] = Default::default();
    for i in 0..plan.warmup + plan.iterations {
        for k in 0..3 {
            let op = (i + k) % 3;
            let took = timed(async {
                if op == 0 {
                    redis::cmd("PING").query_async::<()>(&mut raw).await?;
                } else {
                    lockers[op - 1]
                        .lock(&names[op - 1])
                        .expire(EXPIRE)
                        .acquire_timeout(ACQUIRE_TIMEOUT)
                        .acquire()
                        .await?
                        .release()
                        .await?;
                }
                Ok(())
            })
            .await?;
            if i >= plan.warmup {
                samples[op].push(us(took));
            }
        }
    }
    let waits_between = wait_calls(pair.master.port)?;
    out.iterations = plan.iterations;
    out.rtt_us = median(&samples[0]);
    out.pair_us = [median(&samples[1]), median(&samples[2])];
    out.waiting_pairs = (plan.warmup + plan.iterations) as u64;
    drop(lockers);

    // The hand-over: row 3's two processes, on the replicated master,
    // signalling through the single server.
    let sides = SETTINGS.map(Side::replicas);
    let (handoff, _, releases) = handoff::run_sides(
        &servers.single.url,
        &Deploy::Single(url.clone()),
        &sides,
        false,
        plan.handoff_rounds,
        plan,
    )
    .await?;
    let waits_after = wait_calls(pair.master.port)?;
    out.handoff = handoff;
    out.handoff_rounds = releases / sides.len() as u64;
    out.wait_calls = [
        waits_between.saturating_sub(waits_before),
        waits_after.saturating_sub(waits_between),
    ];
    out.link_status_after = info_field(
        &query(pair.replica.port, &["INFO", "replication"])?,
        "master_link_status",
    );
    out.batch = replica_batch::run(plan).await?;
    Ok(())
}
