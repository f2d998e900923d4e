//! Waiting for a held lock: `Timeout { name, waited }` after (never before)
//! the acquire timeout, success as soon as the holder releases or its lease
//! ends, and mutual exclusion among many waiters.
use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockattr::LockError;
use support::asserts::assert_timeout;
use support::lockers::setup;
use support::outages::{
    assert_within, take_leased, take_leased_blocking, try_wait, try_wait_blocking,
};

/// Generous slack on top of the acquire timeout for an answer to arrive.
const SLACK: Duration = Duration::from_secs(3);

/// Asserts that `err` is the Timeout of the lock `name` after `wait`, and
/// that it came after `elapsed`: not before `wait`, and within [`SLACK`].
fn assert_gave_up_after(err: &LockError, name: &str, wait: Duration, elapsed: Duration) {
    assert_timeout(err, name, wait);
    assert!(
        elapsed >= wait,
        "gave up after {elapsed:?}, before {wait:?}"
    );
    assert!(elapsed < wait + SLACK, "{elapsed:?} for {wait:?}");
}

#[tokio::test]
async fn timeout_carries_name_and_wait_async() {
    let (_server, locker) = setup();
    let holder = take_leased(&locker, "t", Duration::from_secs(30)).await;
    for wait in [
        Duration::from_millis(50),
        Duration::from_millis(300),
        Duration::from_millis(700),
    ] {
        let start = Instant::now();
        let err = try_wait(&locker, "t", wait).await.unwrap_err();
        assert_gave_up_after(&err, "t", wait, start.elapsed());
    }
    holder.release().await.unwrap();
}

#[test]
fn timeout_carries_name_and_wait_blocking() {
    let (_server, locker) = setup();
    let holder = take_leased_blocking(&locker, "t b", Duration::from_secs(30));
    for wait in [Duration::from_millis(80), Duration::from_millis(600)] {
        let start = Instant::now();
        let err = try_wait_blocking(&locker, "t b", wait).unwrap_err();
        assert_gave_up_after(&err, "t b", wait, start.elapsed());
    }
    holder.release_blocking().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_gets_the_lock_when_the_holder_releases() {
    let (_server, locker) = setup();
    let holder = take_leased(&locker, "w", Duration::from_secs(30)).await;
    let released = Arc::new(AtomicBool::new(false));
    let flag = released.clone();
    let releaser = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        flag.store(true, Ordering::SeqCst);
        holder.release().await.unwrap();
    });
    let start = Instant::now();
    let guard = try_wait(&locker, "w", Duration::from_secs(5))
        .await
        .unwrap();
    assert!(
        released.load(Ordering::SeqCst),
        "acquired before the holder released"
    );
    // Taken soon after the release, well before the 30 s lease or the 5 s wait ran out.
    assert_within(start, Duration::from_secs(4));
    releaser.await.unwrap();
    guard.release().await.unwrap();
}

#[test]
fn blocking_waiter_gets_the_lock_when_the_holder_releases() {
    let (_server, locker) = setup();
    let holder = take_leased_blocking(&locker, "w", Duration::from_secs(30));
    let first = holder.fencing_token();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        holder.release_blocking().unwrap();
    });
    let start = Instant::now();
    let guard = try_wait_blocking(&locker, "w", Duration::from_secs(5)).unwrap();
    assert!(guard.fencing_token() > first);
    assert_within(start, Duration::from_secs(4));
    releaser.join().unwrap();
    guard.release_blocking().unwrap();
}

#[tokio::test]
async fn waiter_gets_the_lock_when_the_holders_lease_ends() {
    let (_server, locker) = setup();
    // Held, never released: the 300 ms lease frees it.
    let holder = take_leased(&locker, "lease", Duration::from_millis(300)).await;
    let start = Instant::now();
    let guard = try_wait(&locker, "lease", Duration::from_secs(5))
        .await
        .unwrap();
    assert!(guard.fencing_token() > holder.fencing_token());
    assert_within(start, Duration::from_secs(3));
    guard.release().await.unwrap();
    assert!(holder.release().await.unwrap_err().is_not_owned());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiters_take_turns_one_at_a_time() {
    let (_server, locker) = setup();
    let inside = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..12 {
        let locker = locker.clone();
        let inside = inside.clone();
        let done = done.clone();
        let body = move |()| {
            let now = inside.fetch_add(1, Ordering::SeqCst);
            assert_eq!(now, 0, "two owners at once");
            std::thread::sleep(Duration::from_millis(15));
            inside.fetch_sub(1, Ordering::SeqCst);
            done.fetch_add(1, Ordering::SeqCst);
        };
        if i % 3 == 0 {
            tasks.push(tokio::task::spawn_blocking(move || {
                let guard = try_wait_blocking(&locker, "turns", Duration::from_secs(10)).unwrap();
                body(());
                guard.release_blocking().unwrap();
            }));
        } else {
            tasks.push(tokio::spawn(async move {
                let guard = try_wait(&locker, "turns", Duration::from_secs(10))
                    .await
                    .unwrap();
                body(());
                guard.release().await.unwrap();
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 12);
}

#[tokio::test]
async fn an_unbounded_wait_is_accepted() {
    let (_server, locker) = setup();
    // Free lock: taken at once.
    let holder = locker
        .lock("forever")
        .acquire_timeout(Duration::MAX)
        .expire(Duration::from_millis(400))
        .acquire()
        .await
        .unwrap();
    // Held: taken when the lease ends (no overflow in the wait arithmetic).
    let start = Instant::now();
    let guard = try_wait(&locker, "forever", Duration::MAX).await.unwrap();
    assert_within(start, Duration::from_secs(3));
    guard.release().await.unwrap();
    drop(holder);
}
