//! Benchmark: lockattr against rslock 0.10 on a private, throwaway redis-server.
//!
//! Run with `cargo bench --bench lockattr` (about a minute), or
//! `cargo bench --bench lockattr -- --quick` for a smoke run of a few seconds.
//!
//! The program starts its own `redis-server` on a free loopback port (never
//! 6379) with a temporary directory, and stops it on every way out, panics
//! included. Multi-process scenarios re-execute this binary with the
//! `LOCKATTR_BENCH_ROLE` environment variable naming the role. Every process
//! runs one tokio `current_thread` runtime, the same for both libraries.
//!
//! Scenarios, each measured for both libraries in the same run, interleaved
//! (per iteration or in alternating blocks) so drift cancels:
//! 1. RTT: median raw redis-rs PING on a multiplexed connection of this
//!    runtime, sampled in the same loop as scenario 2; the unit of the other
//!    figures. `Locker::ping` for information.
//! 2. Uncontended acquire + release (median); again as a tight loop, for
//!    information.
//! 3. Handoff across processes: holder releases, a waiter blocked in another
//!    process returns from acquire (p50, p99).
//! 4. Contended: 8 processes loop acquire, GET, SET + 1, release; critical
//!    sections per second, lost updates, least-served process's share.
//! 5. Many locks: 256 tasks on distinct names through one lock manager.
//! 6. Macro overhead: `#[redis_lock]` against the same code by hand.
//!
//! Output: a table on stdout, `docs/bench/results.json` and
//! `docs/bench/chart.svg` (with `--quick`: a temporary directory, unless
//! `--out DIR` says otherwise).

use std::collections::BTreeMap;
use std::error::Error;
use std::fmt::Write as _;
use std::future::Future;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lockattr::{LockError, LockGuard, Locker};
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use rslock::LockManager;

type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Environment variable naming the role of a re-executed child process.
const ROLE_ENV: &str = "LOCKATTR_BENCH_ROLE";
/// Environment variable with the Redis URL, for child processes.
const URL_ENV: &str = "LOCKATTR_BENCH_URL";
/// Environment variable with `key=value;...` parameters, for child processes.
const PARAMS_ENV: &str = "LOCKATTR_BENCH_PARAMS";

/// rslock 0.10.0's defaults (`DEFAULT_RETRY_COUNT`, `DEFAULT_RETRY_DELAY` in
/// its src/lock.rs): 3 attempts, a random 0..200 ms sleep between attempts.
/// Checked at run time against the `Debug` output of a fresh `LockManager`.
const RSLOCK_DEFAULT_RETRY_COUNT: u32 = 3;
const RSLOCK_DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(200);
/// A blocked rslock waiter in the handoff scenario: 100 attempts with the
/// default delay keep it trying for about 10 s (mean sleep 100 ms).
const RSLOCK_WAITER_RETRY_COUNT: u32 = 100;

/// Lease of every lock the benchmark takes, and lockattr's acquire timeout
/// (generous: a bench lock never legitimately waits that long).
const EXPIRE: Duration = Duration::from_secs(10);
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// The handoff holder's lease.
const HANDOFF_EXPIRE: Duration = Duration::from_secs(30);
/// How long the handoff holder waits after signalling, so the waiter is surely blocked.
const HANDOFF_HOLD: Duration = Duration::from_millis(25);

const CONTEND_PROCESSES: usize = 8;
const MANY_TASKS: usize = 256;

const RUNTIME: &str =
    "tokio current_thread, one per process, work in a task; same for both libraries";

// ---------------------------------------------------------------- settings

/// Sizes of one run.
#[derive(Clone, Debug)]
struct Plan {
    quick: bool,
    /// Scenarios 1, 2: measured iterations and warm-up iterations.
    iterations: usize,
    warmup: usize,
    /// Scenario 2's second run: iterations of one operation in a row.
    uncontended_block: usize,
    /// Scenario 3: measured rounds per library, warm-up rounds, block size.
    handoff_rounds: usize,
    handoff_warmup: usize,
    handoff_block: usize,
    /// Scenario 4: one block's length; blocks go lockattr, rslock, rslock, lockattr.
    contend_block: Duration,
    /// Scenario 5: one block's length, same ABBA order.
    many_block: Duration,
    /// Scenario 6: measured iterations (each runs both variants).
    macro_iterations: usize,
}

impl Plan {
    fn full() -> Plan {
        Plan {
            quick: false,
            iterations: 3000,
            warmup: 300,
            uncontended_block: 50,
            handoff_rounds: 200,
            handoff_warmup: 5,
            handoff_block: 25,
            contend_block: Duration::from_secs(2),
            many_block: Duration::from_secs(1),
            macro_iterations: 3000,
        }
    }

    fn quick() -> Plan {
        Plan {
            quick: true,
            iterations: 300,
            warmup: 50,
            uncontended_block: 25,
            handoff_rounds: 20,
            handoff_warmup: 2,
            handoff_block: 10,
            contend_block: Duration::from_millis(500),
            many_block: Duration::from_millis(250),
            macro_iterations: 300,
        }
    }
}

// ---------------------------------------------------------------- entry point

fn main() {
    let outcome = match std::env::var(ROLE_ENV) {
        Ok(role) => child_main(&role),
        Err(_) => coordinator_main(),
    };
    if let Err(e) = outcome {
        let who = std::env::var(ROLE_ENV).unwrap_or_else(|_| "coordinator".into());
        eprintln!("lockattr bench ({who}): error: {e}");
        std::process::exit(1);
    }
}

/// Runs `work` as a task of a fresh current-thread runtime: the way service
/// code runs (in a task, not as `block_on`'s root future), for both
/// libraries. lockattr then uses a connection of this runtime, as rslock
/// and the raw PING do; a root future of a current-thread `block_on` would
/// go through lockattr's I/O thread instead.
fn run_in_task<T: 'static>(work: impl Future<Output = T> + 'static) -> Res<T> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    Ok(local.block_on(&rt, async move { tokio::task::spawn_local(work).await })?)
}

fn coordinator_main() -> Res<()> {
    let mut plan = Plan::full();
    let mut out: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => plan = Plan::quick(),
            // `cargo bench` passes `--bench` to every bench binary.
            "--bench" => {}
            "--out" => {
                out = Some(
                    args.next()
                        .ok_or("--out needs a directory after it")?
                        .into(),
                )
            }
            "--help" | "-h" => {
                println!(
                    "usage: cargo bench --bench lockattr -- [--quick] [--out DIR]\n  \
                     --quick    a few seconds instead of about a minute (smoke test)\n  \
                     --out DIR  where results.json and chart.svg go (default docs/bench, \
                     with --quick a temporary directory)"
                );
                return Ok(());
            }
            other => return Err(format!("unknown argument `{other}` (try --help)").into()),
        }
    }
    let out = out.unwrap_or_else(|| {
        if plan.quick {
            std::env::temp_dir().join("lockattr-bench-quick")
        } else {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/bench")
        }
    });

    let server = RedisServer::start()?;
    println!(
        "lockattr bench: redis-server {} at {} ({}; {})",
        server.version,
        server.url,
        if plan.quick { "quick run" } else { "full run" },
        RUNTIME
    );
    let server = std::sync::Arc::new(server);
    let report = run_in_task({
        let server = server.clone();
        async move { run_all(&server, &plan).await }
    })??;
    drop(server);

    print_table(&report);
    std::fs::create_dir_all(&out)
        .map_err(|e| format!("cannot create output directory {}: {e}", out.display()))?;
    let json_path = out.join("results.json");
    let svg_path = out.join("chart.svg");
    std::fs::write(&json_path, to_json(&report).render())
        .map_err(|e| format!("cannot write {}: {e}", json_path.display()))?;
    std::fs::write(&svg_path, chart_svg(&report))
        .map_err(|e| format!("cannot write {}: {e}", svg_path.display()))?;
    println!("\nwrote {} and {}", json_path.display(), svg_path.display());
    Ok(())
}

// ---------------------------------------------------------------- redis-server

/// A private redis-server; killed and its directory removed when dropped
/// (also while unwinding from a panic).
struct RedisServer {
    child: Child,
    dir: PathBuf,
    url: String,
    version: String,
}

impl RedisServer {
    /// Starts redis-server on a free port; tries another port when the one
    /// picked was taken in the meantime.
    fn start() -> Res<RedisServer> {
        let mut last_error = String::new();
        for _ in 0..5 {
            match RedisServer::try_start()? {
                Ok(server) => return Ok(server),
                Err(e) => last_error = e,
            }
        }
        Err(format!("could not start a private redis-server: {last_error}").into())
    }

    /// `Ok(Err(..))`: this port did not work out, try another.
    fn try_start() -> Res<Result<RedisServer, String>> {
        let port = loop {
            let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            if port != 6379 {
                break port;
            }
        };
        let dir = std::env::temp_dir().join(format!(
            "lockattr-bench-redis-{}-{port}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| {
                let _ = std::fs::remove_dir_all(&dir);
                format!("could not start `redis-server` ({e}); install it (apt-get install redis-server)")
            })?;
        // From here on, Drop kills the server and removes the directory.
        let mut server = RedisServer {
            child,
            dir,
            url: format!("redis://127.0.0.1:{port}/"),
            version: String::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = server.child.try_wait()? {
                return Ok(Err(format!("redis-server exited at start-up ({status})")));
            }
            if let Ok(info) = info_server(port) {
                // Someone else's server may have taken the port first.
                let pid = info_field(&info, "process_id");
                if pid != Some(server.child.id().to_string()) {
                    return Ok(Err(format!("port {port} is served by another process")));
                }
                server.version =
                    info_field(&info, "redis_version").unwrap_or_else(|| "unknown".into());
                return Ok(Ok(server));
            }
            if Instant::now() > deadline {
                return Err("redis-server did not answer within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// `INFO server` of the Redis on `port`, over a plain socket.
fn info_server(port: u16) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut socket = TcpStream::connect(("127.0.0.1", port))?;
    socket.set_read_timeout(Some(Duration::from_secs(2)))?;
    socket.write_all(b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    // A bulk string: `$<len>\r\n<len bytes>\r\n`.
    loop {
        let n = socket.read(&mut buf)?;
        if n == 0 {
            break;
        }
        reply.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&reply);
        if let Some((len, _)) = text.strip_prefix('$').and_then(|t| t.split_once("\r\n")) {
            let header = len.len() + 3;
            if len
                .parse::<usize>()
                .is_ok_and(|len| reply.len() >= header + len)
            {
                break;
            }
        } else if !text.starts_with('$') && text.contains("\r\n") {
            break; // an error reply, such as -LOADING
        }
    }
    let text = String::from_utf8_lossy(&reply).into_owned();
    if text.starts_with('$') {
        Ok(text)
    } else {
        Err(std::io::Error::other(text))
    }
}

/// `name:value` from an INFO reply.
fn info_field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------- child processes

/// Child processes of one scenario: killed (if still running) and reaped
/// when dropped.
struct Children {
    what: &'static str,
    procs: Vec<Child>,
}

impl Children {
    fn spawn(
        what: &'static str,
        role: &str,
        url: &str,
        params: impl IntoIterator<Item = String>,
    ) -> Res<Children> {
        let exe = std::env::current_exe()?;
        let mut children = Children {
            what,
            procs: Vec::new(),
        };
        for p in params {
            let child = Command::new(&exe)
                .env(ROLE_ENV, role)
                .env(URL_ENV, url)
                .env(PARAMS_ENV, p)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| format!("cannot start a {what} process: {e}"))?;
            children.procs.push(child);
        }
        Ok(children)
    }

    /// Waits for every child to exit successfully; on the first failure or
    /// after `timeout`, kills the rest and returns an error.
    async fn wait(&mut self, timeout: Duration) -> Res<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut running = 0;
            for child in &mut self.procs {
                match child.try_wait()? {
                    Some(status) if !status.success() => {
                        return Err(format!("a {} process failed ({status})", self.what).into());
                    }
                    Some(_) => {}
                    None => running += 1,
                }
            }
            if running == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(
                    format!("{} processes did not finish within {timeout:?}", self.what).into(),
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.procs {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

fn child_main(role: &str) -> Res<()> {
    let url = std::env::var(URL_ENV).map_err(|_| format!("{URL_ENV} is not set"))?;
    let params = Params::from_env()?;
    match role {
        "handoff" => run_in_task(async move { handoff_child(&url, &params).await })?,
        "contend" => run_in_task(async move { contend_child(&url, &params).await })?,
        other => Err(format!("unknown role `{other}`").into()),
    }
}

/// `key=value;key=value` parameters of a child process.
struct Params(BTreeMap<String, String>);

impl Params {
    fn from_env() -> Res<Params> {
        let raw = std::env::var(PARAMS_ENV).map_err(|_| format!("{PARAMS_ENV} is not set"))?;
        let map = raw
            .split(';')
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .ok_or_else(|| format!("bad parameter `{kv}`"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Params(map))
    }

    fn num(&self, key: &str) -> Res<u64> {
        let v = self
            .0
            .get(key)
            .ok_or_else(|| format!("parameter `{key}` missing"))?;
        Ok(v.parse()
            .map_err(|e| format!("parameter `{key}`={v}: {e}"))?)
    }
}

// ---------------------------------------------------------------- both libraries

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lib {
    Lockattr,
    Rslock,
}

impl Lib {
    const BOTH: [Lib; 2] = [Lib::Lockattr, Lib::Rslock];
    /// Alternating blocks in the order A B B A, so a linear drift cancels.
    const ABBA: [Lib; 4] = [Lib::Lockattr, Lib::Rslock, Lib::Rslock, Lib::Lockattr];

    fn name(self) -> &'static str {
        match self {
            Lib::Lockattr => "lockattr",
            Lib::Rslock => "rslock",
        }
    }

    fn parse(s: &str) -> Res<Lib> {
        match s {
            "lockattr" => Ok(Lib::Lockattr),
            "rslock" => Ok(Lib::Rslock),
            other => Err(format!("unknown library `{other}`").into()),
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A held lock of either library.
enum Held {
    Lockattr(LockGuard),
    Rslock(rslock::Lock),
}

impl Held {
    fn lib(&self) -> Lib {
        match self {
            Held::Lockattr(_) => Lib::Lockattr,
            Held::Rslock(_) => Lib::Rslock,
        }
    }
}

/// One lock manager of each library, both on the same Redis.
#[derive(Clone)]
struct Libs {
    locker: Locker,
    rslock: LockManager,
}

impl Libs {
    /// `rslock_retry`: None for rslock's defaults, or `(count, delay)`.
    fn new(url: &str, rslock_retry: Option<(u32, Duration)>) -> Res<Libs> {
        let mut rslock = LockManager::new(vec![url]);
        if let Some((count, delay)) = rslock_retry {
            rslock.set_retry(count, delay);
        }
        Ok(Libs {
            locker: Locker::new(url)?,
            rslock,
        })
    }

    /// Acquires `name`; `Ok(None)` when the library gave up waiting
    /// (lockattr: its acquire timeout; rslock: its retries ran out).
    async fn acquire(&self, lib: Lib, name: &str, expire: Duration) -> Res<Option<Held>> {
        match lib {
            Lib::Lockattr => {
                match self
                    .locker
                    .lock(name)
                    .expire(expire)
                    .acquire_timeout(ACQUIRE_TIMEOUT)
                    .acquire()
                    .await
                {
                    Ok(guard) => Ok(Some(Held::Lockattr(guard))),
                    Err(e) if e.is_timeout() => Ok(None),
                    Err(e) => Err(e.into()),
                }
            }
            Lib::Rslock => match self.rslock.lock(name, expire).await {
                Ok(lock) => Ok(Some(Held::Rslock(lock))),
                Err(rslock::LockError::Unavailable) => Ok(None),
                Err(e) => Err(e.into()),
            },
        }
    }

    async fn acquire_or_fail(&self, lib: Lib, name: &str, expire: Duration) -> Res<Held> {
        self.acquire(lib, name, expire)
            .await?
            .ok_or_else(|| format!("{} gave up waiting for `{name}`", lib.name()).into())
    }

    async fn release(&self, held: Held) -> Res<()> {
        match held {
            Held::Lockattr(guard) => guard.release().await?,
            // Best effort by design: rslock's unlock reports nothing.
            Held::Rslock(lock) => self.rslock.unlock(&lock).await,
        }
        Ok(())
    }
}

/// The retry settings of a fresh rslock `LockManager`, read from its `Debug`
/// output (the fields are private): `(retry_count, "retry_delay")`.
fn rslock_defaults_seen() -> (Option<u32>, Option<String>) {
    let text = format!("{:?}", LockManager::new(vec!["redis://127.0.0.1:1/"]));
    let field = |name: &str| {
        text.split_once(&format!("{name}: "))
            .map(|(_, rest)| rest.split([',', ' ', '}']).next().unwrap_or("").to_owned())
    };
    (
        field("retry_count").and_then(|c| c.parse().ok()),
        field("retry_delay"),
    )
}

// ---------------------------------------------------------------- helpers

async fn connect(url: &str, response_timeout: Option<Duration>) -> Res<MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    let config = AsyncConnectionConfig::new().set_response_timeout(response_timeout);
    Ok(client
        .get_multiplexed_async_connection_with_config(&config)
        .await?)
}

/// A connection for signalling between processes: BLPOP may block for a while.
async fn signal_connection(url: &str) -> Res<MultiplexedConnection> {
    connect(url, Some(Duration::from_secs(120))).await
}

async fn rpush(con: &mut MultiplexedConnection, key: &str, value: impl ToString) -> Res<()> {
    redis::cmd("RPUSH")
        .arg(key)
        .arg(value.to_string())
        .query_async::<()>(con)
        .await?;
    Ok(())
}

/// BLPOP with a timeout in seconds; an error when nothing arrived.
async fn blpop(con: &mut MultiplexedConnection, key: &str, secs: u32) -> Res<String> {
    let got: Option<(String, String)> = redis::cmd("BLPOP")
        .arg(key)
        .arg(secs)
        .query_async(con)
        .await?;
    got.map(|(_, v)| v)
        .ok_or_else(|| format!("nothing arrived on `{key}` within {secs} s").into())
}

fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the system clock is set before 1970")
        .as_nanos() as u64
}

async fn timed<T>(f: impl Future<Output = Res<T>>) -> Res<Duration> {
    let start = Instant::now();
    f.await?;
    Ok(start.elapsed())
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The `q` quantile (0..=1) of samples, nearest rank.
fn quantile(samples: &[f64], q: f64) -> f64 {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn median(samples: &[f64]) -> f64 {
    quantile(samples, 0.5)
}

// ---------------------------------------------------------------- the scenarios

/// Everything one run measured.
#[derive(Debug, Default)]
struct Report {
    plan_quick: bool,
    iterations: usize,
    redis_version: String,
    /// The unit: median raw PING interleaved per iteration with the
    /// libraries' operations (`uncontended[0].rtt_us`).
    rtt_us: f64,
    /// Scenarios 1 and 2: interleaved per iteration, and in blocks.
    uncontended: [Uncontended; 2],
    /// `/proc/loadavg` (1 min) at start and end: other load on the machine.
    load: [Option<f64>; 2],
    handoff_samples: [usize; 2],
    handoff_p50_us: [f64; 2],
    handoff_p99_us: [f64; 2],
    /// The holder's release call alone (t0 to its return), p50.
    handoff_release_p50_us: [f64; 2],
    /// When the waiter returned, counted from when the holder's release
    /// call returned (negative: before it), p50.
    handoff_after_release_p50_us: [f64; 2],
    contend: [ContendStats; 2],
    contend_seconds: f64,
    many_pairs_per_s: [f64; 2],
    /// CPU µs per pair, `[redis-server, bench process]`, by `Lib::index`.
    many_cpu_us_per_pair: [[f64; 2]; 2],
    many_seconds: f64,
    macro_us: f64,
    by_hand_us: f64,
    macro_iterations: usize,
    rslock_defaults_seen: (Option<u32>, Option<String>),
    /// `git_state()` when the run started (the code that `cargo bench` built).
    git: (Option<String>, Option<bool>),
}

/// One run of scenarios 1 and 2; medians in µs.
#[derive(Debug, Default, Clone)]
struct Uncontended {
    /// Iterations of one operation in a row (1: interleaved per iteration).
    block: usize,
    rtt_us: f64,
    locker_ping_us: f64,
    /// Acquire + release, by `Lib::index`.
    pair_us: [f64; 2],
}

#[derive(Debug, Default, Clone)]
struct ContendStats {
    /// Critical sections finished inside the measured windows, per process.
    counts: Vec<u64>,
    /// All critical sections run, inside the windows or just after.
    executed: u64,
    /// Acquisitions that gave up (rslock: retries ran out).
    gave_up: u64,
    final_counter: u64,
    per_s: f64,
    least_share: f64,
}

impl ContendStats {
    fn lost(&self) -> i64 {
        self.final_counter as i64 - self.executed as i64
    }
}

async fn run_all(server: &RedisServer, plan: &Plan) -> Res<Report> {
    let mut report = Report {
        plan_quick: plan.quick,
        iterations: plan.iterations,
        redis_version: server.version.clone(),
        rslock_defaults_seen: rslock_defaults_seen(),
        git: git_state(),
        ..Report::default()
    };
    report.load[0] = load_average();
    let url = &server.url;

    eprintln!(
        "[1-2/6] RTT and uncontended acquire + release ({} iterations)",
        plan.iterations
    );
    uncontended(url, plan, &mut report).await?;
    eprintln!(
        "[3/6] handoff across processes ({} rounds per library)",
        plan.handoff_rounds
    );
    handoff(url, plan, &mut report).await?;
    eprintln!("[4/6] contended: {CONTEND_PROCESSES} processes");
    contended(url, plan, &mut report).await?;
    eprintln!("[5/6] many locks: {MANY_TASKS} tasks");
    many_locks(url, server.child.id(), plan, &mut report).await?;
    eprintln!(
        "[6/6] macro overhead ({} iterations)",
        plan.macro_iterations
    );
    macro_overhead(url, plan, &mut report).await?;
    report.load[1] = load_average();
    Ok(report)
}

/// CPU seconds (user + system) used so far by process `pid` ("self" for
/// this one), from /proc (Linux; assumes 100 clock ticks per second).
fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses: state is the
    // first, utime the 12th and stime the 13th.
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// The 1-minute load average (Linux), to show how busy the machine was.
fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Scenarios 1 and 2, measured twice:
/// - per iteration: each iteration runs raw PING, `Locker::ping`, and one
///   acquire + release of each library, in an order that rotates every
///   iteration (every operation follows a few hundred µs of other work);
/// - in blocks: `UNCONTENDED_BLOCK` iterations of one operation in a row
///   (a tight loop), the four operations taking turns in a rotating order.
async fn uncontended(url: &str, plan: &Plan, report: &mut Report) -> Res<()> {
    let mut raw = connect(url, Some(Duration::from_secs(5))).await?;
    let libs = Libs::new(url, None)?;
    for (run, block) in [(0, 1), (1, plan.uncontended_block)] {
        let samples = uncontended_run(&mut raw, &libs, plan, block).await?;
        report.uncontended[run] = Uncontended {
            block,
            rtt_us: median(&samples[0]),
            locker_ping_us: median(&samples[1]),
            pair_us: [median(&samples[2]), median(&samples[3])],
        };
    }
    // The unit of the other scenarios: PING sampled in the same moments as
    // the libraries' operations (on a VM the loopback RTT flips between
    // modes; interleaving per iteration samples them alike).
    report.rtt_us = report.uncontended[0].rtt_us;
    Ok(())
}

/// Samples in µs of raw PING, `Locker::ping`, lockattr's and rslock's
/// acquire + release, run `block` iterations at a time.
async fn uncontended_run(
    raw: &mut MultiplexedConnection,
    libs: &Libs,
    plan: &Plan,
    block: usize,
) -> Res<[Vec<f64>; 4]> {
    let names = ["bench:uncontended:lockattr", "bench:uncontended:rslock"];
    let mut samples: [Vec<f64>; 4] = Default::default();
    let cycles = (plan.warmup + plan.iterations).div_ceil(block);
    for cycle in 0..cycles {
        for k in 0..4 {
            let op = (cycle + k) % 4;
            for j in 0..block {
                let took = match op {
                    0 => {
                        timed(async {
                            redis::cmd("PING").query_async::<()>(raw).await?;
                            Ok(())
                        })
                        .await?
                    }
                    1 => libs.locker.ping().await?,
                    _ => {
                        let lib = Lib::BOTH[op - 2];
                        timed(async {
                            let held = libs
                                .acquire_or_fail(lib, names[lib.index()], EXPIRE)
                                .await?;
                            libs.release(held).await
                        })
                        .await?
                    }
                };
                let i = cycle * block + j;
                if (plan.warmup..plan.warmup + plan.iterations).contains(&i) {
                    samples[op].push(us(took));
                }
            }
        }
    }
    Ok(samples)
}

/// The handoff schedule both processes follow: `(library, measured)` per
/// round. Warm-up rounds of each library, then alternating blocks.
fn handoff_schedule(rounds: usize, warmup: usize, block: usize) -> Vec<(Lib, bool)> {
    let mut schedule = Vec::new();
    for lib in Lib::BOTH {
        schedule.extend(std::iter::repeat_n((lib, false), warmup));
    }
    let mut left = [rounds, rounds];
    let mut b = 0;
    while left.iter().any(|&n| n > 0) {
        let lib = Lib::BOTH[b % 2];
        let n = left[lib.index()].min(block);
        schedule.extend(std::iter::repeat_n((lib, true), n));
        left[lib.index()] -= n;
        b += 1;
    }
    schedule
}

const HANDOFF_GO: &str = "bench:handoff:go";
const HANDOFF_T0: &str = "bench:handoff:t0";
const HANDOFF_RESULTS: &str = "bench:handoff:results";

/// Scenario 3: two processes pass the lock back and forth; see `handoff_child`.
async fn handoff(url: &str, plan: &Plan, report: &mut Report) -> Res<()> {
    let mut con = signal_connection(url).await?;
    redis::cmd("DEL")
        .arg(&[HANDOFF_GO, HANDOFF_T0, HANDOFF_RESULTS])
        .query_async::<()>(&mut con)
        .await?;
    let params = (0..2).map(|idx| {
        format!(
            "idx={idx};rounds={};warmup={};block={}",
            plan.handoff_rounds, plan.handoff_warmup, plan.handoff_block
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
    for line in &lines {
        let f: Vec<&str> = line.split(',').collect();
        let [lib, measured, handoff_ns, release_ns] = f[..] else {
            return Err(format!("bad handoff result `{line}`").into());
        };
        if measured == "1" {
            let i = Lib::parse(lib)?.index();
            samples[i].push(handoff_ns.parse::<f64>()? / 1e3);
            release_samples[i].push(release_ns.parse::<f64>()? / 1e3);
        }
    }
    for lib in Lib::BOTH {
        let s = &samples[lib.index()];
        if s.len() != plan.handoff_rounds {
            return Err(format!(
                "expected {} {} handoff samples, got {}",
                plan.handoff_rounds,
                lib.name(),
                s.len()
            )
            .into());
        }
        report.handoff_samples[lib.index()] = s.len();
        report.handoff_p50_us[lib.index()] = median(s);
        report.handoff_p99_us[lib.index()] = quantile(s, 0.99);
        report.handoff_release_p50_us[lib.index()] = median(&release_samples[lib.index()]);
        let after: Vec<f64> = s
            .iter()
            .zip(&release_samples[lib.index()])
            .map(|(handoff, release)| handoff - release)
            .collect();
        report.handoff_after_release_p50_us[lib.index()] = median(&after);
    }
    Ok(())
}

/// One of the two handoff processes. Per round, the process holding the lock
/// signals the other, sleeps `HANDOFF_HOLD`, takes t0 and releases; the
/// waiter, which started acquiring on the signal, takes t1 when its acquire
/// returns and records t1 - t0. The waiter then holds the lock and is the
/// holder of the next round, so the two processes swap roles every round.
async fn handoff_child(url: &str, params: &Params) -> Res<()> {
    let idx = params.num("idx")?;
    let schedule = handoff_schedule(
        params.num("rounds")? as usize,
        params.num("warmup")? as usize,
        params.num("block")? as usize,
    );
    let libs = Libs::new(
        url,
        Some((RSLOCK_WAITER_RETRY_COUNT, RSLOCK_DEFAULT_RETRY_DELAY)),
    )?;
    let name = |lib: Lib| format!("bench:handoff:lock:{}", lib.name());
    let mut con = signal_connection(url).await?;
    // Connect both libraries before the first round.
    libs.locker.ping().await?;
    let warm = format!("bench:handoff:warm:{idx}");
    for lib in Lib::BOTH {
        let held = libs.acquire_or_fail(lib, &warm, EXPIRE).await?;
        libs.release(held).await?;
    }

    let mut held: Option<Held> = None;
    if idx == 0 {
        held = Some(
            libs.acquire_or_fail(schedule[0].0, &name(schedule[0].0), HANDOFF_EXPIRE)
                .await?,
        );
    }
    for (round, &(lib, measured)) in schedule.iter().enumerate() {
        match held.take() {
            Some(mut h) => {
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
            None => {
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
                // The handoff, and how much of it the holder's release call took.
                let line = format!(
                    "{},{},{},{}",
                    lib.name(),
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

fn contend_ready(block: usize) -> String {
    format!("bench:contend:ready:{block}")
}

fn contend_go(block: usize, idx: usize) -> String {
    format!("bench:contend:go:{block}:{idx}")
}

fn contend_counter(lib: Lib) -> String {
    format!("bench:contend:counter:{}", lib.name())
}

const CONTEND_RESULTS: &str = "bench:contend:results";

/// Scenario 4: `CONTEND_PROCESSES` processes run blocks of each library in
/// the order A B B A, all starting each block together.
async fn contended(url: &str, plan: &Plan, report: &mut Report) -> Res<()> {
    let mut con = signal_connection(url).await?;
    let block_ms = plan.contend_block.as_millis() as u64;
    let params = (0..CONTEND_PROCESSES).map(|idx| format!("idx={idx};block_ms={block_ms}"));
    let mut children = Children::spawn("contend", "contend", url, params)?;
    for block in 0..Lib::ABBA.len() {
        // Barrier: every process is ready for this block (and so done with the last one).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready: Option<usize> = redis::cmd("GET")
                .arg(contend_ready(block))
                .query_async(&mut con)
                .await?;
            if ready == Some(CONTEND_PROCESSES) {
                break;
            }
            if Instant::now() > deadline {
                return Err(
                    format!("contend processes not ready for block {block} within 60 s").into(),
                );
            }
            // A process that died would never be ready: fail fast.
            for child in &mut children.procs {
                if let Some(status) = child.try_wait()? {
                    return Err(format!("a contend process exited early ({status})").into());
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let start_at = unix_nanos() + 50_000_000;
        for idx in 0..CONTEND_PROCESSES {
            rpush(&mut con, &contend_go(block, idx), start_at).await?;
        }
    }
    children.wait(Duration::from_secs(120)).await?;

    let lines: Vec<String> = redis::cmd("LRANGE")
        .arg(CONTEND_RESULTS)
        .arg(0)
        .arg(-1)
        .query_async(&mut con)
        .await?;
    let mut stats: [ContendStats; 2] = Default::default();
    for s in &mut stats {
        s.counts = vec![0; CONTEND_PROCESSES];
    }
    for line in &lines {
        let f: Vec<&str> = line.split(',').collect();
        let [idx, lib, in_window, executed, gave_up] = f[..] else {
            return Err(format!("bad contend result `{line}`").into());
        };
        let s = &mut stats[Lib::parse(lib)?.index()];
        s.counts[idx.parse::<usize>()?] += in_window.parse::<u64>()?;
        s.executed += executed.parse::<u64>()?;
        s.gave_up += gave_up.parse::<u64>()?;
    }
    let seconds = plan.contend_block.as_secs_f64() * 2.0;
    for lib in Lib::BOTH {
        let s = &mut stats[lib.index()];
        let counter: Option<u64> = redis::cmd("GET")
            .arg(contend_counter(lib))
            .query_async(&mut con)
            .await?;
        s.final_counter = counter.unwrap_or(0);
        let total: u64 = s.counts.iter().sum();
        s.per_s = total as f64 / seconds;
        let mean = total as f64 / CONTEND_PROCESSES as f64;
        let min = s.counts.iter().copied().min().unwrap_or(0) as f64;
        s.least_share = if mean > 0.0 { min / mean } else { 0.0 };
    }
    report.contend = stats;
    report.contend_seconds = seconds;
    Ok(())
}

/// One contending process: per block, wait at the barrier, then loop
/// acquire, GET, SET + 1, release until the block's end.
async fn contend_child(url: &str, params: &Params) -> Res<()> {
    let idx = params.num("idx")? as usize;
    let block_len = Duration::from_millis(params.num("block_ms")?);
    // rslock as users get it: default retries; when they run out, the loop tries again.
    let libs = Libs::new(url, None)?;
    let mut data = connect(url, Some(Duration::from_secs(5))).await?;
    let mut con = signal_connection(url).await?;
    libs.locker.ping().await?;
    let warm = format!("bench:contend:warm:{idx}");
    for lib in Lib::BOTH {
        let held = libs.acquire_or_fail(lib, &warm, EXPIRE).await?;
        libs.release(held).await?;
    }

    for (block, lib) in Lib::ABBA.into_iter().enumerate() {
        let lock_name = format!("bench:contend:lock:{}", lib.name());
        let counter = contend_counter(lib);
        redis::cmd("INCR")
            .arg(contend_ready(block))
            .query_async::<()>(&mut con)
            .await?;
        let start_at: u64 = blpop(&mut con, &contend_go(block, idx), 60)
            .await?
            .parse()?;
        let now = unix_nanos();
        let start = Instant::now() + Duration::from_nanos(start_at.saturating_sub(now));
        tokio::time::sleep_until(start.into()).await;
        let end = start + block_len;
        let (mut in_window, mut executed, mut gave_up) = (0u64, 0u64, 0u64);
        while Instant::now() < end {
            let Some(held) = libs.acquire(lib, &lock_name, EXPIRE).await? else {
                gave_up += 1;
                continue;
            };
            let value: Option<u64> = redis::cmd("GET")
                .arg(&counter)
                .query_async(&mut data)
                .await?;
            redis::cmd("SET")
                .arg(&counter)
                .arg(value.unwrap_or(0) + 1)
                .query_async::<()>(&mut data)
                .await?;
            libs.release(held).await?;
            executed += 1;
            if Instant::now() <= end {
                in_window += 1;
            }
        }
        let line = format!("{idx},{},{in_window},{executed},{gave_up}", lib.name());
        rpush(&mut con, CONTEND_RESULTS, line).await?;
    }
    Ok(())
}

/// Scenario 5: `MANY_TASKS` tasks, each on its own lock name, through one
/// lock manager; blocks A B B A.
async fn many_locks(url: &str, redis_pid: u32, plan: &Plan, report: &mut Report) -> Res<()> {
    let libs = Libs::new(url, None)?;
    let mut pairs = [0u64; 2];
    let mut seconds = [0f64; 2];
    // CPU seconds of redis-server and of this process (its threads included).
    let mut cpu = [[0f64; 2]; 2];
    for lib in Lib::ABBA {
        let cpu_before = [cpu_seconds(&redis_pid.to_string()), cpu_seconds("self")];
        let start = Instant::now();
        let end = start + plan.many_block;
        let mut tasks = Vec::with_capacity(MANY_TASKS);
        for k in 0..MANY_TASKS {
            let libs = libs.clone();
            let name = format!("bench:many:{}:{k}", lib.name());
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < end {
                    let held = libs.acquire_or_fail(lib, &name, EXPIRE).await?;
                    libs.release(held).await?;
                    n += 1;
                }
                Res::Ok(n)
            }));
        }
        for task in tasks {
            pairs[lib.index()] += task.await??;
        }
        seconds[lib.index()] += start.elapsed().as_secs_f64();
        let cpu_after = [cpu_seconds(&redis_pid.to_string()), cpu_seconds("self")];
        for who in 0..2 {
            if let (Some(a), Some(b)) = (cpu_before[who], cpu_after[who]) {
                cpu[lib.index()][who] += b - a;
            }
        }
    }
    for lib in Lib::BOTH {
        let i = lib.index();
        report.many_pairs_per_s[i] = pairs[i] as f64 / seconds[i];
        report.many_cpu_us_per_pair[i] = cpu[i].map(|c| c * 1e6 / pairs[i].max(1) as f64);
    }
    report.many_seconds = plan.many_block.as_secs_f64() * 2.0;
    Ok(())
}

/// Scenario 6, the annotated variant.
#[lockattr::redis_lock(name = "bench:macro:{id}", locker = locker, expire = 10, acquire_time = 10)]
async fn annotated(locker: &Locker, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

/// Scenario 6, the same by hand with the builder.
async fn by_hand(locker: &Locker, id: u64) -> Result<u64, LockError> {
    let guard = locker
        .lock(format!("bench:macro:{id}"))
        .expire(Duration::from_secs(10))
        .acquire_timeout(Duration::from_secs(10))
        .acquire()
        .await?;
    let out = Ok(id);
    guard.release().await?;
    out
}

async fn macro_overhead(url: &str, plan: &Plan, report: &mut Report) -> Res<()> {
    let locker = Locker::new(url)?;
    let mut samples: [Vec<f64>; 2] = Default::default();
    for i in 0..plan.warmup + plan.macro_iterations {
        for k in 0..2 {
            let which = (i + k) % 2;
            let start = Instant::now();
            let id = if which == 0 {
                annotated(&locker, 1).await?
            } else {
                by_hand(&locker, 1).await?
            };
            let took = start.elapsed();
            assert_eq!(id, 1);
            if i >= plan.warmup {
                samples[which].push(us(took));
            }
        }
    }
    report.macro_us = median(&samples[0]);
    report.by_hand_us = median(&samples[1]);
    report.macro_iterations = plan.macro_iterations;
    Ok(())
}

// ---------------------------------------------------------------- targets and table

/// The issue's targets for lockattr, checked in one place for the table,
/// the JSON and the chart.
fn uncontended_met(u: &Uncontended) -> bool {
    u.pair_us[0] / u.rtt_us <= 2.3
}

fn handoff_p50_met(r: &Report) -> bool {
    r.handoff_p50_us[0] / r.rtt_us <= 5.0 && r.handoff_p50_us[0] < 1000.0
}

fn handoff_p99_met(r: &Report) -> bool {
    r.handoff_p99_us[0] < 3000.0
}

fn contended_ratio_met(r: &Report) -> bool {
    ratio(r.contend[0].per_s, r.contend[1].per_s) >= 1.5
}

fn contended_share_met(r: &Report) -> bool {
    r.contend[0].least_share >= 0.5
}

fn many_met(r: &Report) -> bool {
    r.many_pairs_per_s[0] >= 30_000.0
}

fn macro_met(r: &Report) -> bool {
    macro_overhead_pct(r) < 3.0
}

fn met_word(met: bool) -> &'static str {
    if met { "met" } else { "missed" }
}

/// A row of the table: one figure of both libraries (or of lockattr only).
struct Row {
    scenario: &'static str,
    metric: &'static str,
    lockattr: String,
    rslock: String,
    ratio: String,
    target: &'static str,
    /// None: no target (information).
    met: Option<bool>,
}

fn fmt_num(x: f64, decimals: usize) -> String {
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

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { f64::NAN } else { a / b }
}

fn rows(r: &Report) -> Vec<Row> {
    let rtt = r.rtt_us;
    let [inter, tight] = [&r.uncontended[0], &r.uncontended[1]];
    let [h50l, h50r] = r.handoff_p50_us;
    let [h99l, h99r] = r.handoff_p99_us;
    let [cl, cr] = [&r.contend[0], &r.contend[1]];
    let [ml, mr] = r.many_pairs_per_s;
    let overhead = macro_overhead_pct(r);
    let none = String::new;
    let in_rtt = |x: f64, unit: f64| format!("{} ({})", fmt_num(x, 1), fmt_num(x / unit, 2));
    let uncontended = |u: &Uncontended, metric: &'static str, checked: bool| Row {
        scenario: "2 uncontended",
        metric,
        lockattr: in_rtt(u.pair_us[0], u.rtt_us),
        rslock: in_rtt(u.pair_us[1], u.rtt_us),
        ratio: fmt_num(ratio(u.pair_us[0], u.pair_us[1]), 2),
        target: if checked {
            "<= 2.3 RTT"
        } else {
            "(information)"
        },
        met: checked.then(|| uncontended_met(u)),
    };
    vec![
        Row {
            scenario: "1 RTT",
            metric: "raw PING, interleaved, µs",
            lockattr: fmt_num(rtt, 1),
            rslock: none(),
            ratio: none(),
            target: "(the unit)",
            met: None,
        },
        Row {
            scenario: "1 RTT",
            metric: "Locker::ping, µs (RTT)",
            lockattr: in_rtt(inter.locker_ping_us, inter.rtt_us),
            rslock: none(),
            ratio: none(),
            target: "(information)",
            met: None,
        },
        uncontended(inter, "acq+rel, interleaved, µs (RTT)", true),
        Row {
            scenario: "2 tight loop",
            metric: "raw PING, µs",
            lockattr: fmt_num(tight.rtt_us, 1),
            rslock: none(),
            ratio: none(),
            target: "(information)",
            met: None,
        },
        Row {
            scenario: "2 tight loop",
            ..uncontended(tight, "acq+rel, µs (RTT)", false)
        },
        Row {
            scenario: "3 handoff",
            metric: "p50, µs (RTT)",
            lockattr: format!("{} ({})", fmt_num(h50l, 0), fmt_num(h50l / rtt, 1)),
            rslock: format!("{} ({})", fmt_num(h50r, 0), fmt_num(h50r / rtt, 1)),
            ratio: fmt_num(ratio(h50l, h50r), 3),
            target: "<= 5 RTT and < 1 ms",
            met: Some(handoff_p50_met(r)),
        },
        Row {
            scenario: "3 handoff",
            metric: "p99, µs",
            lockattr: fmt_num(h99l, 0),
            rslock: fmt_num(h99r, 0),
            ratio: fmt_num(ratio(h99l, h99r), 3),
            target: "< 3 ms",
            met: Some(handoff_p99_met(r)),
        },
        Row {
            scenario: "3 handoff",
            metric: "  holder's release call, p50, µs",
            lockattr: in_rtt(r.handoff_release_p50_us[0], rtt),
            rslock: in_rtt(r.handoff_release_p50_us[1], rtt),
            ratio: none(),
            target: "(information)",
            met: None,
        },
        Row {
            scenario: "3 handoff",
            metric: "  waiter back after it, p50, µs",
            lockattr: in_rtt(r.handoff_after_release_p50_us[0], rtt),
            rslock: in_rtt(r.handoff_after_release_p50_us[1], rtt),
            ratio: none(),
            target: "(information)",
            met: None,
        },
        Row {
            scenario: "4 contended",
            metric: "critical sections/s",
            lockattr: fmt_num(cl.per_s, 0),
            rslock: fmt_num(cr.per_s, 0),
            ratio: fmt_num(ratio(cl.per_s, cr.per_s), 2),
            target: ">= 1.5x rslock",
            met: Some(contended_ratio_met(r)),
        },
        Row {
            scenario: "4 contended",
            metric: "lost updates",
            lockattr: cl.lost().to_string(),
            rslock: cr.lost().to_string(),
            ratio: none(),
            target: "0",
            met: Some(cl.lost() == 0),
        },
        Row {
            scenario: "4 contended",
            metric: "least served share",
            lockattr: fmt_num(cl.least_share, 2),
            rslock: fmt_num(cr.least_share, 2),
            ratio: none(),
            target: ">= 0.5",
            met: Some(contended_share_met(r)),
        },
        Row {
            scenario: "5 many locks",
            metric: "acquire+release pairs/s",
            lockattr: fmt_num(ml, 0),
            rslock: fmt_num(mr, 0),
            ratio: fmt_num(ratio(ml, mr), 2),
            target: ">= 30,000",
            met: Some(many_met(r)),
        },
        Row {
            scenario: "5 many locks",
            metric: "  CPU µs/pair: redis, bench",
            lockattr: cpu_pair(r.many_cpu_us_per_pair[0]),
            rslock: cpu_pair(r.many_cpu_us_per_pair[1]),
            ratio: none(),
            target: "(information)",
            met: None,
        },
        Row {
            scenario: "6 macro",
            metric: "overhead vs builder, %",
            lockattr: format!(
                "{} ({} vs {} µs)",
                fmt_num(overhead, 1),
                fmt_num(r.macro_us, 1),
                fmt_num(r.by_hand_us, 1)
            ),
            rslock: none(),
            ratio: none(),
            target: "< 3%",
            met: Some(macro_met(r)),
        },
    ]
}

fn cpu_pair([redis, bench]: [f64; 2]) -> String {
    format!("{}, {}", fmt_num(redis, 1), fmt_num(bench, 1))
}

fn macro_overhead_pct(r: &Report) -> f64 {
    (r.macro_us / r.by_hand_us - 1.0) * 100.0
}

fn print_table(r: &Report) {
    let rows = rows(r);
    let header = [
        "scenario",
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
                row.target.to_owned(),
                match row.met {
                    Some(true) => "met".into(),
                    Some(false) => "MISSED".into(),
                    None => String::new(),
                },
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
    println!(
        "lockattr {} vs rslock 0.10 (1 node); redis-server {}; {} cores; {}{}",
        env!("CARGO_PKG_VERSION"),
        r.redis_version,
        cores(),
        RUNTIME,
        if r.plan_quick {
            "; QUICK RUN (small samples)"
        } else {
            ""
        }
    );
    println!(
        "rslock retries: defaults {} attempts / random 0..{} ms sleep (uncontended, contended, many); handoff waiter {} attempts / same delay",
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
        "contended, critical sections per process over {} s: lockattr {:?}; rslock {:?} (rslock gave up {} times, retried in the loop)",
        r.contend_seconds, cl.counts, cr.counts, cr.gave_up
    );
    println!(
        "handoff samples: {} per library; uncontended and macro: {} iterations per figure, medians; \
         tight loop = {} iterations of one operation in a row",
        r.handoff_samples[0], r.iterations, r.uncontended[1].block
    );
    let load = |l: Option<f64>| l.map_or("?".into(), |l| format!("{l:.2}"));
    println!(
        "load average (1 min) at start {} and end {} on {} cores: other work on the machine skews the figures",
        load(r.load[0]),
        load(r.load[1]),
        cores()
    );
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_owned())
}

/// `(HEAD commit, whether the library's sources differ from it)`, if git is there.
fn git_state() -> (Option<String>, Option<bool>) {
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
    (head, dirty)
}

// ---------------------------------------------------------------- JSON

/// A JSON value; enough for the results file, without a dependency.
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(&'static str, Json)>),
}

impl Json {
    fn num(x: f64) -> Json {
        if x.is_finite() {
            Json::Num(x)
        } else {
            Json::Null
        }
    }

    fn str(s: impl Into<String>) -> Json {
        Json::Str(s.into())
    }

    fn render(&self) -> String {
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

fn target_json(text: &str, met: bool) -> Json {
    Json::Obj(vec![("text", Json::str(text)), ("met", Json::Bool(met))])
}

fn to_json(r: &Report) -> Json {
    let rtt = r.rtt_us;
    let (head, dirty) = r.git.clone();
    let pair = |l: f64, rs: f64, key: &'static str| {
        Json::Obj(vec![
            (
                "lockattr",
                Json::Obj(vec![(key, Json::num(l)), ("rtt", Json::num(l / rtt))]),
            ),
            (
                "rslock",
                Json::Obj(vec![(key, Json::num(rs)), ("rtt", Json::num(rs / rtt))]),
            ),
            ("ratio_lockattr_over_rslock", Json::num(ratio(l, rs))),
        ])
    };
    let contend = |s: &ContendStats| {
        Json::Obj(vec![
            ("critical_sections_per_s", Json::num(s.per_s)),
            ("lost_updates", Json::num(s.lost() as f64)),
            ("least_served_share", Json::num(s.least_share)),
            (
                "per_process",
                Json::Arr(s.counts.iter().map(|&c| Json::num(c as f64)).collect()),
            ),
            ("executed", Json::num(s.executed as f64)),
            ("final_counter", Json::num(s.final_counter as f64)),
            ("acquisitions_given_up", Json::num(s.gave_up as f64)),
        ])
    };
    let [cl, cr] = [&r.contend[0], &r.contend[1]];
    let overhead = macro_overhead_pct(r);
    let mut handoff = match pair(r.handoff_p50_us[0], r.handoff_p50_us[1], "p50_us") {
        Json::Obj(f) => f,
        _ => unreachable!("pair() makes an object"),
    };
    handoff.insert(
        0,
        (
            "samples_per_library",
            Json::num(r.handoff_samples[0] as f64),
        ),
    );
    handoff.push((
        "p99",
        pair(r.handoff_p99_us[0], r.handoff_p99_us[1], "p99_us"),
    ));
    handoff.push((
        "holder_release_call",
        pair(
            r.handoff_release_p50_us[0],
            r.handoff_release_p50_us[1],
            "p50_us",
        ),
    ));
    handoff.push((
        "waiter_returned_after_release_call_returned",
        pair(
            r.handoff_after_release_p50_us[0],
            r.handoff_after_release_p50_us[1],
            "p50_us",
        ),
    ));
    handoff.push((
        "targets",
        Json::Arr(vec![
            target_json("p50 <= 5 RTT and < 1 ms", handoff_p50_met(r)),
            target_json("p99 < 3 ms", handoff_p99_met(r)),
        ]),
    ));
    let uncontended_run = |u: &Uncontended, checked: bool| {
        let lib = |i: usize| {
            Json::Obj(vec![
                ("median_us", Json::num(u.pair_us[i])),
                ("rtt", Json::num(u.pair_us[i] / u.rtt_us)),
            ])
        };
        Json::Obj(vec![
            ("iterations_in_a_row", Json::num(u.block as f64)),
            ("raw_ping_median_us", Json::num(u.rtt_us)),
            ("locker_ping_median_us", Json::num(u.locker_ping_us)),
            ("lockattr", lib(0)),
            ("rslock", lib(1)),
            (
                "ratio_lockattr_over_rslock",
                Json::num(ratio(u.pair_us[0], u.pair_us[1])),
            ),
            if checked {
                ("target", target_json("<= 2.3 RTT", uncontended_met(u)))
            } else {
                ("target", Json::Null)
            },
        ])
    };
    let uncontended = vec![
        ("iterations", Json::num(r.iterations as f64)),
        (
            "interleaved_per_iteration",
            uncontended_run(&r.uncontended[0], true),
        ),
        ("tight_loop", uncontended_run(&r.uncontended[1], false)),
    ];
    let (seen_count, seen_delay) = &r.rslock_defaults_seen;

    Json::Obj(vec![
        (
            "benchmark",
            Json::str("lockattr vs rslock, benches/lockattr.rs"),
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
                ("start", r.load[0].map_or(Json::Null, Json::num)),
                ("end", r.load[1].map_or(Json::Null, Json::num)),
            ]),
        ),
        (
            "code",
            Json::Obj(vec![
                ("lockattr_version", Json::str(env!("CARGO_PKG_VERSION"))),
                ("git_head", head.map_or(Json::Null, Json::Str)),
                (
                    "library_sources_differ_from_head",
                    dirty.map_or(Json::Null, Json::Bool),
                ),
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
                                "uncontended, contended (a give-up is retried in the loop and not counted), many locks",
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
                ("uncontended_acquire_release", Json::Obj(uncontended)),
                ("handoff_across_processes", Json::Obj(handoff)),
                (
                    "contended",
                    Json::Obj(vec![
                        ("processes", Json::num(CONTEND_PROCESSES as f64)),
                        ("seconds_per_library", Json::num(r.contend_seconds)),
                        ("lockattr", contend(cl)),
                        ("rslock", contend(cr)),
                        (
                            "ratio_lockattr_over_rslock",
                            Json::num(ratio(cl.per_s, cr.per_s)),
                        ),
                        (
                            "targets",
                            Json::Arr(vec![
                                target_json(">= 1.5x rslock", contended_ratio_met(r)),
                                target_json("0 lost updates", cl.lost() == 0),
                                target_json("least served share >= 0.5", contended_share_met(r)),
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
                                (
                                    "lockattr_redis_server",
                                    Json::num(r.many_cpu_us_per_pair[0][0]),
                                ),
                                (
                                    "lockattr_bench_process",
                                    Json::num(r.many_cpu_us_per_pair[0][1]),
                                ),
                                (
                                    "rslock_redis_server",
                                    Json::num(r.many_cpu_us_per_pair[1][0]),
                                ),
                                (
                                    "rslock_bench_process",
                                    Json::num(r.many_cpu_us_per_pair[1][1]),
                                ),
                            ]),
                        ),
                        (
                            "ratio_lockattr_over_rslock",
                            Json::num(ratio(r.many_pairs_per_s[0], r.many_pairs_per_s[1])),
                        ),
                        ("target", target_json(">= 30,000 pairs/s", many_met(r))),
                    ]),
                ),
                (
                    "macro_overhead",
                    Json::Obj(vec![
                        ("iterations", Json::num(r.macro_iterations as f64)),
                        ("annotated_median_us", Json::num(r.macro_us)),
                        ("builder_median_us", Json::num(r.by_hand_us)),
                        ("overhead_pct", Json::num(overhead)),
                        ("target", target_json("< 3%", macro_met(r))),
                    ]),
                ),
            ]),
        ),
    ])
}

// ---------------------------------------------------------------- SVG chart

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A grouped horizontal bar chart: per scenario a lockattr and an rslock
/// bar, each group scaled to its own larger value, with the values written
/// next to the bars.
fn chart_svg(r: &Report) -> String {
    let rtt = r.rtt_us;
    let [cl, cr] = [&r.contend[0], &r.contend[1]];
    let ms = |us: f64| {
        if us >= 1000.0 {
            format!("{} ms", fmt_num(us / 1000.0, 1))
        } else {
            format!("{} µs", fmt_num(us, 0))
        }
    };
    let uncontended = |u: &Uncontended, title: &str, checked: bool| {
        (
            if checked {
                format!(
                    "{title}; target ≤ 2.3 RTT: {}",
                    met_word(uncontended_met(u))
                )
            } else {
                title.to_owned()
            },
            u.pair_us.map(|x| x / u.rtt_us),
            u.pair_us
                .map(|x| format!("{} RTT ({} µs)", fmt_num(x / u.rtt_us, 2), fmt_num(x, 0))),
        )
    };
    // (title, [value of lockattr, rslock], [label of lockattr, rslock])
    let groups: Vec<(String, [f64; 2], [String; 2])> = vec![
        uncontended(
            &r.uncontended[0],
            "Uncontended acquire + release, RTT (lower is better)",
            true,
        ),
        uncontended(
            &r.uncontended[1],
            "Uncontended, tight loop of one operation, RTT of that loop's PING (information)",
            false,
        ),
        (
            format!(
                "Handoff across processes p50, RTT (lower is better); target ≤ 5 RTT and < 1 ms: {}",
                met_word(handoff_p50_met(r))
            ),
            [r.handoff_p50_us[0] / rtt, r.handoff_p50_us[1] / rtt],
            [0, 1].map(|i| {
                format!(
                    "{} RTT ({})",
                    fmt_num(r.handoff_p50_us[i] / rtt, 1),
                    ms(r.handoff_p50_us[i])
                )
            }),
        ),
        (
            format!(
                "Handoff across processes p99, RTT (lower is better); target < 3 ms: {}",
                met_word(handoff_p99_met(r))
            ),
            [r.handoff_p99_us[0] / rtt, r.handoff_p99_us[1] / rtt],
            [0, 1].map(|i| {
                format!(
                    "{} RTT ({})",
                    fmt_num(r.handoff_p99_us[i] / rtt, 1),
                    ms(r.handoff_p99_us[i])
                )
            }),
        ),
        (
            format!(
                "Contended, {CONTEND_PROCESSES} processes: critical sections/s (higher is better); \
                 target ≥ 1.5× rslock: {}, least served ≥ 0.5: {}",
                met_word(contended_ratio_met(r)),
                met_word(contended_share_met(r))
            ),
            [cl.per_s, cr.per_s],
            [cl, cr].map(|s| {
                format!(
                    "{} /s, least served {} of mean",
                    fmt_num(s.per_s, 0),
                    fmt_num(s.least_share, 2)
                )
            }),
        ),
        (
            format!(
                "{MANY_TASKS} tasks on distinct locks: pairs/s (higher is better); target ≥ 30,000: {}",
                met_word(many_met(r))
            ),
            r.many_pairs_per_s,
            r.many_pairs_per_s.map(|x| format!("{} /s", fmt_num(x, 0))),
        ),
    ];

    let width = 960.0;
    let left = 110.0;
    let bar_max = 480.0;
    let bar_h = 22.0;
    let group_h = 24.0 + 2.0 * (bar_h + 6.0) + 18.0;
    let top = 92.0;
    let height = top + group_h * groups.len() as f64 + 40.0;
    let colors = ["#2563eb", "#ea580c"];
    let mut s = String::new();
    let _ = writeln!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="13">"##
    );
    let _ = writeln!(s, r##"<rect width="100%" height="100%" fill="#ffffff"/>"##);
    let _ = writeln!(
        s,
        r##"<text x="20" y="30" font-size="18" font-weight="bold" fill="#111827">lockattr vs rslock 0.10 on one local redis-server</text>"##
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
    let overhead = macro_overhead_pct(r);
    let foot = format!(
        "Contended lost updates: lockattr {}, rslock {}. #[redis_lock] vs the builder by hand: {}% ({} vs {} µs; target < 3%: {}).",
        cl.lost(),
        cr.lost(),
        fmt_num(overhead, 1),
        fmt_num(r.macro_us, 1),
        fmt_num(r.by_hand_us, 1),
        met_word(macro_met(r))
    );
    let _ = writeln!(
        s,
        r##"<text x="20" y="{}" fill="#4b5563">{}</text>"##,
        height - 18.0,
        xml_escape(&foot)
    );
    s.push_str("</svg>\n");
    s
}
