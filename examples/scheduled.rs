//! A scheduled job on three replicas: each runs it every second, by its own
//! clock, and the clocks differ by a little; `hold_at_least` makes the job
//! run once per period all the same.
//!
//! Run with `cargo run --example scheduled`. Uses `REDIS_URL` when set,
//! otherwise starts a throwaway `redis-server` itself.
//!
//! The lock is named after the period (`report:<n>`) and taken with one
//! attempt (`acquire_time = 0`): the replica that comes first runs the job,
//! the others find the lock held and skip it. The job takes a few
//! milliseconds, so without `hold_at_least` the first replica would release
//! the lock long before a replica whose clock is 150 ms late asks for it,
//! and that one would run the job again. With it, the lock stays until
//! 800 ms after it was taken, however fast the job was.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lockattr::{LockError, Locker, redis_lock};

/// How many periods the example runs.
const PERIODS: usize = 5;
/// The length of a period.
const PERIOD: Duration = Duration::from_secs(1);
/// How late each replica's clock is, compared with the first one's.
const CLOCK_SKEW: [Duration; 3] = [
    Duration::ZERO,
    Duration::from_millis(150),
    Duration::from_millis(300),
];

/// The job: once per period across all replicas. `runs` counts its runs
/// per period (a shared counter stands in for the report's output).
#[redis_lock(
    name = "report:{period}",
    expire = 5,
    hold_at_least = "800ms",
    acquire_time = 0,
    locker = locker
)]
async fn build_report(
    locker: &Locker,
    period: usize,
    replica: usize,
    runs: &[AtomicU32],
) -> Result<(), LockError> {
    runs[period].fetch_add(1, Ordering::SeqCst);
    println!("period {period}: replica {replica} builds the report");
    tokio::time::sleep(Duration::from_millis(20)).await; // the work
    Ok(())
}

/// One replica: its own thread, tokio runtime and Locker, firing the job at
/// the start of every period by its own (skewed) clock.
fn replica(
    replica: usize,
    url: String,
    first: Instant,
    runs: Arc<Vec<AtomicU32>>,
) -> std::thread::JoinHandle<Result<(), LockError>> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        runtime.block_on(async {
            let locker = Locker::new(url)?;
            for period in 0..PERIODS {
                let at = first + PERIOD * period as u32 + CLOCK_SKEW[replica];
                tokio::time::sleep_until(at.into()).await;
                match build_report(&locker, period, replica, &runs).await {
                    Ok(()) => {}
                    Err(LockError::Timeout { .. }) => {
                        println!("period {period}: replica {replica} skips it, already done");
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let redis = common::redis()?;
    let runs: Arc<Vec<AtomicU32>> = Arc::new((0..PERIODS).map(|_| AtomicU32::new(0)).collect());
    let first = Instant::now() + Duration::from_millis(200);
    let replicas: Vec<_> = (0..CLOCK_SKEW.len())
        .map(|r| replica(r, redis.url.clone(), first, runs.clone()))
        .collect();
    for handle in replicas {
        handle.join().expect("a replica panicked")?;
    }
    let counts: Vec<u32> = runs.iter().map(|r| r.load(Ordering::SeqCst)).collect();
    println!("runs per period: {counts:?}");
    if counts.iter().any(|&n| n != 1) {
        return Err(format!("expected one run per period, got {counts:?}").into());
    }
    Ok(())
}
