//! What the tasks do: draw an attempt from their own seeded stream, take
//! the lock (builder or `#[redis_lock]`, async or blocking), record the
//! critical section in the ledger with a fenced write at each end, give
//! the lock back; until the round's time is up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockattr::{LockError, LockGuard, LockSetGuard, Locker, redis_lock};
use rand::RngExt;
use rand::rngs::StdRng;

use super::ledger::{Mode, Sink};
use super::plan::{self, Kind, Renew, Round};

/// What one task needs to know.
pub struct TaskCtx {
    pub seed: u64,
    pub round: Round,
    /// 0: the parent; 1..: a worker.
    pub process: usize,
    /// No attempt starts after this.
    pub stop: Instant,
}

/// One attempt, drawn before it starts.
struct Attempt {
    names: Vec<String>,
    mode: Mode,
    acquire: Duration,
    expire: Duration,
    renew: bool,
    cs: Duration,
    /// Drop the acquire future after this long.
    cancel: Option<Duration>,
    attr: bool,
    drop_guard: bool,
}

fn draw(rng: &mut StdRng, round: &Round, sync: bool) -> Attempt {
    let names = match round.kind {
        Kind::Set => {
            let k = rng.random_range(2..=3.min(round.names.len()));
            let mut pool = round.names.clone();
            let mut names = Vec::new();
            for _ in 0..k {
                names.push(pool.swap_remove(rng.random_range(0..pool.len())));
            }
            names
        }
        _ => vec![round.names[rng.random_range(0..round.names.len())].clone()],
    };
    let mode = match round.kind {
        Kind::Lock | Kind::Set => Mode::Lock,
        Kind::Rw if rng.random_bool(round.write_p) => Mode::Write,
        Kind::Rw => Mode::Read,
        Kind::Semaphore => Mode::Permit(round.permits),
    };
    let acquire = Duration::from_millis(rng.random_range(round.acquire_ms.0..=round.acquire_ms.1));
    let expire = Duration::from_millis(rng.random_range(round.expire_ms.0..=round.expire_ms.1));
    let renew = match round.renew {
        Renew::Off => false,
        Renew::On => true,
        Renew::Mixed => rng.random_bool(0.5),
    };
    let mut cs = Duration::from_micros(rng.random_range(round.cs_us.0..=round.cs_us.1));
    if !renew && expire <= Duration::from_millis(500) && rng.random_bool(round.overrun_p) {
        // Outlives its lease: the guard must say it is lost by the exit.
        cs = expire + Duration::from_millis(rng.random_range(5..=40));
    } else if rng.random_bool(round.long_p) {
        // A long holder: waiters with long acquire times time out behind
        // it, which the liveness oracle checks (renewed or not: a lease
        // shorter than this is lost, and reported).
        cs = Duration::from_millis(rng.random_range(300..=2_500));
    }
    let attr = rng.random_bool(round.attr_p);
    let cancel = (!sync && !attr && rng.random_bool(round.cancel_p))
        .then(|| acquire.mul_f64(rng.random_range(0.0..1.0)));
    Attempt {
        names,
        mode,
        acquire,
        expire,
        renew,
        cs,
        cancel,
        attr,
        drop_guard: rng.random_bool(round.drop_p),
    }
}

/// A held guard's members: (name, fencing token, lost).
pub trait Members: Sync {
    fn members(&self) -> Vec<(String, u64, bool)>;
}

impl Members for LockGuard {
    fn members(&self) -> Vec<(String, u64, bool)> {
        vec![(self.name().to_owned(), self.fencing_token(), self.is_lost())]
    }
}

impl Members for LockSetGuard {
    fn members(&self) -> Vec<(String, u64, bool)> {
        self.names()
            .map(|n| {
                let g = self.guard_of(n).expect("a member");
                (n.to_owned(), g.fencing_token(), g.is_lost())
            })
            .collect()
    }
}

fn enter(sink: &mut Sink, holder: u64, held: &dyn Members, mode: Mode) -> Vec<(String, u64)> {
    let members: Vec<(String, u64)> = held
        .members()
        .into_iter()
        .map(|(name, token, _)| (name, token))
        .collect();
    for (name, token) in &members {
        sink.enter(holder, name, *token, mode);
    }
    fenced_writes(sink, holder, &members, mode);
    members
}

fn fenced_writes(sink: &mut Sink, holder: u64, members: &[(String, u64)], mode: Mode) {
    if matches!(mode, Mode::Lock | Mode::Write) {
        for (name, token) in members {
            sink.write(holder, name, *token);
        }
    }
}

fn exit(sink: &mut Sink, holder: u64, held: &dyn Members, members: &[(String, u64)], mode: Mode) {
    fenced_writes(sink, holder, members, mode);
    for (name, _, lost) in held.members() {
        sink.exit(holder, &name, lost);
    }
}

/// The pieces a critical section sleeps in: between them it reads
/// `is_lost()` and reports a loss at once, so that a holder killed before
/// its exit is still excused by a loss it had seen.
const STEP: Duration = Duration::from_millis(10);

/// Reports the members newly lost; `seen`: those already reported.
fn report_lost(sink: &mut Sink, holder: u64, held: &dyn Members, seen: &mut Vec<String>) {
    for (name, _, lost) in held.members() {
        if lost && !seen.contains(&name) {
            sink.lost(holder, &name);
            seen.push(name);
        }
    }
}

/// The critical section of an async holder.
async fn section(sink: &mut Sink, holder: u64, held: &dyn Members, mode: Mode, cs: Duration) {
    let members = enter(sink, holder, held, mode);
    if cs.is_zero() {
        tokio::task::yield_now().await;
    } else {
        let (end, mut seen) = (Instant::now() + cs, Vec::new());
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            tokio::time::sleep(left.min(STEP)).await;
            report_lost(sink, holder, held, &mut seen);
        }
    }
    exit(sink, holder, held, &members, mode);
}

/// The critical section of a blocking holder.
fn section_blocking(sink: &mut Sink, holder: u64, held: &dyn Members, mode: Mode, cs: Duration) {
    let members = enter(sink, holder, held, mode);
    let (end, mut seen) = (Instant::now() + cs, Vec::new());
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(STEP));
        report_lost(sink, holder, held, &mut seen);
    }
    exit(sink, holder, held, &members, mode);
}

// ---- Annotated functions: the attribute's own paths. ----

#[redis_lock(name = "{name}", locker = locker, expire = expire, acquire_time = acquire, guard = g)]
async fn attr_lock(
    locker: &Locker,
    name: &str,
    expire: Duration,
    acquire: Duration,
    sink: &mut Sink,
    holder: u64,
    cs: Duration,
) -> Result<(), LockError> {
    section(sink, holder, g, Mode::Lock, cs).await;
    Ok(())
}

#[redis_lock(name = "{name}", locker = locker, expire = expire, acquire_time = acquire, renew, guard = g)]
async fn attr_lock_renewed(
    locker: &Locker,
    name: &str,
    expire: Duration,
    acquire: Duration,
    sink: &mut Sink,
    holder: u64,
    cs: Duration,
) -> Result<(), LockError> {
    section(sink, holder, g, Mode::Lock, cs).await;
    Ok(())
}

#[redis_lock(name = "{name}", locker = locker, expire = expire, acquire_time = acquire, mode = "read", guard = g)]
async fn attr_read(
    locker: &Locker,
    name: &str,
    expire: Duration,
    acquire: Duration,
    sink: &mut Sink,
    holder: u64,
    cs: Duration,
) -> Result<(), LockError> {
    section(sink, holder, g, Mode::Read, cs).await;
    Ok(())
}

#[redis_lock(name = "{name}", locker = locker, expire = expire, acquire_time = acquire, mode = "write", guard = g)]
async fn attr_write(
    locker: &Locker,
    name: &str,
    expire: Duration,
    acquire: Duration,
    sink: &mut Sink,
    holder: u64,
    cs: Duration,
) -> Result<(), LockError> {
    section(sink, holder, g, Mode::Write, cs).await;
    Ok(())
}

#[redis_lock(name = "{name}", locker = locker, expire = expire, acquire_time = acquire, permits = permits, guard = g)]
#[allow(clippy::too_many_arguments)]
async fn attr_permit(
    locker: &Locker,
    name: &str,
    permits: u32,
    expire: Duration,
    acquire: Duration,
    sink: &mut Sink,
    holder: u64,
    cs: Duration,
) -> Result<(), LockError> {
    section(sink, holder, g, Mode::Permit(permits), cs).await;
    Ok(())
}

#[redis_lock(name = [a, b], locker = locker, expire = expire, acquire_time = acquire, guard = g)]
#[allow(clippy::too_many_arguments)]
async fn attr_set(
    locker: &Locker,
    a: &str,
    b: &str,
    expire: Duration,
    acquire: Duration,
    sink: &mut Sink,
    holder: u64,
    cs: Duration,
) -> Result<(), LockError> {
    section(sink, holder, g, Mode::Lock, cs).await;
    Ok(())
}

#[redis_lock(name = "{name}", locker = locker, expire = expire, acquire_time = acquire, guard = g)]
fn attr_lock_blocking(
    locker: &Locker,
    name: &str,
    expire: Duration,
    acquire: Duration,
    sink: &mut Sink,
    holder: u64,
    cs: Duration,
) -> Result<(), LockError> {
    section_blocking(sink, holder, g, Mode::Lock, cs);
    Ok(())
}

#[redis_lock(name = "{name}", locker = locker, expire = expire, acquire_time = acquire, renew, guard = g)]
fn attr_lock_renewed_blocking(
    locker: &Locker,
    name: &str,
    expire: Duration,
    acquire: Duration,
    sink: &mut Sink,
    holder: u64,
    cs: Duration,
) -> Result<(), LockError> {
    section_blocking(sink, holder, g, Mode::Lock, cs);
    Ok(())
}

#[redis_lock(name = "{name}", locker = locker, expire = expire, acquire_time = acquire, mode = "read", guard = g)]
fn attr_read_blocking(
    locker: &Locker,
    name: &str,
    expire: Duration,
    acquire: Duration,
    sink: &mut Sink,
    holder: u64,
    cs: Duration,
) -> Result<(), LockError> {
    section_blocking(sink, holder, g, Mode::Read, cs);
    Ok(())
}

#[redis_lock(name = "{name}", locker = locker, expire = expire, acquire_time = acquire, mode = "write", guard = g)]
fn attr_write_blocking(
    locker: &Locker,
    name: &str,
    expire: Duration,
    acquire: Duration,
    sink: &mut Sink,
    holder: u64,
    cs: Duration,
) -> Result<(), LockError> {
    section_blocking(sink, holder, g, Mode::Write, cs);
    Ok(())
}

#[redis_lock(name = "{name}", locker = locker, expire = expire, acquire_time = acquire, permits = permits, guard = g)]
#[allow(clippy::too_many_arguments)]
fn attr_permit_blocking(
    locker: &Locker,
    name: &str,
    permits: u32,
    expire: Duration,
    acquire: Duration,
    sink: &mut Sink,
    holder: u64,
    cs: Duration,
) -> Result<(), LockError> {
    section_blocking(sink, holder, g, Mode::Permit(permits), cs);
    Ok(())
}

#[redis_lock(name = [a, b], locker = locker, expire = expire, acquire_time = acquire, guard = g)]
#[allow(clippy::too_many_arguments)]
fn attr_set_blocking(
    locker: &Locker,
    a: &str,
    b: &str,
    expire: Duration,
    acquire: Duration,
    sink: &mut Sink,
    holder: u64,
    cs: Duration,
) -> Result<(), LockError> {
    section_blocking(sink, holder, g, Mode::Lock, cs);
    Ok(())
}

/// A guard of either shape.
enum Held {
    One(LockGuard),
    Set(LockSetGuard),
}

impl Held {
    fn members(&self) -> &dyn Members {
        match self {
            Held::One(g) => g,
            Held::Set(g) => g,
        }
    }
}

/// The variant name of an error, for the counters.
fn label(e: &LockError) -> String {
    let debug = format!("{e:?}");
    let end = debug
        .find(|c: char| !c.is_alphanumeric())
        .unwrap_or(debug.len());
    debug[..end].to_owned()
}

fn failed(sink: &mut Sink, a: &Attempt, e: &LockError) {
    if e.is_timeout() {
        sink.count("timeout");
        sink.timeout(&a.names, a.mode, a.acquire);
    } else {
        sink.count(&format!("error:{}", label(e)));
    }
}

/// An async task of a round: attempts until the round's time is up.
pub async fn run_async(ctx: Arc<TaskCtx>, locker: Locker, mut sink: Sink, task: usize) {
    let mut rng = plan::task_rng(ctx.seed, ctx.round.index, ctx.process, task);
    let mut n = 0_u64;
    while Instant::now() < ctx.stop {
        n += 1;
        let holder = sink.holder(task, n);
        let a = draw(&mut rng, &ctx.round, false);
        if a.attr {
            let result = attr_async(&locker, &ctx.round, &a, &mut sink, holder).await;
            if let Err(e) = result {
                failed(&mut sink, &a, &e);
            }
            continue;
        }
        let acquire = acquire_async(&locker, &ctx.round, &a);
        let result = match a.cancel {
            Some(after) => match tokio::time::timeout(after, acquire).await {
                Ok(result) => result,
                Err(_) => {
                    sink.count("cancelled");
                    continue;
                }
            },
            None => acquire.await,
        };
        let held = match result {
            Ok(held) => held,
            Err(e) => {
                failed(&mut sink, &a, &e);
                continue;
            }
        };
        section(&mut sink, holder, held.members(), a.mode, a.cs).await;
        let released = match held {
            _ if a.drop_guard => Ok(()),
            Held::One(g) => g.release().await,
            Held::Set(g) => g.release().await,
        };
        if let Err(e) = released {
            sink.count(&format!("release:{}", label(&e)));
        }
    }
}

async fn acquire_async(locker: &Locker, round: &Round, a: &Attempt) -> Result<Held, LockError> {
    let name = &a.names[0];
    let one = match (round.kind, a.mode) {
        (Kind::Set, _) => {
            return locker
                .lock_all(&a.names)
                .expire(a.expire)
                .acquire_timeout(a.acquire)
                .renew(a.renew)
                .acquire()
                .await
                .map(Held::Set);
        }
        (_, Mode::Read) => locker.read_lock(name),
        (_, Mode::Write) => locker.write_lock(name),
        (_, Mode::Permit(n)) => locker.semaphore(name, n),
        (_, Mode::Lock) => locker.lock(name),
    };
    one.expire(a.expire)
        .acquire_timeout(a.acquire)
        .renew(a.renew)
        .acquire()
        .await
        .map(Held::One)
}

async fn attr_async(
    locker: &Locker,
    round: &Round,
    a: &Attempt,
    sink: &mut Sink,
    holder: u64,
) -> Result<(), LockError> {
    let name = a.names[0].as_str();
    let (e, t, cs) = (a.expire, a.acquire, a.cs);
    match a.mode {
        Mode::Lock if round.kind == Kind::Set => {
            attr_set(locker, name, &a.names[1], e, t, sink, holder, cs).await
        }
        Mode::Lock if a.renew => attr_lock_renewed(locker, name, e, t, sink, holder, cs).await,
        Mode::Lock => attr_lock(locker, name, e, t, sink, holder, cs).await,
        Mode::Read => attr_read(locker, name, e, t, sink, holder, cs).await,
        Mode::Write => attr_write(locker, name, e, t, sink, holder, cs).await,
        Mode::Permit(n) => attr_permit(locker, name, n, e, t, sink, holder, cs).await,
    }
}

/// A blocking task of a round (on a thread of its own).
pub fn run_blocking(ctx: Arc<TaskCtx>, locker: Locker, mut sink: Sink, task: usize) {
    let mut rng = plan::task_rng(ctx.seed, ctx.round.index, ctx.process, task);
    let mut n = 0_u64;
    while Instant::now() < ctx.stop {
        n += 1;
        let holder = sink.holder(task, n);
        let a = draw(&mut rng, &ctx.round, true);
        if a.attr {
            if let Err(e) = attr_blocking(&locker, &ctx.round, &a, &mut sink, holder) {
                failed(&mut sink, &a, &e);
            }
            continue;
        }
        let held = match acquire_blocking(&locker, &ctx.round, &a) {
            Ok(held) => held,
            Err(e) => {
                failed(&mut sink, &a, &e);
                continue;
            }
        };
        section_blocking(&mut sink, holder, held.members(), a.mode, a.cs);
        let released = match held {
            _ if a.drop_guard => Ok(()),
            Held::One(g) => g.release_blocking(),
            Held::Set(g) => g.release_blocking(),
        };
        if let Err(e) = released {
            sink.count(&format!("release:{}", label(&e)));
        }
    }
}

fn acquire_blocking(locker: &Locker, round: &Round, a: &Attempt) -> Result<Held, LockError> {
    let name = &a.names[0];
    let one = match (round.kind, a.mode) {
        (Kind::Set, _) => {
            return locker
                .lock_all(&a.names)
                .expire(a.expire)
                .acquire_timeout(a.acquire)
                .renew(a.renew)
                .acquire_blocking()
                .map(Held::Set);
        }
        (_, Mode::Read) => locker.read_lock(name),
        (_, Mode::Write) => locker.write_lock(name),
        (_, Mode::Permit(n)) => locker.semaphore(name, n),
        (_, Mode::Lock) => locker.lock(name),
    };
    one.expire(a.expire)
        .acquire_timeout(a.acquire)
        .renew(a.renew)
        .acquire_blocking()
        .map(Held::One)
}

fn attr_blocking(
    locker: &Locker,
    round: &Round,
    a: &Attempt,
    sink: &mut Sink,
    holder: u64,
) -> Result<(), LockError> {
    let name = a.names[0].as_str();
    let (e, t, cs) = (a.expire, a.acquire, a.cs);
    match a.mode {
        Mode::Lock if round.kind == Kind::Set => {
            attr_set_blocking(locker, name, &a.names[1], e, t, sink, holder, cs)
        }
        Mode::Lock if a.renew => attr_lock_renewed_blocking(locker, name, e, t, sink, holder, cs),
        Mode::Lock => attr_lock_blocking(locker, name, e, t, sink, holder, cs),
        Mode::Read => attr_read_blocking(locker, name, e, t, sink, holder, cs),
        Mode::Write => attr_write_blocking(locker, name, e, t, sink, holder, cs),
        Mode::Permit(n) => attr_permit_blocking(locker, name, n, e, t, sink, holder, cs),
    }
}
