//! `#[redis_lock(permits = N)]` on sync and async functions: at most N
//! bodies at once, each with a guard of its own.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockattr::{LockGuard, Locker, redis_lock};
use support::attrs::{all_tasks, plain_lock};
use support::lockers::{locker, setup};
use support::{BodyError as Error, RedisServer, keys, lock_key};

/// The permits of `slots`, from a constant.
const SLOTS: u32 = 3;

/// Counts itself in, pauses, counts itself out.
#[redis_lock(name = "async-pool", permits = 2, expire = 30, acquire_time = 60, locker = locker)]
async fn inside_async(
    locker: &Locker,
    inside: &AtomicUsize,
    most: &AtomicUsize,
) -> Result<(), Error> {
    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
    most.fetch_max(now, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(3)).await;
    inside.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

/// The same, synchronous, with the permits from a constant and the guard.
#[redis_lock(name = "sync-pool", permits = SLOTS, expire = 30, acquire_time = 60, locker = locker, guard = g)]
fn inside_sync(locker: &Locker, inside: &AtomicUsize, most: &AtomicUsize) -> Result<u64, Error> {
    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
    most.fetch_max(now, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(3));
    inside.fetch_sub(1, Ordering::SeqCst);
    let g: &LockGuard = g;
    Ok(g.fencing_token())
}

/// A nested call on the same semaphore takes a permit of its own (a
/// semaphore is never re-entered).
#[redis_lock(name = "nested", permits = 2, acquire_time = 0, locker = locker)]
async fn outer(locker: &Locker, server: &RedisServer) -> Result<(usize, bool), Error> {
    inner(locker, server).await
}

/// How many permits are held, and whether a third call found none.
#[redis_lock(name = "nested", permits = 2, acquire_time = 0, locker = locker)]
async fn inner(locker: &Locker, server: &RedisServer) -> Result<(usize, bool), Error> {
    let held = server.keys(&keys::permit_keys("nested")).len();
    let third = matches!(innermost(locker).await, Err(Error::Lock(e)) if e.is_timeout());
    Ok((held, third))
}

#[redis_lock(name = "nested", permits = 2, acquire_time = 0, locker = locker)]
async fn innermost(locker: &Locker) -> Result<(), Error> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn async_functions_have_at_most_the_permits_inside() {
    let server = RedisServer::start();
    let (inside, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    all_tasks(8, |_| {
        let locker = locker(&server);
        let (inside, most) = (inside.clone(), most.clone());
        async move {
            for _ in 0..10 {
                inside_async(&locker, &inside, &most).await.unwrap();
            }
        }
    })
    .await;
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "not at most, or never, 2 inside"
    );
    assert!(server.keys(&keys::permit_keys("async-pool")).is_empty());
}

#[test]
fn sync_functions_have_at_most_the_permits_inside() {
    let server = RedisServer::start();
    let (inside, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let locker = locker(&server);
            let (inside, most) = (inside.clone(), most.clone());
            std::thread::spawn(move || {
                (0..10)
                    .map(|_| inside_sync(&locker, &inside, &most).unwrap())
                    .collect::<Vec<u64>>()
            })
        })
        .collect();
    let mut fences: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    assert_eq!(
        most.load(Ordering::SeqCst),
        3,
        "not at most, or never, 3 inside"
    );
    let n = fences.len();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), n, "two holders shared a fencing token");
    assert!(server.keys(&keys::permit_keys("sync-pool")).is_empty());
}

#[tokio::test]
async fn a_nested_call_takes_a_permit_of_its_own() {
    let (server, locker) = setup();
    let (held, third_refused) = outer(&locker, &server).await.unwrap();
    assert_eq!(held, 2, "the nested call re-entered the outer permit");
    assert!(third_refused, "a third holder got in");
    assert!(server.keys(&keys::permit_keys("nested")).is_empty());
}

/// A lock of the same name inside a semaphore's body is a lock of its own,
/// not a reentry into the permit.
#[redis_lock(name = "mixed", permits = 2, locker = locker)]
async fn permit_then_lock(locker: &Locker, server: &RedisServer) -> Result<bool, Error> {
    plain_lock(locker, server).await
}

#[tokio::test]
async fn a_lock_inside_a_semaphore_of_the_same_name_is_taken() {
    let (server, locker) = setup();
    let took_lock = permit_then_lock(&locker, &server).await.unwrap();
    assert!(took_lock, "the lock re-entered the semaphore's permit");
    assert!(!server.exists(&lock_key("mixed")));
}
