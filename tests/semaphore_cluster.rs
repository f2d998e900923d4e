//! Semaphores on a 3-master Redis Cluster of our own: every key of one
//! semaphore lives on one master (one hash tag), and the bound holds.

use crate::support;

use std::time::{Duration, Instant};

use support::cluster::Cluster;
use support::kinds::{
    Census, assert_still_waiting, got_within, keys_per_node, run_tasks, spawn_stamped, woken,
};
use support::takes::try_permit;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_semaphore_on_a_cluster_keeps_its_bound_and_hands_over() {
    let cluster = Cluster::start();
    let nodes = &cluster.nodes;
    let census = Census::default();
    run_tasks(12, |t| {
        let locker = cluster.locker();
        let census = census.clone();
        async move {
            for _ in 0..8 {
                let (expire, wait) = (Duration::from_secs(30), Duration::from_secs(60));
                let guard = try_permit(&locker, "render", 3, expire, wait)
                    .await
                    .unwrap();
                census.enter();
                tokio::time::sleep(Duration::from_millis(2 + t as u64 % 3)).await;
                census.leave();
                guard.release().await.unwrap();
            }
        }
    })
    .await;
    assert_eq!(census.most(), 3, "not at most, or never, 3 inside");

    // One master holds every key of the semaphore.
    let locker = cluster.locker();
    let a = locker.semaphore("render", 3).acquire().await.unwrap();
    let b = locker.semaphore("render", 3).acquire().await.unwrap();
    let c = locker.semaphore("render", 3).acquire().await.unwrap();
    let holding = keys_per_node(nodes, "lockattr:{render}:sem:*");
    assert_eq!(
        holding.iter().filter(|&&n| n > 0).count(),
        1,
        "keys spread over masters: {holding:?}"
    );
    assert!(holding.iter().any(|&n| n >= 3), "{holding:?}");

    // A waiter is woken by a release, and a mismatch is refused.
    let waiter = spawn_stamped(&locker, |locker| async move {
        got_within(locker.semaphore("render", 3), Duration::from_secs(30)).await
    });
    let pause = Duration::from_millis(300);
    assert_still_waiting(
        &waiter,
        pause,
        "the waiter got a permit of a full semaphore",
    )
    .await;
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
    let d = woken(
        waiter,
        Duration::from_secs(2),
        released,
        "the waiter was not woken",
    )
    .await;
    assert!(d.fencing_token() > c.fencing_token());
    for guard in [b, c, d] {
        guard.release().await.unwrap();
    }
}
