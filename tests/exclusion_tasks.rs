//! Mutual exclusion under contention, async: 8 tokio tasks on a multi-thread
//! runtime, each with its own Locker, run an async `#[redis_lock]` function
//! that increments a Redis counter non-atomically (GET, a short sleep, SET).
//! No update may be lost, and no two bodies may overlap.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockattr::{Locker, redis_lock};
use redis::aio::MultiplexedConnection;
use support::wakeups::{assert_exclusive_run, async_connection};
use support::{BodyError as Error, RedisServer};

const TASKS: usize = 8;
const ITERATIONS: usize = 50;

/// Read, pause, write: loses updates unless callers are kept apart.
#[redis_lock(name = "counter", expire = 30, acquire_time = 30, locker = locker)]
async fn bump(
    locker: &Locker,
    counter: &mut MultiplexedConnection,
    inside: &AtomicUsize,
    max_inside: &AtomicUsize,
) -> Result<(), Error> {
    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
    max_inside.fetch_max(now, Ordering::SeqCst);
    let value: Option<u64> = redis::cmd("GET")
        .arg("counter")
        .query_async(counter)
        .await?;
    tokio::time::sleep(Duration::from_micros(500)).await;
    tokio::task::yield_now().await;
    let _: () = redis::cmd("SET")
        .arg("counter")
        .arg(value.unwrap_or(0) + 1)
        .query_async(counter)
        .await?;
    inside.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_with_their_own_lockers_lose_no_update() {
    let server = RedisServer::start();
    // The test's own counter, without a TTL (see support::audit).
    server.allow_untimed("counter");
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let url = server.url();
        let (inside, max_inside) = (inside.clone(), max_inside.clone());
        tasks.push(tokio::spawn(async move {
            let locker = Locker::new(&url).unwrap();
            let mut counter = async_connection(&url).await;
            for _ in 0..ITERATIONS {
                bump(&locker, &mut counter, &inside, &max_inside)
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.expect("worker task panicked");
    }
    assert_exclusive_run(&server, &max_inside, TASKS * ITERATIONS);
}
