//! Helpers: connections, signalling between processes, clocks, quantiles,
//! and what the run records about the machine and the code.

use std::future::Future;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;

use crate::Res;

/// A multiplexed redis-rs connection of the calling runtime.
pub async fn connect(url: &str, response_timeout: Option<Duration>) -> Res<MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    let config = AsyncConnectionConfig::new().set_response_timeout(response_timeout);
    Ok(client
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

/// A connection for signalling between processes: BLPOP may block for a while.
pub async fn signal_connection(url: &str) -> Res<MultiplexedConnection> {
    connect(url, Some(Duration::from_secs(120))).await
}

/// RPUSH one value.
pub async fn rpush(con: &mut MultiplexedConnection, key: &str, value: impl ToString) -> Res<()> {
    redis::cmd("RPUSH")
        .arg(key)
        .arg(value.to_string())
        .query_async::<()>(con)
        .await?;
    Ok(())
}

/// BLPOP with a timeout in seconds; an error when nothing arrived.
pub async fn blpop(con: &mut MultiplexedConnection, key: &str, secs: u32) -> Res<String> {
    let got: Option<(String, String)> = redis::cmd("BLPOP")
        .arg(key)
        .arg(secs)
        .query_async(con)
        .await?;
    got.map(|(_, v)| v)
        .ok_or_else(|| format!("nothing arrived on `{key}` within {secs} s").into())
}

/// Nanoseconds since the Unix epoch: a clock all processes share.
pub fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the system clock is set before 1970")
        .as_nanos() as u64
}

/// How long `f` took.
pub async fn timed<T>(f: impl Future<Output = Res<T>>) -> Res<Duration> {
    let start = Instant::now();
    f.await?;
    Ok(start.elapsed())
}

/// A duration in µs.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The `q` quantile (0..=1) of samples, nearest rank.
pub fn quantile(samples: &[f64], q: f64) -> f64 {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// The median, nearest rank.
pub fn median(samples: &[f64]) -> f64 {
    quantile(samples, 0.5)
}

/// CPU seconds (user + system) used so far by process `pid` ("self" for
/// this one), from /proc (Linux; assumes 100 clock ticks per second).
pub fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses: state is the
    // first, utime the 12th and stime the 13th.
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// The 1-minute load average (Linux), to show how busy the machine was.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The CPUs this process may run on.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

/// The CPU's model name from /proc/cpuinfo (Linux).
pub fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_owned())
}

/// What `git` says about the checkout the bench was built from, when it is there.
#[derive(Clone, Debug, Default)]
pub struct GitState {
    /// `HEAD`'s commit.
    pub head: Option<String>,
    /// Whether the library's sources (`src`, `lockattr-runtime`,
    /// `lockattr-macros`) differ from `HEAD`.
    pub library_dirty: Option<bool>,
    /// Whether anything in the work tree differs from `HEAD` (untracked
    /// files included).
    pub worktree_dirty: Option<bool>,
}

/// The checkout's [`GitState`] (when the run starts: the code `cargo bench` built).
pub fn git_state() -> GitState {
    let root = env!("CARGO_MANIFEST_DIR");
    let run = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let head = run(&["rev-parse", "HEAD"]);
    let dirty = run(&[
        "status",
        "--porcelain",
        "--",
        "src",
        "lockattr-runtime",
        "lockattr-macros",
    ])
    .map(|s| !s.is_empty());
    let worktree_dirty = run(&["status", "--porcelain"]).map(|s| !s.is_empty());
    GitState {
        head,
        library_dirty: dirty,
        worktree_dirty,
    }
}

/// `a / b`, NaN when `b` is 0.
pub fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { f64::NAN } else { a / b }
}
