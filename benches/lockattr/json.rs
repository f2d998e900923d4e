//! The JSON record of a run (`docs/bench/results.json`), and a small
//! writer for it (numbers rounded to 3 decimals, arrays of numbers on one line).

use std::fmt::Write as _;

use crate::peers::{
    RSLOCK_DEFAULT_RETRY_COUNT, RSLOCK_DEFAULT_RETRY_DELAY, RSLOCK_WAITER_RETRY_COUNT,
};
use crate::report::rows;
use crate::scenarios::{ContendStats, Handoff, Report, Uncontended};
use crate::targets::{self, Target, ratio};
use crate::util::{cores, cpu_model, quantile, unix_nanos};
use crate::{CONTEND_PROCESSES, MANY_TASKS, ONE_PROCESS_TASKS, RUNTIME};

/// A JSON value; enough for the results file, without a dependency.
pub enum Json {
    /// `null`.
    Null,
    /// `true`, `false`.
    Bool(bool),
    /// A number.
    Num(f64),
    /// A string.
    Str(String),
    /// An array.
    Arr(Vec<Json>),
    /// An object, fields in order.
    Obj(Vec<(&'static str, Json)>),
}

impl Json {
    /// A number; `null` when not finite.
    pub fn num(x: f64) -> Json {
        if x.is_finite() {
            Json::Num(x)
        } else {
            Json::Null
        }
    }

    /// A string.
    pub fn str(s: impl Into<String>) -> Json {
        Json::Str(s.into())
    }

    /// The text of the file.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, 0);
        out.push('\n');
        out
    }

    fn write(&self, out: &mut String, indent: usize) {
        let pad = |n: usize| "  ".repeat(n);
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Num(x) => {
                if x.fract() == 0.0 && x.abs() < 1e15 {
                    let _ = write!(out, "{}", *x as i64);
                } else {
                    let _ = write!(out, "{}", (x * 1000.0).round() / 1000.0);
                }
            }
            Json::Str(s) => {
                out.push('"');
                for c in s.chars() {
                    match c {
                        '"' => out.push_str("\\\""),
                        '\\' => out.push_str("\\\\"),
                        '\n' => out.push_str("\\n"),
                        c if (c as u32) < 0x20 => {
                            let _ = write!(out, "\\u{:04x}", c as u32);
                        }
                        c => out.push(c),
                    }
                }
                out.push('"');
            }
            Json::Arr(items) if items.iter().any(|i| matches!(i, Json::Obj(_))) => {
                out.push_str("[\n");
                for (i, item) in items.iter().enumerate() {
                    out.push_str(&pad(indent + 1));
                    item.write(out, indent + 1);
                    if i + 1 < items.len() {
                        out.push(',');
                    }
                    out.push('\n');
                }
                out.push_str(&pad(indent));
                out.push(']');
            }
            Json::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write(out, indent);
                }
                out.push(']');
            }
            Json::Obj(fields) => {
                out.push_str("{\n");
                for (i, (k, v)) in fields.iter().enumerate() {
                    let _ = write!(out, "{}\"{k}\": ", pad(indent + 1));
                    v.write(out, indent + 1);
                    if i + 1 < fields.len() {
                        out.push(',');
                    }
                    out.push('\n');
                }
                out.push_str(&pad(indent));
                out.push('}');
            }
        }
    }
}

// ---------------------------------------------------------------- the record

fn target_json(t: Target) -> Json {
    Json::Obj(vec![
        ("text", Json::str(t.text)),
        ("met", Json::Bool(t.met)),
    ])
}

fn opt_num(x: Option<f64>) -> Json {
    x.map_or(Json::Null, Json::num)
}

fn opt_bool(x: Option<bool>) -> Json {
    x.map_or(Json::Null, Json::Bool)
}

/// `{"lockattr": {key: a, "rtt": a/rtt}, "rslock": {..}, "ratio_lockattr_over_rslock": a/b}`;
/// a library that did not run is left out.
fn pair(l: f64, rs: f64, key: &'static str, rtt: f64) -> Vec<(&'static str, Json)> {
    let lib = |x: f64| Json::Obj(vec![(key, Json::num(x)), ("rtt", Json::num(x / rtt))]);
    let mut fields = vec![("lockattr", lib(l))];
    if rs.is_finite() {
        fields.push(("rslock", lib(rs)));
        fields.push(("ratio_lockattr_over_rslock", Json::num(ratio(l, rs))));
    }
    fields
}

fn handoff_json(h: &Handoff, rtt: f64, targets: Vec<Target>) -> Json {
    let mut fields = vec![("samples_per_library", Json::num(h.samples[0] as f64))];
    fields.extend(pair(h.p50_us[0], h.p50_us[1], "p50_us", rtt));
    fields.push((
        "p99",
        Json::Obj(pair(h.p99_us[0], h.p99_us[1], "p99_us", rtt)),
    ));
    fields.push((
        "holder_release_call",
        Json::Obj(pair(
            h.release_p50_us[0],
            h.release_p50_us[1],
            "p50_us",
            rtt,
        )),
    ));
    fields.push((
        "waiter_returned_after_release_call_returned",
        Json::Obj(pair(
            h.after_release_p50_us[0],
            h.after_release_p50_us[1],
            "p50_us",
            rtt,
        )),
    ));
    if !targets.is_empty() {
        fields.push((
            "targets",
            Json::Arr(targets.into_iter().map(target_json).collect()),
        ));
    }
    Json::Obj(fields)
}

fn contend_json(s: &ContendStats) -> Json {
    Json::Obj(vec![
        ("critical_sections_per_s", Json::num(s.per_s)),
        ("lost_updates", Json::num(s.lost() as f64)),
        ("least_served_share", Json::num(s.least_share)),
        ("wait_p99_us", Json::num(s.wait_p99_us())),
        (
            "per_process",
            Json::Arr(s.counts.iter().map(|&c| Json::num(c as f64)).collect()),
        ),
        ("executed", Json::num(s.executed as f64)),
        ("final_counter", Json::num(s.final_counter as f64)),
        ("acquisitions_given_up", Json::num(s.gave_up as f64)),
    ])
}

fn uncontended_json(u: &Uncontended, target: Option<Target>) -> Json {
    let mut fields = vec![
        ("iterations_in_a_row", Json::num(u.block as f64)),
        ("raw_ping_median_us", Json::num(u.rtt_us)),
    ];
    if u.locker_ping_us.is_finite() {
        fields.push(("locker_ping_median_us", Json::num(u.locker_ping_us)));
    }
    let lib = |x: f64| {
        Json::Obj(vec![
            ("median_us", Json::num(x)),
            ("rtt", Json::num(x / u.rtt_us)),
        ])
    };
    fields.push(("lockattr", lib(u.pair_us[0])));
    if u.pair_us[1].is_finite() {
        fields.push(("rslock", lib(u.pair_us[1])));
        fields.push((
            "ratio_lockattr_over_rslock",
            Json::num(ratio(u.pair_us[0], u.pair_us[1])),
        ));
    }
    fields.push(("target", target.map_or(Json::Null, target_json)));
    Json::Obj(fields)
}

/// The rows as the table shows them; the README's table is made from these.
fn table_json(r: &Report) -> Json {
    Json::Arr(
        rows(r)
            .into_iter()
            .map(|row| {
                Json::Obj(vec![
                    ("row", Json::str(row.scenario)),
                    ("figure", Json::str(row.metric.trim())),
                    ("lockattr", Json::str(row.lockattr)),
                    ("rslock", Json::str(row.rslock)),
                    ("ratio", Json::str(row.ratio)),
                    ("target", Json::str(row.target)),
                    ("met", opt_bool(row.met)),
                    ("readme", Json::Bool(row.readme)),
                ])
            })
            .collect(),
    )
}

/// Rows 10 and 11: the other lock kinds.
fn kinds_json(r: &Report) -> Json {
    let k = &r.kinds;
    let pair = |i: usize, base: usize, base_name: &'static str| {
        Json::Obj(vec![
            ("median_us", Json::num(k.pair_us[i])),
            ("rtt", Json::num(k.pair_us[i] / k.rtt_us)),
            ("baseline", Json::str(base_name)),
            ("ratio_to_baseline", Json::num(k.pair_ratio(i, base))),
        ])
    };
    Json::Obj(vec![
        (
            "what",
            Json::str(
                "lockattr only. Acquire + release, uncontended, interleaved per iteration (order rotating) with a raw PING (rtt_us) and the baselines; and READERS tasks holding one name READ_HOLD each, read side against write side, blocks A B B A",
            ),
        ),
        ("iterations", Json::num(k.iterations as f64)),
        ("rtt_us", Json::num(k.rtt_us)),
        ("lock", pair(targets::LOCK, targets::LOCK, "a lock")),
        (
            "two_locks_in_a_row",
            pair(targets::TWO_LOCKS, targets::LOCK, "a lock"),
        ),
        (
            "set_of_two_names",
            Json::Obj(vec![
                (
                    "acquire_release",
                    pair(targets::SET, targets::TWO_LOCKS, "two locks in a row"),
                ),
                ("target", target_json(targets::set_of_two(r))),
            ]),
        ),
        ("read", pair(targets::READ, targets::LOCK, "a lock")),
        ("write", pair(targets::WRITE, targets::LOCK, "a lock")),
        (
            "semaphore_permit",
            pair(targets::PERMIT, targets::LOCK, "a lock"),
        ),
        (
            "readers_sharing",
            Json::Obj(vec![
                ("tasks", Json::num(crate::scenarios::kinds::READERS as f64)),
                (
                    "hold_ms",
                    Json::num(crate::scenarios::kinds::READ_HOLD.as_secs_f64() * 1e3),
                ),
                ("seconds_per_side", Json::num(k.shared_seconds)),
                ("read_holds_per_s", Json::num(k.shared_per_s[0])),
                ("write_holds_per_s", Json::num(k.shared_per_s[1])),
                ("read_most_inside", Json::num(k.most_inside[0] as f64)),
                ("write_most_inside", Json::num(k.most_inside[1] as f64)),
                ("target", target_json(targets::readers_share(r))),
            ]),
        ),
    ])
}

/// Row 12: a read-write lock's Redis CPU per call against the readers holding.
fn rw_cost_json(r: &Report) -> Json {
    use crate::scenarios::rw_cost::{BLOCK, Cost, HELD, HELD_LEASE};
    let c = &r.rw_cost;
    let side = |costs: &[Cost; 2], median_ratio: f64, target: Target| {
        let per_count = (0..2)
            .map(|i| {
                let x = &costs[i];
                Json::Obj(vec![
                    ("readers_holding", Json::num(HELD[i] as f64)),
                    (
                        "redis_us_per_call_median_of_blocks",
                        Json::num(x.us_per_call()),
                    ),
                    ("blocks", Json::num(x.block_us.len() as f64)),
                    (
                        "block_us_per_call_p10_p90",
                        Json::Arr(vec![
                            Json::num(quantile(&x.block_us, 0.1)),
                            Json::num(quantile(&x.block_us, 0.9)),
                        ]),
                    ),
                    ("calls", Json::num(x.calls as f64)),
                    ("evalsha_calls", Json::num(x.script_calls as f64)),
                    ("evalsha_usec", Json::num(x.usec as f64)),
                    ("redis_us_per_call_mean", Json::num(x.mean_us_per_call())),
                    ("evalsha_calls_per_call", Json::num(x.scripts_per_call())),
                    (
                        "redis_us_per_evalsha_call_mean",
                        Json::num(x.mean_us_per_script_call()),
                    ),
                ])
            })
            .collect();
        let mean_ratio = ratio(costs[1].mean_us_per_call(), costs[0].mean_us_per_call());
        Json::Obj(vec![
            ("per_readers_holding", Json::Arr(per_count)),
            ("ratio_most_over_one_reader", Json::num(median_ratio)),
            ("ratio_of_means", Json::num(mean_ratio)),
            ("target", target_json(target)),
        ])
    };
    Json::Obj(vec![
        (
            "what",
            Json::str(
                "lockattr only, on the single server. Readers holding one name (read_lock(name).expire(lease).acquire(), guards kept), taken before measuring. Cycles of blocks A B B A (A: the name with the fewest readers, B: the most); in each block, for read calls and then for a writer's tries: CONFIG RESETSTAT, calls_per_block calls, INFO commandstats, whose cmdstat_evalsha usec (a script's usec includes the commands it runs) over the calls is the block's Redis µs per call. The figure is the median of the blocks (Redis times on the wall clock: a block where redis-server lost its CPU mid-script reads high); the mean over all calls is recorded too. A read call is acquire + release of one more reader (two script calls); a writer's try is write_lock(name).acquire_timeout(0).acquire(), which fails busy",
            ),
        ),
        (
            "readers_holding",
            Json::Arr(HELD.iter().map(|&n| Json::num(n as f64)).collect()),
        ),
        (
            "readers_in_index_before_measuring",
            Json::Arr(
                c.readers_seen
                    .iter()
                    .map(|&n| n.map_or(Json::Null, |n| Json::num(n as f64)))
                    .collect(),
            ),
        ),
        ("holders_lease_s", Json::num(HELD_LEASE.as_secs_f64())),
        ("cycles_a_b_b_a", Json::num(c.cycles as f64)),
        ("calls_per_block", Json::num(BLOCK as f64)),
        (
            "read_call",
            side(&c.read, c.read_ratio(), targets::rw_cost_read(r)),
        ),
        (
            "writer_try",
            side(&c.write_try, c.write_ratio(), targets::rw_cost_write(r)),
        ),
    ])
}

/// The JSON record of a run.
pub fn to_json(r: &Report) -> Json {
    let rtt = r.rtt_us;
    let (seen_count, seen_delay) = &r.rslock_defaults_seen;
    let [cl, cr] = [&r.contend[0], &r.contend[1]];
    let [tl, tr] = [&r.tasks[0], &r.tasks[1]];
    let cpu = &r.many_cpu_us_per_pair;
    Json::Obj(vec![
        (
            "benchmark",
            Json::str("lockattr vs rslock, benches/lockattr/"),
        ),
        ("quick", Json::Bool(r.plan_quick)),
        (
            "generated_unix_s",
            Json::num((unix_nanos() / 1_000_000_000) as f64),
        ),
        (
            "machine",
            Json::Obj(vec![
                ("cores", Json::num(cores() as f64)),
                ("cpu", cpu_model().map_or(Json::Null, Json::Str)),
                ("os", Json::str(std::env::consts::OS)),
                ("redis_server_version", Json::str(&r.redis_version)),
                (
                    "redis_server",
                    Json::str("local, loopback, --save '' --appendonly no"),
                ),
            ]),
        ),
        ("runtime", Json::str(RUNTIME)),
        (
            "load_average_1min",
            Json::Obj(vec![
                ("start", opt_num(r.load[0])),
                ("end", opt_num(r.load[1])),
            ]),
        ),
        (
            "code",
            Json::Obj(vec![
                ("lockattr_version", Json::str(env!("CARGO_PKG_VERSION"))),
                ("git_head", r.git.head.clone().map_or(Json::Null, Json::Str)),
                (
                    "library_sources_differ_from_head",
                    opt_bool(r.git.library_dirty),
                ),
                ("worktree_dirty", opt_bool(r.git.worktree_dirty)),
            ]),
        ),
        (
            "peer",
            Json::Obj(vec![
                ("crate", Json::str("rslock")),
                ("version", Json::str("0.10")),
                ("features", Json::Arr(vec![Json::str("tokio-comp")])),
                ("servers", Json::num(1.0)),
                (
                    "retry_defaults",
                    Json::Obj(vec![
                        ("count", Json::num(RSLOCK_DEFAULT_RETRY_COUNT as f64)),
                        (
                            "max_delay_ms",
                            Json::num(RSLOCK_DEFAULT_RETRY_DELAY.as_millis() as f64),
                        ),
                        (
                            "seen_in_debug_output",
                            Json::str(format!(
                                "retry_count {}, retry_delay {}",
                                seen_count.map_or("?".into(), |c| c.to_string()),
                                seen_delay.as_deref().unwrap_or("?")
                            )),
                        ),
                        (
                            "used_in",
                            Json::str(
                                "uncontended, contended (a give-up is retried in the loop and not counted), 64 tasks, many locks, Redlock acquire + release",
                            ),
                        ),
                    ]),
                ),
                (
                    "handoff_waiter_retry",
                    Json::Obj(vec![
                        ("count", Json::num(RSLOCK_WAITER_RETRY_COUNT as f64)),
                        (
                            "max_delay_ms",
                            Json::num(RSLOCK_DEFAULT_RETRY_DELAY.as_millis() as f64),
                        ),
                    ]),
                ),
                ("redlock", Json::str("LockManager::new(vec![5 urls])")),
            ]),
        ),
        (
            "rtt",
            Json::Obj(vec![
                (
                    "what",
                    Json::str(
                        "median raw redis-rs PING on a MultiplexedConnection of the bench's runtime, interleaved per iteration with both libraries' acquire + release; the unit of every `rtt` figure",
                    ),
                ),
                ("raw_ping_median_us", Json::num(rtt)),
                (
                    "locker_ping_median_us",
                    Json::num(r.uncontended[0].locker_ping_us),
                ),
                (
                    "locker_ping_rtt",
                    Json::num(r.uncontended[0].locker_ping_us / rtt),
                ),
            ]),
        ),
        (
            "scenarios",
            Json::Obj(vec![
                (
                    "uncontended_acquire_release",
                    Json::Obj(vec![
                        ("iterations", Json::num(r.iterations as f64)),
                        (
                            "interleaved_per_iteration",
                            uncontended_json(&r.uncontended[0], Some(targets::uncontended(r))),
                        ),
                        ("tight_loop", uncontended_json(&r.uncontended[1], None)),
                    ]),
                ),
                (
                    "handoff_across_processes",
                    handoff_json(
                        &r.handoff,
                        rtt,
                        vec![targets::handoff_p50(r), targets::handoff_p99(r)],
                    ),
                ),
                (
                    "cold_ping",
                    Json::Obj(vec![
                        (
                            "what",
                            Json::str(
                                "a raw PING sent by the hand-over holder process the way it sends its release: a command on its signal connection, the same idle sleep, then the PING on a connection of its runtime; information",
                            ),
                        ),
                        ("samples", Json::num(r.cold_ping.samples as f64)),
                        ("p50_us", Json::num(r.cold_ping.p50_us)),
                        ("rtt", Json::num(r.cold_ping.p50_us / rtt)),
                    ]),
                ),
                (
                    "contended",
                    Json::Obj(vec![
                        ("processes", Json::num(CONTEND_PROCESSES as f64)),
                        ("seconds_per_library", Json::num(r.contend_seconds)),
                        ("lockattr", contend_json(cl)),
                        ("rslock", contend_json(cr)),
                        (
                            "ratio_lockattr_over_rslock",
                            Json::num(ratio(cl.per_s, cr.per_s)),
                        ),
                        (
                            "targets",
                            Json::Arr(vec![
                                target_json(targets::contended_ratio(r)),
                                target_json(targets::no_lost_updates(cl)),
                                target_json(targets::contended_share(r)),
                                target_json(targets::contended_wait(r)),
                            ]),
                        ),
                    ]),
                ),
                (
                    "tasks_one_lock",
                    Json::Obj(vec![
                        ("tasks", Json::num(ONE_PROCESS_TASKS as f64)),
                        ("seconds_per_library", Json::num(r.tasks_seconds)),
                        ("lockattr", contend_json(tl)),
                        ("rslock", contend_json(tr)),
                        (
                            "ratio_lockattr_over_rslock",
                            Json::num(ratio(tl.per_s, tr.per_s)),
                        ),
                        (
                            "targets",
                            Json::Arr(vec![
                                target_json(targets::tasks(r)),
                                target_json(targets::no_lost_updates(tl)),
                            ]),
                        ),
                    ]),
                ),
                (
                    "many_locks",
                    Json::Obj(vec![
                        ("tasks", Json::num(MANY_TASKS as f64)),
                        ("seconds_per_library", Json::num(r.many_seconds)),
                        ("lockattr_pairs_per_s", Json::num(r.many_pairs_per_s[0])),
                        ("rslock_pairs_per_s", Json::num(r.many_pairs_per_s[1])),
                        (
                            "cpu_us_per_pair",
                            Json::Obj(vec![
                                ("lockattr_redis_server", Json::num(cpu[0][0])),
                                ("lockattr_bench_process", Json::num(cpu[0][1])),
                                ("rslock_redis_server", Json::num(cpu[1][0])),
                                ("rslock_bench_process", Json::num(cpu[1][1])),
                            ]),
                        ),
                        (
                            "ratio_lockattr_over_rslock",
                            Json::num(ratio(r.many_pairs_per_s[0], r.many_pairs_per_s[1])),
                        ),
                        ("target", target_json(targets::many(r))),
                    ]),
                ),
                (
                    "macro_overhead",
                    Json::Obj(vec![
                        ("iterations", Json::num(r.macro_iterations as f64)),
                        ("annotated_median_us", Json::num(r.macro_us)),
                        ("builder_median_us", Json::num(r.by_hand_us)),
                        ("overhead_pct", Json::num(targets::macro_overhead_pct(r))),
                        ("target", target_json(targets::macro_overhead(r))),
                    ]),
                ),
                (
                    "redlock",
                    Json::Obj(vec![
                        ("nodes", Json::num(r.redlock.nodes as f64)),
                        ("iterations", Json::num(r.redlock.iterations as f64)),
                        (
                            "acquire_release",
                            uncontended_json(
                                &r.redlock.uncontended,
                                Some(targets::redlock_uncontended(r)),
                            ),
                        ),
                        (
                            "handoff_across_processes",
                            handoff_json(
                                &r.redlock.handoff,
                                rtt,
                                vec![targets::redlock_handoff(r)],
                            ),
                        ),
                    ]),
                ),
                (
                    "cluster",
                    Json::Obj(vec![
                        ("masters", Json::num(r.cluster.nodes as f64)),
                        ("iterations", Json::num(r.cluster.iterations as f64)),
                        (
                            "acquire_release",
                            uncontended_json(&r.cluster.uncontended, None),
                        ),
                        (
                            "handoff_across_processes",
                            handoff_json(&r.cluster.handoff, rtt, Vec::new()),
                        ),
                        (
                            "pubsub_messages_per_release",
                            Json::Obj(vec![
                                (
                                    "what",
                                    Json::str(
                                        "during the hand-over loop: delta of cluster_stats_messages_publish_sent (CLUSTER INFO, summed over the masters) + PUBLISH/SPUBLISH calls (INFO commandstats), divided by the releases that had a waiter; information",
                                    ),
                                ),
                                ("releases", Json::num(r.pubsub.releases as f64)),
                                (
                                    "cluster_bus_publish_messages",
                                    Json::num(r.pubsub.bus_messages as f64),
                                ),
                                ("publish_calls", Json::num(r.pubsub.publish_calls as f64)),
                                ("per_release", Json::num(r.pubsub.per_release())),
                            ]),
                        ),
                    ]),
                ),
                ("kinds", kinds_json(r)),
                ("rw_lock_readers_holding_cost", rw_cost_json(r)),
            ]),
        ),
        ("table", table_json(r)),
    ])
}
