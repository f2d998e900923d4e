//! Locks on a 3-master Redis Cluster of our own (redis-server
//! --cluster-enabled, joined with `redis-cli --cluster create`, on loopback).

use crate::support;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use lockattr::{LockError, Locker, redis_lock};
use support::cluster::Cluster;
use support::deployments::{
    cycle, hold_for, lock_error, release_now, renewed, spawn_try_lock, try_lock,
};
use support::waiters::spawn_waiter;
use support::{RedisServer, keys, lock_key};

#[tokio::test]
async fn locks_on_every_master_exclude_and_release() {
    let cluster = Cluster::start();
    let (a, b) = (cluster.locker(), cluster.locker());
    for (m, name) in cluster.name_per_master("spread").into_iter().enumerate() {
        let guard = a.lock(&name).acquire().await.unwrap();
        assert!(
            cluster.nodes[m].exists(&lock_key(&name)),
            "{name} on master {m}"
        );
        let err = lock_error(&b, &name, Duration::from_millis(100)).await;
        assert!(err.is_timeout(), "{err}");
        guard.release().await.unwrap();
        assert!(!cluster.nodes[m].exists(&lock_key(&name)));
    }
}

/// `inspect` finds each lock on its master, `locks` scans every master, and
/// `force_unlock` frees a lock on its master and hands it to a waiter.
#[tokio::test]
async fn inspect_locks_and_force_unlock_on_every_master() {
    let cluster = Cluster::start();
    let names = cluster.name_per_master("ops");
    let holder = cluster.locker();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(holder.lock(name).acquire().await.unwrap());
    }
    let ops = cluster.locker();
    for (name, guard) in names.iter().zip(&guards) {
        let info = ops.inspect(name).await.unwrap().expect("held");
        assert_eq!(info.fencing_token, guard.fencing_token());
        assert_eq!(info.holder.unwrap().pid, std::process::id());
    }
    let listed = ops.locks("ops-*", 100).await.unwrap();
    let mut listed: Vec<String> = listed.into_iter().map(|i| i.name).collect();
    listed.sort();
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(listed, expected, "one lock per master, all found");

    let waiter = cluster.locker();
    let waiting = spawn_try_lock(&waiter, &names[2], Duration::from_secs(20));
    let start = Instant::now();
    while ops.inspect(&names[2]).await.unwrap().unwrap().waiters != 1 {
        assert!(start.elapsed() < Duration::from_secs(5), "never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(ops.force_unlock(&names[2]).await.unwrap());
    let handed = waiting.await.unwrap().0.unwrap();
    assert!(handed.fencing_token() > guards[2].fencing_token());
    handed.release().await.unwrap();
    assert_eq!(ops.inspect(&names[2]).await.unwrap(), None);
    for guard in guards.drain(..2) {
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn contention_loses_no_update_on_any_master() {
    let cluster = Cluster::start();
    let names = cluster.name_per_master("stress");
    let store = RedisServer::start();
    support::contend(&[cluster.locker(), cluster.locker()], &names, 30, &store).await;
}

#[tokio::test]
async fn a_release_wakes_a_waiter_on_another_locker() {
    let cluster = Cluster::start();
    let (a, b) = (cluster.locker(), cluster.locker());
    for name in cluster.name_per_master("wake") {
        let guard = hold_for(&a, &name, Duration::from_secs(30)).await;
        let waiter = spawn_try_lock(&b, &name, Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let before = guard.fencing_token();
        let released = release_now(guard).await;
        let (outcome, got) = waiter.await.unwrap();
        let token = outcome.unwrap().fencing_token();
        assert!(token > before, "fencing tokens increase");
        assert!(
            got - released < Duration::from_secs(1),
            "{:?}",
            got - released
        );
    }
}

/// `hold_at_least` on every master: a release within the hold leaves the
/// lock for what remains of it, and a waiter on another Locker, queued
/// behind the 30 s lease, takes it when the hold ends.
#[tokio::test]
async fn a_release_within_the_hold_keeps_the_lock_until_it_ends() {
    let cluster = Cluster::start();
    let (a, b) = (cluster.locker(), cluster.locker());
    let hold = Duration::from_secs(1);
    for (m, name) in cluster.name_per_master("hold").into_iter().enumerate() {
        let start = Instant::now();
        let guard = a
            .lock(&name)
            .expire(Duration::from_secs(30))
            .hold_at_least(hold)
            .acquire()
            .await
            .unwrap();
        let waiter = spawn_try_lock(&b, &name, Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(200)).await;
        guard.release().await.unwrap();
        let left = cluster.nodes[m].pttl(&lock_key(&name));
        assert!(
            left > 0 && left <= 1_000,
            "master {m}: PTTL {left} ms after a release within the 1 s hold"
        );
        let (got, at) = waiter.await.unwrap();
        let after = at.duration_since(start);
        got.expect("the waiter got the lock")
            .release()
            .await
            .unwrap();
        assert!(
            after >= hold,
            "master {m}: taken {after:?} after, within the hold"
        );
        assert!(
            after < Duration::from_secs(6),
            "master {m}: taken {after:?} after: the waiter waited for the lease"
        );
    }
}

#[tokio::test]
async fn renewals_across_masters_keep_every_lock() {
    let cluster = Cluster::start();
    let locker = cluster.locker();
    let names = cluster.name_per_master("renew");
    let mut guards = Vec::new();
    for name in &names {
        guards.push(renewed(&locker, name, Duration::from_millis(600)).await);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (m, (name, guard)) in names.iter().zip(&guards).enumerate() {
        assert!(!guard.is_lost(), "{name}");
        assert!(cluster.nodes[m].exists(&lock_key(name)), "{name}");
    }
}

/// One Locker renews 600 ms leases on all three masters (one watchdog, its
/// batch split by slot); a master dies. The lease on the dead master is
/// marked lost; the leases on the two live masters stay renewed the whole
/// time (never lost, never expired in Redis), though each renewal round
/// also waits on the dead master: its call is bounded well below the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_on_live_masters_go_on_while_a_master_is_dead() {
    const LEASE: Duration = Duration::from_millis(600);
    let mut cluster = Cluster::start();
    let locker = Locker::cluster_builder(cluster.urls())
        .response_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let victim = 1;
    let names = cluster.name_per_master("renew-outage");
    let mut guards = Vec::new();
    for name in &names {
        let request = locker.lock(name).expire(LEASE).renew(true);
        guards.push(request.acquire().await.unwrap());
    }
    tokio::time::sleep(LEASE * 2).await;
    assert!(guards.iter().all(|g| !g.is_lost()), "lost before the kill");

    cluster.nodes[victim].kill();
    let killed_at = Instant::now();
    let mut dead_lost = false;
    while killed_at.elapsed() < Duration::from_secs(4) {
        for (i, (guard, name)) in guards.iter().zip(&names).enumerate() {
            if i == victim {
                dead_lost |= guard.is_lost();
                continue;
            }
            let pttl = cluster.nodes[i].pttl(&lock_key(name));
            assert!(
                !guard.is_lost() && pttl > 0,
                "the renewed lease on live master {i} ran out {:?} after master {victim} died \
                 (is_lost: {}, PTTL: {pttl} ms, lease {LEASE:?})",
                killed_at.elapsed(),
                guard.is_lost()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(dead_lost, "the lease on the dead master is not marked lost");
    for (i, guard) in guards.into_iter().enumerate() {
        let result = guard.release().await;
        if i == victim {
            assert!(result.is_err(), "release on the dead master succeeded");
        } else {
            result.unwrap_or_else(|e| panic!("release on live master {i}: {e:?}"));
        }
    }
}

#[tokio::test]
async fn a_dead_master_gives_errors_not_hangs_and_comes_back() {
    let mut cluster = Cluster::start();
    let locker = Locker::cluster_builder(cluster.urls())
        .response_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let names = cluster.name_per_master("outage");
    for name in &names {
        cycle(&locker, name).await;
    }
    cluster.nodes[1].kill();
    let start = Instant::now();
    let err = lock_error(&locker, &names[1], Duration::from_secs(1)).await;
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    assert!(
        matches!(err, LockError::Connection { .. } | LockError::Redis { .. }),
        "{err:?}"
    );
    // The other masters keep working.
    for name in [&names[0], &names[2]] {
        let r = try_lock(&locker, name, Duration::from_secs(5)).await;
        r.unwrap().release().await.unwrap();
    }
    cluster.nodes[1].restart();
    cluster.wait_ok();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut back = false;
    while !back && Instant::now() < deadline {
        back = match try_lock(&locker, &names[1], Duration::ZERO).await {
            Ok(g) => g.release().await.is_ok(),
            Err(_) => false,
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(back, "the lock works again after the master is back");
}

/// A waiter queued on a master that restarts (down 300 ms, back empty with
/// its cluster configuration) keeps waiting through the outage and gets the
/// lock, which the restart freed, once the master is back (generous bound:
/// 20 s, for the cluster to settle), well within its 40 s acquire time.
/// Before, it returned the connection error of its first failed attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_rides_out_a_master_restart() {
    let mut cluster = Cluster::start();
    let (holders, waiters) = (cluster.locker(), cluster.locker());
    let name = cluster.name_per_master("bounce")[1].clone();
    let holder = hold_for(&holders, &name, Duration::from_secs(60)).await;
    let waiter = spawn_waiter(
        &waiters,
        &name,
        Duration::from_secs(60),
        Duration::from_secs(40),
    );
    let queue = keys::lock(&name).queue;
    let queued = support::eventually(Duration::from_secs(5), || cluster.nodes[1].exists(&queue));
    assert!(queued.is_some(), "the waiter never queued");
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.nodes[1].kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    cluster.nodes[1].restart();
    let back = Instant::now();
    let (outcome, returned_at) = tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .expect("the waiter hangs")
        .unwrap();
    let guard = outcome.unwrap_or_else(|e| panic!("the waiter gave up over a restart: {e:?}"));
    let late = returned_at.saturating_duration_since(back);
    assert!(
        late < Duration::from_secs(20),
        "got the lock {late:?} after the master was back"
    );
    assert!(cluster.nodes[1].exists(&lock_key(&name)));
    guard.release().await.unwrap();
    drop(holder);
}

static CLUSTER_LOCKER: OnceLock<Locker> = OnceLock::new();

#[redis_lock(name = "cart:{id}", locker = CLUSTER_LOCKER.get().expect("set"), expire = 5)]
async fn checkout(id: u64) -> Result<u64, LockError> {
    Ok(id * 2)
}

#[tokio::test]
async fn the_attribute_works_unchanged() {
    let cluster = Cluster::start();
    assert!(CLUSTER_LOCKER.set(cluster.locker()).is_ok());
    for id in 0..20 {
        assert_eq!(checkout(id).await.unwrap(), id * 2);
    }
    assert!(cluster.nodes.iter().all(|n| n.held_locks().is_empty()));
}
