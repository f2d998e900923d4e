//! Rows 8 and 9: Redlock on 5 servers (both libraries) and a Redis Cluster
//! of 3 masters (lockattr only): acquire + release, hand-over across
//! processes, and on the Cluster the pub/sub messages per release.

use std::time::Duration;

use super::uncontended::{self, Op};
use super::{Deployment, PubSub, Report, Uncontended, handoff};
use crate::peers::{Deploy, Libs};
use crate::servers::{Servers, info_field, query};
use crate::util::{connect, median};
use crate::{EXPIRE, Plan, Res};

/// Acquire + release on `deploy`, interleaved per iteration with a raw PING
/// to the single server (the unit), then the hand-over across processes.
async fn measure(
    servers: &Servers,
    deploy: &Deploy,
    nodes: usize,
    plan: &Plan,
) -> Res<(Deployment, u64, PubSubProbe)> {
    let url = &servers.single.url;
    let mut raw = connect(url, Some(Duration::from_secs(5))).await?;
    let libs = Libs::on(deploy, None)?;
    let mut ops = vec![Op::RawPing];
    for &lib in deploy.libs() {
        let held = libs
            .acquire_or_fail(lib, "bench:deploy:warm", EXPIRE)
            .await?;
        libs.release(held).await?;
        ops.push(Op::Pair(lib));
    }
    let samples = uncontended::run(
        &mut raw,
        &libs,
        None,
        &ops,
        plan.warmup,
        plan.deploy_iterations,
        1,
    )
    .await?;
    let mut pair_us = [f64::NAN; 2];
    for (op, s) in ops.iter().zip(&samples) {
        if let Op::Pair(lib) = op {
            pair_us[lib.index()] = median(s);
        }
    }
    let before = PubSubProbe::read(servers)?;
    let (handoff, _, releases) =
        handoff::run(url, deploy, false, plan.deploy_handoff_rounds, plan).await?;
    let after = PubSubProbe::read(servers)?;
    let deployment = Deployment {
        nodes,
        uncontended: Uncontended {
            block: 1,
            rtt_us: median(&samples[0]),
            locker_ping_us: f64::NAN,
            pair_us,
            bare_us: f64::NAN,
        },
        iterations: plan.deploy_iterations,
        handoff,
    };
    Ok((deployment, releases, after.minus(&before)))
}

/// Row 8: Redlock on the 5 nodes, lockattr against rslock's
/// `LockManager::new(vec![5 urls])`.
pub async fn redlock(servers: &Servers, plan: &Plan, report: &mut Report) -> Res<()> {
    let deploy = Deploy::Redlock(servers.redlock_urls());
    let (deployment, _, _) = measure(servers, &deploy, servers.redlock.len(), plan).await?;
    report.redlock = deployment;
    Ok(())
}

/// Row 9: the Cluster, lockattr only; the pub/sub count is taken around
/// the hand-over loop.
pub async fn cluster(servers: &Servers, plan: &Plan, report: &mut Report) -> Res<()> {
    let deploy = Deploy::Cluster(servers.cluster_urls());
    let (deployment, releases, probe) =
        measure(servers, &deploy, servers.cluster.len(), plan).await?;
    report.cluster = deployment;
    report.pubsub = PubSub {
        releases,
        bus_messages: probe.bus_messages,
        publish_calls: probe.publish_calls,
    };
    Ok(())
}

/// Pub/sub counters of the Cluster's masters, summed.
#[derive(Clone, Copy, Default)]
struct PubSubProbe {
    /// `cluster_stats_messages_publish_sent` and
    /// `cluster_stats_messages_publishshard_sent` (SPUBLISH to a shard's
    /// replicas) of `CLUSTER INFO`.
    bus_messages: u64,
    /// `calls` of `cmdstat_publish` and `cmdstat_spublish` in `INFO commandstats`.
    publish_calls: u64,
}

impl PubSubProbe {
    fn read(servers: &Servers) -> Res<PubSubProbe> {
        let mut probe = PubSubProbe::default();
        for node in &servers.cluster {
            let info = query(node.port, &["CLUSTER", "INFO"])?;
            for field in [
                "cluster_stats_messages_publish_sent",
                "cluster_stats_messages_publishshard_sent",
            ] {
                probe.bus_messages += info_field(&info, field)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
            let stats = query(node.port, &["INFO", "commandstats"])?;
            for command in ["cmdstat_publish", "cmdstat_spublish"] {
                probe.publish_calls += info_field(&stats, command)
                    .and_then(|v| {
                        v.split(',')
                            .find_map(|kv| kv.strip_prefix("calls="))
                            .and_then(|c| c.parse::<u64>().ok())
                    })
                    .unwrap_or(0);
            }
        }
        Ok(probe)
    }

    fn minus(&self, before: &PubSubProbe) -> PubSubProbe {
        PubSubProbe {
            bus_messages: self.bus_messages.saturating_sub(before.bus_messages),
            publish_calls: self.publish_calls.saturating_sub(before.publish_calls),
        }
    }
}
