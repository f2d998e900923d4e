//! Rows 10 and 11: the lock kinds other than the plain lock (lockattr only),
//! each against a lockattr baseline measured in the same loop.
//!
//! Row 10, uncontended acquire + release, interleaved per iteration with
//! the plain lock and a raw PING (order rotating): a set of two names
//! (against two locks taken one after the other, what a caller would write
//! without `lock_all`), the read side and the write side of a read-write
//! lock, and a permit of a semaphore of 4 (against the plain lock).
//!
//! Row 11, readers sharing: `READERS` tasks of one process loop acquire,
//! hold for `READ_HOLD`, release on one name, in blocks A B B A: the read
//! side against the write side (which admits one at a time). Also the most
//! holders seen inside at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockattr::Locker;

use super::Report;
use crate::util::{connect, median, timed, us};
use crate::{ACQUIRE_TIMEOUT, EXPIRE, Plan, Res};

/// Tasks of row 11.
pub const READERS: usize = 16;
/// How long each of row 11's holders holds.
pub const READ_HOLD: Duration = Duration::from_millis(2);
/// Permits of row 10's semaphore.
pub const PERMITS: u32 = 4;

/// Row 10's operations, in the order of [`Kinds::pair_us`].
#[derive(Clone, Copy, Debug)]
enum Op {
    RawPing,
    Lock,
    TwoLocks,
    Set,
    Read,
    Write,
    Permit,
}

const OPS: [Op; 7] = [
    Op::RawPing,
    Op::Lock,
    Op::TwoLocks,
    Op::Set,
    Op::Read,
    Op::Write,
    Op::Permit,
];

/// Rows 10 and 11.
#[derive(Debug, Default, Clone)]
pub struct Kinds {
    /// Row 10's measured iterations.
    pub iterations: usize,
    /// Row 10: median raw PING in the same loop, µs.
    pub rtt_us: f64,
    /// Row 10: medians in µs: a lock, two locks in a row, a set of two
    /// names, a read, a write, a semaphore permit.
    pub pair_us: [f64; 6],
    /// Row 11: holds finished per second, `[read, write]`.
    pub shared_per_s: [f64; 2],
    /// Row 11: the most holders inside at once, `[read, write]`.
    pub most_inside: [usize; 2],
    /// Row 11: measured seconds per side.
    pub shared_seconds: f64,
}

impl Kinds {
    /// Row 10's figure of `kind` (index into `pair_us`) over `base`'s.
    pub fn pair_ratio(&self, kind: usize, base: usize) -> f64 {
        crate::util::ratio(self.pair_us[kind], self.pair_us[base])
    }
}

/// Rows 10 and 11 on the single server.
pub async fn kinds(url: &str, plan: &Plan, report: &mut Report) -> Res<()> {
    let locker = Locker::new(url)?;
    let mut raw = connect(url, Some(Duration::from_secs(5))).await?;
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); OPS.len()];
    for i in 0..plan.warmup + plan.iterations {
        for k in 0..OPS.len() {
            let op = OPS[(i + k) % OPS.len()];
            let took = timed(async {
                match op {
                    Op::RawPing => redis::cmd("PING").query_async::<()>(&mut raw).await?,
                    Op::Lock => {
                        request(locker.lock("bench:kinds:lock"))
                            .acquire()
                            .await?
                            .release()
                            .await?
                    }
                    Op::TwoLocks => {
                        let a = request(locker.lock("bench:kinds:two:a")).acquire().await?;
                        let b = request(locker.lock("bench:kinds:two:b")).acquire().await?;
                        b.release().await?;
                        a.release().await?
                    }
                    Op::Set => {
                        locker
                            .lock_all(["bench:kinds:set:a", "bench:kinds:set:b"])
                            .expire(EXPIRE)
                            .acquire_timeout(ACQUIRE_TIMEOUT)
                            .acquire()
                            .await?
                            .release()
                            .await?
                    }
                    Op::Read => {
                        request(locker.read_lock("bench:kinds:rw"))
                            .acquire()
                            .await?
                            .release()
                            .await?
                    }
                    Op::Write => {
                        request(locker.write_lock("bench:kinds:rw"))
                            .acquire()
                            .await?
                            .release()
                            .await?
                    }
                    Op::Permit => {
                        request(locker.semaphore("bench:kinds:sem", PERMITS))
                            .acquire()
                            .await?
                            .release()
                            .await?
                    }
                }
                Ok(())
            })
            .await?;
            if i >= plan.warmup {
                samples[op as usize].push(us(took));
            }
        }
    }
    let kinds = &mut report.kinds;
    kinds.iterations = plan.iterations;
    kinds.rtt_us = median(&samples[0]);
    for (slot, s) in kinds.pair_us.iter_mut().zip(&samples[1..]) {
        *slot = median(s);
    }
    shared(&locker, plan, kinds).await
}

/// `builder` with the bench's lease and acquire timeout.
fn request(builder: lockattr::LockBuilder<'_>) -> lockattr::LockBuilder<'_> {
    builder.expire(EXPIRE).acquire_timeout(ACQUIRE_TIMEOUT)
}

/// Row 11.
async fn shared(locker: &Locker, plan: &Plan, kinds: &mut Kinds) -> Res<()> {
    let mut holds = [0u64; 2];
    let mut seconds = [0f64; 2];
    for side in [0, 1, 1, 0] {
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let start = Instant::now();
        let end = start + plan.many_block;
        let mut tasks = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            let (locker, inside, most) = (locker.clone(), inside.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < end {
                    let builder = if side == 0 {
                        locker.read_lock("bench:kinds:shared")
                    } else {
                        locker.write_lock("bench:kinds:shared")
                    };
                    let guard = request(builder).acquire().await?;
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(READ_HOLD).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await?;
                    n += 1;
                }
                Res::Ok(n)
            }));
        }
        for task in tasks {
            holds[side] += task.await??;
        }
        seconds[side] += start.elapsed().as_secs_f64();
        kinds.most_inside[side] = kinds.most_inside[side].max(most.load(Ordering::SeqCst));
    }
    kinds.shared_per_s = [0, 1].map(|side| holds[side] as f64 / seconds[side]);
    kinds.shared_seconds = plan.many_block.as_secs_f64() * 2.0;
    Ok(())
}
