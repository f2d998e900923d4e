//! Row 6, many tasks on distinct locks, and row 7, the macro's overhead.

use std::time::{Duration, Instant};

use lockattr::{LockError, Locker};

use super::Report;
use crate::peers::{Lib, Libs};
use crate::util::{cpu_seconds, median, us};
use crate::{EXPIRE, MANY_TASKS, Plan, Res};

/// Row 6: `MANY_TASKS` tasks, each on its own lock name, through one
/// lock manager per library; blocks A B B A.
pub async fn many_locks(url: &str, redis_pid: u32, plan: &Plan, report: &mut Report) -> Res<()> {
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

/// Row 7, the annotated variant.
#[lockattr::redis_lock(name = "bench:macro:{id}", locker = locker, expire = 10, acquire_time = 10)]
async fn annotated(locker: &Locker, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

/// Row 7, the same by hand with the builder.
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

/// Row 7: the annotated function against the same by hand, interleaved
/// per iteration, medians.
pub async fn macro_overhead(url: &str, plan: &Plan, report: &mut Report) -> Res<()> {
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
