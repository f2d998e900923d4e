//! Cancellation: a `#[redis_lock]` future dropped mid-body (a
//! `tokio::time::timeout` around a call whose body sleeps) frees its lock
//! within 2 s, not at the 30 s expiry; and a call dropped while still waiting
//! for a busy lock never runs its body nor keeps the lock.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lockattr::{LockError, Locker, redis_lock};
use support::attrs::{take_leased, try_wait};
use support::lockers::setup;
use support::{RedisServer, eventually, lock_key};

#[redis_lock(name = "cancel:{id}", expire = 30, acquire_time = 10, locker = locker)]
async fn sleepy(locker: &Locker, id: u32, entered: &AtomicU32) -> Result<(), LockError> {
    entered.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok(())
}

async fn cancel_mid_body(server: &RedisServer, locker: &Locker) {
    let entered = AtomicU32::new(0);
    let key = lock_key("cancel:1");
    let outcome =
        tokio::time::timeout(Duration::from_millis(500), sleepy(locker, 1, &entered)).await;
    assert!(outcome.is_err(), "the 60 s body cannot finish in 500 ms");
    assert_eq!(entered.load(Ordering::SeqCst), 1, "the body never started");
    let freed = eventually(Duration::from_secs(2), || !server.exists(&key));
    assert!(
        freed.is_some(),
        "lock still held 2 s after the future was dropped (lease 30 s, PTTL {})",
        server.pttl(&key)
    );
    // The lock can be taken again at once, by the attribute too.
    let again = tokio::time::timeout(Duration::from_millis(500), sleepy(locker, 1, &entered)).await;
    assert!(again.is_err());
    assert_eq!(
        entered.load(Ordering::SeqCst),
        2,
        "second call did not get the lock"
    );
    assert!(eventually(Duration::from_secs(2), || !server.exists(&key)).is_some());
}

#[tokio::test]
async fn future_dropped_mid_body_frees_the_lock() {
    let (server, locker) = setup();
    cancel_mid_body(&server, &locker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn future_dropped_mid_body_frees_the_lock_multi_thread() {
    let (server, locker) = setup();
    cancel_mid_body(&server, &locker).await;
}

/// An aborted task is a dropped future too. (Multi-thread: the test thread
/// polls with blocking sleeps while the task runs on a worker.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_task_frees_the_lock() {
    let (server, locker) = setup();
    let entered = Arc::new(AtomicU32::new(0));
    let task = {
        let (locker, entered) = (locker.clone(), entered.clone());
        tokio::spawn(async move { sleepy(&locker, 2, &entered).await })
    };
    assert!(
        eventually(Duration::from_secs(5), || entered.load(Ordering::SeqCst)
            == 1)
        .is_some(),
        "the body never started"
    );
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert!(
        eventually(Duration::from_secs(2), || !server
            .exists(&lock_key("cancel:2")))
        .is_some(),
        "lock still held 2 s after the task was aborted (lease 30 s)"
    );
}

/// Dropped while waiting for a busy lock: when the holder lets go, the
/// abandoned call must neither run its body nor sit on the lock.
#[tokio::test]
async fn future_dropped_while_waiting_never_runs_and_never_keeps_the_lock() {
    let (server, locker) = setup();
    let holder = take_leased(&locker, "cancel:3", Duration::from_secs(30)).await;
    let entered = AtomicU32::new(0);
    let outcome =
        tokio::time::timeout(Duration::from_millis(300), sleepy(&locker, 3, &entered)).await;
    assert!(
        outcome.is_err(),
        "the lock is held: the call must still be waiting"
    );
    holder.release().await.unwrap();

    // Someone else gets the lock within 2 s (the abandoned acquisition,
    // acquire_time 10 s, may grab it for a moment, but must give it back).
    let start = Instant::now();
    let other = Locker::new(server.url()).unwrap();
    let guard = try_wait(&other, "cancel:3", Duration::from_secs(2))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "lock not available within 2 s after the holder released it: {e} (PTTL {})",
                server.pttl(&lock_key("cancel:3"))
            )
        });
    assert!(start.elapsed() < Duration::from_secs(3));
    guard.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        entered.load(Ordering::SeqCst),
        0,
        "a dropped call ran its body"
    );
}
