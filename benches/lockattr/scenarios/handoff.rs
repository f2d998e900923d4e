//! Row 3, hand-over across processes (also the hand-overs of rows 8 and
//! 9): two processes pass a lock back and forth; and the cold PING.

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

/// One round of the schedule both processes follow.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Step {
    /// The holder releases a lock of this library to the waiter.
    Pass(Lib),
    /// The holder sends a raw PING the way it would send its release; the
    /// other process sits it out.
    Ping,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Pass(lib) => lib.name(),
            Step::Ping => "ping",
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

fn kinds(deploy: &Deploy, ping: bool) -> Vec<Step> {
    let mut kinds: Vec<Step> = deploy.libs().iter().map(|&l| Step::Pass(l)).collect();
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
/// figures, the cold PING's (when `ping`) and the number of hand-over
/// releases (warm-up rounds included).
pub async fn run(
    url: &str,
    deploy: &Deploy,
    ping: bool,
    rounds: usize,
    plan: &Plan,
) -> Res<(Handoff, ColdPing, u64)> {
    let mut con = signal_connection(url).await?;
    redis::cmd("DEL")
        .arg(&[HANDOFF_GO, HANDOFF_T0, HANDOFF_RESULTS, HANDOFF_IDLE])
        .query_async::<()>(&mut con)
        .await?;
    let steps = schedule(
        &kinds(deploy, ping),
        rounds,
        plan.handoff_warmup,
        plan.handoff_block,
    );
    let releases = steps
        .iter()
        .filter(|(s, _)| matches!(s, Step::Pass(_)))
        .count() as u64;
    let params = (0..2).map(|idx| {
        format!(
            "idx={idx};rounds={rounds};warmup={};block={};ping={};deploy={}",
            plan.handoff_warmup,
            plan.handoff_block,
            u8::from(ping),
            deploy.to_param()
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
            let i = Lib::parse(kind)?.index();
            samples[i].push(handoff_ns.parse::<f64>()? / 1e3);
            release_samples[i].push(release_ns.parse::<f64>()? / 1e3);
        }
    }
    let mut out = Handoff::default();
    for lib in Lib::BOTH {
        let i = lib.index();
        let s = &samples[i];
        let expected = if deploy.libs().contains(&lib) {
            rounds
        } else {
            0
        };
        if s.len() != expected {
            return Err(format!(
                "expected {expected} {} handoff samples, got {}",
                lib.name(),
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
/// of the release (signalling nobody) and keeps the lock.
pub async fn child(url: &str, params: &Params) -> Res<()> {
    let idx = params.num("idx")?;
    let deploy = Deploy::parse(params.text("deploy")?)?;
    let schedule = schedule(
        &kinds(&deploy, params.num("ping")? == 1),
        params.num("rounds")? as usize,
        params.num("warmup")? as usize,
        params.num("block")? as usize,
    );
    let libs = Libs::on(
        &deploy,
        Some((RSLOCK_WAITER_RETRY_COUNT, RSLOCK_DEFAULT_RETRY_DELAY)),
    )?;
    let name = |lib: Lib| format!("bench:handoff:lock:{}", lib.name());
    let mut con = signal_connection(url).await?;
    let mut raw = connect(url, Some(Duration::from_secs(5))).await?;
    // Connect both libraries before the first round.
    libs.locker.ping().await?;
    redis::cmd("PING").query_async::<()>(&mut raw).await?;
    let warm = format!("bench:handoff:warm:{idx}");
    for &lib in deploy.libs() {
        let held = libs.acquire_or_fail(lib, &warm, EXPIRE).await?;
        libs.release(held).await?;
    }
    let first_lib = deploy.libs()[0];

    let mut held: Option<Held> = None;
    if idx == 0 {
        held = Some(
            libs.acquire_or_fail(first_lib, &name(first_lib), HANDOFF_EXPIRE)
                .await?,
        );
    }
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
            (Some(mut h), Step::Pass(lib)) => {
                if h.lib() != lib {
                    // The other process waits for our signal: this is uncontended.
                    libs.release(h).await?;
                    h = libs
                        .acquire_or_fail(lib, &name(lib), HANDOFF_EXPIRE)
                        .await?;
                }
                rpush(&mut con, HANDOFF_GO, round).await?;
                tokio::time::sleep(HANDOFF_HOLD).await;
                let t0 = unix_nanos();
                libs.release(h).await?;
                let released = unix_nanos();
                rpush(&mut con, HANDOFF_T0, format!("{t0},{released}")).await?;
            }
            (None, Step::Pass(lib)) => {
                let go = blpop(&mut con, HANDOFF_GO, 60).await?;
                if go != round.to_string() {
                    return Err(format!("handoff out of step: round {round}, signal {go}").into());
                }
                let h = libs
                    .acquire_or_fail(lib, &name(lib), HANDOFF_EXPIRE)
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
                held = Some(h);
            }
        }
    }
    if let Some(h) = held {
        libs.release(h).await?;
    }
    Ok(())
}
