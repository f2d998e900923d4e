//! Read-write locks on a 3-master Redis Cluster of our own: every key of
//! one read-write lock lives on one master (one hash tag, reader keys
//! included), readers overlap, a writer is alone, and hand-overs wake the
//! waiters.

use crate::support;

use std::time::{Duration, Instant};

use lockattr::Locker;
use support::cluster::Cluster;
use support::keys;
use support::kinds::{
    RwCensus, assert_still_waiting, free_now, got_within, keys_per_node, run_tasks, spawn_stamped,
    within, woken,
};
use support::takes::{try_read, try_write};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_write_lock_on_a_cluster() {
    let cluster = Cluster::start();
    let nodes = &cluster.nodes;
    let census = RwCensus::default();
    run_tasks(8, |t| {
        let locker = cluster.locker();
        let census = census.clone();
        async move {
            for i in 0..6 {
                let writing = (t + i) % 4 == 0;
                let (expire, wait) = (Duration::from_secs(30), Duration::from_secs(60));
                let guard = if writing {
                    try_write(&locker, "index", expire, wait).await.unwrap()
                } else {
                    try_read(&locker, "index", expire, wait).await.unwrap()
                };
                if writing {
                    census.writer_in();
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    census.writer_out();
                } else {
                    census.reader_in();
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    census.reader_out();
                }
                guard.release().await.unwrap();
            }
        }
    })
    .await;
    assert!(!census.broken(), "a writer was not alone");
    assert!(census.most_readers() >= 2, "readers never overlapped");

    // One master holds every key, reader keys included.
    let locker = cluster.locker();
    let a = locker.read_lock("index").acquire().await.unwrap();
    let b = locker.read_lock("index").acquire().await.unwrap();
    let holding = keys_per_node(nodes, &keys::reader_keys("index"));
    assert_eq!(holding.iter().filter(|&&n| n > 0).count(), 1, "{holding:?}");
    assert!(holding.contains(&2), "{holding:?}");

    // The last reader's release hands over to the waiting writer at once.
    let writer = spawn_stamped(&locker, |locker| async move {
        got_within(locker.write_lock("index"), Duration::from_secs(30)).await
    });
    let pause = Duration::from_millis(300);
    assert_still_waiting(&writer, pause, "the writer entered with readers").await;
    a.release().await.unwrap();
    let released = Instant::now();
    b.release().await.unwrap();
    let w = woken(
        writer,
        Duration::from_secs(2),
        released,
        "the writer was not handed the lock",
    )
    .await;
    let written = w.fencing_token();
    assert!(written > 0);
    w.release().await.unwrap();
    let reader = locker.read_lock("index").acquire().await.unwrap();
    assert_eq!(reader.fencing_token(), written);
    reader.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_with_a_hash_tag_keeps_reader_keys_in_its_slot() {
    let cluster = Cluster::start();
    let locker = Locker::cluster_builder(cluster.urls())
        .prefix("shop:{catalog}:")
        .build()
        .unwrap();
    let a = locker.read_lock("items").acquire().await.unwrap();
    let b = locker.read_lock("items").acquire().await.unwrap();
    let holding = keys_per_node(&cluster.nodes, "shop:{catalog}:{items}:rw:read:*");
    assert!(holding.contains(&2), "{holding:?}");
    let busy = within(locker.write_lock("items"), Duration::ZERO).await;
    assert!(busy.is_err(), "{busy:?}");
    a.release().await.unwrap();
    b.release().await.unwrap();
    let w = free_now(locker.write_lock("items")).await;
    w.release().await.unwrap();
}
