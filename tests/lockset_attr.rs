//! `#[redis_lock(name = [..])]`: several names for one call, on sync and
//! async functions, with format strings and `LockKey` expressions; the body
//! runs holding every name, and every way out (value, `?`, panic, a dropped
//! future) releases them all. Reentrancy: a nested set or single lock whose
//! names the call chain holds goes straight in; a nested set that needs a
//! name the chain does not hold, next to names it does, is refused.

use crate::support;

use std::time::Duration;

use lockattr::{LockError, LockSetGuard, Locker, redis_lock};
use support::lockers::setup;
use support::{RedisServer, lock_key};

fn account(id: u32) -> String {
    lock_key(&format!("account:{id}"))
}

fn both_held(server: &RedisServer, from: u32, to: u32) -> bool {
    server.exists(&account(from)) && server.exists(&account(to))
}

#[redis_lock(name = ["account:{from}", "account:{to}"], locker = locker, expire = 30, acquire_time = 0, guard = g)]
fn transfer_sync(
    locker: &Locker,
    server: &RedisServer,
    from: u32,
    to: u32,
    fail: bool,
) -> Result<(bool, u64, u64), LockError> {
    if fail {
        return Err(LockError::NotConfigured);
    }
    Ok((
        both_held(server, from, to),
        g.fencing_token_of(&format!("account:{from}")).unwrap(),
        g.fencing_token_of(&format!("account:{to}")).unwrap(),
    ))
}

#[test]
fn a_sync_function_holds_every_name_and_releases_them() {
    let (server, locker) = setup();
    let (held, a, b) = transfer_sync(&locker, &server, 1, 2, false).unwrap();
    assert!(held, "the body ran without both names");
    assert!(a > 0 && b > 0);
    assert!(!server.exists(&account(1)) && !server.exists(&account(2)));
    // `?`-like early return: released as well.
    assert!(transfer_sync(&locker, &server, 1, 2, true).is_err());
    assert!(!server.exists(&account(1)) && !server.exists(&account(2)));
    // One name held elsewhere: the call does not run, and takes nothing.
    let other = Locker::new(server.url()).unwrap();
    let two = other.lock("account:2").acquire_blocking().unwrap();
    let err = transfer_sync(&locker, &server, 1, 2, false).unwrap_err();
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    assert!(!server.exists(&account(1)));
    two.release_blocking().unwrap();
}

#[redis_lock(name = ["account:{from}", "account:{to}"], locker = locker, expire = 30)]
fn panics_inside(locker: &Locker, from: u32, to: u32) -> Result<(), LockError> {
    panic!("inside {from} {to}");
}

#[test]
fn a_panic_releases_every_name() {
    let (server, locker) = setup();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        panics_inside(&locker, 3, 4)
    }));
    assert!(caught.is_err());
    assert!(!server.exists(&account(3)) && !server.exists(&account(4)));
}

struct Account(u32);

impl lockattr::LockKey for Account {
    fn write_key(&self, out: &mut String) {
        out.push_str("account:");
        self.0.write_key(out);
    }
}

#[redis_lock(name = [from, to], locker = locker, expire = 30, acquire_time = 5, guard = g)]
async fn transfer(
    locker: &Locker,
    server: &RedisServer,
    from: &Account,
    to: &Account,
) -> Result<(bool, usize), LockError> {
    tokio::task::yield_now().await;
    Ok((both_held(server, from.0, to.0), g.names().count()))
}

#[tokio::test]
async fn an_async_function_with_lock_key_names() {
    let (server, locker) = setup();
    let (held, count) = transfer(&locker, &server, &Account(5), &Account(6))
        .await
        .unwrap();
    assert!(held);
    assert_eq!(count, 2);
    assert!(!server.exists(&account(5)) && !server.exists(&account(6)));
    // The same account twice is one name.
    let (held, count) = transfer(&locker, &server, &Account(7), &Account(7))
        .await
        .unwrap();
    assert!(held);
    assert_eq!(count, 1);
}

#[redis_lock(name = ["account:{from}", "account:{to}"], locker = locker, expire = 30)]
async fn sleeps_inside(locker: &Locker, from: u32, to: u32) -> Result<(), LockError> {
    tokio::time::sleep(Duration::from_secs(60)).await;
    Ok(())
}

#[tokio::test]
async fn a_dropped_future_releases_every_name() {
    let (server, locker) = setup();
    let call = sleeps_inside(&locker, 8, 9);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), call)
            .await
            .is_err()
    );
    assert!(
        support::eventually(Duration::from_secs(2), || !server.exists(&account(8))
            && !server.exists(&account(9)))
        .is_some()
    );
}

// ---- reentrancy ----

#[redis_lock(name = "account:{id}", locker = locker, acquire_time = 0, guard = g)]
async fn single(locker: &Locker, id: u32) -> Result<u64, LockError> {
    Ok(g.fencing_token())
}

#[redis_lock(name = ["account:{a}", "account:{b}"], locker = locker, acquire_time = 0, guard = g)]
async fn pair(locker: &Locker, a: u32, b: u32) -> Result<u64, LockError> {
    Ok(g.fencing_token_of(&format!("account:{a}")).unwrap())
}

/// Holds {10, 11, 12}; calls a nested single lock, a nested subset, and a
/// nested set reaching outside.
#[redis_lock(name = ["account:10", "account:11", "account:12"], locker = locker, guard = g)]
async fn outer(
    locker: &Locker,
) -> Result<
    (
        u64,
        Result<u64, LockError>,
        Result<u64, LockError>,
        Result<u64, LockError>,
    ),
    LockError,
> {
    let ten = g.fencing_token_of("account:10").unwrap();
    let single = single(locker, 10).await;
    let subset = pair(locker, 10, 12).await;
    let outside = pair(locker, 11, 13).await;
    Ok((ten, single, subset, outside))
}

#[tokio::test]
async fn nested_calls_inside_the_set_go_straight_in_and_outside_is_refused() {
    let (server, locker) = setup();
    let (ten, single, subset, outside) = outer(&locker).await.unwrap();
    // Straight in, with the outer lease's token (no acquisition).
    assert_eq!(single.unwrap(), ten);
    assert_eq!(subset.unwrap(), ten);
    let err = outside.unwrap_err();
    assert!(matches!(err, LockError::InvalidInput { .. }), "{err:?}");
    assert!(err.to_string().contains("account:13"), "{err}");
    assert!(!server.exists(&account(13)), "the missing name was taken");
    // Only the outermost call released.
    for id in 10..=13 {
        assert!(!server.exists(&account(id)));
    }
}

/// A single lock whose nested call locks a set around it: refused, since
/// the chain holds one of the names.
#[redis_lock(name = "account:{id}", locker = locker)]
async fn single_then_pair(locker: &Locker, id: u32) -> Result<Result<u64, LockError>, LockError> {
    Ok(pair(locker, id, id + 1).await)
}

#[tokio::test]
async fn a_set_nested_in_a_single_lock_that_reaches_outside_is_refused() {
    let (server, locker) = setup();
    let inner = single_then_pair(&locker, 20).await.unwrap();
    assert!(
        matches!(inner, Err(LockError::InvalidInput { .. })),
        "{inner:?}"
    );
    assert!(!server.exists(&account(21)));
}

#[test]
fn the_guard_type_is_the_set_guard() {
    fn takes(_: &LockSetGuard) {}
    #[redis_lock(name = ["x", "y"], locker = locker, guard = g)]
    fn f(locker: &Locker) -> Result<(), LockError> {
        takes(g);
        Ok(())
    }
    let server = RedisServer::start();
    f(&Locker::new(server.url()).unwrap()).unwrap();
}

// ---- renewal and the lost signal ----

#[redis_lock(name = ["ol:{a}", "ol:{b}"], locker = locker, expire = "900ms", renew, on_lost = "abort")]
async fn aborted(locker: &Locker, server: &RedisServer, a: u32, b: u32) -> Result<(), LockError> {
    let _: () = redis::cmd("DEL")
        .arg(lock_key(&format!("ol:{b}")))
        .query(&mut server.client())
        .unwrap();
    tokio::time::sleep(Duration::from_secs(10)).await;
    Ok(())
}

#[tokio::test]
async fn on_lost_abort_stops_the_body_when_one_name_is_lost() {
    let (server, locker) = setup();
    let start = std::time::Instant::now();
    let err = aborted(&locker, &server, 1, 2).await.unwrap_err();
    assert!(
        matches!(err, LockError::Lost { ref name, .. } if name == "ol:2"),
        "{err:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert!(!server.exists(&lock_key("ol:1")), "the other name was kept");
}

#[redis_lock(name = ["rn:a", "rn:b"], locker = locker, expire = "600ms", renew, guard = g)]
async fn renewed(locker: &Locker, server: &RedisServer) -> Result<(bool, bool), LockError> {
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    Ok((
        g.is_lost(),
        server.exists(&lock_key("rn:a")) && server.exists(&lock_key("rn:b")),
    ))
}

#[tokio::test]
async fn renew_keeps_every_name_past_its_lease() {
    let (server, locker) = setup();
    let (lost, held) = renewed(&locker, &server).await.unwrap();
    assert!(!lost);
    assert!(held, "a name expired under renewal");
    assert!(!server.exists(&lock_key("rn:a")) && !server.exists(&lock_key("rn:b")));
}
