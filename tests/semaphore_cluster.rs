//! Semaphores on a 3-master Redis Cluster of our own: every key of one
//! semaphore lives on one master (one hash tag), and the bound holds.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockattr::Locker;
use support::RedisServer;
use support::cluster::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_semaphore_on_a_cluster_keeps_its_bound_and_hands_over() {
    let cluster = Cluster::start();
    let nodes = &cluster.nodes;
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let (inside, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut tasks = Vec::new();
    for t in 0..12 {
        let locker = Locker::cluster(urls.clone()).unwrap();
        let (inside, most) = (inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..8 {
                let guard = locker
                    .semaphore("render", 3)
                    .expire(Duration::from_secs(30))
                    .acquire_timeout(Duration::from_secs(60))
                    .acquire()
                    .await
                    .unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2 + t % 3)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        3,
        "not at most, or never, 3 inside"
    );

    // One master holds every key of the semaphore.
    let locker = Locker::cluster(urls.clone()).unwrap();
    let a = locker.semaphore("render", 3).acquire().await.unwrap();
    let b = locker.semaphore("render", 3).acquire().await.unwrap();
    let c = locker.semaphore("render", 3).acquire().await.unwrap();
    let holding: Vec<usize> = nodes
        .iter()
        .map(|n| n.keys("lockattr:{render}:sem:*").len())
        .collect();
    assert_eq!(
        holding.iter().filter(|&&n| n > 0).count(),
        1,
        "keys spread over masters: {holding:?}"
    );
    assert!(holding.iter().any(|&n| n >= 3), "{holding:?}");

    // A waiter is woken by a release, and a mismatch is refused.
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let guard = locker
                .semaphore("render", 3)
                .acquire_timeout(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap();
            (Instant::now(), guard)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished());
    let mismatch = locker.semaphore("render", 5).acquire().await.unwrap_err();
    assert!(
        matches!(
            mismatch,
            lockattr::LockError::PermitsMismatch { recorded: 3, .. }
        ),
        "{mismatch:?}"
    );
    let released = Instant::now();
    a.release().await.unwrap();
    let (at, d) = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiter was not woken")
        .unwrap();
    let woken = at.duration_since(released);
    assert!(woken < Duration::from_millis(800), "woken after {woken:?}");
    assert!(d.fencing_token() > c.fencing_token());
    for guard in [b, c, d] {
        guard.release().await.unwrap();
    }
}
