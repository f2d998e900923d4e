//! Release notices on a Redis Cluster go on shard channels: a release
//! publishes once, with SPUBLISH, on the shard that serves the lock's slot,
//! where its waiters listen with SSUBSCRIBE, instead of a PUBLISH that the
//! cluster bus carries to every node. A cluster without them (before Redis
//! 7, an ACL, a renamed command) gets PUBLISH and SUBSCRIBE.

use crate::support;

use std::time::{Duration, Instant};

use lockattr::{LockGuard, Locker};
use support::cluster::Cluster;
use support::deployments::{Outcome, acl_setuser, hold_for, spawn_try_lock, try_lock, user_url};
use support::{eventually, keys, lock_key};
use tokio::task::JoinHandle;

/// The channel of lock `name`'s notices.
fn channel(name: &str) -> String {
    keys::lock(name).channel
}

/// Subscribers of `channel` on `node`, as `PUBSUB <numsub> <channel>`
/// counts them (`NUMSUB`, or `SHARDNUMSUB` for shard channels).
fn subscribers(cluster: &Cluster, node: usize, numsub: &str, channel: &str) -> i64 {
    let reply: (String, i64) = redis::cmd("PUBSUB")
        .arg(numsub)
        .arg(channel)
        .query(&mut cluster.nodes[node].client())
        .unwrap();
    reply.1
}

/// `holder` takes `name` for 30 s, and a task waits for it on `waiting`
/// (20 s of acquire time): the guard, and the waiting task (its outcome
/// and when it came).
async fn held_with_a_waiter(
    holder: &Locker,
    waiting: &Locker,
    name: &str,
) -> (LockGuard, JoinHandle<(Outcome, Instant)>) {
    let guard = hold_for(holder, name, Duration::from_secs(30)).await;
    let waiter = spawn_try_lock(waiting, name, Duration::from_secs(20));
    (guard, waiter)
}

/// On each master in turn: a waiter on another Locker, listening on the
/// lock's shard channel of that master, is handed the lock by a release
/// that publishes one shard message and nothing on the cluster bus.
async fn hand_over_on_each_master(cluster: &Cluster, numsub: &str) {
    let (holder, waiting) = (cluster.locker(), cluster.locker());
    for name in cluster.name_per_master("notice") {
        let master = cluster.master_of(&lock_key(&name));
        let (guard, waiter) = held_with_a_waiter(&holder, &waiting, &name).await;
        let listening = eventually(Duration::from_secs(5), || {
            (0..cluster.nodes.len()).any(|n| subscribers(cluster, n, numsub, &channel(&name)) > 0)
        });
        assert!(listening.is_some(), "the waiter never listened ({numsub})");
        if numsub == "SHARDNUMSUB" {
            assert_eq!(
                subscribers(cluster, master, numsub, &channel(&name)),
                1,
                "the waiter listens on the master of the lock's slot"
            );
        }
        let before = guard.fencing_token();
        guard.release().await.unwrap();
        let handed = waiter.await.unwrap().0.unwrap();
        assert!(handed.fencing_token() > before);
        handed.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_publishes_one_shard_message() {
    let cluster = Cluster::start();
    let (published, bus) = (cluster.calls("publish"), cluster.bus_messages("publish"));
    let (sharded, shard_bus) = (
        cluster.calls("spublish"),
        cluster.bus_messages("publishshard"),
    );
    hand_over_on_each_master(&cluster, "SHARDNUMSUB").await;
    // One hand-over per master: one SPUBLISH each, on that master, which
    // has no replica to tell.
    assert_eq!(cluster.calls("spublish") - sharded, 3);
    assert_eq!(cluster.bus_messages("publishshard") - shard_bus, 0);
    assert_eq!(
        cluster.calls("publish") - published,
        0,
        "a PUBLISH was sent"
    );
    assert_eq!(
        cluster.bus_messages("publish") - bus,
        0,
        "a notice crossed the cluster bus"
    );
    // Nobody listens with SUBSCRIBE.
    for node in 0..cluster.nodes.len() {
        let name = cluster.name_per_master("notice").remove(0);
        assert_eq!(subscribers(&cluster, node, "NUMSUB", &channel(&name)), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_shard_channels_gets_publish_and_subscribe() {
    let cluster = Cluster::start_with(&[
        "--rename-command",
        "SSUBSCRIBE",
        "",
        "--rename-command",
        "SPUBLISH",
        "",
    ]);
    let published = cluster.calls("publish");
    hand_over_on_each_master(&cluster, "NUMSUB").await;
    assert_eq!(cluster.calls("publish") - published, 3);
}

/// A waiter listening on its lock's shard channel while the slot moves to
/// another master (a resharding) is told its subscription ended, listens
/// again on the new master, and is handed the lock by the release there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_follows_its_slot_to_another_master() {
    let cluster = Cluster::start();
    let (holder, waiting) = (cluster.locker(), cluster.locker());
    let name = cluster.name_per_master("moving").remove(0);
    let (key, channel) = (lock_key(&name), channel(&name));
    let from = cluster.master_of(&key);
    let to = (from + 1) % cluster.nodes.len();
    let (guard, waiter) = held_with_a_waiter(&holder, &waiting, &name).await;
    let listening = |node: usize| subscribers(&cluster, node, "SHARDNUMSUB", &channel) == 1;
    assert!(eventually(Duration::from_secs(5), || listening(from)).is_some());

    cluster.move_slot(&key, to);
    assert_eq!(cluster.master_of(&key), to);
    assert!(
        eventually(Duration::from_secs(5), || listening(to)).is_some(),
        "the waiter did not listen again where its slot went"
    );
    assert_eq!(subscribers(&cluster, from, "SHARDNUMSUB", &channel), 0);

    let (before, spublished) = (guard.fencing_token(), cluster.calls("spublish"));
    guard.release().await.unwrap();
    let handed = waiter.await.unwrap().0.unwrap();
    assert!(handed.fencing_token() > before);
    assert_eq!(cluster.calls("spublish") - spublished, 1);
    handed.release().await.unwrap();
}

/// A user whose ACL refuses the shard commands (`-spublish -ssubscribe`)
/// gets `PUBLISH` from the scripts and `SUBSCRIBE` for its waiters: the
/// waiter listens and is handed the lock, as on a cluster before Redis 7.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_refused_the_shard_commands_gets_publish_and_subscribe() {
    let cluster = Cluster::start();
    let rules = [
        "on",
        ">secret",
        "~*",
        "&*",
        "+@all",
        "-spublish",
        "-ssubscribe",
    ];
    for node in &cluster.nodes {
        acl_setuser(node, "locker", &rules);
    }
    let urls: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| user_url(n, "locker", "secret"))
        .collect();
    let (holder, waiting) = (
        Locker::cluster(urls.clone()).unwrap(),
        Locker::cluster(urls).unwrap(),
    );
    let published = cluster.calls("publish");
    let name = "refused";
    let (guard, waiter) = held_with_a_waiter(&holder, &waiting, name).await;
    let listening = eventually(Duration::from_secs(5), || {
        (0..cluster.nodes.len()).any(|n| subscribers(&cluster, n, "NUMSUB", &channel(name)) > 0)
    });
    assert!(
        listening.is_some(),
        "the waiter never listened with SUBSCRIBE"
    );
    let before = guard.fencing_token();
    guard.release().await.unwrap();
    let handed = waiter.await.unwrap().0.unwrap();
    assert!(handed.fencing_token() > before);
    assert_eq!(cluster.calls("publish") - published, 1);
    assert_eq!(cluster.calls("spublish"), 0);
    handed.release().await.unwrap();
}

/// The connections of `node` that listen on shard channels: their `ssub`
/// counts, from `CLIENT LIST`.
fn shard_listeners(cluster: &Cluster, node: usize) -> Vec<u32> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut cluster.nodes[node].client())
        .unwrap();
    list.lines()
        .filter_map(|line| {
            line.split(' ')
                .find_map(|pair| pair.strip_prefix("ssub="))
                .and_then(|n| n.parse().ok())
        })
        .filter(|&n| n > 0)
        .collect()
}

/// Two waiters of one Locker on two locks of one master, each in the
/// `block_on` of a runtime of its own: each runtime listens on that shard
/// with a connection of its own (two connections with one shard channel
/// each; before, one connection per Locker on the library's I/O thread
/// listened on both), and each is handed its lock with a larger fencing
/// token.
#[test]
fn each_runtime_listens_on_the_shard_with_a_connection_of_its_own() {
    let cluster = Cluster::start();
    let (holder, waiting) = (cluster.locker(), cluster.locker());
    let first = cluster.name_per_master("runtimes").remove(0);
    let master = cluster.master_of(&lock_key(&first));
    let second = (0..)
        .map(|i| format!("runtimes {i}"))
        .find(|name| cluster.master_of(&lock_key(name)) == master)
        .unwrap();
    let setup = support::current_thread();
    let mut held = Vec::new();
    let mut waiters = Vec::new();
    for name in [first, second] {
        let guard = setup
            .block_on(holder.lock(&name).expire(Duration::from_secs(30)).acquire())
            .unwrap();
        held.push(guard);
        let waiting = waiting.clone();
        waiters.push(std::thread::spawn(move || {
            support::current_thread().block_on(async {
                let guard = try_lock(&waiting, &name, Duration::from_secs(20))
                    .await
                    .unwrap();
                let token = guard.fencing_token();
                guard.release().await.unwrap();
                token
            })
        }));
    }
    let apart = eventually(Duration::from_secs(5), || {
        shard_listeners(&cluster, master) == [1, 1]
    });
    assert!(
        apart.is_some(),
        "expected one shard connection per runtime, found {:?}",
        shard_listeners(&cluster, master)
    );
    for (guard, waiter) in held.into_iter().zip(waiters) {
        let before = guard.fencing_token();
        setup.block_on(guard.release()).unwrap();
        assert!(
            waiter.join().unwrap() > before,
            "handed over with a larger token"
        );
    }
}
