//! Row 12: the Redis CPU of a read-write lock's calls against the number of
//! readers holding (lockattr only), by Redis's own accounting.
//!
//! On the single server, `HELD[0]` readers hold one name and `HELD[1]`
//! another (each a `read_lock(name).expire(HELD_LEASE).acquire()` whose
//! guard is kept, taken before anything is measured). Then, in cycles of
//! blocks A B B A (A: the name with one reader, B: the one with 1,000),
//! each block measures, on its name:
//!
//! - `BLOCK` read calls: acquire + release of one more reader;
//! - `BLOCK` writer's tries: `write_lock(name).acquire_timeout(ZERO)
//!   .acquire()`, which the readers make fail busy.
//!
//! Each of these runs between a `CONFIG RESETSTAT` and an `INFO
//! commandstats` on a connection of its own, so Redis counts nothing else:
//! the `usec` of `cmdstat_evalsha` and `cmdstat_fcall` (the library sends
//! its scripts with FCALL, or EVALSHA to a server without Redis Functions;
//! a script's usec includes the commands it runs) over the calls
//! gives the block's Redis µs per call, and its `calls` how many script
//! calls each took. The figure is the median of the blocks' µs per call:
//! Redis times a command on the wall clock, so a block in which another
//! process took its CPU away mid-script reads high (on 2 cores, often), and
//! the median leaves those blocks out where the mean (total usec / total
//! calls, recorded too) does not. The readers are released at the end.

use std::future::Future;
use std::time::Duration;

use lockattr::Locker;

use super::Report;
use crate::servers::info_field;
use crate::util::{connect, median};
use crate::{ACQUIRE_TIMEOUT, EXPIRE, Plan, Res};

/// The readers holding the name, per side of the comparison.
pub const HELD: [usize; 2] = [1, 1000];
/// The lease of the readers holding: longer than the row takes.
pub const HELD_LEASE: Duration = Duration::from_secs(600);
/// Read calls and writer's tries per name before measuring (scripts
/// loaded, connections up).
const WARMUP: usize = 20;
/// Calls of one kind per block.
pub const BLOCK: usize = 10;

/// Redis's accounting of one kind of call on one name, over its blocks.
#[derive(Debug, Default, Clone)]
pub struct Cost {
    /// Calls measured (read calls, or writer's tries).
    pub calls: u64,
    /// `calls` of `cmdstat_evalsha` and `cmdstat_fcall` over them.
    pub script_calls: u64,
    /// `usec` of `cmdstat_evalsha` and `cmdstat_fcall` over them.
    pub usec: u64,
    /// Each block's Redis µs per call.
    pub block_us: Vec<f64>,
}

impl Cost {
    /// The figure: the median of the blocks' Redis µs per call.
    pub fn us_per_call(&self) -> f64 {
        median(&self.block_us)
    }

    /// Redis µs per call over all calls (total usec / calls).
    pub fn mean_us_per_call(&self) -> f64 {
        crate::util::ratio(self.usec as f64, self.calls as f64)
    }

    /// Script calls per call measured.
    pub fn scripts_per_call(&self) -> f64 {
        crate::util::ratio(self.script_calls as f64, self.calls as f64)
    }

    /// Redis µs per script call over all calls.
    pub fn mean_us_per_script_call(&self) -> f64 {
        crate::util::ratio(self.usec as f64, self.script_calls as f64)
    }

    /// Adds a block of `calls` calls.
    fn add(&mut self, calls: u64, script_calls: u64, usec: u64) {
        self.calls += calls;
        self.script_calls += script_calls;
        self.usec += usec;
        self.block_us
            .push(crate::util::ratio(usec as f64, calls as f64));
    }
}

/// Row 12; `[_; 2]` figures are by index of [`HELD`].
#[derive(Debug, Default, Clone)]
pub struct RwCost {
    /// Cycles of blocks A B B A: each kind of call runs `2 * cycles *
    /// BLOCK` times per reader count.
    pub cycles: usize,
    /// Readers in the name's index (`ZCARD`) just before measuring:
    /// information, to show the readers were there.
    pub readers_seen: [Option<u64>; 2],
    /// Read calls (acquire + release of one more reader).
    pub read: [Cost; 2],
    /// A writer's tries, failing busy.
    pub write_try: [Cost; 2],
}

impl RwCost {
    /// A read call's Redis µs (the median of blocks) with `HELD[1]`
    /// readers over that with `HELD[0]`.
    pub fn read_ratio(&self) -> f64 {
        crate::util::ratio(self.read[1].us_per_call(), self.read[0].us_per_call())
    }

    /// A writer's try's Redis µs (the median of blocks) with `HELD[1]`
    /// readers over that with `HELD[0]`.
    pub fn write_ratio(&self) -> f64 {
        crate::util::ratio(
            self.write_try[1].us_per_call(),
            self.write_try[0].us_per_call(),
        )
    }
}

/// Row 12 on the single server.
pub async fn rw_cost(url: &str, plan: &Plan, report: &mut Report) -> Res<()> {
    let locker = Locker::new(url)?;
    let mut raw = connect(url, Some(Duration::from_secs(5))).await?;
    let names = HELD.map(|n| format!("bench:rwcost:{n}"));
    let mut held = Vec::with_capacity(HELD.iter().sum());
    for (name, &n) in names.iter().zip(&HELD) {
        for _ in 0..n {
            held.push(
                locker
                    .read_lock(name)
                    .expire(HELD_LEASE)
                    .acquire_timeout(ACQUIRE_TIMEOUT)
                    .acquire()
                    .await?,
            );
        }
    }
    for name in &names {
        for _ in 0..WARMUP {
            read_call(&locker, name).await?;
            writer_try(&locker, name).await?;
        }
    }
    let cost = &mut report.rw_cost;
    for (i, name) in names.iter().enumerate() {
        let index = format!("{}{{{name}}}:rw:reading", locker.prefix());
        cost.readers_seen[i] = redis::cmd("ZCARD")
            .arg(&index)
            .query_async::<u64>(&mut raw)
            .await
            .ok();
    }
    cost.cycles = plan.rw_cost_calls.div_ceil(2 * BLOCK).max(1);
    for _ in 0..cost.cycles {
        for side in [0, 1, 1, 0] {
            let name = &names[side];
            let (scripts, usec) = measure(&mut raw, || read_call(&locker, name)).await?;
            cost.read[side].add(BLOCK as u64, scripts, usec);
            let (scripts, usec) = measure(&mut raw, || writer_try(&locker, name)).await?;
            cost.write_try[side].add(BLOCK as u64, scripts, usec);
        }
    }
    for guard in held {
        guard.release().await?;
    }
    Ok(())
}

/// Acquire + release of one more reader on `name`.
async fn read_call(locker: &Locker, name: &str) -> Res<()> {
    locker
        .read_lock(name)
        .expire(EXPIRE)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .acquire()
        .await?
        .release()
        .await?;
    Ok(())
}

/// A writer's try on `name`, which the readers holding make fail busy.
async fn writer_try(locker: &Locker, name: &str) -> Res<()> {
    match locker
        .write_lock(name)
        .expire(EXPIRE)
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await
    {
        Err(e) if e.is_timeout() => Ok(()),
        Err(e) => Err(e.into()),
        Ok(guard) => {
            guard.release().await?;
            Err(format!("a writer got `{name}` while readers held it").into())
        }
    }
}

/// Redis's accounting of `BLOCK` calls of `op`, stats reset right before
/// and read right after: the `calls` and `usec` of `cmdstat_evalsha` and
/// `cmdstat_fcall`.
async fn measure<F, Fut>(raw: &mut redis::aio::MultiplexedConnection, mut op: F) -> Res<(u64, u64)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Res<()>>,
{
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(raw)
        .await?;
    for _ in 0..BLOCK {
        op().await?;
    }
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(raw)
        .await?;
    // EVALSHA, or FCALL on a server that takes Redis Functions.
    let field = |key: &str| {
        ["cmdstat_evalsha", "cmdstat_fcall"]
            .iter()
            .filter_map(|command| {
                info_field(&stats, command).and_then(|v| {
                    v.split(',')
                        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                        .and_then(|x| x.parse::<u64>().ok())
                })
            })
            .sum::<u64>()
    };
    Ok((field("calls"), field("usec")))
}
