//! Row 14: rows 2 and 3 at a realistic round trip. The single server is
//! reached through a userspace TCP delay proxy ([`crate::delay`]: one
//! thread per direction reads a chunk, sleeps until `read time + delay`
//! and writes it), at about 0.2 ms and 1 ms RTT.
//!
//! The tests' fault proxy (`tests/support/proxy.rs`, which row 14 also
//! measures with no delay, for comparison) hands each chunk from a reader
//! thread to a writer thread: two wake-ups more per direction, which on a
//! VM cost more than the 0.1 ms each way of the lower target.
//!
//! The proxy's own hops and `thread::sleep`'s timer slack add to the delay
//! set, so the delay is calibrated in the row's own loop (100 iterations,
//! 30 with `--quick`, not kept): its PING with no delay is the proxy's
//! floor, the delay is set to half of what the target lacks, then
//! corrected twice by half the difference the loop's PING still shows
//! (never below 0). The figure reported as the row's RTT is the raw PING
//! through the proxy measured in the measured loop, not the target.
//!
//! - Uncontended: raw PING, lockattr, rslock and the bare client of row 2
//!   (all through the proxy), interleaved per iteration, order rotating;
//!   medians.
//! - Hand-over: row 3's two processes, lockattr only (rslock's waiter
//!   sleeps a random 0–200 ms between tries, which a round trip does not
//!   move), the Locker through the proxy, the signals direct.

use std::time::Duration;

use super::bare::Bare;
use super::handoff::{self, Side};
use super::uncontended::{self, BareClient, NAMES, Op};
use super::{Handoff, Uncontended};
use crate::delay::DelayProxy;
use crate::peers::{Deploy, Lib, Libs};
use crate::proxy::Proxy;
use crate::util::{connect, median, timed, us};
use crate::{Plan, Res};

/// The target round trips, µs.
pub const TARGETS_US: [f64; 2] = [200.0, 1000.0];

/// Row 14 at one target RTT.
#[derive(Debug, Default, Clone)]
pub struct AtRtt {
    /// The round trip aimed at, µs.
    pub target_rtt_us: f64,
    /// The delay each way the proxy was set to, µs.
    pub delay_us: f64,
    /// Median PING through the proxy with no delay, in the row's loop, µs.
    pub proxy_floor_us: f64,
    /// Median PING through the tests' fault proxy with no delay, in a
    /// block of PINGs, µs.
    pub fault_proxy_floor_us: f64,
    /// Median PING direct to the server, in a block of PINGs, µs.
    pub direct_us: f64,
    /// Uncontended acquire + release through the proxy (`rtt_us`: the
    /// PING through it, in the same loop).
    pub uncontended: Uncontended,
    /// Measured iterations of the uncontended loop.
    pub iterations: usize,
    /// Row 3's hand-over through the proxy, lockattr only (index 0).
    pub handoff: Handoff,
}

/// Row 14 at every target in [`TARGETS_US`].
pub async fn at_rtt(url: &str, bare: &Bare, plan: &Plan) -> Res<Vec<AtRtt>> {
    let port = uncontended::port_of(url)?;
    let mut out = Vec::new();
    for target in TARGETS_US {
        out.push(one(url, port, bare, target, plan).await?);
    }
    Ok(out)
}

async fn one(url: &str, port: u16, bare: &Bare, target_us: f64, plan: &Plan) -> Res<AtRtt> {
    let calibration = if plan.quick { 30 } else { 100 };
    let direct_us = {
        let mut direct = connect(url, Some(Duration::from_secs(5))).await?;
        pings(&mut direct, calibration).await?
    };
    let fault_proxy_floor_us = {
        let fault = Proxy::start(port);
        let mut raw = connect(&fault.url(), Some(Duration::from_secs(5))).await?;
        pings(&mut raw, calibration).await?
    };
    let proxy = DelayProxy::start(port)?;
    let proxied = proxy.url();
    let mut raw = connect(&proxied, Some(Duration::from_secs(5))).await?;
    let libs = Libs::new(&proxied, None)?;
    for lib in [Lib::Lockattr, Lib::Rslock] {
        let held = libs
            .acquire_or_fail(lib, NAMES[lib.index()], crate::EXPIRE)
            .await?;
        libs.release(held).await?;
    }
    let mut bare: BareClient = (
        bare.clone(),
        connect(&proxied, Some(Duration::from_secs(5))).await?,
    );
    let ops = [
        Op::RawPing,
        Op::Pair(Lib::Lockattr),
        Op::Pair(Lib::Rslock),
        Op::Bare,
    ];
    // Calibrated in the loop itself: a PING timed between the libraries'
    // pairs is slower than one of a block of PINGs (colder threads).
    let mut ping_in_loop = async |delay: f64| -> Res<f64> {
        proxy.set_delay(Duration::from_secs_f64(delay / 1e6));
        let samples =
            uncontended::run(&mut raw, &libs, Some(&mut bare), &ops, 0, calibration, 1).await?;
        Ok(median(&samples[0]))
    };
    let floor = ping_in_loop(0.0).await?;
    let mut delay = ((target_us - floor) / 2.0).max(0.0);
    for _ in 0..2 {
        let measured = ping_in_loop(delay).await?;
        delay = (delay + (target_us - measured) / 2.0).max(0.0);
    }
    proxy.set_delay(Duration::from_secs_f64(delay / 1e6));

    let samples = uncontended::run(
        &mut raw,
        &libs,
        Some(&mut bare),
        &ops,
        plan.warmup / 2,
        plan.deploy_iterations,
        1,
    )
    .await?;
    let (handoff, _, _) = handoff::run_sides(
        url,
        &Deploy::Single(proxied.clone()),
        &[Side::of(Lib::Lockattr)],
        false,
        plan.deploy_handoff_rounds,
        plan,
    )
    .await?;
    drop((bare, libs, raw));
    drop(proxy);
    Ok(AtRtt {
        target_rtt_us: target_us,
        delay_us: delay,
        proxy_floor_us: floor,
        fault_proxy_floor_us,
        direct_us,
        uncontended: Uncontended {
            block: 1,
            rtt_us: median(&samples[0]),
            locker_ping_us: f64::NAN,
            pair_us: [median(&samples[1]), median(&samples[2])],
            bare_us: median(&samples[3]),
        },
        iterations: plan.deploy_iterations,
        handoff,
    })
}

/// The median of `n` raw PINGs on `raw`, µs.
async fn pings(raw: &mut redis::aio::MultiplexedConnection, n: usize) -> Res<f64> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let took = timed(async {
            redis::cmd("PING").query_async::<()>(raw).await?;
            Ok(())
        })
        .await?;
        samples.push(us(took));
    }
    Ok(median(&samples))
}
