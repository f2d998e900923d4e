//! Sets on a 3-master Redis Cluster of our own: names on three masters
//! (three slots) are taken together or not at all, in a fixed order with
//! give-back, so `{x, y, z}` against `{z, y, x}` neither deadlocks nor
//! overlaps; a busy name leaves the others free; a release wakes a set
//! waiter; the set excludes single-name holders.

use crate::support;

use std::time::{Duration, Instant};

use lockattr::{LockError, Locker};
use support::cluster::Cluster;
use support::deployments::{
    crossed_sets, cycle, cycle_set, joined, lock_error, set_error, spawn_take_set,
};
use support::{RedisServer, lock_key};

/// A Locker on `cluster` whose prefix has a hash tag: `bank:{transfers}:`.
fn tagged_locker(cluster: &Cluster) -> Locker {
    Locker::cluster_builder(cluster.urls())
        .prefix("bank:{transfers}:")
        .build()
        .unwrap()
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
        let reversed: Vec<&String> = names.iter().rev().collect();
        let err = set_error(&b, &reversed, Duration::ZERO).await;
        assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
        let err = lock_error(&b, &names[1], Duration::ZERO).await;
        assert!(err.is_timeout());
        guard.release().await.unwrap();
        for (m, name) in names.iter().enumerate() {
            assert!(!cluster.nodes[m].exists(&lock_key(name)));
        }

        // All or nothing: the last name held elsewhere leaves the first two
        // free (whichever order the slots are taken in).
        for busy in 0..3 {
            let held = b.lock(&names[busy]).acquire().await.unwrap();
            let err = set_error(&a, &names, Duration::ZERO).await;
            assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
            for (m, name) in names.iter().enumerate() {
                if m != busy {
                    assert!(!cluster.nodes[m].exists(&lock_key(name)), "{name} kept");
                }
            }
            // A waiting set is woken by the release.
            let long = Duration::from_secs(30);
            let waiter = spawn_take_set(&a, &names, long, long);
            tokio::time::sleep(Duration::from_millis(1_100)).await;
            let released = Instant::now();
            held.release().await.unwrap();
            let what = "the set waiter was not woken";
            let (guard, at) = joined(waiter, Duration::from_secs(10), what).await;
            let after = at.duration_since(released);
            assert!(
                after < Duration::from_millis(700),
                "woken {after:?} after the release"
            );
            guard.unwrap().release().await.unwrap();
        }

        // Opposite orders from 8 tasks.
        let orders: Vec<Vec<String>> = (0..8)
            .map(|t| {
                let mut order = names.clone();
                if t % 2 == 1 {
                    order.reverse();
                }
                order
            })
            .collect();
        let (wait, within) = (Duration::from_secs(60), Duration::from_secs(90));
        let overlaps = crossed_sets(&[a.clone(), b.clone()], orders, 8, wait, within).await;
        assert_eq!(overlaps, 0);
        for (m, name) in names.iter().enumerate() {
            assert!(!cluster.nodes[m].exists(&lock_key(name)));
        }
    });
}

/// Script calls (EVALSHA, FCALL and EVAL) completed on every master so far.
fn script_calls(cluster: &Cluster) -> u64 {
    cluster
        .nodes
        .iter()
        .map(|n| {
            let calls = n.completed_calls();
            ["evalsha", "fcall", "eval"]
                .iter()
                .filter_map(|command| calls.get(*command))
                .sum::<u64>()
        })
        .sum()
}

#[test]
fn a_prefix_with_a_hash_tag_puts_a_set_in_one_slot_and_one_script() {
    let cluster = Cluster::start();
    let names = cluster.name_per_master("tagged");
    let rt = support::multi_thread();
    rt.block_on(async {
        // Under the default prefix the names are on three masters: three
        // script calls take the set.
        let plain = cluster.locker();
        cycle_set(&plain, &names).await;
        let before = script_calls(&cluster);
        let guard = plain.lock_all(&names).acquire().await.unwrap();
        assert_eq!(script_calls(&cluster) - before, 3, "one call per slot");
        guard.release().await.unwrap();

        // A Locker whose prefix has a hash tag keeps every key of its locks
        // in that tag's slot: one script call takes the set.
        let tagged = tagged_locker(&cluster);
        cycle_set(&tagged, &names).await;
        let before = script_calls(&cluster);
        let guard = tagged.lock_all(&names).acquire().await.unwrap();
        assert_eq!(script_calls(&cluster) - before, 1, "one call for the set");
        let master = cluster.master_of("{transfers}");
        for name in &names {
            let key = format!("bank:{{transfers}}:{{{name}}}");
            assert!(
                cluster.nodes[master].exists(&key),
                "{key} on the tag's master"
            );
            assert!(guard.fencing_token_of(name).is_some());
        }
        // The operator's view finds them under the prefix.
        let mut listed: Vec<String> = tagged
            .locks("*", 10)
            .await
            .unwrap()
            .into_iter()
            .map(|info| info.name)
            .collect();
        listed.sort();
        let mut expected = names.clone();
        expected.sort();
        assert_eq!(listed, expected);
        // It excludes a single-name caller of the same Locker prefix, and
        // not one under another prefix (another lock altogether).
        let err = lock_error(&tagged, &names[2], Duration::ZERO).await;
        assert!(err.is_timeout(), "{err:?}");
        cycle(&plain, &names[2]).await;
        guard.release().await.unwrap();
        for name in &names {
            assert!(!cluster.nodes[master].exists(&format!("bank:{{transfers}}:{{{name}}}")));
        }
    });
}

/// Scripts run by every master so far (`EVALSHA`s and `FCALL`s that
/// completed).
fn scripts_run(cluster: &Cluster) -> Vec<u64> {
    cluster.nodes.iter().map(RedisServer::scripts_run).collect()
}

/// A set is released in one call per slot, as it is taken: names on three
/// masters cost one call on each; ten names in one slot (a prefix with a
/// hash tag) cost one call in all.
#[test]
fn a_set_is_released_in_one_call_per_slot() {
    let cluster = Cluster::start();
    let rt = support::multi_thread();
    rt.block_on(async {
        let spread = cluster.name_per_master("rel");
        let locker = cluster.locker();
        let guard = locker.lock_all(&spread).acquire().await.unwrap();
        let before = scripts_run(&cluster);
        guard.release().await.unwrap();
        let after = scripts_run(&cluster);
        for (m, name) in spread.iter().enumerate() {
            assert!(!cluster.nodes[m].exists(&lock_key(name)));
            assert_eq!(after[m] - before[m], 1, "master {m}");
        }

        let tagged = tagged_locker(&cluster);
        let names: Vec<String> = (0..10).map(|i| format!("acct:{i}")).collect();
        let guard = tagged.lock_all(&names).acquire().await.unwrap();
        let master = cluster.master_of("bank:{transfers}:x");
        let before = scripts_run(&cluster);
        guard.release().await.unwrap();
        let after = scripts_run(&cluster);
        let ran: u64 = after.iter().zip(&before).map(|(a, b)| a - b).sum();
        assert_eq!(ran, 1, "one call for ten names in one slot");
        assert!(
            cluster.nodes[master]
                .keys("bank:*")
                .iter()
                .all(|k| k.ends_with(":fence"))
        );
    });
}
