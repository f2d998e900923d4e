//! Sets on a 3-master Redis Cluster of our own: names on three masters
//! (three slots) are taken together or not at all, in a fixed order with
//! give-back, so `{x, y, z}` against `{z, y, x}` neither deadlocks nor
//! overlaps; a busy name leaves the others free; a release wakes a set
//! waiter; the set excludes single-name holders.

mod support;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockattr::{LockError, Locker};
use support::{RedisServer, free_port, lock_key};

/// Three masters, no replicas, every slot assigned. With
/// `cluster-require-full-coverage no`, the live masters go on serving their
/// slots while one is dead (with the default, every node refuses every key
/// command once the dead master is marked failed).
struct Cluster {
    nodes: Vec<RedisServer>,
}

impl Cluster {
    fn start() -> Cluster {
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

    fn wait_ok(&self) {
        let ok = support::eventually(Duration::from_secs(20), || {
            self.nodes.iter().all(|n| {
                n.raw("CLUSTER INFO")
                    .is_ok_and(|info| info.contains("cluster_state:ok"))
            })
        });
        assert!(ok.is_some(), "cluster not ok within 20 s");
    }

    fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    fn locker(&self) -> Locker {
        Locker::cluster(self.urls()).unwrap()
    }

    /// The index of the master serving `key`, from `CLUSTER SLOTS`.
    fn master_of(&self, key: &str) -> usize {
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
    fn name_per_master(&self, stem: &str) -> Vec<String> {
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

#[test]
fn a_set_across_slots_is_all_or_nothing_and_deadlock_free() {
    let cluster = Cluster::start();
    let names = cluster.name_per_master("set");
    let rt = support::multi_thread();
    rt.block_on(async {
        let (a, b) = (cluster.locker(), cluster.locker());
        // Taken whole, each name on its master.
        let guard = a.lock_all(&names).acquire().await.unwrap();
        for (m, name) in names.iter().enumerate() {
            assert!(
                cluster.nodes[m].exists(&lock_key(name)),
                "{name} on master {m}"
            );
            assert!(guard.fencing_token_of(name).is_some());
        }
        // Another caller's set, and a single name, are kept out.
        let err = b
            .lock_all(names.iter().rev())
            .acquire_timeout(Duration::ZERO)
            .acquire()
            .await
            .unwrap_err();
        assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
        let err = b
            .lock(&names[1])
            .acquire_timeout(Duration::ZERO)
            .acquire()
            .await
            .unwrap_err();
        assert!(err.is_timeout());
        guard.release().await.unwrap();
        for (m, name) in names.iter().enumerate() {
            assert!(!cluster.nodes[m].exists(&lock_key(name)));
        }

        // All or nothing: the last name held elsewhere leaves the first two
        // free (whichever order the slots are taken in).
        for busy in 0..3 {
            let held = b.lock(&names[busy]).acquire().await.unwrap();
            let err = a
                .lock_all(&names)
                .acquire_timeout(Duration::ZERO)
                .acquire()
                .await
                .unwrap_err();
            assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
            for (m, name) in names.iter().enumerate() {
                if m != busy {
                    assert!(!cluster.nodes[m].exists(&lock_key(name)), "{name} kept");
                }
            }
            // A waiting set is woken by the release.
            let waiter = {
                let a = a.clone();
                let names = names.clone();
                tokio::spawn(async move {
                    let guard = a
                        .lock_all(&names)
                        .expire(Duration::from_secs(30))
                        .acquire_timeout(Duration::from_secs(30))
                        .acquire()
                        .await;
                    (guard, Instant::now())
                })
            };
            tokio::time::sleep(Duration::from_millis(1_100)).await;
            let released = Instant::now();
            held.release().await.unwrap();
            let (guard, at) = tokio::time::timeout(Duration::from_secs(10), waiter)
                .await
                .expect("the set waiter was not woken")
                .unwrap();
            let after = at.duration_since(released);
            assert!(
                after < Duration::from_millis(700),
                "woken {after:?} after the release"
            );
            guard.unwrap().release().await.unwrap();
        }

        // Opposite orders from 8 tasks.
        let inside: Arc<Vec<AtomicUsize>> = Arc::new((0..3).map(|_| AtomicUsize::new(0)).collect());
        let overlaps = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for t in 0..8 {
            let locker = if t % 2 == 0 { a.clone() } else { b.clone() };
            let mut order = names.clone();
            if t % 2 == 1 {
                order.reverse();
            }
            let (inside, overlaps) = (inside.clone(), overlaps.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..8 {
                    let guard = locker
                        .lock_all(&order)
                        .acquire_timeout(Duration::from_secs(60))
                        .acquire()
                        .await
                        .unwrap();
                    for slot in inside.iter() {
                        if slot.fetch_add(1, Ordering::SeqCst) > 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    tokio::task::yield_now().await;
                    for slot in inside.iter() {
                        slot.fetch_sub(1, Ordering::SeqCst);
                    }
                    guard.release().await.unwrap();
                }
            }));
        }
        for task in tasks {
            tokio::time::timeout(Duration::from_secs(90), task)
                .await
                .expect("deadlock: a task did not finish")
                .unwrap();
        }
        assert_eq!(overlaps.load(Ordering::SeqCst), 0);
        for (m, name) in names.iter().enumerate() {
            assert!(!cluster.nodes[m].exists(&lock_key(name)));
        }
    });
}
