//! Rows 1 and 2: the RTT unit and uncontended acquire + release, with the
//! bare client of [`super::bare`] (also the acquire + release of rows 8, 9
//! and 14, through [`run`]).

use std::time::Duration;

use redis::aio::MultiplexedConnection;

use super::bare::{self, Bare};
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
    /// The bare client's acquire + release (the commands lockattr sends).
    Bare,
}

/// Names of the locks of the uncontended loop, by `Lib::index`, then the
/// bare client's.
pub const NAMES: [&str; 3] = [
    "bench:uncontended:lockattr",
    "bench:uncontended:rslock",
    "bench:uncontended:bare",
];

/// The bare client and its own connection.
pub type BareClient = (Bare, MultiplexedConnection);

/// The port of a `redis://127.0.0.1:<port>/` URL.
pub fn port_of(url: &str) -> Res<u16> {
    let rest = url.rsplit_once(':').map(|(_, p)| p).unwrap_or_default();
    Ok(rest
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .map_err(|_| format!("no port in `{url}`"))?)
}

/// The bare client of row 2 on `url`, its commands captured from `libs`'s
/// Locker on the server at `port` (see [`bare`]).
pub async fn bare_client(
    url: &str,
    port: u16,
    raw: &mut MultiplexedConnection,
    libs: &Libs,
) -> Res<BareClient> {
    let bare = bare::capture(port, raw, libs, NAMES[0], NAMES[2]).await?;
    let con = connect(url, Some(Duration::from_secs(5))).await?;
    Ok((bare, con))
}

/// Rows 1 and 2, measured twice:
/// - per iteration: each iteration runs raw PING, `Locker::ping`, and one
///   acquire + release of each library, in an order that rotates every
///   iteration (every operation follows a few hundred µs of other work);
/// - in blocks: `plan.uncontended_block` iterations of one operation in a
///   row (a tight loop), the five operations taking turns in a rotating order.
///
/// The bare client's commands are captured first (see [`bare`]).
pub async fn uncontended(url: &str, plan: &Plan, report: &mut Report) -> Res<()> {
    let mut raw = connect(url, Some(Duration::from_secs(5))).await?;
    let libs = Libs::new(url, None)?;
    let mut bare = bare_client(url, port_of(url)?, &mut raw, &libs).await?;
    report.bare_commands = bare.0.shown();
    report.bare_command_names = bare.0.command_names();
    report.bare = Some(bare.0.clone());
    let ops = [
        Op::RawPing,
        Op::LockerPing,
        Op::Pair(Lib::Lockattr),
        Op::Pair(Lib::Rslock),
        Op::Bare,
    ];
    for (run_index, block) in [(0, 1), (1, plan.uncontended_block)] {
        let samples = run(
            &mut raw,
            &libs,
            Some(&mut bare),
            &ops,
            plan.warmup,
            plan.iterations,
            block,
        )
        .await?;
        report.uncontended[run_index] = Uncontended {
            block,
            rtt_us: median(&samples[0]),
            locker_ping_us: median(&samples[1]),
            pair_us: [median(&samples[2]), median(&samples[3])],
            bare_us: median(&samples[4]),
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
/// `warmup` iterations are not kept. `bare` runs [`Op::Bare`].
pub async fn run(
    raw: &mut MultiplexedConnection,
    libs: &Libs,
    mut bare: Option<&mut BareClient>,
    ops: &[Op],
    warmup: usize,
    iterations: usize,
    block: usize,
) -> Res<Vec<Vec<f64>>> {
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
                                .acquire_or_fail(lib, NAMES[lib.index()], EXPIRE)
                                .await?;
                            libs.release(held).await
                        })
                        .await?
                    }
                    Op::Bare => {
                        let (bare, con) = bare
                            .as_deref_mut()
                            .ok_or("the loop has a bare client's operation but no bare client")?;
                        timed(bare.pair(con)).await?
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
