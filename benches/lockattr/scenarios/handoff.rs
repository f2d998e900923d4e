//! Row 3, hand-over across processes (also the hand-overs of rows 8, 9
//! and 13): two processes pass a lock back and forth; and the cold PING.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::time::{Duration, Instant};

use super::{ColdPing, Handoff, Report};
use crate::children::{Children, Params};
use crate::peers::{
    Deploy, Held, Lib, Libs, RSLOCK_DEFAULT_RETRY_DELAY, RSLOCK_WAITER_RETRY_COUNT,
};
use crate::util::{blpop, connect, median, quantile, rpush, signal_connection, unix_nanos};
use crate::{EXPIRE, Plan, Res};

/// The holder's lease.
const HANDOFF_EXPIRE: Duration = Duration::from_secs(30);
/// How long the holder waits after signalling, so the waiter is surely
/// blocked; the cold PING waits as long before it is sent.
pub const HANDOFF_HOLD: Duration = Duration::from_millis(25);

const HANDOFF_GO: &str = "bench:handoff:go";
const HANDOFF_T0: &str = "bench:handoff:t0";
const HANDOFF_IDLE: &str = "bench:handoff:idle";
const HANDOFF_RESULTS: &str = "bench:handoff:results";
/// Where each process says it is ready (by `idx`): neither starts the
/// rounds before the other is connected and warm.
const HANDOFF_READY: [&str; 2] = ["bench:handoff:ready:0", "bench:handoff:ready:1"];

/// Who passes the lock in a hand-over round: a library and, for lockattr,
/// the `min_replicas` of its Locker (row 13; 0 everywhere else).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Side {
    /// The library.
    pub lib: Lib,
    /// lockattr's `LockerBuilder::min_replicas`.
    pub min_replicas: u32,
}

impl Side {
    /// `lib` with the default Locker.
    pub const fn of(lib: Lib) -> Side {
        Side {
            lib,
            min_replicas: 0,
        }
    }

    /// lockattr with `min_replicas(n)`.
    pub const fn replicas(n: u32) -> Side {
        Side {
            lib: Lib::Lockattr,
            min_replicas: n,
        }
    }

    /// In parameters and result lines: `lockattr`, `rslock`, `lockattr-r1`.
    fn name(self) -> String {
        match self.min_replicas {
            0 => self.lib.name().to_owned(),
            n => format!("{}-r{n}", self.lib.name()),
        }
    }

    /// The inverse of [`Side::name`].
    fn parse(s: &str) -> Res<Side> {
        match s.split_once("-r") {
            Some((lib, n)) => Ok(Side {
                lib: Lib::parse(lib)?,
                min_replicas: n.parse()?,
            }),
            None => Ok(Side::of(Lib::parse(s)?)),
        }
    }
}

/// One round of the schedule both processes follow.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Step {
    /// The holder releases a lock of this side to the waiter.
    Pass(Side),
    /// The holder sends a raw PING the way it would send its release; the
    /// other process sits it out.
    Ping,
}

impl Step {
    fn name(self) -> String {
        match self {
            Step::Pass(side) => side.name(),
            Step::Ping => "ping".to_owned(),
        }
    }
}

/// `(step, measured)` per round: warm-up rounds of each kind, then
/// alternating blocks of `block` rounds.
fn schedule(kinds: &[Step], rounds: usize, warmup: usize, block: usize) -> Vec<(Step, bool)> {
    let mut schedule = Vec::new();
    for &kind in kinds {
        schedule.extend(std::iter::repeat_n((kind, false), warmup));
    }
    let mut left = vec![rounds; kinds.len()];
    let mut b = 0;
    while left.iter().any(|&n| n > 0) {
        let k = b % kinds.len();
        let n = left[k].min(block);
        schedule.extend(std::iter::repeat_n((kinds[k], true), n));
        left[k] -= n;
        b += 1;
    }
    schedule
}

fn kinds(sides: &[Side], ping: bool) -> Vec<Step> {
    let mut kinds: Vec<Step> = sides.iter().map(|&side| Step::Pass(side)).collect();
    if ping {
        kinds.push(Step::Ping);
    }
    kinds
}

/// Row 3 on the single server, with the cold PING.
pub async fn single(url: &str, plan: &Plan, report: &mut Report) -> Res<()> {
    let deploy = Deploy::Single(url.to_owned());
    let (handoff, ping, _) = run(url, &deploy, true, plan.handoff_rounds, plan).await?;
    report.handoff = handoff;
    report.cold_ping = ping;
    Ok(())
}

/// Two processes pass the lock back and forth on `deploy`, signalling
/// through the server at `url`; see [`child`]. Returns the hand-over
/// figures (by `Lib::index`), the cold PING's (when `ping`) and the number
/// of hand-over releases (warm-up rounds included).
pub async fn run(
    url: &str,
    deploy: &Deploy,
    ping: bool,
    rounds: usize,
    plan: &Plan,
) -> Res<(Handoff, ColdPing, u64)> {
    // Lockattr first, then rslock where it runs: each side's index is its
    // `Lib::index`.
    let sides: Vec<Side> = deploy.libs().iter().map(|&lib| Side::of(lib)).collect();
    run_sides(url, deploy, &sides, ping, rounds, plan).await
}

/// [`run`] with the sides named: the hand-over figures are by index into
/// `sides` (at most two), the rounds of each side taking turns in blocks.
pub async fn run_sides(
    url: &str,
    deploy: &Deploy,
    sides: &[Side],
    ping: bool,
    rounds: usize,
    plan: &Plan,
) -> Res<(Handoff, ColdPing, u64)> {
    if sides.is_empty() || sides.len() > 2 {
        return Err(format!(
            "a hand-over run takes one or two sides, not {}",
            sides.len()
        )
        .into());
    }
    let mut con = signal_connection(url).await?;
    redis::cmd("DEL")
        .arg(&[HANDOFF_GO, HANDOFF_T0, HANDOFF_RESULTS, HANDOFF_IDLE])
        .arg(&HANDOFF_READY)
        .query_async::<()>(&mut con)
        .await?;
    let steps = schedule(
        &kinds(sides, ping),
        rounds,
        plan.handoff_warmup,
        plan.handoff_block,
    );
    let releases = steps
        .iter()
        .filter(|(s, _)| matches!(s, Step::Pass(_)))
        .count() as u64;
    let side_names: Vec<String> = sides.iter().map(|s| s.name()).collect();
    let params = (0..2).map(|idx| {
        format!(
            "idx={idx};rounds={rounds};warmup={};block={};ping={};deploy={};sides={}",
            plan.handoff_warmup,
            plan.handoff_block,
            u8::from(ping),
            deploy.to_param(),
            side_names.join(",")
        )
    });
    let mut children = Children::spawn("handoff", "handoff", url, params)?;
    children.wait(Duration::from_secs(300)).await?;

    let lines: Vec<String> = redis::cmd("LRANGE")
        .arg(HANDOFF_RESULTS)
        .arg(0)
        .arg(-1)
        .query_async(&mut con)
        .await?;
    let mut samples: [Vec<f64>; 2] = Default::default();
    let mut release_samples: [Vec<f64>; 2] = Default::default();
    let mut pings = Vec::new();
    for line in &lines {
        let f: Vec<&str> = line.split(',').collect();
        let [kind, measured, handoff_ns, release_ns] = f[..] else {
            return Err(format!("bad handoff result `{line}`").into());
        };
        if measured != "1" {
            continue;
        }
        if kind == "ping" {
            pings.push(handoff_ns.parse::<f64>()? / 1e3);
        } else {
            let side = Side::parse(kind)?;
            let i = sides
                .iter()
                .position(|&s| s == side)
                .ok_or_else(|| format!("handoff result of an unknown side `{kind}`"))?;
            samples[i].push(handoff_ns.parse::<f64>()? / 1e3);
            release_samples[i].push(release_ns.parse::<f64>()? / 1e3);
        }
    }
    let mut out = Handoff::default();
    for i in 0..2 {
        let s = &samples[i];
        let expected = if i < sides.len() { rounds } else { 0 };
        if s.len() != expected {
            return Err(format!(
                "expected {expected} handoff samples of side {i} ({}), got {}",
                side_names.get(i).map_or("none", String::as_str),
                s.len()
            )
            .into());
        }
        out.samples[i] = s.len();
        out.p50_us[i] = median(s);
        out.p99_us[i] = quantile(s, 0.99);
        out.release_p50_us[i] = median(&release_samples[i]);
        let after: Vec<f64> = s
            .iter()
            .zip(&release_samples[i])
            .map(|(handoff, release)| handoff - release)
            .collect();
        out.after_release_p50_us[i] = median(&after);
    }
    let cold = ColdPing {
        samples: pings.len(),
        p50_us: median(&pings),
    };
    if ping && cold.samples != rounds {
        return Err(format!("expected {rounds} cold PINGs, got {}", cold.samples).into());
    }
    Ok((out, cold, releases))
}

/// One of the two hand-over processes. Per round, the process holding the
/// lock signals the other, sleeps `HANDOFF_HOLD`, takes t0 and releases;
/// the waiter, which started acquiring on the signal, takes t1 when its
/// acquire returns and records t1 - t0. The waiter then holds the lock and
/// is the holder of the next round, so the two processes swap roles every
/// round. In a PING round the holder does the same with a raw PING in place
/// of the release (signalling nobody) and keeps the lock. Each side has a
/// lock name of its own, and each `min_replicas` a Locker of its own.
pub async fn child(url: &str, params: &Params) -> Res<()> {
    let idx = params.num("idx")?;
    let deploy = Deploy::parse(params.text("deploy")?)?;
    let sides = params
        .text("sides")?
        .split(',')
        .map(Side::parse)
        .collect::<Res<Vec<Side>>>()?;
    let schedule = schedule(
        &kinds(&sides, params.num("ping")? == 1),
        params.num("rounds")? as usize,
        params.num("warmup")? as usize,
        params.num("block")? as usize,
    );
    let mut by_replicas: BTreeMap<u32, Libs> = BTreeMap::new();
    for side in &sides {
        if let Entry::Vacant(slot) = by_replicas.entry(side.min_replicas) {
            slot.insert(Libs::on_with(
                &deploy,
                Some((RSLOCK_WAITER_RETRY_COUNT, RSLOCK_DEFAULT_RETRY_DELAY)),
                side.min_replicas,
            )?);
        }
    }
    let libs_of = |side: Side| &by_replicas[&side.min_replicas];
    let name = |side: Side| format!("bench:handoff:lock:{}", side.name());
    let mut con = signal_connection(url).await?;
    let mut raw = connect(url, Some(Duration::from_secs(5))).await?;
    // Connect every Locker and both libraries before the first round.
    for libs in by_replicas.values() {
        libs.locker.ping().await?;
    }
    redis::cmd("PING").query_async::<()>(&mut raw).await?;
    let warm = format!("bench:handoff:warm:{idx}");
    for &side in &sides {
        let libs = libs_of(side);
        let held = libs.acquire_or_fail(side.lib, &warm, EXPIRE).await?;
        libs.release(held).await?;
    }
    let first = sides[0];

    let mut held: Option<(Side, Held)> = None;
    if idx == 0 {
        let h = libs_of(first)
            .acquire_or_fail(first.lib, &name(first), HANDOFF_EXPIRE)
            .await?;
        held = Some((first, h));
    }
    // Both ready before round 0: a holder whose peer is still starting
    // (slower through row 14's delay proxy) would otherwise pop its own
    // signal back when it waits in the next round.
    let idx = usize::try_from(idx)?;
    rpush(&mut con, HANDOFF_READY[1 - idx.min(1)], idx).await?;
    blpop(&mut con, HANDOFF_READY[idx.min(1)], 60).await?;
    for (round, &(step, measured)) in schedule.iter().enumerate() {
        match (held.take(), step) {
            (Some(h), Step::Ping) => {
                rpush(&mut con, HANDOFF_IDLE, round).await?;
                tokio::time::sleep(HANDOFF_HOLD).await;
                let t0 = Instant::now();
                redis::cmd("PING").query_async::<()>(&mut raw).await?;
                let took = t0.elapsed().as_nanos();
                let line = format!("ping,{},{took},{took}", u8::from(measured));
                rpush(&mut con, HANDOFF_RESULTS, line).await?;
                held = Some(h);
            }
            (None, Step::Ping) => {}
            (Some((held_side, mut h)), Step::Pass(side)) => {
                if held_side != side {
                    // The other process waits for our signal: this is uncontended.
                    libs_of(held_side).release(h).await?;
                    h = libs_of(side)
                        .acquire_or_fail(side.lib, &name(side), HANDOFF_EXPIRE)
                        .await?;
                }
                rpush(&mut con, HANDOFF_GO, round).await?;
                tokio::time::sleep(HANDOFF_HOLD).await;
                let t0 = unix_nanos();
                libs_of(side).release(h).await?;
                let released = unix_nanos();
                rpush(&mut con, HANDOFF_T0, format!("{t0},{released}")).await?;
            }
            (None, Step::Pass(side)) => {
                let go = blpop(&mut con, HANDOFF_GO, 60).await?;
                if go != round.to_string() {
                    return Err(format!("handoff out of step: round {round}, signal {go}").into());
                }
                let h = libs_of(side)
                    .acquire_or_fail(side.lib, &name(side), HANDOFF_EXPIRE)
                    .await?;
                let t1 = unix_nanos();
                let times = blpop(&mut con, HANDOFF_T0, 60).await?;
                let (t0, released) = times
                    .split_once(',')
                    .ok_or_else(|| format!("bad handoff times `{times}`"))?;
                let (t0, released): (u64, u64) = (t0.parse()?, released.parse()?);
                // The hand-over, and how much of it the holder's release call took.
                let line = format!(
                    "{},{},{},{}",
                    step.name(),
                    u8::from(measured),
                    t1.saturating_sub(t0),
                    released.saturating_sub(t0)
                );
                rpush(&mut con, HANDOFF_RESULTS, line).await?;
                held = Some((side, h));
            }
        }
    }
    if let Some((side, h)) = held {
        libs_of(side).release(h).await?;
    }
    Ok(())
}
