//! Locks through a failover with `min_replicas(1)`: every grant (an
//! acquisition, a hand-over, a renewal) waits for a replica's
//! acknowledgement, so the replica that is promoted holds every lock and
//! every fencing token a caller was told about.
//!
//! Each test runs a contention for a few names, by several tasks on two
//! Lockers (hand-overs to queued waiters, renewed leases of 500 ms under
//! bodies that run 1.2 s), fails the master over in the middle of it and
//! keeps contending on the new master. Every holding is recorded in this
//! process (name, fencing token, when acquire returned, when the body
//! ended or the guard reported the lock lost). Then:
//! - no two holders of a name overlapped in time;
//! - per name, tokens grow from one holder to the next, and every token
//!   handed out after the failover began is larger than every one before;
//! - the work went on after the failover.
//!
//! To give the failover something to lose, the replica is cut off for
//! [`LAG`] just before the master is killed: frozen (SIGSTOP), so that it
//! cannot reconnect, and its replication link closed by the master (`CLIENT
//! KILL TYPE replica`; a frozen replica alone would still read, once thawed,
//! what its socket had received). Whatever the master grants meanwhile
//! never reaches the replica. With `min_replicas(1)` nothing is granted
//! meanwhile (no acknowledgement). Leases of 500 ms end long before
//! a promotion, so the contenders alone cannot show a lost grant: a Locker
//! also tries, while the replica is frozen, to take one more name with a
//! lease longer than the failover ([`Across`]), and another Locker takes
//! that name on the new master. Without `min_replicas` the first is granted
//! the lock on the old master only, and the two overlap.
//! A master without replicas grants nothing: right after the promotion, a
//! probe's acquisition fails with `LockError::Replicas`, and none of the
//! contenders gets a lock until the old master is back as a replica.
//! The clean Cluster switch (`CLUSTER FAILOVER`) loses nothing by design:
//! no cut-off, no probe; the old master is the new one's replica at once.
//!
//! Long: 13-22 s a test on a loaded 2-core machine (a Sentinel set or a
//! six-node cluster, a failover, 11 s of contention).

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockattr::{LockError, Locker};
use support::cluster::{Cluster, ReplicatedCluster};
use support::sentinel::{SETTLE, SentinelSet};

/// The lease of every lock: renewed every third of it.
const LEASE: Duration = Duration::from_millis(500);
/// Most bodies: short, for many hand-overs.
const SHORT_BODY: Duration = Duration::from_millis(20);
/// One body in four: more than two leases, renewed meanwhile.
const LONG_BODY: Duration = Duration::from_millis(1200);
/// The acquire time of the contenders.
const ACQUIRE: Duration = Duration::from_secs(5);
/// Connect and response timeouts of the Lockers.
const QUICK: Duration = Duration::from_secs(1);
/// Longer than any acquire or release may take: the test fails instead of
/// hanging.
const HANG: Duration = Duration::from_secs(30);
/// Contention before the failover.
const BEFORE: Duration = Duration::from_secs(5);
/// Contention after the failover (once the new master has a replica again).
const AFTER: Duration = Duration::from_secs(6);
/// How long the replica is cut off before the master is killed.
const LAG: Duration = Duration::from_millis(300);
/// Tasks per Locker.
const TASKS: usize = 3;

/// One holder's time with a lock.
#[derive(Debug)]
struct Holding {
    name: String,
    /// Which Locker, which task.
    locker: usize,
    task: usize,
    token: u64,
    /// When acquire returned the guard.
    start: Instant,
    /// Just before the release, or when the guard reported the lock lost
    /// (when its lost signal fired: at or after the moment the lease may
    /// have ended, never before).
    end: Instant,
    /// The loss, when the guard reported one during the body.
    lost: Option<String>,
    /// What the release returned.
    released: Result<(), String>,
}

/// An acquire or a release that failed.
#[derive(Debug)]
struct Failure {
    at: Instant,
    name: String,
    what: &'static str,
    kind: &'static str,
    error: String,
}

/// What the contenders recorded.
#[derive(Default)]
struct Record {
    holdings: Mutex<Vec<Holding>>,
    failures: Mutex<Vec<Failure>>,
}

impl Record {
    fn held(&self, holding: Holding) {
        self.holdings.lock().unwrap().push(holding);
    }

    fn failed(&self, name: &str, what: &'static str, error: &LockError) {
        self.failures.lock().unwrap().push(Failure {
            at: Instant::now(),
            name: name.to_owned(),
            what,
            kind: kind(error),
            error: error.to_string(),
        });
    }
}

fn kind(error: &LockError) -> &'static str {
    match error {
        e if e.is_connection() => "connection",
        e if e.is_replicas() => "replicas",
        e if e.is_timeout() => "timeout",
        e if e.is_not_owned() => "not-owned",
        e if e.is_lost() => "lost",
        LockError::Redis { .. } => "redis",
        _ => "other",
    }
}

/// Tasks taking the names in turn, each with a Locker of its own, until told to stop.
struct Contention {
    record: Arc<Record>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Contention {
    fn start(rt: &tokio::runtime::Runtime, lockers: &[Locker], names: &[String]) -> Contention {
        let record = Arc::new(Record::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for (l, locker) in lockers.iter().enumerate() {
            for t in 0..TASKS {
                let task = l * TASKS + t;
                tasks.push(rt.spawn(contend(
                    locker.clone(),
                    l,
                    task,
                    names.to_vec(),
                    stop.clone(),
                    record.clone(),
                )));
            }
        }
        Contention {
            record,
            stop,
            tasks,
        }
    }

    /// Stops the tasks, waits for them, and returns what they recorded.
    fn finish(self, rt: &tokio::runtime::Runtime) -> (Vec<Holding>, Vec<Failure>) {
        self.stop.store(true, Ordering::SeqCst);
        rt.block_on(async {
            for task in self.tasks {
                tokio::time::timeout(HANG, task)
                    .await
                    .expect("a contender did not stop")
                    .expect("a contender panicked");
            }
        });
        let record = Arc::try_unwrap(self.record).ok().expect("tasks done");
        (
            record.holdings.into_inner().unwrap(),
            record.failures.into_inner().unwrap(),
        )
    }
}

async fn contend(
    locker: Locker,
    l: usize,
    task: usize,
    names: Vec<String>,
    stop: Arc<AtomicBool>,
    record: Arc<Record>,
) {
    let mut round = 0;
    while !stop.load(Ordering::SeqCst) {
        let name = &names[(task + round) % names.len()];
        let body = if (task + round).is_multiple_of(4) {
            LONG_BODY
        } else {
            SHORT_BODY
        };
        round += 1;
        let attempt = tokio::time::timeout(
            HANG,
            locker
                .lock(name)
                .expire(LEASE)
                .renew(true)
                .acquire_timeout(ACQUIRE)
                .acquire(),
        )
        .await
        .unwrap_or_else(|_| panic!("acquire of {name} did not return within {HANG:?}"));
        let guard = match attempt {
            Ok(guard) => guard,
            Err(e) => {
                record.failed(name, "acquire", &e);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let start = Instant::now();
        let token = guard.fencing_token();
        let lost = tokio::select! {
            () = tokio::time::sleep(body) => None,
            e = guard.lost() => Some((Instant::now(), format!("{e:?}"))),
        };
        let end = lost.as_ref().map_or_else(Instant::now, |(at, _)| *at);
        let released = tokio::time::timeout(HANG, guard.release())
            .await
            .unwrap_or_else(|_| panic!("release of {name} did not return within {HANG:?}"));
        if let Err(e) = &released {
            record.failed(name, "release", e);
        }
        record.held(Holding {
            name: name.clone(),
            locker: l,
            task,
            token,
            start,
            end,
            lost: lost.map(|(_, e)| e),
            released: released.map_err(|e| format!("{e:?}")),
        });
    }
}

/// When things happened, for the checks and the messages.
struct Timeline {
    t0: Instant,
    /// The master was killed (or the failover asked for) right after this.
    switch: Instant,
    /// The replica was promoted (and, for a clean switch, the old master is
    /// its replica).
    promoted: Instant,
    /// The old master came back as a replica of the new one (a clean switch:
    /// = `promoted`).
    back: Instant,
}

impl Timeline {
    fn ms(&self, at: Instant) -> String {
        format!(
            "{:.3}s",
            at.saturating_duration_since(self.t0).as_secs_f64()
        )
    }
}

/// Every check of the module docs; all findings in one panic.
fn verify(
    what: &str,
    names: &[String],
    holdings: &[Holding],
    failures: &[Failure],
    time: &Timeline,
    mut findings: Vec<String>,
) {
    // Summary.
    let lost: Vec<&Holding> = holdings.iter().filter(|h| h.lost.is_some()).collect();
    let count = |what: &str, kind: &str| {
        failures
            .iter()
            .filter(|f| f.what == what && f.kind == kind)
            .count()
    };
    eprintln!(
        "{what}: {} holdings ({} before the switch at {}, {} after the old master was back at {}; \
         promoted at {}), {} reported lost; acquire failures: {} connection, {} replicas, {} \
         timeout, {} redis, {} other; release failures: {} connection, {} not-owned, {} other",
        holdings.len(),
        holdings.iter().filter(|h| h.start < time.switch).count(),
        time.ms(time.switch),
        holdings.iter().filter(|h| h.start > time.back).count(),
        time.ms(time.back),
        time.ms(time.promoted),
        lost.len(),
        count("acquire", "connection"),
        count("acquire", "replicas"),
        count("acquire", "timeout"),
        count("acquire", "redis"),
        failures
            .iter()
            .filter(|f| f.what == "acquire"
                && !["connection", "replicas", "timeout", "redis"].contains(&f.kind))
            .count(),
        count("release", "connection"),
        count("release", "not-owned"),
        failures
            .iter()
            .filter(|f| f.what == "release" && !["connection", "not-owned"].contains(&f.kind))
            .count(),
    );
    for h in &lost {
        eprintln!(
            "  lost: {} token {} (locker {} task {}) {}..{}: {}; release: {:?}",
            h.name,
            h.token,
            h.locker,
            h.task,
            time.ms(h.start),
            time.ms(h.end),
            h.lost.as_deref().unwrap_or_default(),
            h.released
        );
    }
    for f in failures.iter().filter(|f| f.kind != "connection") {
        // Who held the name when the error came, by this record.
        let holder = holdings
            .iter()
            .find(|h| h.name == f.name && h.start <= f.at && f.at <= h.end)
            .map_or_else(
                || "nobody in this record".to_owned(),
                |h| format!("token {} since {}", h.token, time.ms(h.start)),
            );
        eprintln!(
            "  {} error at {} (held then by {holder}): {} of {}: {}",
            f.kind,
            time.ms(f.at),
            f.what,
            f.name,
            f.error
        );
    }

    // Only the errors a failover explains.
    for f in failures {
        let expected = match f.what {
            "acquire" => ["connection", "replicas", "timeout", "redis"].contains(&f.kind),
            _ => ["connection", "not-owned"].contains(&f.kind),
        };
        if !expected {
            findings.push(format!(
                "unexpected {} error at {} for {}: {}",
                f.what,
                time.ms(f.at),
                f.name,
                f.error
            ));
        }
    }

    // Every name held (the contention's and any other), then the work on the
    // contention's.
    let mut held: Vec<&String> = holdings.iter().map(|h| &h.name).collect();
    held.sort();
    held.dedup();
    for name in held {
        let mut mine: Vec<&Holding> = holdings.iter().filter(|h| &h.name == name).collect();
        mine.sort_by_key(|h| h.start);
        // No overlap: each holder starts after every earlier one ended.
        let mut latest: Option<&Holding> = None;
        for h in &mine {
            if let Some(prev) = latest
                && h.start < prev.end
            {
                findings.push(format!(
                    "{name}: two holders at once: token {} (locker {} task {}) held \
                     {}..{} (lost: {:?}, release: {:?}), token {} (locker {} task {}) \
                     acquired at {}, {:?} before that end",
                    prev.token,
                    prev.locker,
                    prev.task,
                    time.ms(prev.start),
                    time.ms(prev.end),
                    prev.lost,
                    prev.released,
                    h.token,
                    h.locker,
                    h.task,
                    time.ms(h.start),
                    prev.end - h.start
                ));
            }
            if latest.is_none_or(|prev| h.end > prev.end) {
                latest = Some(h);
            }
        }
        // Tokens grow from one holder to the next.
        for pair in mine.windows(2) {
            if pair[1].token <= pair[0].token {
                findings.push(format!(
                    "{name}: token {} acquired at {} after token {} acquired at {}",
                    pair[1].token,
                    time.ms(pair[1].start),
                    pair[0].token,
                    time.ms(pair[0].start)
                ));
            }
        }
        // Every token after the switch above every token before it.
        let before = mine
            .iter()
            .filter(|h| h.start < time.switch)
            .map(|h| h.token)
            .max();
        let after = mine
            .iter()
            .filter(|h| h.start >= time.switch)
            .map(|h| h.token)
            .min();
        if let (Some(before), Some(after)) = (before, after)
            && after <= before
        {
            findings.push(format!(
                "{name}: a token handed out after the switch ({after}) is not above the \
                 largest one before it ({before})"
            ));
        }
    }
    for name in names {
        let mine: Vec<&Holding> = holdings.iter().filter(|h| &h.name == name).collect();
        // Work before the switch, and after the failover.
        let (early, late) = (
            mine.iter().filter(|h| h.start < time.switch).count(),
            mine.iter().filter(|h| h.start > time.back).count(),
        );
        if early == 0 || late == 0 {
            findings.push(format!(
                "{name}: {early} acquisitions before the switch, {late} after the failover: \
                 the contention did not run on both masters"
            ));
        }
    }
    // Renewal worked on both masters: bodies that ran more than two leases
    // kept their lock.
    let renewed =
        |h: &&Holding| names.contains(&h.name) && h.lost.is_none() && h.end - h.start > 2 * LEASE;
    let renewed_before = holdings
        .iter()
        .filter(renewed)
        .filter(|h| h.end < time.switch)
        .count();
    let renewed_after = holdings
        .iter()
        .filter(renewed)
        .filter(|h| h.start > time.back)
        .count();
    eprintln!(
        "  bodies longer than two leases, kept by renewal: {renewed_before} before the switch, \
         {renewed_after} after the failover"
    );
    if renewed_before == 0 || renewed_after == 0 {
        findings.push(format!(
            "renewal: {renewed_before} bodies longer than two leases kept their lock before \
             the switch, {renewed_after} after the failover"
        ));
    }
    assert!(
        findings.is_empty(),
        "{what}: {} finding(s):\n{}",
        findings.len(),
        findings.join("\n")
    );
}

/// A holding that began while the new master had no replica (between
/// `from` and `to`): with `min_replicas(1)` there is none.
fn granted_without_replica(
    holdings: &[Holding],
    from: Instant,
    to: Instant,
    time: &Timeline,
) -> Vec<String> {
    holdings
        .iter()
        .filter(|h| h.start > from && h.start < to)
        .map(|h| {
            format!(
                "{}: token {} granted at {}, while the new master had no replica ({}..{})",
                h.name,
                h.token,
                time.ms(h.start),
                time.ms(from),
                time.ms(to)
            )
        })
        .collect()
}

/// Right after the promotion, the new master has no replica: an acquisition
/// (one attempt) fails with `LockError::Replicas` once the Locker reaches
/// it (connection and cluster errors before that). A finding otherwise.
fn probe_refused(rt: &tokio::runtime::Runtime, locker: &Locker, name: &str) -> Option<String> {
    rt.block_on(async {
        let start = Instant::now();
        let mut errors = Vec::new();
        while start.elapsed() < SETTLE {
            let attempt = tokio::time::timeout(
                HANG,
                locker
                    .lock(name)
                    .expire(LEASE)
                    .acquire_timeout(Duration::ZERO)
                    .acquire(),
            )
            .await
            .expect("the probe's acquire hung");
            match attempt {
                Ok(guard) => {
                    let token = guard.fencing_token();
                    let _ = guard.release().await;
                    return Some(format!(
                        "the probe took {name} (token {token}) on a master without replicas; \
                         errors before: {errors:?}"
                    ));
                }
                Err(LockError::Replicas {
                    acknowledged,
                    wanted,
                    ..
                }) => {
                    eprintln!(
                        "probe: refused, {acknowledged} of {wanted} replicas, after {:?} and \
                         {} other errors",
                        start.elapsed(),
                        errors.len()
                    );
                    return (acknowledged != 0 || wanted != 1).then(|| {
                        format!("the probe's refusal says {acknowledged} of {wanted} replicas")
                    });
                }
                Err(e) => errors.push(format!("{e}")),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Some(format!(
            "the probe got no Replicas error within {SETTLE:?}: {errors:?}"
        ))
    })
}

/// The lease of the lock [`Across`] tries to take: longer than a failover.
const ACROSS_LEASE: Duration = Duration::from_secs(20);

/// A lock tried while the only replica is frozen, with a lease that
/// outlasts the failover: with `min_replicas(1)` it is refused
/// (`LockError::Replicas`); a grant would live on the old master only, and
/// another Locker would take the name on the new one while the first still
/// holds it.
struct Across {
    /// Its own runtime: the attempt does not queue behind the contenders'
    /// grants, which wait for the frozen replica too.
    rt: tokio::runtime::Runtime,
    name: String,
    first: Locker,
    second: Locker,
    held: Option<(lockattr::LockGuard, Instant)>,
    findings: Vec<String>,
}

impl Across {
    /// Both Lockers take and release the name once: their connections are
    /// open before the replica is cut off (a Locker that connects to a
    /// cluster for the first time while a node is frozen may wait for it).
    fn new(name: &str, first: Locker, second: Locker) -> Across {
        let rt = support::current_thread();
        rt.block_on(support::warm_up(&first, name));
        rt.block_on(support::warm_up(&second, name));
        Across {
            rt,
            name: name.to_owned(),
            first,
            second,
            held: None,
            findings: Vec::new(),
        }
    }

    /// One attempt, while the replica is frozen.
    fn try_during_lag(&mut self) {
        let name = self.name.clone();
        let attempt = self
            .rt
            .block_on(async {
                tokio::time::timeout(
                    HANG,
                    self.first
                        .lock(&name)
                        .expire(ACROSS_LEASE)
                        .acquire_timeout(Duration::ZERO)
                        .acquire(),
                )
                .await
            })
            .expect("the attempt during the lag hung");
        match attempt {
            Ok(guard) => {
                self.findings.push(format!(
                    "{name}: granted (token {}) while the only replica was frozen",
                    guard.fencing_token()
                ));
                self.held = Some((guard, Instant::now()));
            }
            Err(e) if e.is_replicas() => {
                eprintln!("{name}: refused while the replica was frozen: {e}")
            }
            Err(e) => self.findings.push(format!(
                "{name}: while the replica was frozen, expected a Replicas error, got {e:?}"
            )),
        }
    }

    /// Once the new master has a replica: the second Locker takes the name
    /// (connection errors are tried again), then the first releases what it
    /// held, then the second. Both holdings go to `holdings`.
    fn take_after(mut self, holdings: &mut Vec<Holding>) -> Vec<String> {
        let name = self.name.clone();
        let rt = &self.rt;
        let start = Instant::now();
        let taken = loop {
            let attempt = rt
                .block_on(async {
                    tokio::time::timeout(
                        HANG,
                        self.second
                            .lock(&name)
                            .expire(LEASE)
                            .acquire_timeout(Duration::ZERO)
                            .acquire(),
                    )
                    .await
                })
                .expect("the attempt after the failover hung");
            match attempt {
                Ok(guard) => break Some((guard, Instant::now())),
                Err(e) if e.is_connection() && start.elapsed() < SETTLE => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Err(e) => {
                    self.findings.push(format!(
                        "{name}: the second Locker could not take it on the new master: {e:?}"
                    ));
                    break None;
                }
            }
        };
        if let Some((guard, at)) = self.held.take() {
            let token = guard.fencing_token();
            let lost = guard.is_lost().then(|| "lost by its end".to_owned());
            let end = Instant::now();
            let released = rt.block_on(guard.release()).map_err(|e| format!("{e:?}"));
            holdings.push(Holding {
                name: name.clone(),
                locker: 2,
                task: 0,
                token,
                start: at,
                end,
                lost,
                released,
            });
        }
        if let Some((guard, at)) = taken {
            let token = guard.fencing_token();
            let end = Instant::now();
            let released = rt.block_on(guard.release()).map_err(|e| format!("{e:?}"));
            holdings.push(Holding {
                name,
                locker: 3,
                task: 0,
                token,
                start: at,
                end,
                lost: None,
                released,
            });
        }
        self.findings
    }
}

/// Closes every replica's link to `master` (`CLIENT KILL TYPE replica`).
fn cut_replicas_off(master: &support::RedisServer) {
    let answer = master
        .raw("CLIENT KILL TYPE replica")
        .expect("CLIENT KILL TYPE replica");
    assert_eq!(answer.trim(), ":1", "CLIENT KILL TYPE replica: {answer}");
}

fn sentinel_locker(set: &SentinelSet) -> Locker {
    Locker::sentinel_builder(set.name.as_str(), set.sentinel_urls())
        .connect_timeout(QUICK)
        .response_timeout(QUICK)
        .min_replicas(1)
        .build()
        .unwrap()
}

fn cluster_locker(cluster: &Cluster) -> Locker {
    Locker::cluster_builder(cluster.urls())
        .connect_timeout(QUICK)
        .response_timeout(QUICK)
        .min_replicas(1)
        .build()
        .unwrap()
}

/// Sentinel: the master killed (its replica cut off for [`LAG`] first),
/// the replica promoted, the old master back as its replica.
#[test]
fn sentinel_master_killed_mid_contention() {
    let t0 = Instant::now();
    let rt = support::multi_thread();
    let mut set = SentinelSet::start("lockattr-replicas");
    let names: Vec<String> = (0..3).map(|i| format!("failover-{i}")).collect();
    let lockers = [sentinel_locker(&set), sentinel_locker(&set)];
    let probe = sentinel_locker(&set);
    rt.block_on(probe.ping()).unwrap();
    let mut across = Across::new("across", sentinel_locker(&set), sentinel_locker(&set));
    let contention = Contention::start(&rt, &lockers, &names);
    std::thread::sleep(BEFORE);

    set.replica().freeze();
    cut_replicas_off(set.master());
    let frozen = Instant::now();
    across.try_during_lag();
    std::thread::sleep(LAG.saturating_sub(frozen.elapsed()));
    let switch = Instant::now();
    set.kill_master();
    set.replica().thaw();
    set.wait_for_failover(SETTLE);
    let promoted = Instant::now();
    let mut findings: Vec<String> = probe_refused(&rt, &probe, "probe").into_iter().collect();
    let restart = Instant::now();
    set.restart_old_master_as_replica();
    let back = Instant::now();
    std::thread::sleep(AFTER);

    let (mut holdings, failures) = contention.finish(&rt);
    findings.extend(across.take_after(&mut holdings));
    let time = Timeline {
        t0,
        switch,
        promoted,
        back,
    };
    findings.extend(granted_without_replica(&holdings, promoted, restart, &time));
    verify(
        "sentinel, master killed",
        &names,
        &holdings,
        &failures,
        &time,
        findings,
    );
    eprintln!("took {:?}", t0.elapsed());
}

/// A cluster of masters with a replica each, the names on one master, and
/// that master's index and its replica's.
fn cluster_with_names() -> (ReplicatedCluster, usize, usize, Vec<String>, String) {
    let cluster = Cluster::start_with_replicas();
    // A master other than node 0 (which answers `master_of`).
    let master = (1..cluster.nodes.len())
        .find(|&i| cluster.role_of(i).as_deref() == Some("master"))
        .expect("a master besides node 0");
    let replica = cluster.replica_of(master);
    let names = cluster.names_on(master, "failover", 3);
    let probe = cluster.names_on(master, "probe", 1).remove(0);
    (cluster, master, replica, names, probe)
}

/// Cluster: the master of the names killed (its replica cut off for [`LAG`]
/// first), the replica promoted after the node timeout, the old master
/// restarted (empty) and back as its replica.
#[test]
fn cluster_master_killed_mid_contention() {
    let t0 = Instant::now();
    let rt = support::multi_thread();
    let (mut cluster, master, replica, names, probe_name) = cluster_with_names();
    let lockers = [cluster_locker(&cluster), cluster_locker(&cluster)];
    let probe = cluster_locker(&cluster);
    rt.block_on(probe.ping()).unwrap();
    let across_name = cluster.names_on(master, "across", 1).remove(0);
    let mut across = Across::new(
        &across_name,
        cluster_locker(&cluster),
        cluster_locker(&cluster),
    );
    let contention = Contention::start(&rt, &lockers, &names);
    std::thread::sleep(BEFORE);

    cluster.nodes[replica].freeze();
    cut_replicas_off(&cluster.nodes[master]);
    let frozen = Instant::now();
    across.try_during_lag();
    std::thread::sleep(LAG.saturating_sub(frozen.elapsed()));
    let switch = Instant::now();
    cluster.nodes[master].kill();
    cluster.nodes[replica].thaw();
    cluster.wait_master(replica, SETTLE);
    let promoted = Instant::now();
    let mut findings: Vec<String> = probe_refused(&rt, &probe, &probe_name)
        .into_iter()
        .collect();
    let restart = Instant::now();
    cluster.nodes[master].restart();
    let synced = support::eventually(SETTLE, || cluster.replica_synced(replica));
    assert!(
        synced.is_some(),
        "the restarted old master is not a replica of the new one within {SETTLE:?}"
    );
    let back = Instant::now();
    std::thread::sleep(AFTER);

    let (mut holdings, failures) = contention.finish(&rt);
    findings.extend(across.take_after(&mut holdings));
    let time = Timeline {
        t0,
        switch,
        promoted,
        back,
    };
    findings.extend(granted_without_replica(&holdings, promoted, restart, &time));
    verify(
        "cluster, master killed",
        &names,
        &holdings,
        &failures,
        &time,
        findings,
    );
    eprintln!("took {:?}", t0.elapsed());
}

/// Cluster: `CLUSTER FAILOVER` sent to the replica of the names' master (a
/// clean switch: the master stops taking writes, the replica catches up and
/// takes over, the old master becomes its replica).
#[test]
fn cluster_clean_failover_mid_contention() {
    let t0 = Instant::now();
    let rt = support::multi_thread();
    let (cluster, master, replica, names, _) = cluster_with_names();
    let lockers = [cluster_locker(&cluster), cluster_locker(&cluster)];
    rt.block_on(lockers[0].ping()).unwrap();
    let contention = Contention::start(&rt, &lockers, &names);
    std::thread::sleep(BEFORE);

    let switch = Instant::now();
    let answer = cluster.nodes[replica]
        .raw("CLUSTER FAILOVER")
        .expect("CLUSTER FAILOVER");
    assert!(answer.starts_with("+OK"), "CLUSTER FAILOVER: {answer}");
    cluster.wait_master(replica, SETTLE);
    let synced = support::eventually(SETTLE, || {
        cluster.replica_synced(replica) && cluster.role_of(master).as_deref() == Some("slave")
    });
    assert!(
        synced.is_some(),
        "the old master is not a replica of the new one within {SETTLE:?}"
    );
    let promoted = Instant::now();
    std::thread::sleep(AFTER);

    let (holdings, failures) = contention.finish(&rt);
    let time = Timeline {
        t0,
        switch,
        promoted,
        back: promoted,
    };
    verify(
        "cluster, clean failover",
        &names,
        &holdings,
        &failures,
        &time,
        Vec::new(),
    );
    eprintln!("took {:?}", t0.elapsed());
}
