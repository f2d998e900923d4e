//! `renew_for` through the attribute: the lease is renewed past its
//! `expire` until the cap has passed since the lock was taken; then renewal
//! stops, the lease runs out, and `on_lost` applies: an `on_lost = "abort"`
//! body is dropped, an `on_lost = "error"` body's `Ok` becomes
//! `Err(Lost(RenewFor))` (sync and async); with `on_lost = "ignore"` the
//! body runs on and its result stands. A body shorter than the cap is
//! unaffected. A
//! reentrant nested call's `renew_for` changes nothing: the outer call's
//! lease keeps its own renewal.
//!
//! Leases are 1 s and caps 1.5 s: the lock is renewed at about 0.33 s,
//! 0.67 s, 1 s and 1.33 s, and runs out at about 2.33 s. Bounds are
//! generous.

use crate::support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lockattr::{LockError, Locker, LostReason, redis_lock};
use support::asserts::lost_reason;
use support::lockers::setup;
use support::{RedisServer, eventually, lock_key, stranger_takes};

/// The guard is lost by then, counted from the call.
const LOST_BY: Duration = Duration::from_secs(4);
/// The cap of the functions here.
const CAP: Duration = Duration::from_millis(1500);

/// The key of `name` is gone within 2 s (the lease ran out, or the release).
fn freed(server: &RedisServer, name: &str) -> bool {
    eventually(Duration::from_secs(2), || !server.exists(&lock_key(name))).is_some()
}

// ---- on_lost = "abort" ----

#[redis_lock(name = "cap:abort", expire = 1, renew_for = "1.5s", on_lost = "abort", locker = locker)]
async fn capped_abort(
    locker: &Locker,
    server: &RedisServer,
    pttl_at_1300ms: &std::sync::Mutex<Option<i64>>,
    after: &AtomicBool,
) -> Result<(), LockError> {
    tokio::time::sleep(Duration::from_millis(1300)).await;
    *pttl_at_1300ms.lock().unwrap() = Some(server.pttl(&lock_key("cap:abort")));
    tokio::time::sleep(Duration::from_secs(10)).await;
    after.store(true, Ordering::SeqCst);
    Ok(())
}

/// Renewed past its 1 s lease (time left in Redis at 1.3 s), then dropped
/// mid-body with `RenewFor` after the cap and within a lease or so of it;
/// the key is gone and another Locker takes the lock.
#[tokio::test]
async fn abort_body_is_dropped_after_the_cap() {
    let (server, locker) = setup();
    let (pttl, after) = (std::sync::Mutex::new(None), AtomicBool::new(false));
    let start = Instant::now();
    let err = capped_abort(&locker, &server, &pttl, &after)
        .await
        .expect_err("renewal stopped at the cap");
    let took = start.elapsed();
    assert_eq!(lost_reason(&err), Some(LostReason::RenewFor), "{err:?}");
    let pttl = pttl.lock().unwrap().expect("the body got to 1.3 s");
    assert!(pttl > 0, "PTTL {pttl} at 1.3 s: not renewed past its lease");
    assert!(!after.load(Ordering::SeqCst), "the body went on");
    assert!(took >= CAP, "aborted after {took:?}, before the cap");
    assert!(took < LOST_BY, "aborted only after {took:?}");
    assert!(freed(&server, "cap:abort"));
    stranger_takes(&server, "cap:abort").unwrap();
}

// ---- on_lost = "error" ----

#[redis_lock(name = "cap:error:async", expire = 1, renew_for = "1.5s", on_lost = "error", locker = locker)]
async fn capped_error_async(locker: &Locker, work: Duration) -> Result<u32, LockError> {
    tokio::time::sleep(work).await;
    Ok(7)
}

#[redis_lock(name = "cap:error:sync", expire = 1, renew_for = "1.5s", on_lost = "error", locker = locker)]
fn capped_error_sync(locker: &Locker, work: Duration) -> Result<u32, LockError> {
    std::thread::sleep(work);
    Ok(7)
}

/// An async body that outlives cap and lease (3 s) finishes, and the call
/// says `Err(Lost(RenewFor))`; the key is gone, a stranger takes the lock.
#[tokio::test]
async fn error_async_body_finishes_then_reports_the_cap() {
    let (server, locker) = setup();
    let start = Instant::now();
    let err = capped_error_async(&locker, Duration::from_secs(3))
        .await
        .expect_err("lost after the cap");
    assert!(
        start.elapsed() >= Duration::from_secs(3),
        "the body was cut short"
    );
    assert_eq!(lost_reason(&err), Some(LostReason::RenewFor), "{err:?}");
    assert!(freed(&server, "cap:error:async"));
    stranger_takes(&server, "cap:error:async").unwrap();
}

/// The same for a sync body.
#[test]
fn error_sync_body_finishes_then_reports_the_cap() {
    let (server, locker) = setup();
    let start = Instant::now();
    let err = capped_error_sync(&locker, Duration::from_secs(3)).expect_err("lost after the cap");
    assert!(start.elapsed() >= Duration::from_secs(3));
    assert_eq!(lost_reason(&err), Some(LostReason::RenewFor), "{err:?}");
    assert!(freed(&server, "cap:error:sync"));
    stranger_takes(&server, "cap:error:sync").unwrap();
}

/// Bodies shorter than the cap, past their first lease (1.2 s): `Ok`, and
/// the lock is released at once, sync and async.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_shorter_than_the_cap_is_unaffected() {
    let (server, locker) = setup();
    let work = Duration::from_millis(1200);
    assert_eq!(capped_error_async(&locker, work).await.unwrap(), 7);
    assert!(!server.exists(&lock_key("cap:error:async")));
    let sync = tokio::task::block_in_place(|| capped_error_sync(&locker, work));
    assert_eq!(sync.unwrap(), 7);
    assert!(!server.exists(&lock_key("cap:error:sync")));
}

// ---- on_lost = "ignore": the body runs on ----

#[redis_lock(name = "cap:plain", expire = 1, renew_for = "1.5s", on_lost = "ignore", guard = g, locker = locker)]
fn capped_plain(
    locker: &Locker,
    server: &RedisServer,
) -> Result<(bool, Option<LockError>), LockError> {
    let lost = g.lost_blocking(LOST_BY);
    // The lease runs out (the guard counts it from below, so the key may
    // last a few milliseconds longer): a stranger can take the lock while
    // the body runs.
    let taken = freed(server, "cap:plain") && stranger_takes(server, "cap:plain").is_ok();
    Ok((taken, lost))
}

/// With `on_lost = "ignore"`, a sync body sees the loss through its guard,
/// the lock is free for others meanwhile, and its result stands.
#[test]
fn on_lost_ignore_the_body_sees_the_loss_and_its_result_stands() {
    let (server, locker) = setup();
    let (taken, lost) = capped_plain(&locker, &server).unwrap();
    let lost = lost.expect("lost within 4 s");
    assert_eq!(lost_reason(&lost), Some(LostReason::RenewFor), "{lost:?}");
    assert!(taken, "a stranger could not take the lock after the loss");
}

// ---- reentrant nested calls ----

#[redis_lock(name = "cap:nested", expire = 1, renew_for = "1.5s", on_lost = "abort", locker = locker)]
async fn capped_outer(locker: &Locker) -> Result<(), LockError> {
    capped_inner(locker).await
}

#[redis_lock(name = "cap:nested", expire = 1, renew_for = "1h", on_lost = "abort", locker = locker)]
async fn capped_inner(locker: &Locker) -> Result<(), LockError> {
    tokio::time::sleep(Duration::from_secs(10)).await;
    Ok(())
}

/// A nested call's longer `renew_for` does not lift the outer call's cap:
/// the lock is lost by the outer cap, and the whole chain stops.
#[tokio::test]
async fn a_nested_renew_for_changes_nothing() {
    let (server, locker) = setup();
    let start = Instant::now();
    let err = capped_outer(&locker)
        .await
        .expect_err("lost at the outer cap");
    assert_eq!(lost_reason(&err), Some(LostReason::RenewFor), "{err:?}");
    let took = start.elapsed();
    assert!(took >= CAP && took < LOST_BY, "lost after {took:?}");
    assert!(freed(&server, "cap:nested"));
}
