//! Read-write locks on a 3-master Redis Cluster of our own: every key of
//! one read-write lock lives on one master (one hash tag, reader keys
//! included), readers overlap, a writer is alone, and hand-overs wake the
//! waiters.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockattr::Locker;
use support::cluster::Cluster;
use support::{RedisServer, keys};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_write_lock_on_a_cluster() {
    let cluster = Cluster::start();
    let nodes = &cluster.nodes;
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let broken = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for t in 0..8 {
        let locker = Locker::cluster(urls.clone()).unwrap();
        let (readers, writers, most, broken) = (
            readers.clone(),
            writers.clone(),
            most.clone(),
            broken.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for i in 0..6 {
                let writing = (t + i) % 4 == 0;
                let request = if writing {
                    locker.write_lock("index")
                } else {
                    locker.read_lock("index")
                };
                let guard = request
                    .expire(Duration::from_secs(30))
                    .acquire_timeout(Duration::from_secs(60))
                    .acquire()
                    .await
                    .unwrap();
                if writing {
                    if writers.fetch_add(1, Ordering::SeqCst) != 0
                        || readers.load(Ordering::SeqCst) != 0
                    {
                        broken.store(true, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    writers.fetch_sub(1, Ordering::SeqCst);
                } else {
                    let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    if writers.load(Ordering::SeqCst) != 0 {
                        broken.store(true, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    readers.fetch_sub(1, Ordering::SeqCst);
                }
                guard.release().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert!(!broken.load(Ordering::SeqCst), "a writer was not alone");
    assert!(most.load(Ordering::SeqCst) >= 2, "readers never overlapped");

    // One master holds every key, reader keys included.
    let locker = Locker::cluster(urls.clone()).unwrap();
    let a = locker.read_lock("index").acquire().await.unwrap();
    let b = locker.read_lock("index").acquire().await.unwrap();
    let holding: Vec<usize> = nodes
        .iter()
        .map(|n| n.keys(&keys::reader_keys("index")).len())
        .collect();
    assert_eq!(holding.iter().filter(|&&n| n > 0).count(), 1, "{holding:?}");
    assert!(holding.contains(&2), "{holding:?}");

    // The last reader's release hands over to the waiting writer at once.
    let writer = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let guard = locker
                .write_lock("index")
                .acquire_timeout(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap();
            (Instant::now(), guard)
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!writer.is_finished(), "the writer entered with readers");
    a.release().await.unwrap();
    let released = Instant::now();
    b.release().await.unwrap();
    let (at, w) = tokio::time::timeout(Duration::from_secs(2), writer)
        .await
        .expect("the writer was not handed the lock")
        .unwrap();
    let woken = at.duration_since(released);
    assert!(woken < Duration::from_millis(800), "woken after {woken:?}");
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
    let urls: Vec<String> = cluster.nodes.iter().map(RedisServer::url).collect();
    let locker = Locker::cluster_builder(urls)
        .prefix("shop:{catalog}:")
        .build()
        .unwrap();
    let a = locker.read_lock("items").acquire().await.unwrap();
    let b = locker.read_lock("items").acquire().await.unwrap();
    let holding: Vec<usize> = cluster
        .nodes
        .iter()
        .map(|n| n.keys("shop:{catalog}:{items}:rw:read:*").len())
        .collect();
    assert!(holding.contains(&2), "{holding:?}");
    let busy = locker
        .write_lock("items")
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await;
    assert!(busy.is_err(), "{busy:?}");
    a.release().await.unwrap();
    b.release().await.unwrap();
    let w = locker
        .write_lock("items")
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await
        .unwrap();
    w.release().await.unwrap();
}
