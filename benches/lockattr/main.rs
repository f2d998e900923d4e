//! Benchmark: lockattr against rslock 0.10 on private, throwaway redis-servers:
//! one server, Redlock on five servers, a three-master Redis Cluster, and a
//! master with one replica.
//!
//! Run with `cargo bench --bench lockattr` (about two and a half minutes), or
//! `cargo bench --bench lockattr -- --quick` for a smoke run of well under a
//! minute. `-- --readme` only rewrites the benchmark table of
//! `docs/performance.md` from `docs/bench/results.json`.
//!
//! The program starts its own `redis-server`s on free loopback ports (never
//! 6379) with temporary directories, and stops them on every way out: a
//! return, an error, a panic, Ctrl-C or SIGTERM. Multi-process scenarios
//! re-execute this binary with the `LOCKATTR_BENCH_ROLE` environment
//! variable naming the role. Every process runs one tokio `current_thread`
//! runtime and does its work in a task of it, the same for both libraries.
//!
//! Rows (see `benches/README.md` for definitions and targets), each measured
//! for both libraries in the same run, interleaved per iteration or in
//! alternating blocks so drift cancels:
//! 1. RTT: median raw redis-rs PING, sampled in the same loop as row 2; the
//!    unit of the other figures.
//! 2. Uncontended acquire + release, and a bare redis-rs client sending
//!    the same commands as lockattr's (captured with MONITOR).
//! 3. Hand-over across processes (and a cold PING, for information).
//! 4. 8 processes contending on one lock.
//! 5. 64 tasks of one process contending on one lock.
//! 6. 256 tasks on distinct locks.
//! 7. Macro overhead: `#[redis_lock]` against the same code by hand.
//! 8. Redlock on 5 servers: acquire + release and hand-over.
//! 9. Redis Cluster, 3 masters: acquire + release, hand-over and pub/sub
//!    messages per release (lockattr only).
//! 10. Lock kinds (lockattr only): a set of two names, a read, a write and a
//!     semaphore permit, against a plain lock and two locks in a row.
//! 11. Readers sharing: 16 tasks holding the read side against the write
//!     side (lockattr only).
//! 12. Read-write lock: Redis CPU per call (`INFO commandstats`) of a read
//!     and of a writer's try with 1 reader and with 1,000 readers holding
//!     (lockattr only).
//! 13. Replicas: `min_replicas(1)` against `min_replicas(0)` on a master
//!     with one replica, acquire + release and hand-over across processes
//!     (lockattr only).
//! 14. Rows 2 and 3 through a TCP delay proxy at about 0.2 ms and 1 ms RTT
//!     (the hand-over lockattr only).
//!
//! Output: a table on stdout, `docs/bench/results.json`,
//! `docs/bench/chart.svg` and the table of `docs/performance.md` (with
//! `--quick`: JSON and chart to a temporary directory and no table, unless
//! `--out DIR` says where).

mod chart;
mod children;
mod delay;
mod json;
mod peers;
#[path = "../../tests/support/proxy.rs"]
mod proxy;
mod readme;
mod report;
mod scenarios;
mod servers;
mod targets;
mod util;

use std::error::Error;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use scenarios::Report;
use servers::Servers;

/// The error type of the whole benchmark.
pub type Res<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Lease of every lock the benchmark takes, and lockattr's acquire timeout
/// (generous: a bench lock never legitimately waits that long).
pub const EXPIRE: Duration = Duration::from_secs(10);
/// lockattr's acquire timeout everywhere.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// Processes of the contended row.
pub const CONTEND_PROCESSES: usize = 8;
/// Tasks of the one-process contended row.
pub const ONE_PROCESS_TASKS: usize = 64;
/// Tasks of the many-locks row.
pub const MANY_TASKS: usize = 256;

/// How every process runs its work.
pub const RUNTIME: &str =
    "tokio current_thread, one per process, work in a task; same for both libraries";

/// Sizes of one run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// A smoke run with small samples.
    pub quick: bool,
    /// Rows 1, 2: measured iterations and warm-up iterations.
    pub iterations: usize,
    /// Warm-up iterations of rows 1, 2, 7.
    pub warmup: usize,
    /// Row 2's second run: iterations of one operation in a row.
    pub uncontended_block: usize,
    /// Row 3: measured rounds per library.
    pub handoff_rounds: usize,
    /// Row 3: warm-up rounds per library.
    pub handoff_warmup: usize,
    /// Row 3: rounds of one library in a row.
    pub handoff_block: usize,
    /// Rows 4, 5: one block's length; blocks go lockattr, rslock, rslock, lockattr.
    pub contend_block: Duration,
    /// Row 6: one block's length, same ABBA order.
    pub many_block: Duration,
    /// Row 7: measured iterations (each runs both variants).
    pub macro_iterations: usize,
    /// Rows 8, 9: measured iterations of acquire + release.
    pub deploy_iterations: usize,
    /// Rows 8, 9: measured hand-over rounds per library.
    pub deploy_handoff_rounds: usize,
    /// Row 12: read calls, and writer's tries, per number of readers
    /// holding (in cycles of blocks A B B A of `rw_cost::BLOCK` calls).
    pub rw_cost_calls: usize,
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
            deploy_iterations: 1000,
            deploy_handoff_rounds: 100,
            rw_cost_calls: 2000,
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
            contend_block: Duration::from_millis(400),
            many_block: Duration::from_millis(250),
            macro_iterations: 300,
            deploy_iterations: 100,
            deploy_handoff_rounds: 10,
            rw_cost_calls: 200,
        }
    }
}

fn main() {
    let outcome = match std::env::var(children::ROLE_ENV) {
        Ok(role) => child_main(&role),
        Err(_) => coordinator_main(),
    };
    if let Err(e) = outcome {
        let who = std::env::var(children::ROLE_ENV).unwrap_or_else(|_| "coordinator".into());
        eprintln!("lockattr bench ({who}): error: {e}");
        std::process::exit(1);
    }
}

/// Runs `work` as a task of a fresh current-thread runtime: the way service
/// code runs (in a task, not as `block_on`'s root future), for both
/// libraries. lockattr then uses a connection of this runtime, as rslock
/// and the raw PING do; a root future of a current-thread `block_on` would
/// go through lockattr's I/O thread instead.
pub fn run_in_task<T: 'static>(work: impl Future<Output = T> + 'static) -> Res<T> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    Ok(local.block_on(&rt, async move { tokio::task::spawn_local(work).await })?)
}

const USAGE: &str = "usage: cargo bench --bench lockattr -- [--quick] [--out DIR] [--readme [JSON]]
  --quick          well under a minute instead of about two and a half minutes (smoke test)
  --out DIR        where results.json and chart.svg go (default docs/bench, with
                   --quick a temporary directory)
  --readme [JSON]  measure nothing: rewrite the benchmark table of docs/performance.md
                   from JSON (default docs/bench/results.json)";

fn coordinator_main() -> Res<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut plan = Plan::full();
    let mut out: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1).peekable();
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
            "--readme" => {
                let json = match args.next_if(|a| !a.starts_with("--")) {
                    Some(path) => PathBuf::from(path),
                    None => root.join("docs/bench/results.json"),
                };
                let page = root.join("docs/performance.md");
                readme::update_table(&json, &page)?;
                println!(
                    "rewrote the table in {} from {}",
                    page.display(),
                    json.display()
                );
                return Ok(());
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                return Ok(());
            }
            other => return Err(format!("unknown argument `{other}` (try --help)").into()),
        }
    }
    let to_docs = out.is_none() && !plan.quick;
    let out = out.unwrap_or_else(|| {
        if plan.quick {
            std::env::temp_dir().join("lockattr-bench-quick")
        } else {
            root.join("docs/bench")
        }
    });

    servers::clean_up_on_signals();
    let servers = Servers::start()?;
    println!(
        "lockattr bench: redis-server {} at {}, Redlock on {} more, a Cluster of {} masters, a master at {} with a replica ({}; {})",
        servers.single.version,
        servers.single.url,
        servers.redlock.len(),
        servers.cluster.len(),
        servers.replicated.master.url,
        if plan.quick { "quick run" } else { "full run" },
        RUNTIME
    );
    let servers = std::sync::Arc::new(servers);
    let report = run_in_task({
        let servers = servers.clone();
        async move { run_all(&servers, &plan).await }
    })??;
    drop(servers);

    report::print_table(&report);
    std::fs::create_dir_all(&out)
        .map_err(|e| format!("cannot create output directory {}: {e}", out.display()))?;
    let json_path = out.join("results.json");
    let svg_path = out.join("chart.svg");
    std::fs::write(&json_path, json::to_json(&report).render())
        .map_err(|e| format!("cannot write {}: {e}", json_path.display()))?;
    std::fs::write(&svg_path, chart::chart_svg(&report))
        .map_err(|e| format!("cannot write {}: {e}", svg_path.display()))?;
    println!("\nwrote {} and {}", json_path.display(), svg_path.display());
    if to_docs {
        let page = root.join("docs/performance.md");
        readme::update_table(&json_path, &page)?;
        println!("rewrote the table in {}", page.display());
    }
    Ok(())
}

/// Every row, in order.
async fn run_all(servers: &Servers, plan: &Plan) -> Res<Report> {
    let mut report = Report {
        plan_quick: plan.quick,
        iterations: plan.iterations,
        redis_version: servers.single.version.clone(),
        rslock_defaults_seen: peers::rslock_defaults_seen(),
        git: util::git_state(),
        ..Report::default()
    };
    report.load[0] = util::load_average();
    let url = &servers.single.url;

    eprintln!(
        "[1-2/14] RTT and uncontended acquire + release ({} iterations)",
        plan.iterations
    );
    scenarios::uncontended::uncontended(url, plan, &mut report).await?;
    eprintln!(
        "[3/14] hand-over across processes ({} rounds per library)",
        plan.handoff_rounds
    );
    scenarios::handoff::single(url, plan, &mut report).await?;
    eprintln!("[4/14] contended: {CONTEND_PROCESSES} processes");
    scenarios::contended::processes(url, plan, &mut report).await?;
    eprintln!("[5/14] contended: {ONE_PROCESS_TASKS} tasks in one process");
    scenarios::contended::tasks(url, plan, &mut report).await?;
    eprintln!("[6/14] many locks: {MANY_TASKS} tasks");
    scenarios::many::many_locks(url, servers.single.pid(), plan, &mut report).await?;
    eprintln!(
        "[7/14] macro overhead ({} iterations)",
        plan.macro_iterations
    );
    scenarios::many::macro_overhead(url, plan, &mut report).await?;
    eprintln!("[8/14] Redlock on {} servers", servers.redlock.len());
    scenarios::deployments::redlock(servers, plan, &mut report).await?;
    eprintln!("[9/14] Redis Cluster, {} masters", servers.cluster.len());
    scenarios::deployments::cluster(servers, plan, &mut report).await?;
    eprintln!(
        "[10-11/14] lock kinds ({} iterations) and {} readers sharing",
        plan.iterations,
        scenarios::kinds::READERS
    );
    scenarios::kinds::kinds(url, plan, &mut report).await?;
    eprintln!(
        "[12/14] read-write lock: Redis CPU per call with {} and {} readers holding ({} calls each)",
        scenarios::rw_cost::HELD[0],
        scenarios::rw_cost::HELD[1],
        plan.rw_cost_calls
    );
    scenarios::rw_cost::rw_cost(url, plan, &mut report).await?;
    eprintln!(
        "[13/14] replicas: min_replicas(1) against min_replicas(0) on a master with one replica ({} iterations, {} hand-over rounds each)",
        plan.iterations, plan.handoff_rounds
    );
    scenarios::replicas::replicas(servers, plan, &mut report).await?;
    eprintln!(
        "[14/14] rows 2 and 3 through a delay proxy at about {} µs RTT ({} iterations, {} hand-over rounds each)",
        scenarios::rtt::TARGETS_US
            .map(|t| t.to_string())
            .join(" and "),
        plan.deploy_iterations,
        plan.deploy_handoff_rounds
    );
    let bare = report.bare.clone().ok_or("row 2 made no bare client")?;
    report.at_rtt = scenarios::rtt::at_rtt(url, &bare, plan).await?;
    report.load[1] = util::load_average();
    Ok(report)
}

/// The entry point of a child process.
pub fn child_main(role: &str) -> Res<()> {
    let url = std::env::var(children::URL_ENV)
        .map_err(|_| format!("{} is not set", children::URL_ENV))?;
    let params = children::Params::from_env()?;
    match role {
        "handoff" => run_in_task(async move { scenarios::handoff::child(&url, &params).await })?,
        "contend" => run_in_task(async move { scenarios::contended::child(&url, &params).await })?,
        other => Err(format!("unknown role `{other}`").into()),
    }
}
