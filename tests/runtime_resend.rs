//! Requests whose answer is lost with their connection: the request reached
//! Redis and ran, then the connection dropped before the reply came back
//! (the proxy of `support::proxy`). The library sends a request once more
//! on a new connection only when running it twice is safe: a release is
//! re-sent and its ambiguous "not owned" read for what it is; an extension
//! is re-sent as a raise that cannot add twice.
use crate::support;

use std::time::Duration;

use lockattr::{LockError, Locker, redis_lock};
use support::outages::{assert_pttl, attempt, take_leased, take_leased_blocking};
use support::proxy::Proxy;
use support::{RedisServer, lock_key};

/// A server, a proxy in front of it, and a Locker through the proxy.
fn setup() -> (RedisServer, Proxy, Locker) {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let locker = Locker::new(proxy.url()).unwrap();
    (server, proxy, locker)
}

/// Loads the scripts (an acquire, an extension and a release of another
/// lock), so that the request the proxy cuts off is the one that runs, not
/// an FCALL answered that the library is not loaded.
async fn warm_up(locker: &Locker) {
    let guard = locker.lock("warm-up").acquire().await.unwrap();
    guard.extend(Duration::from_millis(1)).await.unwrap();
    guard.release().await.unwrap();
}

/// [`setup`], and [`warm_up`] its Locker.
async fn warmed_up() -> (RedisServer, Proxy, Locker) {
    let (server, proxy, locker) = setup();
    warm_up(&locker).await;
    (server, proxy, locker)
}

/// [`warmed_up`] for a sync caller: [`warm_up`] runs on a runtime of its
/// own.
fn warmed_up_blocking() -> (RedisServer, Proxy, Locker) {
    let (server, proxy, locker) = setup();
    support::current_thread().block_on(warm_up(&locker));
    (server, proxy, locker)
}

/// The first try of the release ran and deleted the lock; its answer was
/// lost. The re-send finds the lock gone: the release counts as done, as
/// it was sent well within the lease.
#[tokio::test]
async fn a_release_whose_answer_was_lost_is_done() {
    let (server, proxy, locker) = warmed_up().await;
    let guard = take_leased(&locker, "rel", Duration::from_secs(30)).await;
    proxy.drop_after_request_containing(lock_key("rel").as_bytes());
    guard.release().await.unwrap();
    assert!(!server.exists(&lock_key("rel")));
    assert_eq!(
        proxy.accepted(),
        2,
        "the release went out on a new connection"
    );
}

/// The same from synchronous code.
#[test]
fn a_blocking_release_whose_answer_was_lost_is_done() {
    let (server, proxy, locker) = warmed_up_blocking();
    let guard = take_leased_blocking(&locker, "rel", Duration::from_secs(30));
    proxy.drop_after_request_containing(lock_key("rel").as_bytes());
    guard.release_blocking().unwrap();
    assert!(!server.exists(&lock_key("rel")));
}

/// A release first sent after the lease ran out says so, answer lost or not.
#[tokio::test]
async fn a_late_release_whose_answer_was_lost_is_not_owned() {
    let (_server, proxy, locker) = warmed_up().await;
    let guard = take_leased(&locker, "late", Duration::from_millis(150)).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    proxy.drop_after_request_containing(lock_key("late").as_bytes());
    let err = guard.release().await.unwrap_err();
    assert!(err.is_not_owned(), "{err:?}");
}

/// The first try of an extension by 100 s ran; its answer was lost. The
/// re-send must not add another 100 s.
#[tokio::test]
async fn an_extension_whose_answer_was_lost_is_applied_once() {
    let (server, proxy, locker) = warmed_up().await;
    let guard = take_leased(&locker, "ext", Duration::from_secs(10)).await;
    proxy.drop_after_request_containing(lock_key("ext").as_bytes());
    guard.extend(Duration::from_secs(100)).await.unwrap();
    let pttl = server.pttl(&lock_key("ext"));
    assert!(
        (100_000..=110_000).contains(&pttl),
        "PTTL {pttl} ms after extending a 10 s lease by 100 s once"
    );
    assert!(!guard.is_lost());
    assert_eq!(
        proxy.accepted(),
        2,
        "the extension went out on a new connection"
    );
    guard.release().await.unwrap();
}

/// The same from synchronous code.
#[test]
fn a_blocking_extension_whose_answer_was_lost_is_applied_once() {
    let (server, proxy, locker) = warmed_up_blocking();
    let guard = take_leased_blocking(&locker, "ext", Duration::from_secs(10));
    proxy.drop_after_request_containing(lock_key("ext").as_bytes());
    guard.extend_blocking(Duration::from_secs(100)).unwrap();
    assert_pttl(&server, &lock_key("ext"), 100_000..=110_000);
    guard.release_blocking().unwrap();
}

/// An extension whose first try did not run (the connection dropped while
/// idle, before the request got to Redis) is applied by the re-send.
#[tokio::test]
async fn an_extension_that_did_not_reach_redis_is_applied_by_the_resend() {
    let (server, proxy, locker) = warmed_up().await;
    let guard = take_leased(&locker, "idle", Duration::from_secs(10)).await;
    // Every connection cut while idle: the next request fails on the old
    // one without reaching Redis, and is sent again on a new one.
    proxy.cut_all();
    tokio::time::sleep(Duration::from_millis(50)).await;
    guard.extend(Duration::from_secs(100)).await.unwrap();
    assert_pttl(&server, &lock_key("idle"), 100_000..=110_000);
    guard.release().await.unwrap();
}

/// `on_lost = "error"`: a body that finished well inside its lease returns
/// its own `Ok`, even when the release's answer is lost.
#[redis_lock(name = "attr-rel", expire = 30, acquire_time = 0, locker = locker, on_lost = "error")]
async fn body_then_lost_release(locker: &Locker, proxy: &Proxy) -> Result<u32, LockError> {
    proxy.drop_after_request_containing(lock_key("attr-rel").as_bytes());
    Ok(7)
}

#[tokio::test]
async fn the_attribute_keeps_the_bodys_ok_when_the_releases_answer_is_lost() {
    let (server, proxy, locker) = warmed_up().await;
    assert_eq!(body_then_lost_release(&locker, &proxy).await.unwrap(), 7);
    assert!(!server.exists(&lock_key("attr-rel")));
}

/// The same on a synchronous function.
#[redis_lock(name = "attr-rel-sync", expire = 30, acquire_time = 0, locker = locker, on_lost = "error")]
fn sync_body_then_lost_release(locker: &Locker, proxy: &Proxy) -> Result<u32, LockError> {
    proxy.drop_after_request_containing(lock_key("attr-rel-sync").as_bytes());
    Ok(8)
}

#[test]
fn the_sync_attribute_keeps_the_bodys_ok_when_the_releases_answer_is_lost() {
    let (server, proxy, locker) = warmed_up_blocking();
    assert_eq!(sync_body_then_lost_release(&locker, &proxy).unwrap(), 8);
    assert!(!server.exists(&lock_key("attr-rel-sync")));
}

/// Redis restarted (without persistence) while the lock was held: the
/// release's first try fails on the connection the restart broke, and the
/// re-send finds the lock gone. That is not a lost answer: the lock's
/// counter is gone too, or started again from the clock for a newcomer, so
/// the release says `NotOwned` (and the attribute would say `Lost`).
#[tokio::test]
async fn a_release_after_redis_lost_the_lock_is_not_owned() {
    let mut server = RedisServer::start();
    let locker = Locker::new(server.url()).unwrap();
    let alone = take_leased(&locker, "alone", Duration::from_secs(30)).await;
    let taken = take_leased(&locker, "taken", Duration::from_secs(30)).await;
    server.restart();
    // A newcomer, on a Locker of its own, takes "taken" on the empty server.
    let newcomer = Locker::new(server.url()).unwrap();
    let second = attempt(&newcomer, "taken").await.unwrap();
    let err = alone.release().await.unwrap_err();
    assert!(err.is_not_owned(), "{err:?}");
    let err = taken.release().await.unwrap_err();
    assert!(err.is_not_owned(), "{err:?}");
    assert!(second.fencing_token() > 0);
    second.release().await.unwrap();
}
