//! A 3-master Redis Cluster of our own (redis-server --cluster-enabled,
//! joined with `redis-cli --cluster create`, on loopback).

use std::process::Command;
use std::time::Duration;

use lockattr::Locker;

use super::{RedisServer, free_port, lock_key};

/// Three masters, no replicas, every slot assigned. With
/// `cluster-require-full-coverage no`, the live masters go on serving their
/// slots while one is dead (with the default, every node refuses every key
/// command once the dead master is marked failed).
pub struct Cluster {
    pub nodes: Vec<RedisServer>,
}

impl Cluster {
    pub fn start() -> Cluster {
        Cluster::create(3, 0, "2000", &[])
    }

    /// [`start`](Self::start), each node with the `extra` options.
    pub fn start_with(extra: &[&str]) -> Cluster {
        Cluster::create(3, 0, "2000", extra)
    }

    /// Moves the slot of `key`, with its keys, from the master serving it
    /// to master `to`, as a resharding does (`IMPORTING`, `MIGRATING`,
    /// `MIGRATE`, then `SETSLOT NODE` on every node).
    pub fn move_slot(&self, key: &str, to: usize) {
        let from = self.master_of(key);
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[from].client())
            .unwrap();
        let id = |i: usize| -> String {
            redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut self.nodes[i].client())
                .unwrap()
        };
        let (from_id, to_id) = (id(from), id(to));
        let setslot = |node: usize, words: &[&str]| {
            let _: () = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(words)
                .query(&mut self.nodes[node].client())
                .unwrap();
        };
        setslot(to, &["IMPORTING", &from_id]);
        setslot(from, &["MIGRATING", &to_id]);
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100)
                .query(&mut self.nodes[from].client())
                .unwrap();
            if keys.is_empty() {
                break;
            }
            let _: () = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(self.nodes[to].port)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys)
                .query(&mut self.nodes[from].client())
                .unwrap();
        }
        setslot(to, &["NODE", &to_id]);
        setslot(from, &["NODE", &to_id]);
        for node in (0..self.nodes.len()).filter(|n| *n != to && *n != from) {
            setslot(node, &["NODE", &to_id]);
        }
    }

    /// Calls of `command` (lower case, as `INFO commandstats` names it),
    /// summed over the nodes.
    pub fn calls(&self, command: &str) -> u64 {
        self.nodes
            .iter()
            .map(|n| n.command_calls().get(command).copied().unwrap_or(0))
            .sum()
    }

    /// `cluster_stats_messages_<kind>_sent` of `CLUSTER INFO`, summed over
    /// the nodes: the messages of that kind sent on the cluster bus.
    pub fn bus_messages(&self, kind: &str) -> u64 {
        let field = format!("cluster_stats_messages_{kind}_sent:");
        self.nodes
            .iter()
            .map(|n| {
                n.raw("CLUSTER INFO")
                    .ok()
                    .and_then(|info| {
                        info.lines()
                            .find_map(|l| l.strip_prefix(field.as_str()))
                            .and_then(|v| v.trim().parse::<u64>().ok())
                    })
                    .unwrap_or(0)
            })
            .sum()
    }

    /// `nodes` servers joined into a cluster with `replicas` replicas per
    /// master (`redis-cli --cluster create`), each with the node timeout
    /// `node_timeout` (ms) and the `extra` options; returns once every node
    /// says `cluster_state:ok`.
    fn create(nodes: usize, replicas: usize, node_timeout: &str, extra: &[&str]) -> Cluster {
        let nodes: Vec<RedisServer> = (0..nodes)
            .map(|_| {
                let bus = free_port().to_string();
                let mut args = vec![
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    node_timeout,
                    "--cluster-require-full-coverage",
                    "no",
                    "--cluster-port",
                    &bus,
                ];
                args.extend_from_slice(extra);
                RedisServer::start_with(&args)
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let replicas = replicas.to_string();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas, "--cluster-yes"])
            .output()
            .expect("redis-cli (install redis-tools)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = Cluster { nodes };
        cluster.wait_ok();
        cluster
    }

    pub fn wait_ok(&self) {
        let ok = super::eventually(Duration::from_secs(20), || {
            self.nodes.iter().all(|n| {
                n.raw("CLUSTER INFO")
                    .is_ok_and(|info| info.contains("cluster_state:ok"))
            })
        });
        assert!(ok.is_some(), "cluster not ok within 20 s");
    }

    /// [`RedisServer::allow_untimed`] on every node.
    pub fn allow_untimed(&self, pattern: &str) {
        for node in &self.nodes {
            node.allow_untimed(pattern);
        }
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    pub fn locker(&self) -> Locker {
        Locker::cluster(self.urls()).unwrap()
    }

    /// The index of the master serving `key`, from `CLUSTER SLOTS`.
    pub fn master_of(&self, key: &str) -> usize {
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].client())
            .unwrap();
        let ranges: Vec<(i64, i64, (String, i64))> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query::<Vec<redis::Value>>(&mut self.nodes[0].client())
            .unwrap()
            .into_iter()
            .map(|range| {
                let redis::Value::Array(items) = range else {
                    panic!("CLUSTER SLOTS: {range:?}")
                };
                let start: i64 = redis::from_redis_value(items[0].clone()).unwrap();
                let end: i64 = redis::from_redis_value(items[1].clone()).unwrap();
                let redis::Value::Array(master) = &items[2] else {
                    panic!("CLUSTER SLOTS master: {:?}", items[2])
                };
                let host: String = redis::from_redis_value(master[0].clone()).unwrap();
                let port: i64 = redis::from_redis_value(master[1].clone()).unwrap();
                (start, end, (host, port))
            })
            .collect();
        let (_, _, (_, port)) = ranges
            .iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .expect("every slot is served");
        self.nodes
            .iter()
            .position(|n| i64::from(n.port) == *port)
            .expect("one of ours")
    }

    /// Names whose locks live on master 0, 1 and 2, in that order.
    pub fn name_per_master(&self, stem: &str) -> Vec<String> {
        let mut found: Vec<Option<String>> = vec![None; 3];
        for i in 0.. {
            let name = format!("{stem}-{i}");
            let m = self.master_of(&lock_key(&name));
            if found[m].is_none() {
                found[m] = Some(name);
            }
            if found.iter().all(Option::is_some) {
                break;
            }
        }
        found.into_iter().map(Option::unwrap).collect()
    }
}

/// The keyspace audit of every node (see `audit.rs`), reported together;
/// then each node is killed by its own drop.
impl Drop for Cluster {
    fn drop(&mut self) {
        let findings: Vec<String> = self
            .nodes
            .iter_mut()
            .filter_map(RedisServer::final_audit)
            .collect();
        if !findings.is_empty() {
            panic!("{}", findings.join("\n\n"));
        }
    }
}

// ---- Added for tests/replica_failover.rs: masters with a replica each. ----

/// The node timeout of [`Cluster::start_with_replicas`], in milliseconds: a
/// master is marked failed after about this long without an answer, and its
/// replica is promoted within a second or two more.
pub const REPLICA_NODE_TIMEOUT_MS: u64 = 1000;

impl Cluster {
    /// Three masters with one replica each (`--cluster-replicas 1`): six
    /// nodes; which are masters `redis-cli` chooses (ask [`role_of`](Self::role_of)),
    /// and which replica is whose, [`replica_of`](Self::replica_of).
    /// The node timeout is [`REPLICA_NODE_TIMEOUT_MS`], so that a killed
    /// master fails over within a few seconds. Returns once every node says
    /// `cluster_state:ok` and every replica's link to its master is up.
    pub fn start_with_replicas() -> ReplicatedCluster {
        let timeout = REPLICA_NODE_TIMEOUT_MS.to_string();
        // A replica's first sync at once.
        let cluster = Cluster::create(6, 1, &timeout, &["--repl-diskless-sync-delay", "0"]);
        let synced = super::eventually(Duration::from_secs(30), || {
            (0..3).all(|m| cluster.replica_synced(m))
        });
        assert!(synced.is_some(), "the replicas did not sync within 30 s");
        ReplicatedCluster { cluster }
    }

    /// `INFO replication` of node `i`, `None` when it does not answer.
    pub fn replication_info(&self, i: usize) -> Option<String> {
        let mut con = redis::Client::open(self.nodes[i].url())
            .ok()?
            .get_connection_with_timeout(Duration::from_millis(500))
            .ok()?;
        con.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
        redis::cmd("INFO").arg("replication").query(&mut con).ok()
    }

    /// `role:` of node `i` (`master` or `slave`), `None` when it does not answer.
    pub fn role_of(&self, i: usize) -> Option<String> {
        self.replication_info(i)?
            .lines()
            .find_map(|l| l.strip_prefix("role:"))
            .map(|r| r.trim().to_owned())
    }

    /// The index of the replica of master `master` (the node whose
    /// `master_port` is that master's port).
    pub fn replica_of(&self, master: usize) -> usize {
        let port = format!("master_port:{}", self.nodes[master].port);
        (0..self.nodes.len())
            .find(|&i| {
                i != master
                    && self
                        .replication_info(i)
                        .is_some_and(|info| info.lines().any(|l| l.trim() == port))
            })
            .unwrap_or_else(|| panic!("no replica of node {master}"))
    }

    /// True when node `master` is a master with a replica online and that
    /// replica's link to it is up.
    pub fn replica_synced(&self, master: usize) -> bool {
        let Some(info) = self.replication_info(master) else {
            return false;
        };
        if !info.contains("role:master") {
            return false;
        }
        info.lines()
            .filter(|l| l.starts_with("slave") && l.contains("state=online"))
            .filter_map(|l| {
                let port = l.split(',').find_map(|kv| kv.strip_prefix("port="))?;
                self.nodes.iter().position(|n| n.port.to_string() == port)
            })
            .any(|r| {
                self.replication_info(r)
                    .is_some_and(|i| i.contains("master_link_status:up"))
            })
    }

    /// Waits until node `i` answers as a master and every node that is
    /// running says `cluster_state:ok`; panics after `within`.
    pub fn wait_master(&self, i: usize, within: Duration) {
        let ok = super::eventually(within, || {
            self.role_of(i).as_deref() == Some("master")
                && self.nodes.iter().filter(|n| n.has_process()).all(|n| {
                    n.raw("CLUSTER INFO")
                        .is_ok_and(|info| info.contains("cluster_state:ok"))
                })
        });
        assert!(
            ok.is_some(),
            "node {i} is not a master of an ok cluster within {within:?}"
        );
    }

    /// The first `count` names `{stem}-{i}` whose locks live on node
    /// `master` (through [`master_of`](Self::master_of): node 0 must answer).
    pub fn names_on(&self, master: usize, stem: &str, count: usize) -> Vec<String> {
        (0..)
            .map(|i| format!("{stem}-{i}"))
            .filter(|name| self.master_of(&lock_key(name)) == master)
            .take(count)
            .collect()
    }
}

/// A [`Cluster`] whose masters have replicas ([`Cluster::start_with_replicas`]);
/// it dereferences to the cluster. Its drop audits the nodes that are
/// replicas then (see `audit.rs`) over a connection that sent `READONLY`
/// first: a replica refuses the audit's script otherwise (its keys are in
/// slots it does not serve). The masters are audited by the cluster's drop.
pub struct ReplicatedCluster {
    cluster: Cluster,
}

impl std::ops::Deref for ReplicatedCluster {
    type Target = Cluster;

    fn deref(&self) -> &Cluster {
        &self.cluster
    }
}

impl std::ops::DerefMut for ReplicatedCluster {
    fn deref_mut(&mut self) -> &mut Cluster {
        &mut self.cluster
    }
}

impl Drop for ReplicatedCluster {
    fn drop(&mut self) {
        // As `final_audit`: nothing while the test is already failing.
        if std::thread::panicking() {
            return;
        }
        let mut findings = Vec::new();
        for i in 0..self.cluster.nodes.len() {
            if self.cluster.role_of(i).as_deref() != Some("slave") {
                continue;
            }
            let node = &mut self.cluster.nodes[i];
            findings.extend(node.final_audit_by("a replica", audit_replica));
        }
        if !findings.is_empty() {
            panic!("{}", findings.join("\n\n"));
        }
    }
}

/// The audit's script on the replica on `port`, after `READONLY`.
fn audit_replica(port: u16) -> Result<Vec<super::audit::UntimedKey>, String> {
    let why = |e: redis::RedisError| format!("port {port}: {e}");
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
        .map_err(why)?;
    con.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(why)?;
    let () = redis::cmd("READONLY").query(&mut con).map_err(why)?;
    let lines: Vec<String> = redis::cmd("EVAL")
        .arg(super::audit::SCRIPT)
        .arg(0)
        .query(&mut con)
        .map_err(why)?;
    super::audit::parse_lines(lines.iter().map(String::as_str))
}
