//! Rows 1 and 2: the RTT unit and uncontended acquire + release (also the
//! acquire + release of rows 8 and 9, through [`run`]).

use std::time::Duration;

use redis::aio::MultiplexedConnection;

use super::{Report, Uncontended};
use crate::peers::{Lib, Libs};
use crate::util::{connect, median, timed, us};
use crate::{EXPIRE, Plan, Res};

/// One operation of the interleaved loop.
#[derive(Clone, Copy, Debug)]
pub enum Op {
    /// A raw redis-rs PING on a connection of this runtime (the unit).
    RawPing,
    /// `Locker::ping`.
    LockerPing,
    /// Acquire + release of a library.
    Pair(Lib),
}

/// Rows 1 and 2, measured twice:
/// - per iteration: each iteration runs raw PING, `Locker::ping`, and one
///   acquire + release of each library, in an order that rotates every
///   iteration (every operation follows a few hundred µs of other work);
/// - in blocks: `plan.uncontended_block` iterations of one operation in a
///   row (a tight loop), the four operations taking turns in a rotating order.
pub async fn uncontended(url: &str, plan: &Plan, report: &mut Report) -> Res<()> {
    let mut raw = connect(url, Some(Duration::from_secs(5))).await?;
    let libs = Libs::new(url, None)?;
    let ops = [
        Op::RawPing,
        Op::LockerPing,
        Op::Pair(Lib::Lockattr),
        Op::Pair(Lib::Rslock),
    ];
    for (run_index, block) in [(0, 1), (1, plan.uncontended_block)] {
        let samples = run(&mut raw, &libs, &ops, plan.warmup, plan.iterations, block).await?;
        report.uncontended[run_index] = Uncontended {
            block,
            rtt_us: median(&samples[0]),
            locker_ping_us: median(&samples[1]),
            pair_us: [median(&samples[2]), median(&samples[3])],
        };
    }
    // The unit of the other rows: PING sampled in the same moments as the
    // libraries' operations (on a VM the loopback RTT flips between modes;
    // interleaving per iteration samples them alike).
    report.rtt_us = report.uncontended[0].rtt_us;
    Ok(())
}

/// Samples in µs of each of `ops`, run `block` iterations at a time, the
/// operations taking turns in an order that rotates every cycle; the first
/// `warmup` iterations are not kept.
pub async fn run(
    raw: &mut MultiplexedConnection,
    libs: &Libs,
    ops: &[Op],
    warmup: usize,
    iterations: usize,
    block: usize,
) -> Res<Vec<Vec<f64>>> {
    let names = ["bench:uncontended:lockattr", "bench:uncontended:rslock"];
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); ops.len()];
    let cycles = (warmup + iterations).div_ceil(block);
    for cycle in 0..cycles {
        for k in 0..ops.len() {
            let op = (cycle + k) % ops.len();
            for j in 0..block {
                let took = match ops[op] {
                    Op::RawPing => {
                        timed(async {
                            redis::cmd("PING").query_async::<()>(raw).await?;
                            Ok(())
                        })
                        .await?
                    }
                    Op::LockerPing => libs.locker.ping().await?,
                    Op::Pair(lib) => {
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
                if (warmup..warmup + iterations).contains(&i) {
                    samples[op].push(us(took));
                }
            }
        }
    }
    Ok(samples)
}
