//! The plan of a torture run: a pure function of the seed and the budget.
//! Every process (the parent and each worker child) computes it again from
//! the same two numbers, so a worker needs only its round and its index.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};

/// Where the locks live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Deploy {
    /// One redis-server, reached through a fault proxy.
    Single,
    /// A 3-master Redis Cluster, reached directly.
    Cluster,
    /// Three independent redis-servers locked by majority, each through a proxy.
    Redlock,
}

impl Deploy {
    pub const ALL: [Deploy; 3] = [Deploy::Single, Deploy::Cluster, Deploy::Redlock];

    pub fn label(self) -> &'static str {
        match self {
            Deploy::Single => "single",
            Deploy::Cluster => "cluster",
            Deploy::Redlock => "redlock",
        }
    }
}

/// What is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Lock,
    /// A read-write lock: readers together, a writer alone.
    Rw,
    /// A semaphore of `Round::permits` permits.
    Semaphore,
    /// `lock_all` of 2 or 3 names of the round's pool.
    Set,
}

impl Kind {
    pub fn label(self) -> &'static str {
        match self {
            Kind::Lock => "lock",
            Kind::Rw => "rw",
            Kind::Semaphore => "sem",
            Kind::Set => "set",
        }
    }
}

/// Renewal of the leases of a round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renew {
    Off,
    On,
    /// Each attempt draws.
    Mixed,
}

/// A fault, injected `at` after the round started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `DEBUG SLEEP` on a node (the only node of one server) for `ms`.
    Stall { node: usize, ms: u64 },
    /// Every connection through the proxy of a node is closed at once.
    Cut { node: usize },
    /// The node is killed and started again, empty, on the same port.
    Restart { node: usize },
    /// The worker process is SIGKILLed, whatever it holds or waits for.
    KillWorker { worker: usize },
}

impl Fault {
    pub fn label(self) -> &'static str {
        match self {
            Fault::Stall { .. } => "stall",
            Fault::Cut { .. } => "cut",
            Fault::Restart { .. } => "restart",
            Fault::KillWorker { .. } => "kill",
        }
    }
}

/// A worker process of a round: how many tasks of each flavour it runs on
/// its one Locker.
#[derive(Clone, Copy, Debug)]
pub struct Worker {
    pub async_tasks: usize,
    pub sync_tasks: usize,
}

/// One round: one deployment, one kind, fresh names, a fixed time.
#[derive(Clone, Debug)]
pub struct Round {
    pub index: usize,
    pub deploy: Deploy,
    pub kind: Kind,
    /// "hot": the shape that makes a process-local queue work hard (many
    /// tasks of one Locker on one name, acquire times of a few ms).
    pub hot: bool,
    pub millis: u64,
    /// The names of the round (a set takes 2 or 3 of them).
    pub names: Vec<String>,
    pub permits: u32,
    /// Tasks of the parent process, all on `lockers` Lockers.
    pub async_tasks: usize,
    pub sync_tasks: usize,
    pub lockers: usize,
    pub workers: Vec<Worker>,
    /// Acquire times, drawn per attempt, in ms (inclusive).
    pub acquire_ms: (u64, u64),
    /// Critical sections, drawn per attempt, in µs (inclusive).
    pub cs_us: (u64, u64),
    /// Leases, drawn per attempt, in ms (inclusive).
    pub expire_ms: (u64, u64),
    pub renew: Renew,
    /// Chance that an async builder attempt is cancelled (its acquire
    /// future dropped) before its acquire time ends.
    pub cancel_p: f64,
    /// Chance that an attempt goes through an annotated function.
    pub attr_p: f64,
    /// Chance that a critical section outlives its lease on purpose (only
    /// without renewal: the guard must then report itself lost).
    pub overrun_p: f64,
    /// Chance that a critical section lasts 0.3–2.5 s (rounds with long
    /// acquire times only).
    pub long_p: f64,
    /// Read-write rounds: the chance that an attempt writes.
    pub write_p: f64,
    /// Chance that a guard is dropped (released in the background) rather
    /// than released and awaited.
    pub drop_p: f64,
    pub faults: Vec<(Duration, Fault)>,
}

impl Round {
    /// The longest an attempt may take once started: its acquire time, a
    /// critical section (an overrun included) and a release.
    pub fn attempt_bound(&self) -> Duration {
        Duration::from_millis(self.acquire_ms.1 + 2 * self.expire_ms.1 + 5_000)
            + Duration::from_micros(self.cs_us.1)
    }

    pub fn describe(&self) -> String {
        let workers: Vec<String> = self
            .workers
            .iter()
            .map(|w| format!("{}a+{}s", w.async_tasks, w.sync_tasks))
            .collect();
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(at, f)| format!("{}@{}ms", describe_fault(*f), at.as_millis()))
            .collect();
        format!(
            "round {} {}/{}{} {} ms, names {:?}{}, tasks {}a+{}s on {} Locker(s), workers [{}], acquire {:?} ms, cs {:?} µs, lease {:?} ms, renew {:?}, cancel {:.2}, attr {:.2}, faults [{}]",
            self.index,
            self.deploy.label(),
            self.kind.label(),
            if self.hot { " (hot)" } else { "" },
            self.millis,
            self.names,
            if self.kind == Kind::Semaphore {
                format!(" ({} permits)", self.permits)
            } else {
                String::new()
            },
            self.async_tasks,
            self.sync_tasks,
            self.lockers,
            workers.join(" "),
            self.acquire_ms,
            self.cs_us,
            self.expire_ms,
            self.renew,
            self.cancel_p,
            self.attr_p,
            faults.join(" "),
        )
    }
}

fn describe_fault(f: Fault) -> String {
    match f {
        Fault::Stall { node, ms } => format!("stall(node {node}, {ms} ms)"),
        Fault::Cut { node } => format!("cut(node {node})"),
        Fault::Restart { node } => format!("restart(node {node})"),
        Fault::KillWorker { worker } => format!("kill(worker {worker})"),
    }
}

/// The Redlock's `max_lease`: a restarted node is out of every majority
/// this long, and no Redlock lease may be longer.
pub const REDLOCK_MAX_LEASE: Duration = Duration::from_millis(1500);

/// The whole run.
pub struct Plan {
    pub rounds: Vec<Round>,
}

/// The plan for `seed` with a budget of `secs` seconds of rounds.
pub fn make(seed: u64, secs: u64) -> Plan {
    let mut rng = StdRng::seed_from_u64(seed);
    let budget = secs.max(1) * 1000;
    let mut rounds = Vec::new();
    let mut used = 0;
    let mut required = REQUIRED.to_vec();
    required.shuffle(&mut rng);
    // One cut, restart and killed worker at least (the numbers of `round`'s
    // fault draw).
    let mut wanted = vec![4, 6, 7];
    while used < budget {
        let index = rounds.len();
        // A round of at least 1.5 s; the last one takes what is left.
        let mut millis = rng.random_range(2_000..=5_000_u64);
        if budget - used < millis + 1_500 {
            millis = budget - used;
        }
        used += millis;
        // Every third round is a hot lock round; the others cover the
        // required deployments and kinds first, in a seeded order.
        let shape = if index % 3 == 0 {
            Shape::HotLock
        } else if let Some((deploy, kind)) = required.pop() {
            Shape::Given(deploy, kind)
        } else {
            Shape::Any
        };
        rounds.push(round(&mut rng, index, millis, shape, &mut wanted));
    }
    // A kind of fault no round drew goes, half-way, into the first round
    // that is not hot and where it applies (if there is one).
    for pick in wanted {
        let fits = |r: &&mut Round| {
            !r.hot
                && match pick {
                    7 => !r.workers.is_empty(),
                    _ => r.deploy != Deploy::Cluster,
                }
        };
        if let Some(r) = rounds.iter_mut().find(fits) {
            let fault = match pick {
                4 => Fault::Cut { node: 0 },
                6 => Fault::Restart { node: 0 },
                _ => Fault::KillWorker { worker: 0 },
            };
            r.faults.push((Duration::from_millis(r.millis / 2), fault));
            r.faults.sort_by_key(|(at, _)| *at);
        }
    }
    Plan { rounds }
}

/// What a round must be, before the rest is drawn.
enum Shape {
    /// A hot lock round (one server or the Cluster).
    HotLock,
    /// This deployment and kind (hot or not is drawn).
    Given(Deploy, Kind),
    /// Anything.
    Any,
}

/// Every kind on one server; locks and sets also on a Cluster and a
/// Redlock (read-write locks and semaphores are refused on a Redlock).
const REQUIRED: [(Deploy, Kind); 8] = [
    (Deploy::Single, Kind::Lock),
    (Deploy::Single, Kind::Rw),
    (Deploy::Single, Kind::Semaphore),
    (Deploy::Single, Kind::Set),
    (Deploy::Cluster, Kind::Lock),
    (Deploy::Cluster, Kind::Set),
    (Deploy::Redlock, Kind::Lock),
    (Deploy::Redlock, Kind::Set),
];

/// `wanted`: the fault kinds (by their `pick` numbers below) the run has
/// not had yet.
fn round(
    rng: &mut StdRng,
    index: usize,
    millis: u64,
    shape: Shape,
    wanted: &mut Vec<u32>,
) -> Round {
    let (hot, deploy, kind) = match shape {
        // The schedules that find a process-local queue handing a lock to
        // a waiter that already gave up: many tasks of one Locker on one
        // name, acquire times of a few ms.
        Shape::HotLock => {
            let deploy = if rng.random_bool(0.75) {
                Deploy::Single
            } else {
                Deploy::Cluster
            };
            (true, deploy, Kind::Lock)
        }
        Shape::Given(deploy, kind) => (
            deploy != Deploy::Redlock && rng.random_bool(0.3),
            deploy,
            kind,
        ),
        Shape::Any => {
            let deploy = match rng.random_range(0..4) {
                0 | 1 => Deploy::Single,
                2 => Deploy::Cluster,
                _ => Deploy::Redlock,
            };
            let kind = if deploy == Deploy::Redlock {
                if rng.random_bool(0.6) {
                    Kind::Lock
                } else {
                    Kind::Set
                }
            } else {
                match rng.random_range(0..4) {
                    0 => Kind::Lock,
                    1 => Kind::Rw,
                    2 => Kind::Semaphore,
                    _ => Kind::Set,
                }
            };
            (
                deploy != Deploy::Redlock && rng.random_bool(0.3),
                deploy,
                kind,
            )
        }
    };
    let name_count = match kind {
        Kind::Set => rng.random_range(3..=4),
        _ if hot => 1,
        _ => rng.random_range(1..=2),
    };
    let tag = deploy.label();
    let names = (0..name_count)
        .map(|n| format!("t{index}-{tag}-{}{n}", kind.label()))
        .collect();
    let permits = rng.random_range(2..=4);

    let (async_tasks, sync_tasks, lockers, workers) = if hot {
        let async_tasks = rng.random_range(12..=28);
        let sync_tasks = rng.random_range(0..=4);
        // Sometimes a worker process joins, on the same name.
        let workers = if rng.random_bool(0.25) {
            vec![Worker {
                async_tasks: rng.random_range(4..=12),
                sync_tasks: 0,
            }]
        } else {
            Vec::new()
        };
        (async_tasks, sync_tasks, 1, workers)
    } else {
        let async_tasks = rng.random_range(2..=10);
        let sync_tasks = rng.random_range(0..=3);
        let lockers = if rng.random_bool(0.25) { 2 } else { 1 };
        let workers = if rng.random_bool(0.5) {
            (0..rng.random_range(1..=3))
                .map(|_| Worker {
                    async_tasks: rng.random_range(1..=6),
                    sync_tasks: rng.random_range(0..=2),
                })
                .collect()
        } else {
            Vec::new()
        };
        (async_tasks, sync_tasks, lockers, workers)
    };

    // A Redlock with many contenders and acquire times of a few ms grants
    // little (split votes end in NoQuorum): fewer such rounds there.
    let short_p = if deploy == Deploy::Redlock { 0.25 } else { 0.4 };
    let acquire_ms = if hot || rng.random_bool(short_p) {
        (1, 12)
    } else if rng.random_bool(0.5) {
        (20, 300)
    } else {
        (500, 3_000)
    };
    let cs_us = if hot || rng.random_bool(0.6) {
        (0, 2_000)
    } else {
        (0, 20_000)
    };
    let max_lease = if deploy == Deploy::Redlock {
        REDLOCK_MAX_LEASE.as_millis() as u64
    } else {
        5_000
    };
    let (expire_ms, renew) = match rng.random_range(0..4) {
        // Short leases, not renewed: critical sections outlive some of them.
        0 => ((30, 300), Renew::Off),
        // Short leases kept alive by renewal.
        1 => ((60, 400), Renew::On),
        2 => ((1_000, max_lease), Renew::Mixed),
        _ => ((100, max_lease), Renew::Mixed),
    };
    let overrun_p = if renew == Renew::On {
        0.0
    } else {
        rng.random_range(0.0..0.05)
    };

    // Faults: up to 2 stalls in a hot round, up to 3 of any kind in the others.
    let mut faults = Vec::new();
    let fault_count = if hot {
        rng.random_range(0..=2)
    } else if rng.random_bool(0.7) {
        rng.random_range(1..=3)
    } else {
        0
    };
    let nodes = if deploy == Deploy::Single { 1 } else { 3 };
    for _ in 0..fault_count {
        let at = Duration::from_millis(rng.random_range(millis / 10..=millis * 8 / 10));
        let node = rng.random_range(0..nodes);
        let mut pick = rng.random_range(0..10);
        // A kind of fault the run has not had yet comes first, where it applies.
        if !hot {
            let applies = |k: &u32| match k {
                4 | 6 => deploy != Deploy::Cluster,
                7 => !workers.is_empty(),
                _ => true,
            };
            if let Some(i) = wanted.iter().position(applies) {
                pick = wanted.remove(i);
            }
        }
        let fault = match pick {
            _ if hot => Fault::Stall {
                node,
                ms: rng.random_range(50..=300),
            },
            0..=3 => Fault::Stall {
                node,
                ms: rng.random_range(50..=300),
            },
            // The Cluster is reached directly: no proxy to cut, and no
            // restart (a node restarted empty leaves the cluster).
            4..=5 if deploy != Deploy::Cluster => Fault::Cut { node },
            6 if deploy != Deploy::Cluster => Fault::Restart { node },
            7..=9 if !workers.is_empty() => Fault::KillWorker {
                worker: rng.random_range(0..workers.len()),
            },
            _ => Fault::Stall {
                node,
                ms: rng.random_range(50..=300),
            },
        };
        faults.push((at, fault));
    }
    faults.sort_by_key(|(at, _)| *at);

    Round {
        index,
        deploy,
        kind,
        hot,
        millis,
        names,
        permits,
        async_tasks,
        sync_tasks,
        lockers,
        workers,
        acquire_ms,
        cs_us,
        expire_ms,
        renew,
        cancel_p: if rng.random_bool(0.6) {
            rng.random_range(0.0..0.3)
        } else {
            0.0
        },
        attr_p: rng.random_range(0.0..0.6),
        overrun_p,
        long_p: if acquire_ms.0 >= 500 {
            rng.random_range(0.05..0.2)
        } else {
            0.0
        },
        write_p: rng.random_range(0.2..0.7),
        drop_p: rng.random_range(0.0..0.3),
        faults,
    }
}

/// The RNG of one task: its own stream, from the seed, the round, the
/// process (0: the parent, 1..: workers) and the task.
pub fn task_rng(seed: u64, round: usize, process: usize, task: usize) -> StdRng {
    let mix = seed
        ^ (round as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (process as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
        ^ (task as u64).wrapping_mul(0x1656_67B1_9E37_79F9);
    StdRng::seed_from_u64(mix)
}
