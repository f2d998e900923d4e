//! The rows' measurements, and the record of everything one run measured.

pub mod bare;
pub mod contended;
pub mod deployments;
pub mod handoff;
pub mod kinds;
pub mod many;
pub mod replica_batch;
pub mod replicas;
pub mod rtt;
pub mod rw_cost;
pub mod uncontended;

use crate::util::GitState;

/// Everything one run measured. `[_; 2]` figures are by `Lib::index`
/// (lockattr, rslock); NaN where a library does not run.
#[derive(Debug, Default)]
pub struct Report {
    /// A `--quick` run.
    pub plan_quick: bool,
    /// Iterations of rows 1, 2.
    pub iterations: usize,
    /// The single server's version.
    pub redis_version: String,
    /// The unit: median raw PING interleaved per iteration with the
    /// libraries' operations (`uncontended[0].rtt_us`).
    pub rtt_us: f64,
    /// Rows 1 and 2: interleaved per iteration, and in blocks.
    pub uncontended: [Uncontended; 2],
    /// Row 2: the bare client (the commands captured from lockattr).
    pub bare: Option<bare::Bare>,
    /// Row 2: the bare client's commands, fresh values in braces.
    pub bare_commands: String,
    /// Row 2: the bare client's command names, e.g. `FCALL, FCALL`.
    pub bare_command_names: String,
    /// `/proc/loadavg` (1 min) at start and end: other load on the machine.
    pub load: [Option<f64>; 2],
    /// Row 3, on the single server.
    pub handoff: Handoff,
    /// Row 3's information row: a raw PING sent the way the holder sends its
    /// release, after the same idle sleep.
    pub cold_ping: ColdPing,
    /// Row 4.
    pub contend: [ContendStats; 2],
    /// Row 4: measured seconds per library.
    pub contend_seconds: f64,
    /// Row 5.
    pub tasks: [ContendStats; 2],
    /// Row 5: measured seconds per library.
    pub tasks_seconds: f64,
    /// Row 6: acquire + release pairs per second.
    pub many_pairs_per_s: [f64; 2],
    /// CPU µs per pair, `[redis-server, bench process]`, by `Lib::index`.
    pub many_cpu_us_per_pair: [[f64; 2]; 2],
    /// Row 6: measured seconds per library.
    pub many_seconds: f64,
    /// Row 7: median of the annotated function, µs.
    pub macro_us: f64,
    /// Row 7: median of the same by hand, µs.
    pub by_hand_us: f64,
    /// Row 7: iterations.
    pub macro_iterations: usize,
    /// Row 8.
    pub redlock: Deployment,
    /// Row 9.
    pub cluster: Deployment,
    /// Row 9: pub/sub messages per release.
    pub pubsub: PubSub,
    /// Rows 10 and 11: the other lock kinds (lockattr only).
    pub kinds: kinds::Kinds,
    /// Row 12: a read-write lock's Redis CPU per call against the readers
    /// holding (lockattr only).
    pub rw_cost: rw_cost::RwCost,
    /// Row 13: grants that wait for a replica, `min_replicas(1)` against
    /// `min_replicas(0)` (lockattr only).
    pub replicas: replicas::Replicas,
    /// Row 14: rows 2 and 3 through a delay proxy, at each target RTT.
    pub at_rtt: Vec<rtt::AtRtt>,
    /// rslock's retry settings as its `Debug` output shows them.
    pub rslock_defaults_seen: (Option<u32>, Option<String>),
    /// The checkout when the run started (the code that `cargo bench` built).
    pub git: GitState,
}

/// One run of rows 1 and 2 (or the acquire + release of a deployment);
/// medians in µs.
#[derive(Debug, Default, Clone)]
pub struct Uncontended {
    /// Iterations of one operation in a row (1: interleaved per iteration).
    pub block: usize,
    /// Median raw PING to the single server, in the same loop.
    pub rtt_us: f64,
    /// Median `Locker::ping` (NaN where not sampled).
    pub locker_ping_us: f64,
    /// Acquire + release, by `Lib::index`.
    pub pair_us: [f64; 2],
    /// The bare client's acquire + release (NaN where not sampled).
    pub bare_us: f64,
}

/// Hand-over across processes; µs, by side: `Lib::index` in rows 3, 8
/// and 9, the Locker's `min_replicas` in row 13.
#[derive(Debug, Default, Clone)]
pub struct Handoff {
    /// Measured rounds per library.
    pub samples: [usize; 2],
    /// Release start to the waiter's return, p50.
    pub p50_us: [f64; 2],
    /// The same, p99.
    pub p99_us: [f64; 2],
    /// The holder's release call alone (t0 to its return), p50.
    pub release_p50_us: [f64; 2],
    /// When the waiter returned, counted from when the holder's release
    /// call returned (negative: before it), p50.
    pub after_release_p50_us: [f64; 2],
}

/// The cold PING of row 3.
#[derive(Debug, Default, Clone)]
pub struct ColdPing {
    /// Measured PINGs.
    pub samples: usize,
    /// Their p50, µs.
    pub p50_us: f64,
}

/// Acquire + release and hand-over on a deployment other than one server.
#[derive(Debug, Default, Clone)]
pub struct Deployment {
    /// Nodes (Redlock) or masters (Cluster).
    pub nodes: usize,
    /// Acquire + release, interleaved per iteration with a raw PING to the
    /// single server (`rtt_us`).
    pub uncontended: Uncontended,
    /// Measured iterations of acquire + release.
    pub iterations: usize,
    /// Hand-over across processes.
    pub handoff: Handoff,
}

/// Pub/sub work of the Cluster's hand-over loop.
#[derive(Debug, Default, Clone)]
pub struct PubSub {
    /// Releases in the loop (each with a waiter blocked on the lock).
    pub releases: u64,
    /// Delta of `cluster_stats_messages_publish_sent` and
    /// `cluster_stats_messages_publishshard_sent`, summed over the masters.
    pub bus_messages: u64,
    /// Delta of PUBLISH and SPUBLISH calls (`INFO commandstats`), summed.
    pub publish_calls: u64,
}

impl PubSub {
    /// (bus messages + PUBLISH/SPUBLISH calls) / releases.
    pub fn per_release(&self) -> f64 {
        if self.releases == 0 {
            f64::NAN
        } else {
            (self.bus_messages + self.publish_calls) as f64 / self.releases as f64
        }
    }
}

/// Rows 4 and 5: critical sections of processes or tasks on one lock.
#[derive(Debug, Default, Clone)]
pub struct ContendStats {
    /// Critical sections finished inside the measured windows, per process
    /// (or task).
    pub counts: Vec<u64>,
    /// All critical sections run, inside the windows or just after.
    pub executed: u64,
    /// Acquisitions that gave up (rslock: retries ran out).
    pub gave_up: u64,
    /// The shared counter at the end.
    pub final_counter: u64,
    /// Critical sections finished inside the windows per second.
    pub per_s: f64,
    /// The least served process's (task's) count / the mean.
    pub least_share: f64,
    /// Wait of each critical section inside the windows, µs: from the first
    /// acquire call to the return of the one that got the lock.
    pub waits_us: Vec<f64>,
}

impl ContendStats {
    /// Final counter − critical sections run: increments lost to a broken
    /// mutual exclusion.
    pub fn lost(&self) -> i64 {
        self.final_counter as i64 - self.executed as i64
    }

    /// The p99 of `waits_us`, µs.
    pub fn wait_p99_us(&self) -> f64 {
        crate::util::quantile(&self.waits_us, 0.99)
    }

    /// Sets `per_s` and `least_share` from `counts`.
    pub fn finish(&mut self, seconds: f64) {
        let total: u64 = self.counts.iter().sum();
        self.per_s = total as f64 / seconds;
        let mean = total as f64 / self.counts.len().max(1) as f64;
        let min = self.counts.iter().copied().min().unwrap_or(0) as f64;
        self.least_share = if mean > 0.0 { min / mean } else { 0.0 };
    }
}
