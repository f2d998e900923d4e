//! The JSON record of a run (`docs/bench/results.json`): serde types in the
//! file's shape, written by `serde_json` (numbers rounded to 3 decimals).

use serde::{Serialize, Serializer};

use crate::peers::{
    RSLOCK_DEFAULT_RETRY_COUNT, RSLOCK_DEFAULT_RETRY_DELAY, RSLOCK_WAITER_RETRY_COUNT,
};
use crate::report::rows;
use crate::scenarios::kinds::{READ_HOLD, READERS};
use crate::scenarios::replicas::Replicas;
use crate::scenarios::rw_cost::{BLOCK, Cost, HELD, HELD_LEASE};
use crate::scenarios::{ContendStats, Handoff, Report, Uncontended};
use crate::targets::{self, Target};
use crate::util::ratio;
use crate::util::{cores, cpu_model, quantile, unix_nanos};
use crate::{CONTEND_PROCESSES, MANY_TASKS, ONE_PROCESS_TASKS, RUNTIME};

/// A measured figure: rounded to 3 decimals, written as an integer when
/// whole, `null` when not finite.
#[derive(Clone, Copy)]
struct N(f64);

impl Serialize for N {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let x = self.0;
        if !x.is_finite() {
            s.serialize_none()
        } else if x.fract() == 0.0 && x.abs() < 1e15 {
            s.serialize_i64(x as i64)
        } else {
            s.serialize_f64((x * 1000.0).round() / 1000.0)
        }
    }
}

/// One library's median, and in RTTs.
#[derive(Serialize)]
struct Median {
    median_us: N,
    rtt: N,
}

/// One library's 50th percentile, and in RTTs.
#[derive(Serialize)]
struct P50 {
    p50_us: N,
    rtt: N,
}

/// One library's 99th percentile, and in RTTs.
#[derive(Serialize)]
struct P99 {
    p99_us: N,
    rtt: N,
}

/// Both libraries' figures and their ratio; rslock's are left out when it
/// did not run.
#[derive(Serialize)]
struct Pair<L> {
    lockattr: L,
    #[serde(skip_serializing_if = "Option::is_none")]
    rslock: Option<L>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_lockattr_over_rslock: Option<N>,
}

fn pair<L>(l: f64, rs: f64, rtt: f64, lib: fn(N, N) -> L) -> Pair<L> {
    let of = |x: f64| lib(N(x), N(x / rtt));
    Pair {
        lockattr: of(l),
        rslock: rs.is_finite().then(|| of(rs)),
        ratio_lockattr_over_rslock: rs.is_finite().then(|| N(ratio(l, rs))),
    }
}

fn median(median_us: N, rtt: N) -> Median {
    Median { median_us, rtt }
}

fn p50(p50_us: N, rtt: N) -> P50 {
    P50 { p50_us, rtt }
}

/// Rows 2, 8 and 9: acquire + release.
#[derive(Serialize)]
struct UncontendedJson {
    iterations_in_a_row: usize,
    raw_ping_median_us: N,
    #[serde(skip_serializing_if = "Option::is_none")]
    locker_ping_median_us: Option<N>,
    #[serde(flatten)]
    pair: Pair<Median>,
    target: Option<Target>,
    /// Rows 2 and 14: the bare client sending lockattr's commands.
    #[serde(skip_serializing_if = "Option::is_none")]
    bare_client: Option<BareJson>,
}

/// The bare client's acquire + release in a loop of rows 2 and 14.
#[derive(Serialize)]
struct BareJson {
    #[serde(flatten)]
    median: Median,
    ratio_lockattr_over_bare_client: N,
    ratio_bare_client_over_rslock: N,
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<Target>,
}

fn uncontended(u: &Uncontended, target: Option<Target>) -> UncontendedJson {
    uncontended_with_bare(u, target, None)
}

fn uncontended_with_bare(
    u: &Uncontended,
    target: Option<Target>,
    bare_target: Option<Target>,
) -> UncontendedJson {
    UncontendedJson {
        iterations_in_a_row: u.block,
        raw_ping_median_us: N(u.rtt_us),
        locker_ping_median_us: u.locker_ping_us.is_finite().then_some(N(u.locker_ping_us)),
        pair: pair(u.pair_us[0], u.pair_us[1], u.rtt_us, median),
        target,
        bare_client: u.bare_us.is_finite().then(|| BareJson {
            median: median(N(u.bare_us), N(u.bare_us / u.rtt_us)),
            ratio_lockattr_over_bare_client: N(ratio(u.pair_us[0], u.bare_us)),
            ratio_bare_client_over_rslock: N(ratio(u.bare_us, u.pair_us[1])),
            target: bare_target,
        }),
    }
}

/// Rows 3, 8 and 9: the hand-over across processes.
#[derive(Serialize)]
struct HandoffJson {
    samples_per_library: usize,
    #[serde(flatten)]
    p50: Pair<P50>,
    p99: Pair<P99>,
    holder_release_call: Pair<P50>,
    waiter_returned_after_release_call_returned: Pair<P50>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    targets: Vec<Target>,
}

fn handoff(h: &Handoff, rtt: f64, targets: Vec<Target>) -> HandoffJson {
    HandoffJson {
        samples_per_library: h.samples[0],
        p50: pair(h.p50_us[0], h.p50_us[1], rtt, p50),
        p99: pair(h.p99_us[0], h.p99_us[1], rtt, |p99_us, rtt| P99 {
            p99_us,
            rtt,
        }),
        holder_release_call: pair(h.release_p50_us[0], h.release_p50_us[1], rtt, p50),
        waiter_returned_after_release_call_returned: pair(
            h.after_release_p50_us[0],
            h.after_release_p50_us[1],
            rtt,
            p50,
        ),
        targets,
    }
}

/// Rows 4 and 5: one library contending on one lock.
#[derive(Serialize)]
struct ContendJson {
    critical_sections_per_s: N,
    lost_updates: i64,
    least_served_share: N,
    wait_p99_us: N,
    per_process: Vec<u64>,
    executed: u64,
    final_counter: u64,
    acquisitions_given_up: u64,
}

fn contend(s: &ContendStats) -> ContendJson {
    ContendJson {
        critical_sections_per_s: N(s.per_s),
        lost_updates: s.lost(),
        least_served_share: N(s.least_share),
        wait_p99_us: N(s.wait_p99_us()),
        per_process: s.counts.clone(),
        executed: s.executed,
        final_counter: s.final_counter,
        acquisitions_given_up: s.gave_up,
    }
}

/// Rows 4 (`processes`) and 5 (`tasks`): both libraries contending.
#[derive(Serialize)]
struct Contention {
    #[serde(skip_serializing_if = "Option::is_none")]
    processes: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tasks: Option<usize>,
    seconds_per_library: N,
    lockattr: ContendJson,
    rslock: ContendJson,
    ratio_lockattr_over_rslock: N,
    targets: Vec<Target>,
}

fn contention([l, rs]: &[ContendStats; 2], seconds: f64, targets: Vec<Target>) -> Contention {
    Contention {
        processes: None,
        tasks: None,
        seconds_per_library: N(seconds),
        lockattr: contend(l),
        rslock: contend(rs),
        ratio_lockattr_over_rslock: N(ratio(l.per_s, rs.per_s)),
        targets,
    }
}

/// A lock kind against its baseline (row 10).
#[derive(Serialize)]
struct KindJson {
    median_us: N,
    rtt: N,
    baseline: &'static str,
    ratio_to_baseline: N,
}

/// One side of row 12 at one count of readers holding.
#[derive(Serialize)]
struct CostJson {
    readers_holding: usize,
    redis_us_per_call_median_of_blocks: N,
    blocks: usize,
    block_us_per_call_p10_p90: [N; 2],
    calls: u64,
    evalsha_calls: u64,
    evalsha_usec: u64,
    redis_us_per_call_mean: N,
    evalsha_calls_per_call: N,
    redis_us_per_evalsha_call_mean: N,
}

/// One side of row 12: read calls or a writer's tries.
#[derive(Serialize)]
struct CostSide {
    per_readers_holding: [CostJson; 2],
    ratio_most_over_one_reader: N,
    ratio_of_means: N,
    target: Target,
}

fn cost_side(costs: &[Cost; 2], median_ratio: f64, target: Target) -> CostSide {
    let at = |i: usize| {
        let x = &costs[i];
        CostJson {
            readers_holding: HELD[i],
            redis_us_per_call_median_of_blocks: N(x.us_per_call()),
            blocks: x.block_us.len(),
            block_us_per_call_p10_p90: [
                N(quantile(&x.block_us, 0.1)),
                N(quantile(&x.block_us, 0.9)),
            ],
            calls: x.calls,
            evalsha_calls: x.script_calls,
            evalsha_usec: x.usec,
            redis_us_per_call_mean: N(x.mean_us_per_call()),
            evalsha_calls_per_call: N(x.scripts_per_call()),
            redis_us_per_evalsha_call_mean: N(x.mean_us_per_script_call()),
        }
    };
    CostSide {
        per_readers_holding: [at(0), at(1)],
        ratio_most_over_one_reader: N(median_ratio),
        ratio_of_means: N(ratio(
            costs[1].mean_us_per_call(),
            costs[0].mean_us_per_call(),
        )),
        target,
    }
}

/// A row of the table as printed; the table of docs/performance.md is made from these.
#[derive(Serialize)]
struct TableRow {
    row: &'static str,
    figure: &'static str,
    lockattr: String,
    rslock: String,
    ratio: String,
    target: &'static str,
    met: Option<bool>,
    readme: bool,
}

/// Row 6: tasks on distinct locks.
#[derive(Serialize)]
struct ManyLocks {
    tasks: usize,
    seconds_per_library: N,
    lockattr_pairs_per_s: N,
    rslock_pairs_per_s: N,
    cpu_us_per_pair: CpuPerPair,
    ratio_lockattr_over_rslock: N,
    target: Target,
}

/// Row 6: CPU time per acquire + release, of Redis and of the bench.
#[derive(Serialize)]
struct CpuPerPair {
    lockattr_redis_server: N,
    lockattr_bench_process: N,
    rslock_redis_server: N,
    rslock_bench_process: N,
}

/// Row 7: `#[redis_lock]` against the builder by hand.
#[derive(Serialize)]
struct MacroOverhead {
    iterations: usize,
    annotated_median_us: N,
    builder_median_us: N,
    overhead_pct: N,
    target: Target,
}

/// Row 8: Redlock.
#[derive(Serialize)]
struct Redlock {
    nodes: usize,
    iterations: usize,
    acquire_release: UncontendedJson,
    handoff_across_processes: HandoffJson,
}

/// Row 9: Redis Cluster.
#[derive(Serialize)]
struct Cluster {
    masters: usize,
    iterations: usize,
    acquire_release: UncontendedJson,
    handoff_across_processes: HandoffJson,
    pubsub_messages_per_release: PubSub,
}

/// Row 9: pub/sub messages per release.
#[derive(Serialize)]
struct PubSub {
    what: &'static str,
    releases: u64,
    cluster_bus_publish_messages: u64,
    publish_calls: u64,
    per_release: N,
    target: Target,
}

/// Rows 10 and 11: the other lock kinds.
#[derive(Serialize)]
struct Kinds {
    what: &'static str,
    iterations: usize,
    rtt_us: N,
    lock: KindJson,
    two_locks_in_a_row: KindJson,
    set_of_two_names: SetOfTwo,
    read: KindJson,
    write: KindJson,
    semaphore_permit: KindJson,
    readers_sharing: ReadersSharing,
}

/// Row 10: a set of two names against two locks in a row.
#[derive(Serialize)]
struct SetOfTwo {
    acquire_release: KindJson,
    target: Target,
}

/// Row 11: readers sharing one name, read side against write side.
#[derive(Serialize)]
struct ReadersSharing {
    tasks: usize,
    hold_ms: N,
    seconds_per_side: N,
    read_holds_per_s: N,
    write_holds_per_s: N,
    read_most_inside: usize,
    write_most_inside: usize,
    target: Target,
}

/// Row 12: a read-write lock's Redis CPU per call against the readers holding.
#[derive(Serialize)]
struct RwCost {
    what: &'static str,
    readers_holding: [usize; 2],
    readers_in_index_before_measuring: [Option<u64>; 2],
    holders_lease_s: N,
    cycles_a_b_b_a: usize,
    calls_per_block: usize,
    read_call: CostSide,
    writer_try: CostSide,
}

/// Row 13: one figure with `min_replicas(0)` and with `min_replicas(1)`,
/// and their ratio.
#[derive(Serialize)]
struct BySetting<L> {
    min_replicas_0: L,
    min_replicas_1: L,
    ratio_1_over_0: N,
}

fn by_setting<L>(x: [f64; 2], rtt: f64, of: fn(N, N) -> L) -> BySetting<L> {
    BySetting {
        min_replicas_0: of(N(x[0]), N(x[0] / rtt)),
        min_replicas_1: of(N(x[1]), N(x[1] / rtt)),
        ratio_1_over_0: N(Replicas::ratio(x)),
    }
}

/// Row 13's hand-over.
#[derive(Serialize)]
struct ReplicasHandoff {
    samples_per_setting: usize,
    p50: BySetting<P50>,
    p99: BySetting<P99>,
    holder_release_call: BySetting<P50>,
    waiter_returned_after_release_call_returned: BySetting<P50>,
}

/// Row 13: WAIT calls the master ran.
#[derive(Serialize)]
struct WaitCalls {
    during_acquire_release: u64,
    acquire_release_with_min_replicas_1: u64,
    during_handoff: u64,
    handoff_rounds_per_setting: u64,
}

/// Row 13: grants that wait for a replica.
#[derive(Serialize)]
struct ReplicasJson {
    what: &'static str,
    replicas: usize,
    replica_timeout_ms: N,
    iterations: usize,
    raw_ping_median_us: N,
    acquire_release: BySetting<Median>,
    handoff_across_processes: ReplicasHandoff,
    wait_calls: WaitCalls,
    replica_master_link_status_after: Option<String>,
}

/// Row 13.
fn replicas(r: &Report) -> ReplicasJson {
    let x = &r.replicas;
    let h = &x.handoff;
    let rtt = x.rtt_us;
    let p99 = |p99_us, rtt| P99 { p99_us, rtt };
    ReplicasJson {
        what: "lockattr only, on a master with one replica of its own (in sync before the run): Locker::builder(master).min_replicas(1) against min_replicas(0), replica_timeout the default. Acquire + release interleaved per iteration (order rotating) with a raw PING to that master (raw_ping_median_us, the unit of this row's rtt figures); the hand-over across processes of row 3, the two settings taking turns in blocks, signalling through the single server. wait_calls: cmdstat_wait calls on the master around each part",
        replicas: 1,
        replica_timeout_ms: N(lockattr::DEFAULT_REPLICA_TIMEOUT.as_secs_f64() * 1e3),
        iterations: x.iterations,
        raw_ping_median_us: N(rtt),
        acquire_release: by_setting(x.pair_us, rtt, median),
        handoff_across_processes: ReplicasHandoff {
            samples_per_setting: h.samples[1],
            p50: by_setting(h.p50_us, rtt, p50),
            p99: by_setting(h.p99_us, rtt, p99),
            holder_release_call: by_setting(h.release_p50_us, rtt, p50),
            waiter_returned_after_release_call_returned: by_setting(
                h.after_release_p50_us,
                rtt,
                p50,
            ),
        },
        wait_calls: WaitCalls {
            during_acquire_release: x.wait_calls[0],
            acquire_release_with_min_replicas_1: x.waiting_pairs,
            during_handoff: x.wait_calls[1],
            handoff_rounds_per_setting: x.handoff_rounds,
        },
        replica_master_link_status_after: x.link_status_after.clone(),
    }
}

/// Row 2 in both loops.
#[derive(Serialize)]
struct UncontendedScenario {
    iterations: usize,
    bare_client: BareClient,
    interleaved_per_iteration: UncontendedJson,
    tight_loop: UncontendedJson,
}

/// What row 2's bare client sends.
#[derive(Serialize)]
struct BareClient {
    what: &'static str,
    commands: String,
    sent: String,
}

/// Row 14 at one target RTT.
#[derive(Serialize)]
struct AtRttJson {
    target_rtt_us: N,
    delay_each_way_us: N,
    proxy_without_delay_ping_median_us: N,
    fault_proxy_without_delay_ping_median_us: N,
    direct_ping_median_us: N,
    iterations: usize,
    acquire_release: UncontendedJson,
    handoff_across_processes_lockattr: HandoffJson,
}

/// Row 14.
#[derive(Serialize)]
struct AtRttScenario {
    what: &'static str,
    rtts: Vec<AtRttJson>,
}

fn at_rtt(r: &Report) -> AtRttScenario {
    AtRttScenario {
        what: "the single server through a userspace TCP delay proxy (benches/lockattr/delay.rs: one thread per direction reads a chunk, sleeps until its read time + the delay, writes it); for comparison the PING direct and through the tests' fault proxy (tests/support/proxy.rs, a reader and a writer thread per direction) with no delay; the delay calibrated against PINGs through the proxy to reach about each target RTT; rtt figures are in the PING through the proxy sampled in the same loop (raw_ping_median_us), not the target. Acquire + release: raw PING, lockattr, rslock and the bare client of row 2, interleaved per iteration, order rotating. Hand-over: row 3's two processes, lockattr only, the Locker through the proxy and the signals direct",
        rtts: r
            .at_rtt
            .iter()
            .map(|a| AtRttJson {
                target_rtt_us: N(a.target_rtt_us),
                delay_each_way_us: N(a.delay_us),
                proxy_without_delay_ping_median_us: N(a.proxy_floor_us),
                fault_proxy_without_delay_ping_median_us: N(a.fault_proxy_floor_us),
                direct_ping_median_us: N(a.direct_us),
                iterations: a.iterations,
                acquire_release: uncontended(
                    &a.uncontended,
                    (a.target_rtt_us >= 1000.0).then(|| targets::at_rtt_uncontended(a)),
                ),
                handoff_across_processes_lockattr: handoff(
                    &Handoff {
                        samples: [a.handoff.samples[0], 0],
                        p50_us: [a.handoff.p50_us[0], f64::NAN],
                        p99_us: [a.handoff.p99_us[0], f64::NAN],
                        release_p50_us: [a.handoff.release_p50_us[0], f64::NAN],
                        after_release_p50_us: [a.handoff.after_release_p50_us[0], f64::NAN],
                    },
                    a.uncontended.rtt_us,
                    Vec::new(),
                ),
            })
            .collect(),
    }
}

/// Row 3's cold PING, for information.
#[derive(Serialize)]
struct ColdPing {
    what: &'static str,
    samples: usize,
    p50_us: N,
    rtt: N,
}

/// Every row's figures.
#[derive(Serialize)]
struct Scenarios {
    uncontended_acquire_release: UncontendedScenario,
    handoff_across_processes: HandoffJson,
    cold_ping: ColdPing,
    contended: Contention,
    tasks_one_lock: Contention,
    many_locks: ManyLocks,
    macro_overhead: MacroOverhead,
    redlock: Redlock,
    cluster: Cluster,
    kinds: Kinds,
    rw_lock_readers_holding_cost: RwCost,
    replicas: ReplicasJson,
    at_rtt: AtRttScenario,
}

/// The machine the run measured on.
#[derive(Serialize)]
struct Machine {
    cores: usize,
    cpu: Option<String>,
    os: &'static str,
    redis_server_version: String,
    redis_server: &'static str,
}

/// The 1-minute load average at the start and the end of the run.
#[derive(Serialize)]
struct LoadAverage {
    start: Option<N>,
    end: Option<N>,
}

/// The code that ran.
#[derive(Serialize)]
struct Code {
    lockattr_version: &'static str,
    git_head: Option<String>,
    library_sources_differ_from_head: Option<bool>,
    worktree_dirty: Option<bool>,
}

/// The peer library and how it is configured.
#[derive(Serialize)]
struct Peer {
    #[serde(rename = "crate")]
    krate: &'static str,
    version: &'static str,
    features: [&'static str; 1],
    servers: usize,
    retry_defaults: RetryDefaults,
    handoff_waiter_retry: Retry,
    redlock: &'static str,
}

/// rslock's retries by default.
#[derive(Serialize)]
struct RetryDefaults {
    count: u32,
    max_delay_ms: u64,
    seen_in_debug_output: String,
    used_in: &'static str,
}

/// rslock's retries for the hand-over's waiter.
#[derive(Serialize)]
struct Retry {
    count: u32,
    max_delay_ms: u64,
}

/// The unit of every `rtt` figure.
#[derive(Serialize)]
struct Rtt {
    what: &'static str,
    raw_ping_median_us: N,
    locker_ping_median_us: N,
    locker_ping_rtt: N,
}

/// The JSON record of a run, field by field in the file's order.
#[derive(Serialize)]
pub struct Record {
    benchmark: &'static str,
    quick: bool,
    generated_unix_s: u64,
    machine: Machine,
    runtime: &'static str,
    load_average_1min: LoadAverage,
    code: Code,
    peer: Peer,
    rtt: Rtt,
    scenarios: Scenarios,
    table: Vec<TableRow>,
}

impl Record {
    /// The text of the file.
    pub fn render(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("the record is plain data");
        text.push('\n');
        text
    }
}

/// Rows 10 and 11.
fn kinds(r: &Report) -> Kinds {
    let k = &r.kinds;
    let pair = |i: usize, base: usize, baseline: &'static str| KindJson {
        median_us: N(k.pair_us[i]),
        rtt: N(k.pair_us[i] / k.rtt_us),
        baseline,
        ratio_to_baseline: N(k.pair_ratio(i, base)),
    };
    Kinds {
        what: "lockattr only. Acquire + release, uncontended, interleaved per iteration (order rotating) with a raw PING (rtt_us) and the baselines; and READERS tasks holding one name READ_HOLD each, read side against write side, blocks A B B A",
        iterations: k.iterations,
        rtt_us: N(k.rtt_us),
        lock: pair(targets::LOCK, targets::LOCK, "a lock"),
        two_locks_in_a_row: pair(targets::TWO_LOCKS, targets::LOCK, "a lock"),
        set_of_two_names: SetOfTwo {
            acquire_release: pair(targets::SET, targets::TWO_LOCKS, "two locks in a row"),
            target: targets::set_of_two(r),
        },
        read: pair(targets::READ, targets::LOCK, "a lock"),
        write: pair(targets::WRITE, targets::LOCK, "a lock"),
        semaphore_permit: pair(targets::PERMIT, targets::LOCK, "a lock"),
        readers_sharing: ReadersSharing {
            tasks: READERS,
            hold_ms: N(READ_HOLD.as_secs_f64() * 1e3),
            seconds_per_side: N(k.shared_seconds),
            read_holds_per_s: N(k.shared_per_s[0]),
            write_holds_per_s: N(k.shared_per_s[1]),
            read_most_inside: k.most_inside[0],
            write_most_inside: k.most_inside[1],
            target: targets::readers_share(r),
        },
    }
}

/// Row 12.
fn rw_cost(r: &Report) -> RwCost {
    let c = &r.rw_cost;
    RwCost {
        what: "lockattr only, on the single server. Readers holding one name (read_lock(name).expire(lease).acquire(), guards kept), taken before measuring. Cycles of blocks A B B A (A: the name with the fewest readers, B: the most); in each block, for read calls and then for a writer's tries: CONFIG RESETSTAT, calls_per_block calls, INFO commandstats, whose cmdstat_evalsha and cmdstat_fcall usec (a script's usec includes the commands it runs) over the calls is the block's Redis µs per call. The figure is the median of the blocks (Redis times on the wall clock: a block where redis-server lost its CPU mid-script reads high); the mean over all calls is recorded too. A read call is acquire + release of one more reader (two script calls); a writer's try is write_lock(name).acquire_timeout(0).acquire(), which fails busy",
        readers_holding: HELD,
        readers_in_index_before_measuring: c.readers_seen,
        holders_lease_s: N(HELD_LEASE.as_secs_f64()),
        cycles_a_b_b_a: c.cycles,
        calls_per_block: BLOCK,
        read_call: cost_side(&c.read, c.read_ratio(), targets::rw_cost_read(r)),
        writer_try: cost_side(&c.write_try, c.write_ratio(), targets::rw_cost_write(r)),
    }
}

/// The JSON record of a run.
pub fn to_json(r: &Report) -> Record {
    let rtt = r.rtt_us;
    let (seen_count, seen_delay) = &r.rslock_defaults_seen;
    let cpu = &r.many_cpu_us_per_pair;
    let max_delay_ms = RSLOCK_DEFAULT_RETRY_DELAY.as_millis() as u64;
    Record {
        benchmark: "lockattr vs rslock, benches/lockattr/",
        quick: r.plan_quick,
        generated_unix_s: unix_nanos() / 1_000_000_000,
        machine: Machine {
            cores: cores(),
            cpu: cpu_model(),
            os: std::env::consts::OS,
            redis_server_version: r.redis_version.clone(),
            redis_server: "local, loopback, --save '' --appendonly no",
        },
        runtime: RUNTIME,
        load_average_1min: LoadAverage {
            start: r.load[0].map(N),
            end: r.load[1].map(N),
        },
        code: Code {
            lockattr_version: env!("CARGO_PKG_VERSION"),
            git_head: r.git.head.clone(),
            library_sources_differ_from_head: r.git.library_dirty,
            worktree_dirty: r.git.worktree_dirty,
        },
        peer: Peer {
            krate: "rslock",
            version: "0.10",
            features: ["tokio-comp"],
            servers: 1,
            retry_defaults: RetryDefaults {
                count: RSLOCK_DEFAULT_RETRY_COUNT,
                max_delay_ms,
                seen_in_debug_output: format!(
                    "retry_count {}, retry_delay {}",
                    seen_count.map_or("?".into(), |c| c.to_string()),
                    seen_delay.as_deref().unwrap_or("?")
                ),
                used_in: "uncontended, contended (a give-up is retried in the loop and not counted), 64 tasks, many locks, Redlock acquire + release",
            },
            handoff_waiter_retry: Retry {
                count: RSLOCK_WAITER_RETRY_COUNT,
                max_delay_ms,
            },
            redlock: "LockManager::new(vec![5 urls])",
        },
        rtt: Rtt {
            what: "median raw redis-rs PING on a MultiplexedConnection of the bench's runtime, interleaved per iteration with both libraries' acquire + release; the unit of every `rtt` figure",
            raw_ping_median_us: N(rtt),
            locker_ping_median_us: N(r.uncontended[0].locker_ping_us),
            locker_ping_rtt: N(r.uncontended[0].locker_ping_us / rtt),
        },
        scenarios: Scenarios {
            uncontended_acquire_release: UncontendedScenario {
                iterations: r.iterations,
                bare_client: BareClient {
                    what: "a plain redis-rs MultiplexedConnection of the bench's runtime sending, per acquire + release, the commands lockattr's Locker sent for one (captured with redis-cli monitor at the row's start), on a name of its own, with a fresh token, clock and fencing token; in the same loop as the PING and the libraries",
                    commands: r.bare_command_names.clone(),
                    sent: r.bare_commands.clone(),
                },
                interleaved_per_iteration: uncontended_with_bare(
                    &r.uncontended[0],
                    Some(targets::uncontended(r)),
                    Some(targets::bare_client(r)),
                ),
                tight_loop: uncontended(&r.uncontended[1], None),
            },
            handoff_across_processes: handoff(
                &r.handoff,
                rtt,
                vec![targets::handoff_p50(r), targets::handoff_p99(r)],
            ),
            cold_ping: ColdPing {
                what: "a raw PING sent by the hand-over holder process the way it sends its release: a command on its signal connection, the same idle sleep, then the PING on a connection of its runtime; information",
                samples: r.cold_ping.samples,
                p50_us: N(r.cold_ping.p50_us),
                rtt: N(r.cold_ping.p50_us / rtt),
            },
            contended: Contention {
                processes: Some(CONTEND_PROCESSES),
                ..contention(
                    &r.contend,
                    r.contend_seconds,
                    vec![
                        targets::contended_ratio(r),
                        targets::no_lost_updates(&r.contend[0]),
                        targets::contended_share(r),
                        targets::contended_wait(r),
                    ],
                )
            },
            tasks_one_lock: Contention {
                tasks: Some(ONE_PROCESS_TASKS),
                ..contention(
                    &r.tasks,
                    r.tasks_seconds,
                    vec![targets::tasks(r), targets::no_lost_updates(&r.tasks[0])],
                )
            },
            many_locks: ManyLocks {
                tasks: MANY_TASKS,
                seconds_per_library: N(r.many_seconds),
                lockattr_pairs_per_s: N(r.many_pairs_per_s[0]),
                rslock_pairs_per_s: N(r.many_pairs_per_s[1]),
                cpu_us_per_pair: CpuPerPair {
                    lockattr_redis_server: N(cpu[0][0]),
                    lockattr_bench_process: N(cpu[0][1]),
                    rslock_redis_server: N(cpu[1][0]),
                    rslock_bench_process: N(cpu[1][1]),
                },
                ratio_lockattr_over_rslock: N(ratio(r.many_pairs_per_s[0], r.many_pairs_per_s[1])),
                target: targets::many(r),
            },
            macro_overhead: MacroOverhead {
                iterations: r.macro_iterations,
                annotated_median_us: N(r.macro_us),
                builder_median_us: N(r.by_hand_us),
                overhead_pct: N(targets::macro_overhead_pct(r)),
                target: targets::macro_overhead(r),
            },
            redlock: Redlock {
                nodes: r.redlock.nodes,
                iterations: r.redlock.iterations,
                acquire_release: uncontended(
                    &r.redlock.uncontended,
                    Some(targets::redlock_uncontended(r)),
                ),
                handoff_across_processes: handoff(
                    &r.redlock.handoff,
                    rtt,
                    vec![targets::redlock_handoff(r)],
                ),
            },
            cluster: Cluster {
                masters: r.cluster.nodes,
                iterations: r.cluster.iterations,
                acquire_release: uncontended(&r.cluster.uncontended, None),
                handoff_across_processes: handoff(&r.cluster.handoff, rtt, Vec::new()),
                pubsub_messages_per_release: PubSub {
                    what: "during the hand-over loop: delta of cluster_stats_messages_publish_sent and cluster_stats_messages_publishshard_sent (CLUSTER INFO, summed over the masters) + PUBLISH/SPUBLISH calls (INFO commandstats), divided by the releases that had a waiter",
                    releases: r.pubsub.releases,
                    cluster_bus_publish_messages: r.pubsub.bus_messages,
                    publish_calls: r.pubsub.publish_calls,
                    per_release: N(r.pubsub.per_release()),
                    target: targets::cluster_pubsub(r),
                },
            },
            kinds: kinds(r),
            rw_lock_readers_holding_cost: rw_cost(r),
            replicas: replicas(r),
            at_rtt: at_rtt(r),
        },
        table: rows(r)
            .into_iter()
            .map(|row| TableRow {
                row: row.scenario,
                figure: row.metric.trim(),
                lockattr: row.lockattr,
                rslock: row.rslock,
                ratio: row.ratio,
                target: row.target,
                met: row.met,
                readme: row.readme,
            })
            .collect(),
    }
}
