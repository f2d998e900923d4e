//! A seeded torture run on real redis-servers: mutual exclusion, fencing
//! and liveness under random schedules and faults, instead of hand-picked
//! ones.
//!
//! The run is a sequence of rounds (2 to 5 s each). A round picks a
//! deployment (one server behind a fault proxy; a 3-master Redis Cluster,
//! reached directly; a 3-node Redlock, each node behind a proxy), a kind
//! (lock, read-write lock, semaphore, lock set; read-write locks and
//! semaphores are refused on a Redlock by design, so they do not run
//! there), fresh names, tasks of this process (async tasks on one or two
//! Lockers, blocking tasks on threads) and of 0 to 3 worker processes (this
//! test binary again, as `torture_worker`, one Locker each), acquire times
//! (1–12 ms, 20–300 ms or 0.5–3 s), critical sections (under 2 ms or
//! 20 ms; a few of 0.3–2.5 s), leases (short ones, renewed or not, some
//! outlived on purpose), cancellations (an acquire future dropped by
//! `tokio::time::timeout`), the `#[redis_lock]` attribute (sync and async)
//! or the builders (`acquire` and `acquire_blocking`), and faults at seeded
//! times: `DEBUG SLEEP` stalls of a node (50–300 ms), every connection
//! through a node's proxy cut, a node restarted empty, a worker process
//! SIGKILLed whatever it holds or waits for. The Cluster gets stalls and
//! killed workers only (no proxy in front of it, and a node restarted
//! empty would leave it).
//!
//! Every third round is a "hot" lock round (one server or the Cluster):
//! one Locker, 12 to 28 async tasks and a few blocking ones on one name,
//! sometimes a worker process on it too, acquire times of 1–12 ms,
//! sections under 2 ms, stalls; the shape that makes a process-local wait
//! queue hand a lock to a waiter whose acquire time just ended. The other
//! rounds cover each deployment and kind first (every kind on one server;
//! locks and sets on the Cluster and the Redlock), in a seeded order, and
//! their faults include a cut, a restart and a killed worker at least
//! once (where the plan has a round that is not hot and where the fault
//! applies: one server or the Redlock; a round with worker processes);
//! about 30% of them are hot too.
//!
//! # Oracles (outside Redis)
//!
//! - **Exclusion.** A ledger records every critical section: `enter` after
//!   the guard was returned, `exit` before the release starts, so each
//!   recorded section lies inside the real hold. Worker processes send
//!   their events over loopback TCP to the parent and wait for its answer,
//!   so the ledger's order is the real one. An overlap is a section that
//!   enters while another of the same name is inside (read-write: a writer
//!   with anyone; a semaphore of N: more than N inside). It is excused only
//!   when the earlier guard reported itself lost (`is_lost()`, read at its
//!   exit, or earlier: a section reads it every 10 ms and reports a loss at
//!   once), or, on one server, when a restart (which forgets every lock)
//!   came between the two entries. Sections of a killed worker end when it
//!   is reaped, lost if they had reported it.
//! - **Fencing.** A model store per name accepts a write only with a token
//!   at least the largest it accepted. Each section of a lock, a writer
//!   or a set member writes at its entry and at its exit. A violation is a
//!   write it accepted from a guard not reported lost while a larger token
//!   had already been handed out, or a write it refused from a guard not
//!   reported lost (restarts excused as above).
//! - **Liveness.** A waiter that waited its whole acquire time while its
//!   names were free (per the ledger) for longer than
//!   `ledger::LIVENESS_BOUND` (1.5 s; 2.5 s for sets, which also retry once
//!   a second) is a miss, unless the wait overlaps a fault's window (the
//!   fault plus the longest lease and acquire time of the round).
//! - **Keyspace.** Every server is audited when it stops (`support::audit`):
//!   a key left without a time to live fails the test.
//!
//! The test fails on any overlap, fencing violation or liveness miss, and
//! names the seed in its message. It always prints one summary line (`torture
//! summary: ...`) with the figures.
//!
//! # Seeds
//!
//! `LOCKATTR_TORTURE_SEED` (a u64; random when unset) and
//! `LOCKATTR_TORTURE_SECS` together fix the plan (a failure names both):
//! the rounds, their task counts, kinds, acquire times, leases, and the
//! faults and their times, and each task's stream of choices. It does not fix the
//! OS schedule or the servers' timing, so a replay runs the same plan but
//! not the same interleaving; a failure found once is usually found again
//! by its seed, not always. `LOCKATTR_TORTURE_SECS` is the time of the
//! rounds (default 75 s: the whole test, server start-up included, takes
//! about 90 s). `LOCKATTR_TORTURE_PLAN_ONLY=1` prints the plan of a seed
//! and runs nothing; `LOCKATTR_TORTURE_ROUNDS=3,7` runs only those rounds
//! of it (to replay the round a failure names).
//!
//! # Not covered
//!
//! Sentinel and TLS deployments; cut connections and restarts on the
//! Cluster; cancelling a body mid-way (only acquire futures are dropped);
//! reentrant calls, `hold_at_least`, `renew_for` and `extend`; clock jumps;
//! a paused holder process (stalls are of servers). Liveness is checked
//! only for waits longer than its bound, so only rounds with long acquire
//! times check it.
//!
//! # Commands
//!
//! It is `#[ignore]`d, so that `cargo test --workspace` does not run it;
//! `.ci/run` runs it once, on its own:
//!
//! ```text
//! cargo test --test torture -- --ignored --nocapture                              # the CI run
//! LOCKATTR_TORTURE_SEED=123 cargo test --test torture -- --ignored --nocapture    # replay a plan
//! LOCKATTR_TORTURE_SECS=600 cargo test --release --test torture -- --ignored --nocapture   # a 10 minute soak
//! ```
//!
//! The CI run uses the debug build that `cargo test --workspace` already
//! made; `--release` works the same (it builds the dependencies once more).

mod support;

#[path = "torture/ledger.rs"]
mod ledger;
#[path = "torture/plan.rs"]
mod plan;
#[path = "torture/work.rs"]
mod work;

use std::collections::BTreeMap;
use std::process::Child;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockattr::Locker;
use plan::{Deploy, Fault, Kind, Round};
use support::cluster::Cluster;
use support::proxy::Proxy;
use support::{RedisServer, child_test, wait_child};

const SEED: &str = "LOCKATTR_TORTURE_SEED";
const SECS: &str = "LOCKATTR_TORTURE_SECS";
/// The default time of the rounds, in seconds.
const DEFAULT_SECS: u64 = 75;
/// A comma-separated list: run only these rounds of the plan.
const ROUNDS: &str = "LOCKATTR_TORTURE_ROUNDS";
/// Set: print the plan of the seed and run nothing.
const PLAN_ONLY: &str = "LOCKATTR_TORTURE_PLAN_ONLY";
/// Set for a worker child: `round:worker:ledger port:deployment:url,url,..`.
const WORKER: &str = "LOCKATTR_TORTURE_WORKER";
/// What a worker prints when it ran to its end.
const DONE: &str = "LOCKATTR_TORTURE_WORKER_DONE";
/// Servers must take `DEBUG SLEEP` (Redis 7 refuses DEBUG by default).
const DEBUG: &[&str] = &["--enable-debug-command", "local"];

/// The servers of the run, each started only when the plan uses it.
struct Deployments {
    single: Option<(RedisServer, Proxy)>,
    cluster: Option<Cluster>,
    redlock: Vec<(RedisServer, Proxy)>,
}

impl Deployments {
    fn start(plan: &plan::Plan) -> Deployments {
        let uses = |d: Deploy| plan.rounds.iter().any(|r| r.deploy == d);
        let proxied = || {
            let server = RedisServer::start_with(DEBUG);
            let proxy = Proxy::start(server.port);
            (server, proxy)
        };
        // The Redlock first: its nodes vote only once they have kept their
        // data for its max_lease, which the Cluster's start-up covers.
        let redlock = if uses(Deploy::Redlock) {
            (0..3).map(|_| proxied()).collect()
        } else {
            Vec::new()
        };
        let single = uses(Deploy::Single).then(proxied);
        let cluster = uses(Deploy::Cluster).then(|| Cluster::start_with(DEBUG));
        let deployments = Deployments {
            single,
            cluster,
            redlock,
        };
        if uses(Deploy::Redlock) {
            // Past the new nodes' delay before the first round.
            let locker = locker_for(Deploy::Redlock, &deployments.urls(Deploy::Redlock));
            locker
                .lock("torture-warm-up")
                .expire(Duration::from_secs(1))
                .acquire_timeout(Duration::from_secs(10))
                .acquire_blocking()
                .expect("the Redlock takes a lock within 10 s of its start")
                .release_blocking()
                .expect("release the warm-up lock");
        }
        deployments
    }

    fn urls(&self, deploy: Deploy) -> Vec<String> {
        match deploy {
            Deploy::Single => vec![self.single.as_ref().expect("started").1.url()],
            Deploy::Cluster => self.cluster.as_ref().expect("started").urls(),
            Deploy::Redlock => self.redlock.iter().map(|(_, p)| p.url()).collect(),
        }
    }

    fn server(&mut self, deploy: Deploy, node: usize) -> &mut RedisServer {
        match deploy {
            Deploy::Single => &mut self.single.as_mut().expect("started").0,
            Deploy::Cluster => &mut self.cluster.as_mut().expect("started").nodes[node],
            Deploy::Redlock => &mut self.redlock[node].0,
        }
    }

    fn proxy(&self, deploy: Deploy, node: usize) -> Option<&Proxy> {
        match deploy {
            Deploy::Single => self.single.as_ref().map(|(_, p)| p),
            Deploy::Cluster => None,
            Deploy::Redlock => self.redlock.get(node).map(|(_, p)| p),
        }
    }
}

fn locker_for(deploy: Deploy, urls: &[String]) -> Locker {
    match deploy {
        Deploy::Single => Locker::new(urls[0].as_str()).expect("a Locker"),
        Deploy::Cluster => Locker::cluster(urls.iter().map(String::as_str)).expect("a Locker"),
        Deploy::Redlock => Locker::redlock_builder(urls.iter().map(String::as_str))
            .max_lease(plan::REDLOCK_MAX_LEASE)
            .delay_restarted_nodes(true)
            .build()
            .expect("a Locker"),
    }
}

/// The seed and budget of this run, from the environment.
fn settings() -> (u64, u64) {
    let seed = match std::env::var(SEED) {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{SEED}={s:?} is not a u64")),
        Err(_) => rand::random(),
    };
    let secs = match std::env::var(SECS) {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{SECS}={s:?} is not a number of seconds")),
        Err(_) => DEFAULT_SECS,
    };
    (seed, secs)
}

/// Runs the tasks of one process for a round and waits for them; false
/// when one of them did not finish in time.
fn run_tasks(
    ctx: &Arc<work::TaskCtx>,
    lockers: &[Locker],
    async_tasks: usize,
    sync_tasks: usize,
    sink: &dyn Fn() -> ledger::Sink,
    rt: &tokio::runtime::Handle,
) -> bool {
    let mut running = Vec::new();
    for task in 0..async_tasks {
        let locker = lockers[task % lockers.len()].clone();
        running.push(rt.spawn(work::run_async(ctx.clone(), locker, sink(), task)));
    }
    let mut threads = Vec::new();
    for task in async_tasks..async_tasks + sync_tasks {
        let (ctx, locker, sink) = (ctx.clone(), lockers[task % lockers.len()].clone(), sink());
        threads.push(std::thread::spawn(move || {
            work::run_blocking(ctx, locker, sink, task)
        }));
    }
    let deadline = ctx.stop + ctx.round.attempt_bound() + Duration::from_secs(10);
    let mut finished = true;
    for handle in running {
        let left = deadline.saturating_duration_since(Instant::now());
        match rt.block_on(async { tokio::time::timeout(left, handle).await }) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => panic!("a torture task failed: {e}"),
            Err(_) => finished = false,
        }
    }
    for thread in threads {
        while !thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if thread.is_finished() {
            if let Err(e) = thread.join() {
                std::panic::resume_unwind(e);
            }
        } else {
            finished = false;
        }
    }
    finished
}

/// The worker child: runs its part of a round against the parent's ledger.
#[test]
fn torture_worker() {
    let Ok(spec) = std::env::var(WORKER) else {
        return; // not a child of the torture run
    };
    let (seed, secs) = settings();
    let parts: Vec<&str> = spec.splitn(5, ':').collect();
    let [round, worker, port, deploy, urls] = parts[..] else {
        panic!("{WORKER}={spec:?}");
    };
    let (round, worker): (usize, usize) = (round.parse().unwrap(), worker.parse().unwrap());
    let port: u16 = port.parse().unwrap();
    let deploy = *Deploy::ALL
        .iter()
        .find(|d| d.label() == deploy)
        .expect("a deployment");
    let urls: Vec<String> = urls.split(',').map(str::to_owned).collect();
    let round = plan::make(seed, secs).rounds[round].clone();
    let shape = round.workers[worker];
    let process = worker + 1;
    let ctx = Arc::new(work::TaskCtx {
        seed,
        stop: Instant::now() + Duration::from_millis(round.millis),
        round,
        process,
    });
    let rt = support::multi_thread();
    let locker = locker_for(deploy, &urls);
    let sink = || ledger::Sink::Remote {
        process,
        conn: ledger::Remote::connect(port, process),
    };
    let finished = run_tasks(
        &ctx,
        &[locker],
        shape.async_tasks,
        shape.sync_tasks,
        &sink,
        rt.handle(),
    );
    assert!(finished, "a worker task did not finish in time");
    println!("{DONE}");
}

/// What the whole run found.
#[derive(Default)]
struct Totals {
    sections: BTreeMap<(Deploy, Kind), u64>,
    faults: BTreeMap<&'static str, u64>,
    overlaps: u64,
    overlaps_by: BTreeMap<(Deploy, Kind), u64>,
    excused_lost: u64,
    excused_restart: u64,
    writes: u64,
    refused: u64,
    fencing_violations: u64,
    liveness_checked: u64,
    liveness_misses: u64,
    liveness_excused: u64,
    counters: BTreeMap<String, u64>,
    hung: u64,
    worker_failures: u64,
    details: Vec<String>,
}

/// One round: workers, tasks, faults at their times, then the ledger's findings.
fn run_round(
    seed: u64,
    secs: u64,
    round: &Round,
    deployments: &mut Deployments,
    server: &ledger::Server,
    rt: &tokio::runtime::Runtime,
    totals: &mut Totals,
) {
    let book = Arc::new(ledger::Book::default());
    server.set_book(book.clone());
    let urls = deployments.urls(round.deploy);
    let start = Instant::now();
    let seed_s = seed.to_string();
    let secs_s = secs.to_string();
    let mut children: Vec<Option<Child>> = (0..round.workers.len())
        .map(|w| {
            let spec = format!(
                "{}:{w}:{}:{}:{}",
                round.index,
                server.port,
                round.deploy.label(),
                urls.join(",")
            );
            let child = child_test(
                "torture_worker",
                &[(WORKER, spec.as_str()), (SEED, &seed_s), (SECS, &secs_s)],
            )
            .spawn()
            .expect("spawn a worker");
            Some(child)
        })
        .collect();
    let ctx = Arc::new(work::TaskCtx {
        seed,
        round: round.clone(),
        process: 0,
        stop: start + Duration::from_millis(round.millis),
    });
    let lockers: Vec<Locker> = (0..round.lockers)
        .map(|_| locker_for(round.deploy, &urls))
        .collect();

    // The parent's tasks run on their own thread, while this one injects
    // the faults.
    let tasks = {
        let (ctx, book, lockers) = (ctx.clone(), book.clone(), lockers.clone());
        let handle = rt.handle().clone();
        std::thread::spawn(move || {
            let sink = || ledger::Sink::Local { book: book.clone() };
            let (a, s) = (ctx.round.async_tasks, ctx.round.sync_tasks);
            run_tasks(&ctx, &lockers, a, s, &sink, &handle)
        })
    };

    let slack = Duration::from_millis(round.acquire_ms.1 + round.expire_ms.1 + 1_000);
    let mut windows = Vec::new();
    for (at, fault) in &round.faults {
        let when = start + *at;
        std::thread::sleep(when.saturating_duration_since(Instant::now()));
        let t = Instant::now();
        let mut applied = true;
        match *fault {
            Fault::Stall { node, ms } => {
                let reply = deployments
                    .server(round.deploy, node)
                    .raw(&format!("DEBUG SLEEP {:.3}", ms as f64 / 1000.0));
                assert!(
                    reply.as_deref().is_ok_and(|r| r.starts_with("+OK")),
                    "DEBUG SLEEP: {reply:?}"
                );
                windows.push((t, Instant::now() + slack));
            }
            Fault::Cut { node } => {
                deployments
                    .proxy(round.deploy, node)
                    .expect("a proxied node")
                    .cut_all();
                windows.push((t, t + slack + Duration::from_secs(1)));
            }
            Fault::Restart { node } => {
                let single = round.deploy == Deploy::Single;
                if single {
                    // One server forgets every lock: holders from before
                    // and after may overlap (docs/guarantees.md).
                    book.restarting();
                }
                deployments.server(round.deploy, node).restart();
                if single {
                    book.restarted();
                }
                windows.push((t, Instant::now() + slack + plan::REDLOCK_MAX_LEASE));
            }
            Fault::KillWorker { worker } => {
                // A worker killed already (or finished) is not killed twice.
                match children[worker].take() {
                    Some(mut child) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        book.killed(worker + 1);
                    }
                    None => applied = false,
                }
                windows.push((t, Instant::now() + slack));
            }
        }
        if applied {
            *totals.faults.entry(fault.label()).or_default() += 1;
        }
    }

    let finished = tasks.join().expect("the parent's tasks");
    if !finished {
        totals.hung += 1;
        totals.details.push(format!(
            "round {}: a task of the parent did not finish in time",
            round.index
        ));
    }
    let within =
        Duration::from_millis(round.millis) + round.attempt_bound() + Duration::from_secs(30);
    for (w, child) in children.into_iter().enumerate() {
        let Some(child) = child else { continue };
        let output = wait_child(child, within);
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() || !stdout.contains(DONE) {
            totals.worker_failures += 1;
            totals.details.push(format!(
                "round {}: worker {w} failed ({}): {}\n{}",
                round.index,
                output.status,
                stdout.lines().rev().take(20).collect::<Vec<_>>().join("\n"),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
    }
    drop(lockers);

    let f = book.findings(&windows);
    *totals
        .sections
        .entry((round.deploy, round.kind))
        .or_default() += f.sections;
    totals.overlaps += f.overlaps;
    if f.overlaps > 0 {
        *totals
            .overlaps_by
            .entry((round.deploy, round.kind))
            .or_default() += f.overlaps;
    }
    totals.excused_lost += f.excused_lost;
    totals.excused_restart += f.excused_restart;
    totals.writes += f.writes;
    totals.refused += f.refused;
    totals.fencing_violations += f.fencing_violations;
    totals.liveness_checked += f.liveness_checked;
    totals.liveness_misses += f.liveness_misses;
    totals.liveness_excused += f.liveness_excused;
    for (k, v) in &f.counters {
        *totals.counters.entry(k.clone()).or_default() += v;
    }
    let elapsed = start.elapsed();
    println!(
        "  {:.1}s: {} sections, {} overlaps, {} fencing violations, {} liveness misses (excused: {} lost, {} restart); {:?}",
        elapsed.as_secs_f64(),
        f.sections,
        f.overlaps,
        f.fencing_violations,
        f.liveness_misses,
        f.excused_lost,
        f.excused_restart,
        f.counters,
    );
    for d in &f.details {
        totals.details.push(format!(
            "round {} ({}/{}): {d}",
            round.index,
            round.deploy.label(),
            round.kind.label()
        ));
    }
}

#[test]
#[ignore = "a long seeded run; .ci/run runs it with --ignored (see the module docs)"]
fn torture() {
    let started = Instant::now();
    let (seed, secs) = settings();
    let plan = plan::make(seed, secs);
    println!(
        "torture: seed {seed} ({SEED}={seed} replays this plan), {secs} s of rounds, {} rounds",
        plan.rounds.len()
    );
    if std::env::var_os(PLAN_ONLY).is_some() {
        for round in &plan.rounds {
            println!("{}", round.describe());
        }
        return;
    }
    let mut deployments = Deployments::start(&plan);
    println!("  servers up after {:.1}s", started.elapsed().as_secs_f64());
    let server = ledger::Server::start();
    let rt = support::multi_thread();
    let mut totals = Totals::default();
    let only: Option<Vec<usize>> = std::env::var(ROUNDS).ok().map(|list| {
        list.split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .expect("LOCKATTR_TORTURE_ROUNDS: round numbers")
            })
            .collect()
    });
    let mut ran = std::collections::BTreeSet::new();
    for round in &plan.rounds {
        if only
            .as_ref()
            .is_some_and(|only| !only.contains(&round.index))
        {
            continue;
        }
        println!("{}", round.describe());
        ran.insert(round.deploy);
        run_round(
            seed,
            secs,
            round,
            &mut deployments,
            &server,
            &rt,
            &mut totals,
        );
    }
    drop(rt);

    let sections: Vec<String> = totals
        .sections
        .iter()
        .map(|((d, k), n)| format!("{}/{}={n}", d.label(), k.label()))
        .collect();
    let overlaps_by: Vec<String> = totals
        .overlaps_by
        .iter()
        .map(|((d, k), n)| format!("{}/{}={n}", d.label(), k.label()))
        .collect();
    let faults: Vec<String> = totals
        .faults
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    let counters: Vec<String> = totals
        .counters
        .iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect();
    let summary = format!(
        "torture summary: seed={seed} secs={secs} wall={:.1}s rounds={} sections[{}] total_sections={} faults[{}] overlaps={} [{}] (excused: lost={} restart={}) fencing_violations={} (writes={} refused={}) liveness_misses={} (checked={} excused={}) hung={} worker_failures={} [{}]",
        started.elapsed().as_secs_f64(),
        plan.rounds.len(),
        sections.join(" "),
        totals.sections.values().sum::<u64>(),
        faults.join(" "),
        totals.overlaps,
        overlaps_by.join(" "),
        totals.excused_lost,
        totals.excused_restart,
        totals.fencing_violations,
        totals.writes,
        totals.refused,
        totals.liveness_misses,
        totals.liveness_checked,
        totals.liveness_excused,
        totals.hung,
        totals.worker_failures,
        counters.join(" "),
    );
    println!("{summary}");
    // A deployment that granted nothing would make every oracle pass
    // vacuously: that is a failure too.
    let idle: Vec<&str> = Deploy::ALL
        .iter()
        .filter(|d| ran.contains(*d))
        .filter(|d| {
            totals
                .sections
                .iter()
                .all(|((deploy, _), n)| deploy != *d || *n == 0)
        })
        .map(|d| d.label())
        .collect();
    if !idle.is_empty() {
        totals
            .details
            .insert(0, format!("no critical section ran on: {idle:?}"));
    }
    let bad = idle.len() as u64
        + totals.overlaps
        + totals.fencing_violations
        + totals.liveness_misses
        + totals.hung
        + totals.worker_failures;
    assert!(
        bad == 0,
        "torture run failed (seed {seed}; replay: {SEED}={seed} {SECS}={secs} cargo test --test torture -- --ignored --nocapture)\n{summary}\n{}{}",
        totals
            .details
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
        if totals.details.len() > 30 {
            format!("\n(and {} more lines)", totals.details.len() - 30)
        } else {
            String::new()
        }
    );
    drop(deployments); // the keyspace audit of every server
}
