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
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                let bus = free_port().to_string();
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                    "--cluster-require-full-coverage",
                    "no",
                    "--cluster-port",
                    &bus,
                ])
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
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
