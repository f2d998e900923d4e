//! The SVG chart: per row a lockattr and an rslock bar.

use std::fmt::Write as _;

use crate::peers::Lib;
use crate::report::fmt_num;
use crate::scenarios::replicas::Replicas;
use crate::scenarios::{ContendStats, Report, Uncontended};
use crate::targets::{self, Target, met_word};
use crate::util::cores;
use crate::{CONTEND_PROCESSES, MANY_TASKS, ONE_PROCESS_TASKS};

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A grouped horizontal bar chart: per scenario a lockattr and an rslock
/// bar, each group scaled to its own larger value, with the values written
/// next to the bars.
pub fn chart_svg(r: &Report) -> String {
    let rtt = r.rtt_us;
    let ms = |us: f64| {
        if us >= 1000.0 {
            format!("{} ms", fmt_num(us / 1000.0, 1))
        } else {
            format!("{} µs", fmt_num(us, 0))
        }
    };
    let verdict = |t: Target| format!("target {}: {}", t.text, met_word(t.met));
    let pair = |u: &Uncontended, title: String| {
        (
            title,
            u.pair_us.map(|x| x / u.rtt_us),
            u.pair_us
                .map(|x| format!("{} RTT ({} µs)", fmt_num(x / u.rtt_us, 2), fmt_num(x, 0))),
        )
    };
    let quantile = |title: String, values: [f64; 2]| {
        (
            title,
            values.map(|x| x / rtt),
            values.map(|x| format!("{} RTT ({})", fmt_num(x / rtt, 1), ms(x))),
        )
    };
    let rate = |title: String, s: &[ContendStats; 2]| {
        (
            title,
            [s[0].per_s, s[1].per_s],
            [&s[0], &s[1]].map(|s| {
                format!(
                    "{} /s, least served {} of mean, p99 wait {}",
                    fmt_num(s.per_s, 0),
                    fmt_num(s.least_share, 2),
                    ms(s.wait_p99_us())
                )
            }),
        )
    };
    // (title, [value of lockattr, rslock], [label of lockattr, rslock])
    let groups: Vec<(String, [f64; 2], [String; 2])> = vec![
        pair(
            &r.uncontended[0],
            format!(
                "Uncontended acquire + release, RTT (lower is better); {}",
                verdict(targets::uncontended(r))
            ),
        ),
        pair(
            &r.uncontended[1],
            "Uncontended, tight loop of one operation, RTT of that loop's PING (information)"
                .into(),
        ),
        quantile(
            format!(
                "Hand-over across processes p50, RTT (lower is better); {}",
                verdict(targets::handoff_p50(r))
            ),
            r.handoff.p50_us,
        ),
        quantile(
            format!(
                "Hand-over across processes p99, RTT (lower is better); {}",
                verdict(targets::handoff_p99(r))
            ),
            r.handoff.p99_us,
        ),
        rate(
            format!(
                "{CONTEND_PROCESSES} processes on one lock: critical sections/s (higher is better); {}",
                verdict(targets::contended_ratio(r))
            ),
            &r.contend,
        ),
        rate(
            format!(
                "{ONE_PROCESS_TASKS} tasks of one process on one lock: critical sections/s (higher is better); {}",
                verdict(targets::tasks(r))
            ),
            &r.tasks,
        ),
        (
            format!(
                "{MANY_TASKS} tasks on distinct locks: pairs/s (higher is better); {}",
                verdict(targets::many(r))
            ),
            r.many_pairs_per_s,
            [0, 1].map(|i| {
                format!(
                    "{} /s, Redis CPU {} µs per pair",
                    fmt_num(r.many_pairs_per_s[i], 0),
                    fmt_num(r.many_cpu_us_per_pair[i][0], 1)
                )
            }),
        ),
        pair(
            &r.redlock.uncontended,
            format!(
                "Redlock, {} nodes: acquire + release, RTT (lower is better); {}",
                r.redlock.nodes,
                verdict(targets::redlock_uncontended(r))
            ),
        ),
        quantile(
            format!(
                "Redlock, {} nodes: hand-over p50, RTT (lower is better); {}",
                r.redlock.nodes,
                verdict(targets::redlock_handoff(r))
            ),
            r.redlock.handoff.p50_us,
        ),
    ];

    let width = 1000.0;
    let left = 110.0;
    let bar_max = 480.0;
    let bar_h = 22.0;
    let group_h = 24.0 + 2.0 * (bar_h + 6.0) + 18.0;
    let top = 92.0;
    let height = top + group_h * groups.len() as f64 + 100.0;
    let colors = ["#2563eb", "#ea580c"];
    let mut s = String::new();
    let _ = writeln!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="13">"##
    );
    let _ = writeln!(s, r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
    let _ = writeln!(
        s,
        r##"<text x="20" y="30" font-size="18" font-weight="bold" fill="#111827">lockattr vs rslock 0.10 on local redis-servers</text>"##
    );
    let subtitle = format!(
        "RTT = raw PING median {} µs; redis-server {}; {} cores; {}{}",
        fmt_num(rtt, 1),
        r.redis_version,
        cores(),
        "tokio current_thread",
        if r.plan_quick { "; QUICK RUN" } else { "" }
    );
    let _ = writeln!(
        s,
        r##"<text x="20" y="52" fill="#4b5563">{}</text>"##,
        xml_escape(&subtitle)
    );
    for (i, lib) in Lib::BOTH.into_iter().enumerate() {
        let x = 20.0 + i as f64 * 110.0;
        let _ = writeln!(
            s,
            r##"<rect x="{x}" y="64" width="14" height="14" fill="{}"/><text x="{}" y="76" fill="#111827">{}</text>"##,
            colors[i],
            x + 20.0,
            lib.name()
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="260" y="76" fill="#6b7280">each group's bars are scaled to its larger value</text>"##
    );
    for (g, (title, values, labels)) in groups.iter().enumerate() {
        let y0 = top + g as f64 * group_h;
        let _ = writeln!(
            s,
            r##"<text x="20" y="{}" font-weight="bold" fill="#111827">{}</text>"##,
            y0 + 14.0,
            xml_escape(title)
        );
        let max = values
            .iter()
            .copied()
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        for (i, lib) in Lib::BOTH.into_iter().enumerate() {
            let y = y0 + 24.0 + i as f64 * (bar_h + 6.0);
            let v = values[i];
            let w = if max > 0.0 && v.is_finite() {
                (v / max * bar_max).max(1.5)
            } else {
                0.0
            };
            let _ = writeln!(
                s,
                r##"<text x="{}" y="{}" text-anchor="end" fill="#374151">{}</text>"##,
                left - 8.0,
                y + 15.0,
                lib.name()
            );
            let _ = writeln!(
                s,
                r##"<rect x="{left}" y="{y}" width="{w:.1}" height="{bar_h}" fill="{}" rx="2"/>"##,
                colors[i]
            );
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{}" fill="#111827">{}</text>"##,
                left + w + 6.0,
                y + 15.0,
                xml_escape(&labels[i])
            );
        }
    }
    let foot = [
        format!(
            "Lost updates: {CONTEND_PROCESSES} processes lockattr {}, rslock {}; {ONE_PROCESS_TASKS} tasks lockattr {}, rslock {}.",
            r.contend[0].lost(),
            r.contend[1].lost(),
            r.tasks[0].lost(),
            r.tasks[1].lost(),
        ),
        format!(
            "#[redis_lock] vs the builder by hand: {}% ({}). Cold PING p50 (information): {} RTT ({}).",
            fmt_num(targets::macro_overhead_pct(r), 1),
            verdict(targets::macro_overhead(r)),
            fmt_num(r.cold_ping.p50_us / rtt, 1),
            ms(r.cold_ping.p50_us)
        ),
        format!(
            "Cluster, {} masters (lockattr only): acquire + release {} RTT, hand-over p50 {} RTT, {} pub/sub messages per release.",
            r.cluster.nodes,
            fmt_num(
                r.cluster.uncontended.pair_us[0] / r.cluster.uncontended.rtt_us,
                2
            ),
            fmt_num(r.cluster.handoff.p50_us[0] / rtt, 1),
            fmt_num(r.pubsub.per_release(), 2)
        ),
        format!(
            "Replicas (lockattr only): min_replicas(1) / min_replicas(0): acquire + release {}×, hand-over p50 {}×, p99 {}×.",
            fmt_num(Replicas::ratio(r.replicas.pair_us), 2),
            fmt_num(Replicas::ratio(r.replicas.handoff.p50_us), 2),
            fmt_num(Replicas::ratio(r.replicas.handoff.p99_us), 2)
        ),
    ];
    for (i, line) in foot.iter().enumerate() {
        let _ = writeln!(
            s,
            r##"<text x="20" y="{}" fill="#4b5563">{}</text>"##,
            height - 80.0 + i as f64 * 20.0,
            xml_escape(line)
        );
    }
    s.push_str("</svg>\n");
    s
}
