//! The rows of the table, as printed on stdout and recorded in the JSON
//! (from which the table of docs/performance.md is made).

use crate::peers::{
    RSLOCK_DEFAULT_RETRY_COUNT, RSLOCK_DEFAULT_RETRY_DELAY, RSLOCK_WAITER_RETRY_COUNT,
};
use crate::scenarios::replica_batch::{Batch, LINK_DELAY, TASKS};
use crate::scenarios::replicas::Replicas;
use crate::scenarios::rtt::AtRtt;
use crate::scenarios::rw_cost::{BLOCK, Cost, HELD};
use crate::scenarios::{ContendStats, Handoff, Report, Uncontended};
use crate::targets::{self, Target};
use crate::util::ratio;
use crate::util::{cores, cpu_model};
use crate::{CONTEND_PROCESSES, ONE_PROCESS_TASKS, RUNTIME};

/// A row of the table: one figure of both libraries (or of lockattr only).
pub struct Row {
    /// The row's number and name.
    pub scenario: &'static str,
    /// The figure.
    pub metric: &'static str,
    /// lockattr's value.
    pub lockattr: String,
    /// rslock's value (empty where it did not run).
    pub rslock: String,
    /// lockattr / rslock.
    pub ratio: String,
    /// Empty: information, no target.
    pub target: &'static str,
    /// None: no target (information).
    pub met: Option<bool>,
    /// Whether the table of docs/performance.md shows it.
    pub readme: bool,
}

impl Row {
    fn info(scenario: &'static str, metric: &'static str, lockattr: String, rslock: String) -> Row {
        Row {
            scenario,
            metric,
            lockattr,
            rslock,
            ratio: String::new(),
            target: "",
            met: None,
            readme: false,
        }
    }

    fn checked(mut self, target: Target) -> Row {
        self.target = target.text;
        self.met = Some(target.met);
        self.readme = true;
        self
    }

    /// Sets the ratio column; left empty where rslock did not run.
    fn ratio(mut self, a: f64, b: f64, decimals: usize) -> Row {
        if b.is_finite() {
            self.ratio = fmt_num(ratio(a, b), decimals);
        }
        self
    }

    fn in_readme(mut self) -> Row {
        self.readme = true;
        self
    }
}

/// `x` with `decimals` and thousands separators; `n/a` when not finite.
pub fn fmt_num(x: f64, decimals: usize) -> String {
    if !x.is_finite() {
        return "n/a".into();
    }
    let mut s = format!("{x:.decimals$}");
    if s.starts_with('-') && s[1..].chars().all(|c| c == '0' || c == '.') {
        s.remove(0); // no "-0.0"
    }
    // Thousands separators for the integer part.
    let (int, frac) = s
        .split_once('.')
        .map_or((s.as_str(), None), |(i, f)| (i, Some(f)));
    let (sign, digits) = int.strip_prefix('-').map_or(("", int), |d| ("-", d));
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

/// `µs (RTT)`.
fn in_rtt(x: f64, unit: f64) -> String {
    if !x.is_finite() {
        return String::new();
    }
    format!("{} ({})", fmt_num(x, 1), fmt_num(x / unit, 2))
}

/// Every row of the table, in order.
pub fn rows(r: &Report) -> Vec<Row> {
    let rtt = r.rtt_us;
    let [inter, tight] = [&r.uncontended[0], &r.uncontended[1]];
    let none = String::new;
    let pair_row = |scenario, metric, u: &Uncontended| {
        Row::info(
            scenario,
            metric,
            in_rtt(u.pair_us[0], u.rtt_us),
            in_rtt(u.pair_us[1], u.rtt_us),
        )
        .ratio(u.pair_us[0], u.pair_us[1], 2)
    };
    let handoff_rows = |scenario, h: &Handoff| {
        [
            Row::info(
                scenario,
                "hand-over p50, µs (RTT)",
                in_rtt(h.p50_us[0], rtt),
                in_rtt(h.p50_us[1], rtt),
            )
            .ratio(h.p50_us[0], h.p50_us[1], 3),
            Row::info(
                scenario,
                "hand-over p99, µs (RTT)",
                in_rtt(h.p99_us[0], rtt),
                in_rtt(h.p99_us[1], rtt),
            )
            .ratio(h.p99_us[0], h.p99_us[1], 3),
            Row::info(
                scenario,
                "  holder's release call, p50, µs (RTT)",
                in_rtt(h.release_p50_us[0], rtt),
                in_rtt(h.release_p50_us[1], rtt),
            ),
            Row::info(
                scenario,
                "  waiter back after it, p50, µs (RTT)",
                in_rtt(h.after_release_p50_us[0], rtt),
                in_rtt(h.after_release_p50_us[1], rtt),
            ),
        ]
    };
    let contend_rows = |scenario, s: &[ContendStats; 2]| {
        [
            Row::info(
                scenario,
                "critical sections/s",
                fmt_num(s[0].per_s, 0),
                fmt_num(s[1].per_s, 0),
            )
            .ratio(s[0].per_s, s[1].per_s, 2),
            Row::info(
                scenario,
                "lost updates",
                s[0].lost().to_string(),
                s[1].lost().to_string(),
            )
            .checked(targets::no_lost_updates(&s[0])),
            Row::info(
                scenario,
                "least served share",
                fmt_num(s[0].least_share, 2),
                fmt_num(s[1].least_share, 2),
            ),
            Row::info(
                scenario,
                "p99 wait, ms",
                fmt_num(s[0].wait_p99_us() / 1e3, 1),
                fmt_num(s[1].wait_p99_us() / 1e3, 1),
            )
            .ratio(s[0].wait_p99_us(), s[1].wait_p99_us(), 2),
        ]
    };
    let [h50, h99, h_release, h_after] = handoff_rows("3 hand-over", &r.handoff);
    let [c_rate, c_lost, c_share, c_wait] = contend_rows("4 8 processes", &r.contend);
    let [t_rate, t_lost, t_share, t_wait] = contend_rows("5 64 tasks, 1 lock", &r.tasks);
    let [rl50, rl99, _, _] = handoff_rows("8 Redlock 5 nodes", &r.redlock.handoff);
    let [cl50, cl99, _, _] = handoff_rows("9 Cluster 3 masters", &r.cluster.handoff);
    let [ml, mr] = r.many_pairs_per_s;
    let overhead = targets::macro_overhead_pct(r);
    let cpu = |who: usize| [0, 1].map(|lib| fmt_num(r.many_cpu_us_per_pair[lib][who], 1));
    let [redis_l, redis_r] = cpu(0);
    let k = &r.kinds;
    // Row 10: `µs (RTT; ratio x base)` in the lockattr column (the ratio
    // column is lockattr / rslock, and rslock has none of these kinds).
    let kind_row = |metric: &'static str, i: usize, base: usize| {
        Row::info(
            "10 kinds",
            metric,
            format!(
                "{} ({}; {}×)",
                fmt_num(k.pair_us[i], 1),
                fmt_num(k.pair_us[i] / k.rtt_us, 2),
                fmt_num(k.pair_ratio(i, base), 2)
            ),
            none(),
        )
    };
    let [bench_l, bench_r] = cpu(1);
    // Row 12: Redis µs per call (median of blocks) with 1 reader; with
    // 1,000 (their ratio).
    let c = &r.rw_cost;
    let cost_row = |metric: &'static str, costs: &[Cost; 2], ratio: f64| {
        Row::info(
            "12 rw lock, readers holding",
            metric,
            format!(
                "{}; {} ({}×)",
                fmt_num(costs[0].us_per_call(), 1),
                fmt_num(costs[1].us_per_call(), 1),
                fmt_num(ratio, 2)
            ),
            none(),
        )
    };
    // Row 13: `µs (RTT of its master)` with min_replicas(0); the same with
    // min_replicas(1) (their ratio).
    let rep = &r.replicas;
    let setting_row = |metric: &'static str, x: [f64; 2]| {
        Row::info(
            "13 replicas",
            metric,
            format!(
                "{}; {} ({}×)",
                in_rtt(x[0], rep.rtt_us),
                in_rtt(x[1], rep.rtt_us),
                fmt_num(Replicas::ratio(x), 2)
            ),
            none(),
        )
    };
    let per = |n: u64, of: u64| {
        if of == 0 {
            f64::NAN
        } else {
            n as f64 / of as f64
        }
    };
    let mut rows = vec![
        Row {
            target: "(the unit)",
            ..Row::info(
                "1 RTT",
                "raw PING, interleaved, µs",
                fmt_num(rtt, 1),
                none(),
            )
        },
        Row::info(
            "1 RTT",
            "Locker::ping, µs (RTT)",
            in_rtt(inter.locker_ping_us, inter.rtt_us),
            none(),
        ),
        pair_row("2 uncontended", "acq+rel, interleaved, µs (RTT)", inter)
            .checked(targets::uncontended(r)),
        Row::info(
            "2 uncontended",
            "lockattr / bare redis-rs client, same commands (µs vs µs)",
            times(inter.pair_us[0], inter.bare_us),
            none(),
        )
        .checked(targets::bare_client(r)),
        Row::info(
            "2 uncontended",
            "bare client acq+rel (in rslock's column: rslock), µs (RTT)",
            in_rtt(inter.bare_us, inter.rtt_us),
            in_rtt(inter.pair_us[1], inter.rtt_us),
        )
        .ratio(inter.bare_us, inter.pair_us[1], 2)
        .in_readme(),
        Row::info(
            "2 tight loop",
            "raw PING, µs",
            fmt_num(tight.rtt_us, 1),
            none(),
        ),
        pair_row("2 tight loop", "acq+rel, µs (RTT)", tight),
        Row::info(
            "2 tight loop",
            "lockattr / bare client (µs vs µs)",
            times(tight.pair_us[0], tight.bare_us),
            none(),
        ),
        h50.checked(targets::handoff_p50(r)),
        h99.checked(targets::handoff_p99(r)),
        h_release,
        h_after,
        Row::info(
            "3 cold PING",
            "after the same idle sleep, p50, µs (RTT)",
            in_rtt(r.cold_ping.p50_us, rtt),
            none(),
        )
        .in_readme(),
        c_rate.checked(targets::contended_ratio(r)),
        c_lost,
        c_share.checked(targets::contended_share(r)),
        c_wait.checked(targets::contended_wait(r)),
        t_rate.checked(targets::tasks(r)),
        t_lost,
        t_share,
        t_wait,
        Row::info(
            "6 256 tasks, distinct locks",
            "acquire+release pairs/s",
            fmt_num(ml, 0),
            fmt_num(mr, 0),
        )
        .ratio(ml, mr, 2)
        .checked(targets::many(r)),
        Row::info(
            "6 256 tasks, distinct locks",
            "  Redis CPU µs per pair",
            redis_l,
            redis_r,
        )
        .in_readme(),
        Row::info(
            "6 256 tasks, distinct locks",
            "  bench process CPU µs per pair",
            bench_l,
            bench_r,
        ),
        Row::info(
            "7 macro",
            "overhead vs builder, %",
            format!(
                "{} ({} vs {} µs)",
                fmt_num(overhead, 1),
                fmt_num(r.macro_us, 1),
                fmt_num(r.by_hand_us, 1)
            ),
            none(),
        )
        .checked(targets::macro_overhead(r)),
        pair_row(
            "8 Redlock 5 nodes",
            "acq+rel, µs (RTT)",
            &r.redlock.uncontended,
        )
        .checked(targets::redlock_uncontended(r)),
        rl50.checked(targets::redlock_handoff(r)),
        rl99,
        pair_row(
            "9 Cluster 3 masters",
            "acq+rel, µs (RTT)",
            &r.cluster.uncontended,
        )
        .in_readme(),
        cl50.in_readme(),
        cl99,
        Row::info(
            "9 Cluster 3 masters",
            "pub/sub messages per release",
            fmt_num(r.pubsub.per_release(), 2),
            none(),
        )
        .checked(targets::cluster_pubsub(r)),
        kind_row(
            "set of 2 names, acq+rel, µs (RTT; × two locks in a row)",
            targets::SET,
            targets::TWO_LOCKS,
        )
        .checked(targets::set_of_two(r)),
        kind_row(
            "two locks in a row, acq+rel, µs (RTT; × a lock)",
            targets::TWO_LOCKS,
            targets::LOCK,
        ),
        kind_row(
            "read lock, acq+rel, µs (RTT; × a lock)",
            targets::READ,
            targets::LOCK,
        )
        .in_readme(),
        kind_row(
            "write lock, acq+rel, µs (RTT; × a lock)",
            targets::WRITE,
            targets::LOCK,
        ),
        kind_row(
            "semaphore of 4, a permit, acq+rel, µs (RTT; × a lock)",
            targets::PERMIT,
            targets::LOCK,
        )
        .in_readme(),
        Row::info(
            "10 kinds",
            "a plain lock, acq+rel, µs (RTT)",
            in_rtt(k.pair_us[targets::LOCK], k.rtt_us),
            none(),
        ),
        Row::info(
            "11 16 readers, 1 name",
            "holds/s (2 ms each): read side; write side",
            format!(
                "{}; {}",
                fmt_num(k.shared_per_s[0], 0),
                fmt_num(k.shared_per_s[1], 0)
            ),
            none(),
        )
        .checked(targets::readers_share(r)),
        Row::info(
            "11 16 readers, 1 name",
            "most inside at once: read side; write side",
            format!("{}; {}", k.most_inside[0], k.most_inside[1]),
            none(),
        ),
        cost_row(
            "read call (acq+rel), Redis µs: 1 reader; 1,000 (× 1 reader)",
            &c.read,
            c.read_ratio(),
        )
        .checked(targets::rw_cost_read(r)),
        cost_row(
            "writer's try (busy), Redis µs: 1 reader; 1,000 (× 1 reader)",
            &c.write_try,
            c.write_ratio(),
        )
        .checked(targets::rw_cost_write(r)),
        Row::info(
            "12 rw lock, readers holding",
            "  mean over all calls, Redis µs: read 1; 1,000 / try 1; 1,000",
            format!(
                "{}; {} / {}; {}",
                fmt_num(c.read[0].mean_us_per_call(), 1),
                fmt_num(c.read[1].mean_us_per_call(), 1),
                fmt_num(c.write_try[0].mean_us_per_call(), 1),
                fmt_num(c.write_try[1].mean_us_per_call(), 1)
            ),
            none(),
        ),
        Row::info(
            "12 rw lock, readers holding",
            "  script calls (EVALSHA or FCALL) per read call; per try (1 reader / 1,000)",
            format!(
                "{} / {}; {} / {}",
                fmt_num(c.read[0].scripts_per_call(), 2),
                fmt_num(c.read[1].scripts_per_call(), 2),
                fmt_num(c.write_try[0].scripts_per_call(), 2),
                fmt_num(c.write_try[1].scripts_per_call(), 2)
            ),
            none(),
        ),
    ];
    rows.extend([
        Row::info(
            "13 replicas",
            "raw PING to the replicated master, interleaved, µs",
            fmt_num(rep.rtt_us, 1),
            none(),
        ),
        setting_row("acq+rel, µs (RTT): min_replicas 0; 1 (× 0)", rep.pair_us).in_readme(),
        setting_row(
            "hand-over p50, µs (RTT): min_replicas 0; 1 (× 0)",
            rep.handoff.p50_us,
        )
        .in_readme(),
        setting_row(
            "hand-over p99, µs (RTT): min_replicas 0; 1 (× 0)",
            rep.handoff.p99_us,
        )
        .in_readme(),
        setting_row(
            "  holder's release call, p50, µs (RTT): 0; 1 (× 0)",
            rep.handoff.release_p50_us,
        ),
        setting_row(
            "  waiter back after it, p50, µs (RTT): 0; 1 (× 0)",
            rep.handoff.after_release_p50_us,
        ),
        Row::info(
            "13 replicas",
            "  WAIT calls (min_replicas 1): per acq+rel; per hand-over round",
            format!(
                "{}; {}",
                fmt_num(per(rep.wait_calls[0], rep.waiting_pairs), 2),
                fmt_num(per(rep.wait_calls[1], rep.handoff_rounds), 2)
            ),
            none(),
        ),
    ]);
    rows.extend(batch_rows(&rep.batch));
    for (a, scenario) in r.at_rtt.iter().zip(AT_RTT_ROWS) {
        rows.extend(at_rtt_rows(a, scenario));
    }
    rows
}

/// Row 14's name at each of `rtt::TARGETS_US`.
const AT_RTT_ROWS: [&str; 2] = ["14 ~0.2 ms RTT (proxy)", "14 ~1 ms RTT (proxy)"];

/// `a/b× (a vs b)`, µs.
fn times(a: f64, b: f64) -> String {
    format!(
        "{}× ({} vs {})",
        fmt_num(ratio(a, b), 2),
        fmt_num(a, 1),
        fmt_num(b, 1)
    )
}

/// Row 14 at one RTT: figures in the unit of the PING through the proxy.
fn at_rtt_rows(a: &AtRtt, scenario: &'static str) -> Vec<Row> {
    let u = &a.uncontended;
    let h = &a.handoff;
    let unit = u.rtt_us;
    let none = String::new;
    let pair = Row::info(
        scenario,
        "acq+rel, interleaved, µs (RTT)",
        in_rtt(u.pair_us[0], unit),
        in_rtt(u.pair_us[1], unit),
    )
    .ratio(u.pair_us[0], u.pair_us[1], 2);
    // The target is set at about 1 ms; at 0.2 ms the row is information.
    let pair = if a.target_rtt_us >= 1000.0 {
        pair.checked(targets::at_rtt_uncontended(a))
    } else {
        pair.in_readme()
    };
    vec![
        Row::info(
            scenario,
            "raw PING through the proxy, interleaved, µs (delay each way; proxy with none; direct)",
            format!(
                "{} ({}; {}; {})",
                fmt_num(unit, 1),
                fmt_num(a.delay_us, 1),
                fmt_num(a.proxy_floor_us, 1),
                fmt_num(a.direct_us, 1)
            ),
            none(),
        )
        .in_readme(),
        pair,
        Row::info(
            scenario,
            "bare client acq+rel (in rslock's column: rslock), µs (RTT)",
            in_rtt(u.bare_us, unit),
            in_rtt(u.pair_us[1], unit),
        )
        .ratio(u.bare_us, u.pair_us[1], 2),
        Row::info(
            scenario,
            "lockattr / bare client (µs vs µs)",
            times(u.pair_us[0], u.bare_us),
            none(),
        )
        .in_readme(),
        Row::info(
            scenario,
            "hand-over p50, µs (RTT)",
            in_rtt(h.p50_us[0], unit),
            none(),
        )
        .in_readme(),
        Row::info(
            scenario,
            "hand-over p99, µs (RTT)",
            in_rtt(h.p99_us[0], unit),
            none(),
        ),
        Row::info(
            scenario,
            "  holder's release call, p50; waiter back after it, p50, µs (RTT)",
            format!(
                "{}; {}",
                in_rtt(h.release_p50_us[0], unit),
                in_rtt(h.after_release_p50_us[0], unit)
            ),
            none(),
        ),
    ]
}

/// The run's circumstances, one line each: what the JSON's `machine`,
/// `code`, `load_average_1min` and `rtt` record.
fn circumstances(r: &Report) -> Vec<String> {
    let load = |l: Option<f64>| l.map_or("?".into(), |l| format!("{l:.2}"));
    let yes_no = |b: Option<bool>| b.map_or("?", |b| if b { "yes" } else { "no" });
    vec![
        format!(
            "lockattr {} vs rslock 0.10; redis-server {}; {} cores, {}; {}{}",
            env!("CARGO_PKG_VERSION"),
            r.redis_version,
            cores(),
            cpu_model().unwrap_or_else(|| "CPU unknown".into()),
            RUNTIME,
            if r.plan_quick {
                "; QUICK RUN (small samples)"
            } else {
                ""
            }
        ),
        format!(
            "git commit {}; library sources differ from it: {}; work tree dirty: {}",
            r.git.head.as_deref().unwrap_or("?"),
            yes_no(r.git.library_dirty),
            yes_no(r.git.worktree_dirty)
        ),
        format!(
            "RTT unit (median raw PING, interleaved): {} µs; load average (1 min) at start {} and end {}",
            fmt_num(r.rtt_us, 1),
            load(r.load[0]),
            load(r.load[1])
        ),
    ]
}

/// Prints the table and the run's circumstances.
pub fn print_table(r: &Report) {
    let rows = rows(r);
    let header = [
        "row",
        "figure",
        "lockattr",
        "rslock",
        "lockattr/rslock",
        "target (lockattr)",
        "",
    ];
    let cells: Vec<[String; 7]> = rows
        .iter()
        .map(|row| {
            [
                row.scenario.to_owned(),
                row.metric.to_owned(),
                row.lockattr.clone(),
                row.rslock.clone(),
                row.ratio.clone(),
                if row.target.is_empty() {
                    "(information)".to_owned()
                } else {
                    row.target.to_owned()
                },
                row.met
                    .map_or(String::new(), |m| targets::met_word(m).to_owned()),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: &[String]| {
        let mut s = String::new();
        for (i, (c, w)) in cols.iter().zip(widths).enumerate() {
            let pad = w - c.chars().count();
            if (2..=4).contains(&i) {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            }
            s.push_str("  ");
        }
        println!("{}", s.trim_end());
    };
    println!();
    for l in circumstances(r) {
        println!("{l}");
    }
    println!(
        "rslock retries: defaults {} attempts / random 0..{} ms sleep (uncontended, contended, many); hand-over waiter {} attempts / same delay",
        RSLOCK_DEFAULT_RETRY_COUNT,
        RSLOCK_DEFAULT_RETRY_DELAY.as_millis(),
        RSLOCK_WAITER_RETRY_COUNT
    );
    println!();
    line(&header.map(String::from));
    line(&widths.map(|w| "-".repeat(w)));
    for row in &cells {
        line(row);
    }
    let [cl, cr] = [&r.contend[0], &r.contend[1]];
    println!();
    println!(
        "{CONTEND_PROCESSES} processes, critical sections per process over {} s: lockattr {:?}; rslock {:?} (rslock gave up {} times, retried in the loop)",
        r.contend_seconds, cl.counts, cr.counts, cr.gave_up
    );
    println!(
        "{ONE_PROCESS_TASKS} tasks: least served share lockattr {}, rslock {}; rslock gave up {} times",
        fmt_num(r.tasks[0].least_share, 2),
        fmt_num(r.tasks[1].least_share, 2),
        r.tasks[1].gave_up
    );
    println!(
        "hand-over samples: {} per library (Redlock {}, Cluster {}), cold PINGs {}; uncontended and macro: {} iterations per figure, medians; \
         tight loop = {} iterations of one operation in a row",
        r.handoff.samples[0],
        r.redlock.handoff.samples[0],
        r.cluster.handoff.samples[0],
        r.cold_ping.samples,
        r.iterations,
        r.uncontended[1].block
    );
    println!(
        "Cluster pub/sub over {} hand-over releases: {} cluster-bus publish messages + {} PUBLISH/SPUBLISH calls",
        r.pubsub.releases, r.pubsub.bus_messages, r.pubsub.publish_calls
    );
    let rep = &r.replicas;
    println!(
        "Replicas (row 13, lockattr only): a master with one replica, replica_timeout {} ms (the default); RTT = the PING to that master in the acq+rel loop ({} iterations); \
         hand-over samples {} per setting; WAIT calls on the master: {} over {} acq+rel with min_replicas 1 (warm-up included), {} over {} hand-over rounds of each setting; \
         replica's master_link_status after the row: {}",
        lockattr::DEFAULT_REPLICA_TIMEOUT.as_millis(),
        rep.iterations,
        rep.handoff.samples[1],
        rep.wait_calls[0],
        rep.waiting_pairs,
        rep.wait_calls[1],
        rep.handoff_rounds,
        rep.link_status_after.as_deref().unwrap_or("?")
    );
    let b = &r.replicas.batch;
    println!(
        "Replicas, many names (row 13): {} tasks on names of their own in one process, a master whose replica is behind a proxy adding {} ms each way; \
         WAIT calls in the min_replicas 1 block: {}; failures (Connection / other): min_replicas 0 {} / {}, 1 {} / {}",
        TASKS,
        LINK_DELAY.as_millis(),
        b.wait_calls,
        b.blocks[0].connection_errors,
        b.blocks[0].other_errors,
        b.blocks[1].connection_errors,
        b.blocks[1].other_errors
    );
    println!(
        "Bare client (row 2): a plain redis-rs MultiplexedConnection sending what lockattr's Locker sent for one acq+rel, captured with MONITOR ({}): {}",
        r.bare_command_names, r.bare_commands
    );
    for a in &r.at_rtt {
        println!(
            "Delay proxy (row 14) aiming at {} µs RTT: delay set to {} µs each way; median PING direct {} µs, through the tests' fault proxy with no delay {} µs, through the delay proxy with no delay {} µs, with the delay {} µs (interleaved, the row's unit); {} iterations; {} hand-over rounds (lockattr)",
            fmt_num(a.target_rtt_us, 0),
            fmt_num(a.delay_us, 1),
            fmt_num(a.direct_us, 1),
            fmt_num(a.fault_proxy_floor_us, 1),
            fmt_num(a.proxy_floor_us, 1),
            fmt_num(a.uncontended.rtt_us, 1),
            a.iterations,
            a.handoff.samples[0]
        );
    }
    let c = &r.rw_cost;
    let seen = |s: Option<u64>| s.map_or("?".into(), |n| n.to_string());
    let per = |costs: &[Cost; 2]| {
        format!(
            "{} / {} script calls, {} / {} µs",
            costs[0].script_calls, costs[1].script_calls, costs[0].usec, costs[1].usec
        )
    };
    println!(
        "Read-write lock, {} vs {} readers holding (readers in the index: {}, {}), {} cycles of blocks A B B A, {} calls each, figure = median of the blocks' µs per call: \
         read calls {} in all (mean {} / {} µs per script call); writer's tries {} in all",
        HELD[0],
        HELD[1],
        seen(c.readers_seen[0]),
        seen(c.readers_seen[1]),
        c.cycles,
        BLOCK,
        per(&c.read),
        fmt_num(c.read[0].mean_us_per_script_call(), 2),
        fmt_num(c.read[1].mean_us_per_script_call(), 2),
        per(&c.write_try)
    );
}

/// Row 13's many-names part (see `scenarios::replica_batch`): each figure
/// with `min_replicas` 0; 1 (their ratio), then the frozen replica's.
fn batch_rows(b: &Batch) -> Vec<Row> {
    let scenario = "13 replicas, many names";
    let pair = |metric: &'static str, x: [f64; 2], decimals: usize| {
        Row::info(
            scenario,
            metric,
            format!(
                "{}; {} ({}×)",
                fmt_num(x[0], decimals),
                fmt_num(x[1], decimals),
                fmt_num(ratio(x[1], x[0]), 2)
            ),
            String::new(),
        )
    };
    let [r0, r1] = &b.blocks;
    vec![
        pair(
            "150 tasks, replica 5 ms away: grants/s, min_replicas 0; 1 (× 0)",
            [r0.grants_per_s, r1.grants_per_s],
            0,
        ),
        pair("  acquire p50, µs: 0; 1 (× 0)", [r0.p50_us, r1.p50_us], 0),
        pair("  acquire p99, µs: 0; 1 (× 0)", [r0.p99_us, r1.p99_us], 0),
        Row::info(
            scenario,
            "  replica frozen, 300 ms acquire: Replicas / failures / tries; fail p50; max, µs",
            format!(
                "{} / {} / {}; {}; {}",
                b.frozen_replicas,
                b.frozen_failures,
                b.frozen_tries,
                fmt_num(b.frozen_fail_p50_us, 0),
                fmt_num(b.frozen_fail_max_us, 0)
            ),
            String::new(),
        ),
    ]
}
