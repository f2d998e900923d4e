//! The targets for lockattr, checked in one place for the table,
//! the JSON, the README and the chart. Each has its text and its check.

use crate::scenarios::rtt::AtRtt;
use crate::scenarios::{ContendStats, Report};
use crate::util::ratio;

/// A target: what it says, and whether this run met it (in the JSON as
/// `{"text": ..., "met": ...}`).
#[derive(serde::Serialize)]
pub struct Target {
    /// As printed, e.g. `<= 1.0x rslock and <= 2.3 RTT`.
    pub text: &'static str,
    /// Whether lockattr met it.
    pub met: bool,
}

/// Row 2: uncontended acquire + release.
pub fn uncontended(r: &Report) -> Target {
    let u = &r.uncontended[0];
    Target {
        text: "<= 1.0x rslock and <= 2.3 RTT",
        met: ratio(u.pair_us[0], u.pair_us[1]) <= 1.0 && u.pair_us[0] / u.rtt_us <= 2.3,
    }
}

/// Row 2: lockattr's acquire + release against the bare client sending
/// the same commands.
pub fn bare_client(r: &Report) -> Target {
    let u = &r.uncontended[0];
    Target {
        text: "<= 1.05x the bare client",
        met: ratio(u.pair_us[0], u.bare_us) <= 1.05,
    }
}

/// Row 14 at about 1 ms RTT: acquire + release through the delay proxy.
pub fn at_rtt_uncontended(a: &AtRtt) -> Target {
    let p = a.uncontended.pair_us;
    Target {
        text: "<= 1.05x rslock",
        met: ratio(p[0], p[1]) <= 1.05,
    }
}

/// Row 3: hand-over p50.
pub fn handoff_p50(r: &Report) -> Target {
    Target {
        text: "<= 4 RTT",
        met: r.handoff.p50_us[0] / r.rtt_us <= 4.0,
    }
}

/// Row 3: hand-over p99.
pub fn handoff_p99(r: &Report) -> Target {
    Target {
        text: "<= 10 RTT",
        met: r.handoff.p99_us[0] / r.rtt_us <= 10.0,
    }
}

/// Row 4: critical sections per second.
pub fn contended_ratio(r: &Report) -> Target {
    Target {
        text: ">= 1.5x rslock",
        met: ratio(r.contend[0].per_s, r.contend[1].per_s) >= 1.5,
    }
}

/// Rows 4, 5: no lost update.
pub fn no_lost_updates(s: &ContendStats) -> Target {
    Target {
        text: "0",
        met: s.lost() == 0,
    }
}

/// Row 4: the least served process's share.
pub fn contended_share(r: &Report) -> Target {
    Target {
        text: ">= 0.5",
        met: r.contend[0].least_share >= 0.5,
    }
}

/// Row 4: p99 of the waits.
pub fn contended_wait(r: &Report) -> Target {
    Target {
        text: "<= 50 ms",
        met: r.contend[0].wait_p99_us() <= 50_000.0,
    }
}

/// Row 5: 64 tasks of one process on one lock.
pub fn tasks(r: &Report) -> Target {
    Target {
        text: ">= 2x rslock",
        met: ratio(r.tasks[0].per_s, r.tasks[1].per_s) >= 2.0,
    }
}

/// Row 6: 256 tasks on distinct locks.
pub fn many(r: &Report) -> Target {
    Target {
        text: ">= 1.0x rslock",
        met: ratio(r.many_pairs_per_s[0], r.many_pairs_per_s[1]) >= 1.0,
    }
}

/// Row 7: the macro's overhead.
pub fn macro_overhead(r: &Report) -> Target {
    Target {
        text: "< 3%",
        met: macro_overhead_pct(r) < 3.0,
    }
}

/// Row 7's figure: (annotated / by hand − 1) in %.
pub fn macro_overhead_pct(r: &Report) -> f64 {
    (r.macro_us / r.by_hand_us - 1.0) * 100.0
}

/// Row 8: Redlock acquire + release.
pub fn redlock_uncontended(r: &Report) -> Target {
    let p = r.redlock.uncontended.pair_us;
    Target {
        text: "<= 1.0x rslock",
        met: ratio(p[0], p[1]) <= 1.0,
    }
}

/// Row 8: Redlock hand-over p50.
pub fn redlock_handoff(r: &Report) -> Target {
    let p = r.redlock.handoff.p50_us;
    Target {
        text: "<= 1.0x rslock and <= 2x one server's",
        met: ratio(p[0], p[1]) <= 1.0 && ratio(p[0], r.handoff.p50_us[0]) <= 2.0,
    }
}

/// Row 9: pub/sub messages per release on the Cluster (the PUBLISH or
/// SPUBLISH calls plus the cluster-bus messages they cause).
pub fn cluster_pubsub(r: &Report) -> Target {
    Target {
        text: "1.00 (one message per release)",
        met: r.pubsub.releases > 0 && r.pubsub.per_release() <= 1.0,
    }
}

/// Row 10: a set of two names against two locks taken one after the other.
pub fn set_of_two(r: &Report) -> Target {
    Target {
        text: "<= 1.0x two locks in a row",
        met: r.kinds.pair_ratio(SET, TWO_LOCKS) <= 1.0,
    }
}

/// Row 11: readers share the lock.
pub fn readers_share(r: &Report) -> Target {
    let k = &r.kinds;
    Target {
        text: ">= 4x the write side, and more than one inside at once",
        met: ratio(k.shared_per_s[0], k.shared_per_s[1]) >= 4.0 && k.most_inside[0] > 1,
    }
}

/// Row 12's text: 1,000 readers holding against one.
const RW_COST_TEXT: &str = "<= 2x with 1 reader holding";

/// Row 12: a read call's Redis CPU with 1,000 readers holding.
pub fn rw_cost_read(r: &Report) -> Target {
    Target {
        text: RW_COST_TEXT,
        met: r.rw_cost.read_ratio() <= 2.0,
    }
}

/// Row 12: a writer's try's Redis CPU with 1,000 readers holding.
pub fn rw_cost_write(r: &Report) -> Target {
    Target {
        text: RW_COST_TEXT,
        met: r.rw_cost.write_ratio() <= 2.0,
    }
}

/// Indices into row 10's `pair_us`.
pub const LOCK: usize = 0;
/// See [`LOCK`].
pub const TWO_LOCKS: usize = 1;
/// See [`LOCK`].
pub const SET: usize = 2;
/// See [`LOCK`].
pub const READ: usize = 3;
/// See [`LOCK`].
pub const WRITE: usize = 4;
/// See [`LOCK`].
pub const PERMIT: usize = 5;

/// `met` or `missed`.
pub fn met_word(met: bool) -> &'static str {
    if met { "met" } else { "missed" }
}
