//! Connections: a Locker (and its clones) opens one command connection per
//! tokio runtime whose tasks use it (the library's I/O thread counts as one:
//! it serves the blocking path) and one subscriber connection for all its
//! waiters, however many tasks and threads use it.
use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use lockattr::Locker;
use support::RedisServer;
use support::outages::{try_wait, try_wait_blocking};

/// The inspecting connection of `client_count` itself, the Locker's three
/// (the I/O thread's, the test runtime's, the subscriber), and slack for a
/// connection being replaced.
const MAX_CLIENTS: usize = 5;

#[test]
fn a_thousand_operations_share_a_handful_of_connections() {
    let server = Arc::new(RedisServer::start());
    let locker = Locker::new(server.url()).unwrap();
    let acquisitions = Arc::new(AtomicUsize::new(0));

    let connections_before = server.total_connections_received();
    // Watch the number of clients while the work runs.
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let server = server.clone();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut max = 0;
            let mut samples: u64 = 0;
            while !stop.load(Ordering::SeqCst) {
                max = max.max(server.client_count());
                samples += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            (max, samples)
        })
    };

    // 600 acquisitions from 12 async tasks on a multi-thread runtime...
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let async_work = {
        let locker = locker.clone();
        let acquisitions = acquisitions.clone();
        std::thread::spawn(move || {
            rt.block_on(async {
                let tasks: Vec<_> = (0..12)
                    .map(|t| {
                        let locker = locker.clone();
                        let acquisitions = acquisitions.clone();
                        tokio::spawn(async move {
                            for i in 0..50 {
                                let name = format!("conn-{}", (t + i) % 6);
                                let guard = try_wait(&locker, &name, Duration::from_secs(20))
                                    .await
                                    .unwrap();
                                acquisitions.fetch_add(1, Ordering::SeqCst);
                                if i % 5 == 0 {
                                    guard.extend(Duration::from_secs(1)).await.unwrap();
                                }
                                if i % 2 == 0 {
                                    guard.release().await.unwrap();
                                } else {
                                    drop(guard);
                                }
                            }
                        })
                    })
                    .collect();
                for task in tasks {
                    task.await.unwrap();
                }
            });
        })
    };
    // ...and 400 from 4 plain threads, on the same names.
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let locker = locker.clone();
            let acquisitions = acquisitions.clone();
            std::thread::spawn(move || {
                for i in 0..100 {
                    let name = format!("conn-{}", (t + i) % 6);
                    let guard = try_wait_blocking(&locker, &name, Duration::from_secs(20)).unwrap();
                    acquisitions.fetch_add(1, Ordering::SeqCst);
                    guard.release_blocking().unwrap();
                }
            })
        })
        .collect();

    async_work.join().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    let (max_during, samples) = watcher.join().unwrap();

    // Every connection ever opened, minus the inspecting ones (each sample
    // opened one, and so did this query): what the Locker opened in total.
    let opened = server.total_connections_received() - connections_before - samples - 1;
    assert_eq!(acquisitions.load(Ordering::SeqCst), 1_000);
    // Two (a connection per runtime), the subscriber's if a task went to
    // Redis's queue (the tasks of one Locker wait in their process, behind
    // the one at Redis), and one more if a slow answer on this busy 2-core
    // box made it reconnect once.
    assert!(
        (2..=4).contains(&opened),
        "the Locker opened {opened} connections"
    );
    assert!(samples > 0);
    assert!(
        max_during <= MAX_CLIENTS,
        "{max_during} clients connected during the run"
    );
    let after = server.client_count();
    assert!(
        after <= MAX_CLIENTS,
        "{after} clients connected after the run"
    );
    // Dropped guards are released in the background: all free soon.
    let free = support::eventually(Duration::from_secs(2), || server.held_locks().is_empty());
    assert!(free.is_some(), "locks left: {:?}", server.held_locks());
}

#[test]
fn clones_share_one_connection_and_lockers_have_their_own() {
    let server = RedisServer::start();
    let base = server.client_count();
    let a = Locker::new(server.url()).unwrap();
    let a2 = a.clone();
    a.ping_blocking().unwrap();
    a2.ping_blocking().unwrap();
    a2.lock("c")
        .acquire_blocking()
        .unwrap()
        .release_blocking()
        .unwrap();
    assert_eq!(server.client_count(), base + 1);
    let b = Locker::new(server.url()).unwrap();
    b.ping_blocking().unwrap();
    assert_eq!(server.client_count(), base + 2);
}
