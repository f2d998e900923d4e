//! Dropping: a dropped guard frees its lock (at once for a blocking guard,
//! soon for an async one, with or without a runtime around), and a dropped
//! `acquire()` future never leaves a lock behind.
use crate::support;

use std::time::Duration;

use support::lockers::setup;
use support::outages::{assert_freed_within, take_and_release, take_and_release_now, try_wait};
use support::{RedisServer, lock_key};

/// Long enough that only a release (never the lease) can free the lock in these tests.
const LONG: Duration = Duration::from_secs(30);

/// Asserts that the lock `d` is freed within 2 s (`why`: the message
/// otherwise).
fn assert_freed_soon(server: &RedisServer, why: &str) {
    assert_freed_within(server, "d", Duration::from_secs(2), why);
}

#[test]
fn dropped_blocking_guard_is_released_before_drop_returns() {
    let (server, locker) = setup();
    let guard = locker.lock("d").expire(LONG).acquire_blocking().unwrap();
    assert!(server.exists(&lock_key("d")));
    drop(guard);
    assert!(!server.exists(&lock_key("d")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_blocking_guard_inside_a_runtime_is_released() {
    let (server, locker) = setup();
    let guard = locker.lock("d").expire(LONG).acquire_blocking().unwrap();
    drop(guard);
    assert!(!server.exists(&lock_key("d")));
}

#[tokio::test]
async fn dropped_async_guard_is_released_soon() {
    let (server, locker) = setup();
    let guard = locker.lock("d").expire(LONG).acquire().await.unwrap();
    assert!(server.exists(&lock_key("d")));
    drop(guard);
    assert_freed_soon(&server, "still held 2 s after the drop (expire 30 s)");
    // Free for others, too.
    take_and_release_now(&locker, "d").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_async_guard_in_a_spawned_task_is_released() {
    let (server, locker) = setup();
    let l = locker.clone();
    tokio::spawn(async move {
        let _guard = l.lock("d").expire(LONG).acquire().await.unwrap();
        tokio::task::yield_now().await;
    })
    .await
    .unwrap();
    assert_freed_soon(&server, "still held 2 s after the drop");
}

#[test]
fn dropped_async_guard_in_a_thread_without_runtime_is_released() {
    let (server, locker) = setup();
    let rt = support::current_thread();
    let guard = rt
        .block_on(locker.lock("d").expire(LONG).acquire())
        .unwrap();
    // The runtime that acquired it is gone; the guard dies in a plain thread.
    drop(rt);
    std::thread::spawn(move || drop(guard)).join().unwrap();
    assert_freed_soon(&server, "still held 2 s after the drop");
}

#[tokio::test]
async fn dropped_acquire_future_waiting_on_a_held_lock_leaves_no_lock() {
    let (server, locker) = setup();
    let holder = locker.lock("d").expire(LONG).acquire().await.unwrap();
    let waiting = locker
        .lock("d")
        .expire(LONG)
        .acquire_timeout(Duration::from_secs(5))
        .acquire();
    let outcome = tokio::time::timeout(Duration::from_millis(200), waiting).await;
    assert!(
        outcome.is_err(),
        "the lock is held: the acquire cannot finish"
    );
    holder.release().await.unwrap();

    // The abandoned request may take the lock a moment later, but must give it back.
    tokio::time::sleep(Duration::from_millis(500)).await;
    // (Blocking this test's runtime thread is fine: the locks' I/O runs on the library's thread.)
    assert_freed_soon(&server, "a lock was left behind by a dropped future");
    let guard = try_wait(&locker, "d", Duration::from_secs(2))
        .await
        .unwrap();
    // And it stays ours: nothing else comes back for it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard.release().await.unwrap();
    assert!(!server.exists(&lock_key("d")));
}

#[tokio::test]
async fn dropped_acquire_future_on_a_free_lock_leaves_no_lock() {
    let (server, locker) = setup();
    for _ in 0..20 {
        let mut fut = std::pin::pin!(locker.lock("d").expire(LONG).acquire());
        // Poll once (the request starts), then drop it.
        tokio::select! {
            biased;
            res = &mut fut => drop(res),
            () = std::future::ready(()) => {}
        }
    }
    assert_freed_soon(&server, "a lock was left behind by a dropped future");
    take_and_release(&locker, "d", Duration::from_secs(2)).await;
}

#[tokio::test]
async fn dropped_release_future_still_releases() {
    let (server, locker) = setup();
    let guard = locker.lock("d").expire(LONG).acquire().await.unwrap();
    {
        let mut fut = std::pin::pin!(guard.release());
        // Poll once, then drop the future.
        tokio::select! {
            biased;
            res = &mut fut => res.unwrap(),
            () = std::future::ready(()) => {}
        }
    }
    assert_freed_soon(&server, "a cancelled release left the lock held");
}
