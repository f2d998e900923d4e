//! Reentrant annotated functions: a call made while the call chain already
//! holds the same lock (same server, same prefix, same name) re-enters it
//! with no Redis round trip, shares the outer lease (same fencing token),
//! and leaves the release to the outermost call; sync and async, three
//! levels deep, from `join!` branches, and sync-from-async. The call chain
//! of an async fn is its body's future: another task, even one spawned from
//! the body, waits like anyone else. `reentrant = false` opts out; another
//! name, another server or another prefix is another lock; a lock already
//! lost cannot be re-entered.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lockattr::{LockError, Locker, LostReason, redis_lock};
use support::{RedisServer, lock_key};
use tokio::sync::Notify;

fn account(id: u32) -> String {
    lock_key(&format!("account:{id}"))
}

// ---- 1. nested calls share the outer lease ----

#[redis_lock(name = "account:{id}", acquire_time = 0, locker = locker, guard = g)]
fn withdraw(locker: &Locker, id: u32) -> Result<u64, LockError> {
    Ok(g.fencing_token())
}

/// The outer token, the inner token, and whether the lock was still held
/// right after the inner call returned.
#[redis_lock(name = "account:{id}", expire = 30, locker = locker, guard = g)]
fn transfer(locker: &Locker, server: &RedisServer, id: u32) -> Result<(u64, u64, bool), LockError> {
    let inner = withdraw(locker, id)?;
    Ok((g.fencing_token(), inner, server.exists(&account(id))))
}

#[redis_lock(name = "account:{id}", expire = 30, acquire_time = 0, locker = locker, guard = g)]
fn audit(locker: &Locker, server: &RedisServer, id: u32) -> Result<[u64; 3], LockError> {
    let (middle, inner, held) = transfer(locker, server, id)?;
    assert!(held, "released by the middle call");
    assert!(server.exists(&account(id)), "released by the middle call");
    Ok([g.fencing_token(), middle, inner])
}

#[redis_lock(name = "account:{id}", acquire_time = 0, locker = locker, guard = g)]
async fn withdraw_async(locker: &Locker, id: u32) -> Result<u64, LockError> {
    tokio::task::yield_now().await;
    Ok(g.fencing_token())
}

#[redis_lock(name = "account:{id}", expire = 30, locker = locker, guard = g)]
async fn transfer_async(
    locker: &Locker,
    server: &RedisServer,
    id: u32,
) -> Result<(u64, u64, bool), LockError> {
    let inner = withdraw_async(locker, id).await?;
    tokio::time::sleep(Duration::from_millis(5)).await;
    Ok((g.fencing_token(), inner, server.exists(&account(id))))
}

#[redis_lock(name = "account:{id}", expire = 30, acquire_time = 0, locker = locker, guard = g)]
async fn audit_async(
    locker: &Locker,
    server: &RedisServer,
    id: u32,
) -> Result<[u64; 3], LockError> {
    let (middle, inner, held) = transfer_async(locker, server, id).await?;
    assert!(held, "released by the middle call");
    assert!(server.exists(&account(id)), "released by the middle call");
    Ok([g.fencing_token(), middle, inner])
}

/// Sync: the inner call (acquire time 0) re-enters with the outer token;
/// the lock is held until the outer call returns, then freed; and again
/// three levels deep.
#[test]
fn sync_calls_reenter() {
    let server = RedisServer::start();
    let locker = Locker::new(&server.url()).unwrap();
    let (outer, inner, held) = transfer(&locker, &server, 1).unwrap();
    assert_eq!(outer, inner, "the nested call took a lock of its own");
    assert!(held, "the nested call released the outer lock");
    assert!(!server.exists(&account(1)), "held after the outer call");

    let [a, b, c] = audit(&locker, &server, 1).unwrap();
    assert!(a > outer, "a new outermost call takes a new lease");
    assert_eq!((a, a), (b, c));
    assert!(!server.exists(&account(1)));
}

/// The same for async fns, on a multi-thread runtime (the body may move
/// between threads at every await).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_calls_reenter() {
    let server = RedisServer::start();
    let locker = Locker::new(&server.url()).unwrap();
    let (outer, inner, held) = transfer_async(&locker, &server, 1).await.unwrap();
    assert_eq!(outer, inner, "the nested call took a lock of its own");
    assert!(held, "the nested call released the outer lock");
    assert!(!server.exists(&account(1)), "held after the outer call");

    let [a, b, c] = audit_async(&locker, &server, 1).await.unwrap();
    assert!(a > outer, "a new outermost call takes a new lease");
    assert_eq!((a, a), (b, c));
    assert!(!server.exists(&account(1)));
}

// ---- 2. another task is another call chain ----

#[redis_lock(name = "account:{id}", expire = 30, acquire_time = 10, locker = &locker, guard = g)]
async fn hold_until(
    locker: Locker,
    id: u32,
    entered: Arc<Notify>,
    go: Arc<Notify>,
) -> Result<u64, LockError> {
    entered.notify_one();
    go.notified().await;
    Ok(g.fencing_token())
}

/// While one task is inside the body, another task calling the same
/// function waits; it gets the lock (a new lease) once the first returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_task_waits() {
    let server = RedisServer::start();
    let locker = Locker::new(&server.url()).unwrap();
    let notify = || Arc::new(Notify::new());
    let (a_in, a_go, b_in, b_go) = (notify(), notify(), notify(), notify());
    let a = tokio::spawn(hold_until(locker.clone(), 2, a_in.clone(), a_go.clone()));
    a_in.notified().await;
    let b = tokio::spawn(hold_until(locker.clone(), 2, b_in.clone(), b_go.clone()));
    let early = tokio::time::timeout(Duration::from_millis(500), b_in.notified()).await;
    assert!(
        early.is_err(),
        "the second task entered while the first held"
    );

    a_go.notify_one();
    let first = a.await.unwrap().unwrap();
    tokio::time::timeout(Duration::from_secs(5), b_in.notified())
        .await
        .expect("the second task never got the freed lock");
    b_go.notify_one();
    let second = b.await.unwrap().unwrap();
    assert!(
        second > first,
        "token {second} after {first}: not a new lease"
    );
    assert!(!server.exists(&account(2)));
}

#[redis_lock(name = "account:{id}", acquire_time = 0, locker = &locker, guard = g)]
async fn try_now(locker: Locker, id: u32) -> Result<u64, LockError> {
    Ok(g.fencing_token())
}

/// The token of the body, of a nested call, and what a task spawned from
/// the body got.
#[redis_lock(name = "account:{id}", expire = 30, locker = &locker, guard = g)]
async fn spawns_from_body(
    locker: Locker,
    id: u32,
) -> Result<(u64, u64, Result<u64, LockError>), LockError> {
    let spawned = tokio::spawn(try_now(locker.clone(), id)).await.unwrap();
    let nested = try_now(locker.clone(), id).await?;
    Ok((g.fencing_token(), nested, spawned))
}

/// A task spawned from a locked body does not re-enter: with acquire time 0
/// it times out, while a call awaited in the body re-enters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_spawned_from_the_body_does_not_reenter() {
    let server = RedisServer::start();
    let locker = Locker::new(&server.url()).unwrap();
    let (outer, nested, spawned) = spawns_from_body(locker, 3).await.unwrap();
    assert_eq!(outer, nested);
    assert!(
        matches!(spawned, Err(LockError::Timeout { .. })),
        "{spawned:?}"
    );
    assert!(!server.exists(&account(3)));
}

// ---- 3, 4. join! branches; sync from async ----

#[redis_lock(name = "account:{id}", expire = 30, locker = locker, guard = g)]
async fn joined(locker: &Locker, id: u32) -> Result<[u64; 3], LockError> {
    let (a, b) = tokio::join!(withdraw_async(locker, id), withdraw_async(locker, id));
    Ok([g.fencing_token(), a?, b?])
}

#[redis_lock(name = "account:{id}", expire = 30, locker = locker, guard = g)]
async fn calls_sync(locker: &Locker, id: u32) -> Result<[u64; 2], LockError> {
    tokio::task::yield_now().await;
    let inner = withdraw(locker, id)?;
    Ok([g.fencing_token(), inner])
}

/// Both branches of a `join!` in a locked body re-enter; so does a sync
/// annotated fn called from an async body.
#[tokio::test]
async fn join_branches_and_sync_calls_reenter() {
    let server = RedisServer::start();
    let locker = Locker::new(&server.url()).unwrap();
    let [outer, a, b] = joined(&locker, 4).await.unwrap();
    assert_eq!((outer, outer), (a, b));
    let [outer, inner] = calls_sync(&locker, 4).await.unwrap();
    assert_eq!(outer, inner);
    assert!(!server.exists(&account(4)));
}

// ---- 5. reentrant = false ----

#[redis_lock(name = "account:{id}", acquire_time = "200ms", reentrant = false, locker = locker)]
fn stranger(locker: &Locker, id: u32, ran: &AtomicU32) -> Result<(), LockError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[redis_lock(name = "account:{id}", acquire_time = "200ms", reentrant = false, locker = locker)]
async fn stranger_async(locker: &Locker, id: u32, ran: &AtomicU32) -> Result<(), LockError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[redis_lock(name = "account:{id}", expire = 30, locker = locker)]
fn calls_stranger(locker: &Locker, id: u32, ran: &AtomicU32) -> Result<LockError, LockError> {
    Ok(stranger(locker, id, ran).expect_err("re-entered with reentrant = false"))
}

#[redis_lock(name = "account:{id}", expire = 30, locker = locker)]
async fn calls_stranger_async(
    locker: &Locker,
    id: u32,
    ran: &AtomicU32,
) -> Result<LockError, LockError> {
    let inner = stranger_async(locker, id, ran).await;
    Ok(inner.expect_err("re-entered with reentrant = false"))
}

/// `reentrant = false`: the nested call waits like a stranger and times
/// out without running; the outer call completes and releases.
#[tokio::test]
async fn reentrant_false_times_out_inside() {
    let server = RedisServer::start();
    let locker = Locker::new(&server.url()).unwrap();
    let ran = AtomicU32::new(0);
    let e = calls_stranger(&locker, 5, &ran).unwrap();
    assert!(matches!(e, LockError::Timeout { .. }), "{e:?}");
    assert!(!server.exists(&account(5)));
    let e = calls_stranger_async(&locker, 5, &ran).await.unwrap();
    assert!(matches!(e, LockError::Timeout { .. }), "{e:?}");
    assert!(!server.exists(&account(5)));
    assert_eq!(ran.load(Ordering::SeqCst), 0, "a timed-out body ran");
    // With the lock free, it runs.
    stranger(&locker, 5, &ran).unwrap();
    stranger_async(&locker, 5, &ran).await.unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 2);
}

// ---- 6. only the same lock is re-entered ----

/// The keys held on `watched` while the body runs, and the token.
#[redis_lock(name = name, acquire_time = 0, locker = locker, guard = g)]
fn inner_lock(
    locker: &Locker,
    name: &str,
    watched: &RedisServer,
) -> Result<(Vec<String>, u64), LockError> {
    Ok((watched.keys("*{*}"), g.fencing_token()))
}

#[redis_lock(name = "outer", expire = 30, locker = locker, guard = g)]
fn outer_lock<T>(
    locker: &Locker,
    inner: impl FnOnce() -> Result<T, LockError>,
) -> Result<(u64, T), LockError> {
    Ok((g.fencing_token(), inner()?))
}

/// Another name nests as a second lock; a Locker on another server takes
/// its own lock there; another prefix on the same server is another lock;
/// another Locker with the same server and prefix re-enters.
#[test]
fn only_the_same_lock_is_reentered() {
    let server = RedisServer::start();
    let elsewhere = RedisServer::start();
    let locker = Locker::new(&server.url()).unwrap();
    let keys = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();

    let (_, (held, _)) = outer_lock(&locker, || inner_lock(&locker, "other", &server)).unwrap();
    assert_eq!(held, keys(&["lockattr:{other}", "lockattr:{outer}"]));

    let remote = Locker::new(&elsewhere.url()).unwrap();
    let (_, (held, _)) = outer_lock(&locker, || {
        let inner = inner_lock(&remote, "outer", &elsewhere)?;
        assert!(server.exists(&lock_key("outer")), "outer lock let go");
        Ok(inner)
    })
    .unwrap();
    assert_eq!(held, keys(&["lockattr:{outer}"]), "on the other server");
    assert!(elsewhere.held_locks().is_empty());

    let prefixed = Locker::builder(server.url())
        .prefix("app:")
        .build()
        .unwrap();
    let (_, (held, _)) = outer_lock(&locker, || inner_lock(&prefixed, "outer", &server)).unwrap();
    assert_eq!(held, keys(&["app:{outer}", "lockattr:{outer}"]));

    let twin = Locker::new(&server.url()).unwrap();
    let (outer, (held, inner)) =
        outer_lock(&locker, || inner_lock(&twin, "outer", &server)).unwrap();
    assert_eq!(held, keys(&["lockattr:{outer}"]));
    assert_eq!(outer, inner, "same server and prefix: the same lock");
    assert!(
        server.keys("*{*}").is_empty(),
        "left held: {:?}",
        server.keys("*{*}")
    );
}

// ---- 7. a lost lock is not re-entered ----

#[redis_lock(name = "account:{id}", expire = "300ms", locker = locker)]
fn outlives_lease(
    locker: &Locker,
    id: u32,
    ran: &AtomicU32,
) -> Result<Result<u64, LockError>, LockError> {
    std::thread::sleep(Duration::from_millis(500));
    Ok(counted(locker, id, ran))
}

#[redis_lock(name = "account:{id}", acquire_time = 0, locker = locker, guard = g)]
fn counted(locker: &Locker, id: u32, ran: &AtomicU32) -> Result<u64, LockError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(g.fencing_token())
}

#[redis_lock(name = "account:{id}", expire = "300ms", locker = locker)]
async fn outlives_lease_async(
    locker: &Locker,
    id: u32,
    ran: &AtomicU32,
) -> Result<Result<u64, LockError>, LockError> {
    tokio::time::sleep(Duration::from_millis(500)).await;
    Ok(counted_async(locker, id, ran).await)
}

#[redis_lock(name = "account:{id}", acquire_time = 0, locker = locker, guard = g)]
async fn counted_async(locker: &Locker, id: u32, ran: &AtomicU32) -> Result<u64, LockError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(g.fencing_token())
}

/// A nested call after the outer lease ran out (300 ms, no renewal, the
/// body sleeps 500 ms) returns `Err(Lost)` without running its body.
#[tokio::test]
async fn a_lost_lock_is_not_reentered() {
    let server = RedisServer::start();
    let locker = Locker::new(&server.url()).unwrap();
    let ran = AtomicU32::new(0);
    let expired = |inner: &Result<u64, LockError>| {
        matches!(
            inner,
            Err(LockError::Lost {
                reason: LostReason::Expired,
                ..
            })
        )
    };
    let inner = outlives_lease(&locker, 7, &ran).unwrap();
    assert!(expired(&inner), "{inner:?}");
    let inner = outlives_lease_async(&locker, 7, &ran).await.unwrap();
    assert!(expired(&inner), "{inner:?}");
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "a nested body ran on a lost lock"
    );
}

// ---- 8. no round trip ----

/// Every command Redis counted, but our own INFO queries.
fn commands(server: &RedisServer) -> Vec<(String, u64)> {
    let mut calls: Vec<_> = server
        .command_calls()
        .into_iter()
        .filter(|(name, _)| name != "info")
        .collect();
    calls.sort();
    calls
}

#[redis_lock(name = "account:{id}", expire = 30, locker = locker)]
fn counts_sync(locker: &Locker, server: &RedisServer, id: u32) -> Result<bool, LockError> {
    let before = commands(server);
    withdraw(locker, id)?;
    Ok(commands(server) == before)
}

#[redis_lock(name = "account:{id}", expire = 30, locker = locker)]
async fn counts_async(locker: &Locker, server: &RedisServer, id: u32) -> Result<bool, LockError> {
    let before = commands(server);
    withdraw_async(locker, id).await?;
    withdraw(locker, id)?;
    Ok(commands(server) == before)
}

/// A nested call reaches no Redis at all: no command is counted by the
/// server between before and after it.
#[tokio::test]
async fn reentry_makes_no_round_trip() {
    let server = RedisServer::start();
    let locker = Locker::new(&server.url()).unwrap();
    assert!(
        counts_sync(&locker, &server, 8).unwrap(),
        "sync nested call reached Redis"
    );
    assert!(
        counts_async(&locker, &server, 8).await.unwrap(),
        "async nested call reached Redis"
    );
    // The counts see the outer calls' own commands.
    assert!(
        commands(&server)
            .iter()
            .any(|(name, n)| name == "evalsha" && *n >= 4)
    );
}
