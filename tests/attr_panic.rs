//! A panic in the body of a `#[redis_lock]` function reaches the caller
//! unchanged, and the lock is free right after (within 2 s, while the lease
//! is 30 s), sync and async.

use crate::support;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use lockattr::{LockError, Locker, redis_lock};
use support::attrs::{try_wait, try_wait_blocking};
use support::lockers::setup;
use support::{RedisServer, eventually, lock_key};

#[redis_lock(name = "panic:sync", expire = 30, acquire_time = 0, locker = locker)]
fn sync_panics(locker: &Locker, server: &RedisServer) -> Result<(), LockError> {
    assert!(server.exists(&lock_key("panic:sync")), "not held in body");
    panic!("boom in the sync body");
}

#[redis_lock(name = "panic:async", expire = 30, acquire_time = 0, locker = &locker)]
async fn async_panics(locker: Locker, ran: std::sync::mpsc::Sender<bool>) -> Result<(), LockError> {
    tokio::time::sleep(Duration::from_millis(5)).await;
    let _ = ran.send(true);
    panic!("boom in the async body");
}

fn message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "<not a string>".into())
}

#[test]
fn sync_panic_reaches_the_caller_and_frees_the_lock() {
    let (server, locker) = setup();
    for _ in 0..2 {
        let payload = catch_unwind(AssertUnwindSafe(|| sync_panics(&locker, &server)))
            .expect_err("the panic must reach the caller");
        assert_eq!(message(&*payload), "boom in the sync body");
        // A sync guard releases before its Drop returns, unwinding included.
        assert!(
            !server.exists(&lock_key("panic:sync")),
            "lock still held right after the panic"
        );
    }
    // Anyone can take it again at once.
    let _held =
        try_wait_blocking(&locker, "panic:sync", Duration::ZERO).expect("free after the panic");
}

#[tokio::test]
async fn async_panic_reaches_the_caller_and_frees_the_lock() {
    let (server, locker) = setup();
    for _ in 0..2 {
        let (tx, rx) = std::sync::mpsc::channel();
        let join = tokio::spawn(async_panics(locker.clone(), tx)).await;
        let err = join.expect_err("the panic must reach the caller");
        assert!(err.is_panic(), "{err:?}");
        assert!(rx.try_recv().unwrap(), "the body did not run");
        assert_eq!(message(&*err.into_panic()), "boom in the async body");
        let freed = eventually(Duration::from_secs(2), || {
            !server.exists(&lock_key("panic:async"))
        });
        assert!(
            freed.is_some(),
            "lock not freed within 2 s of the panic (lease 30 s)"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_panic_on_multi_thread_runtime_frees_the_lock() {
    let (server, locker) = setup();
    let (tx, _rx) = std::sync::mpsc::channel();
    let err = tokio::spawn(async_panics(locker.clone(), tx))
        .await
        .expect_err("the panic must reach the caller");
    assert!(err.is_panic());
    assert!(
        eventually(Duration::from_secs(2), || !server
            .exists(&lock_key("panic:async")))
        .is_some(),
        "lock not freed within 2 s of the panic (lease 30 s)"
    );
    // And the lock can be taken again.
    let _held = try_wait(&locker, "panic:async", Duration::from_secs(2))
        .await
        .expect("free after the panic");
}
