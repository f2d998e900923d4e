//! Reentrant annotated functions: an async call made while the call chain
//! already holds the same lock (same server, same prefix, same name)
//! re-enters it with no Redis round trip, shares the outer lease (same
//! fencing token), and leaves the release to the outermost call; three
//! levels deep, and from `join!` branches. The call chain of an async fn is
//! its body's future: another task, even one spawned from the body, waits
//! like anyone else. `reentrant = false` opts out; another name, another
//! server or another prefix is another lock; a lock already lost cannot be
//! re-entered. The nested call's own `expire` and `renew` still count: a
//! longer `expire` raises the lease (checked with PTTL on the server), and
//! `renew` keeps an unrenewed lease alive while the nested body runs.
//!
//! Sync functions never re-enter: a thread that waits in a thread pool runs
//! other jobs, and a job for the same lock cannot be told from a nested
//! call. A nested sync call, from a sync or an async body, and a call from a
//! job that rayon runs on the waiting thread, wait like anyone else.

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

// ---- 1. nested async calls share the outer lease; nested sync calls wait ----

#[redis_lock(name = "account:{id}", acquire_time = 0, locker = locker, guard = g)]
fn withdraw(locker: &Locker, id: u32) -> Result<u64, LockError> {
    Ok(g.fencing_token())
}

/// What the nested call got, and whether the lock was still held right
/// after it returned.
#[redis_lock(name = "account:{id}", expire = 30, locker = locker)]
fn transfer(
    locker: &Locker,
    server: &RedisServer,
    id: u32,
) -> Result<(Result<u64, LockError>, bool), LockError> {
    let inner = withdraw(locker, id);
    Ok((inner, server.exists(&account(id))))
}

/// Sync: the nested call (acquire time 0) does not get in: it times out,
/// the outer call still holds the lock and frees it when it returns.
#[test]
fn sync_calls_do_not_reenter() {
    let server = RedisServer::start();
    let locker = Locker::new(server.url()).unwrap();
    let (inner, held) = transfer(&locker, &server, 1).unwrap();
    assert!(matches!(inner, Err(LockError::Timeout { .. })), "{inner:?}");
    assert!(held, "the nested call released the outer lock");
    assert!(!server.exists(&account(1)), "held after the outer call");
    // With the lock free, it runs.
    withdraw(&locker, 1).unwrap();
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

/// Async: the inner call (acquire time 0) re-enters with the outer token;
/// the lock is held until the outer call returns, then freed; and again
/// three levels deep. On a multi-thread runtime (the body may move between
/// threads at every await).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_calls_reenter() {
    let server = RedisServer::start();
    let locker = Locker::new(server.url()).unwrap();
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
    let locker = Locker::new(server.url()).unwrap();
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
    let locker = Locker::new(server.url()).unwrap();
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
async fn calls_sync(locker: &Locker, id: u32) -> Result<(u64, Result<u64, LockError>), LockError> {
    tokio::task::yield_now().await;
    let inner = withdraw(locker, id);
    Ok((g.fencing_token(), inner))
}

/// Both branches of a `join!` in a locked body re-enter; a sync annotated
/// fn called from an async body does not: it waits, and times out.
#[tokio::test]
async fn join_branches_reenter_and_sync_calls_do_not() {
    let server = RedisServer::start();
    let locker = Locker::new(server.url()).unwrap();
    let [outer, a, b] = joined(&locker, 4).await.unwrap();
    assert_eq!((outer, outer), (a, b));
    let (_, inner) = calls_sync(&locker, 4).await.unwrap();
    assert!(matches!(inner, Err(LockError::Timeout { .. })), "{inner:?}");
    assert!(!server.exists(&account(4)));
}

// ---- 5. reentrant = false ----

/// `reentrant = false` is allowed on a sync fn: it is what those do anyway.
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
    let locker = Locker::new(server.url()).unwrap();
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
async fn inner_lock(
    locker: &Locker,
    name: &str,
    watched: &RedisServer,
) -> Result<(Vec<String>, u64), LockError> {
    Ok((watched.keys("*{*}"), g.fencing_token()))
}

/// Awaits `inner` in its body: the inner call is made there.
#[redis_lock(name = "outer", expire = 30, locker = locker, guard = g)]
async fn outer_lock<T>(
    locker: &Locker,
    inner: impl Future<Output = Result<T, LockError>>,
) -> Result<(u64, T), LockError> {
    Ok((g.fencing_token(), inner.await?))
}

/// Another name nests as a second lock; a Locker on another server takes
/// its own lock there; another prefix on the same server is another lock;
/// another Locker with the same server and prefix re-enters.
#[tokio::test]
async fn only_the_same_lock_is_reentered() {
    let server = RedisServer::start();
    let elsewhere = RedisServer::start();
    let locker = Locker::new(server.url()).unwrap();
    let keys = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();

    let (_, (held, _)) = outer_lock(&locker, inner_lock(&locker, "other", &server))
        .await
        .unwrap();
    assert_eq!(held, keys(&["lockattr:{other}", "lockattr:{outer}"]));

    let remote = Locker::new(elsewhere.url()).unwrap();
    let (_, (held, _)) = outer_lock(&locker, async {
        let inner = inner_lock(&remote, "outer", &elsewhere).await?;
        assert!(server.exists(&lock_key("outer")), "outer lock let go");
        Ok::<_, LockError>(inner)
    })
    .await
    .unwrap();
    assert_eq!(held, keys(&["lockattr:{outer}"]), "on the other server");
    assert!(elsewhere.held_locks().is_empty());

    let prefixed = Locker::builder(server.url())
        .prefix("app:")
        .build()
        .unwrap();
    let (_, (held, _)) = outer_lock(&locker, inner_lock(&prefixed, "outer", &server))
        .await
        .unwrap();
    assert_eq!(held, keys(&["app:{outer}", "lockattr:{outer}"]));

    let twin = Locker::new(server.url()).unwrap();
    let (outer, (held, inner)) = outer_lock(&locker, inner_lock(&twin, "outer", &server))
        .await
        .unwrap();
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

/// A nested async call after the outer lease ran out (300 ms, no renewal,
/// the body sleeps 500 ms) returns `Err(Lost)` without running its body.
#[tokio::test]
async fn a_lost_lock_is_not_reentered() {
    let server = RedisServer::start();
    let locker = Locker::new(server.url()).unwrap();
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
async fn counts_async(locker: &Locker, server: &RedisServer, id: u32) -> Result<bool, LockError> {
    let before = commands(server);
    withdraw_async(locker, id).await?;
    Ok(commands(server) == before)
}

/// A nested async call reaches no Redis at all: no command is counted by
/// the server between before and after it.
#[tokio::test]
async fn reentry_makes_no_round_trip() {
    let server = RedisServer::start();
    let locker = Locker::new(server.url()).unwrap();
    assert!(
        counts_async(&locker, &server, 8).await.unwrap(),
        "async nested call reached Redis"
    );
    // The counts see the outer call's own commands.
    assert!(
        commands(&server)
            .iter()
            .any(|(name, n)| name == "evalsha" && *n >= 2)
    );
}

// ---- 9. sync calls never re-enter: a pool may run another job on the waiting thread ----

/// Critical sections of the lock "counter" in this process: how many are
/// open, and how many found another one open.
#[derive(Default)]
struct Sections {
    open: AtomicU32,
    overlaps: AtomicU32,
}

impl Sections {
    /// Runs `f` as one critical section, noting whether another was open.
    fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        if self.open.fetch_add(1, Ordering::SeqCst) != 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        let out = f();
        self.open.fetch_sub(1, Ordering::SeqCst);
        out
    }
}

const COUNTER: &str = "counter";

/// GET then SET of the counter: not atomic, so only the lock keeps
/// increments from being lost.
fn read_counter(server: &RedisServer) -> u64 {
    server.get(COUNTER).map_or(0, |v| v.parse().unwrap())
}

fn write_counter(server: &RedisServer, value: u64) {
    let () = redis::cmd("SET")
        .arg(COUNTER)
        .arg(value)
        .query(&mut server.client())
        .unwrap();
}

#[redis_lock(name = "counter", expire = 30, acquire_time = "200ms", locker = locker)]
fn bump(locker: &Locker, server: &RedisServer, sections: &Sections) -> Result<(), LockError> {
    sections.run(|| {
        let value = read_counter(server);
        write_counter(server, value + 1);
    });
    Ok(())
}

/// One increment of its own that spans `n` parallel calls of `bump`: it
/// reads the counter, runs them on the pool it is called in, then writes.
#[redis_lock(name = "counter", expire = 30, locker = locker)]
fn bump_around(
    locker: &Locker,
    server: &RedisServer,
    sections: &Sections,
    n: usize,
) -> Result<Vec<Result<(), LockError>>, LockError> {
    use rayon::prelude::*;
    Ok(sections.run(|| {
        let value = read_counter(server);
        let inner = (0..n)
            .into_par_iter()
            .map(|_| bump(locker, server, sections))
            .collect();
        write_counter(server, value + 1);
        inner
    }))
}

/// A locked sync body on a rayon worker runs `par_iter`; its worker runs
/// some of the items itself while it waits for the rest, and the items call
/// `bump` on the same lock. A thread cannot tell those items from a nested
/// call, so no sync call re-enters: each item waits like any other caller
/// and times out, and no increment is lost.
#[test]
fn sync_calls_from_a_thread_pool_do_not_enter() {
    let server = RedisServer::start();
    let locker = Locker::new(server.url()).unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    let sections = Sections::default();
    let inner = pool
        .install(|| bump_around(&locker, &server, &sections, 12))
        .unwrap();
    let mut ran = 0;
    for result in &inner {
        match result {
            Ok(()) => ran += 1,
            Err(LockError::Timeout { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    let overlaps = sections.overlaps.load(Ordering::SeqCst);
    let counter = read_counter(&server);
    assert!(
        overlaps == 0 && counter == 1 + ran,
        "{ran} of the 12 calls ran, {overlaps} of them while the lock's holder was inside; \
         the counter is {counter} after {} increments",
        1 + ran
    );
    assert!(!server.exists(&lock_key(COUNTER)));
}

// ---- 10. a nested async call's own expire and renew ----

/// The lock's PTTL on the server, seen from inside a nested call that asks
/// for a minute.
#[redis_lock(name = "account:{id}", expire = 60, acquire_time = 0, locker = locker)]
async fn needs_a_minute(locker: &Locker, server: &RedisServer, id: u32) -> Result<i64, LockError> {
    Ok(server.pttl(&account(id)))
}

/// The PTTL before the nested call and inside it, and whether the lock was
/// lost (by the guard's count or on the server) 1.5 s later, past this
/// call's own lease.
#[redis_lock(name = "account:{id}", expire = "1s", locker = locker, guard = g)]
async fn short_lease_calls_long(
    locker: &Locker,
    server: &RedisServer,
    id: u32,
) -> Result<(i64, i64, bool), LockError> {
    let before = server.pttl(&account(id));
    let inside = needs_a_minute(locker, server, id).await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let lost = g.is_lost() || !server.exists(&account(id));
    Ok((before, inside, lost))
}

/// The PTTL inside a nested call that asks for less than is left, and
/// whether the nested call reached Redis.
#[redis_lock(name = "account:{id}", expire = "2s", acquire_time = 0, locker = locker)]
async fn needs_two_seconds(
    locker: &Locker,
    server: &RedisServer,
    id: u32,
) -> Result<i64, LockError> {
    Ok(server.pttl(&account(id)))
}

#[redis_lock(name = "account:{id}", expire = 30, locker = locker)]
async fn long_lease_calls_short(
    locker: &Locker,
    server: &RedisServer,
    id: u32,
) -> Result<(i64, bool), LockError> {
    // The body's own PTTL aside.
    let lock_commands = || {
        let mut calls = commands(server);
        calls.retain(|(name, _)| name != "pttl");
        calls
    };
    let before = lock_commands();
    let inside = needs_two_seconds(locker, server, id).await?;
    Ok((inside, lock_commands() == before))
}

/// A nested call that sets no `expire` of its own: the PTTL inside it.
#[redis_lock(name = "account:{id}", acquire_time = 0, locker = locker)]
async fn takes_the_lease_as_it_is(
    locker: &Locker,
    server: &RedisServer,
    id: u32,
) -> Result<i64, LockError> {
    Ok(server.pttl(&account(id)))
}

#[redis_lock(name = "account:{id}", expire = "2s", locker = locker)]
async fn short_lease_calls_default(
    locker: &Locker,
    server: &RedisServer,
    id: u32,
) -> Result<i64, LockError> {
    takes_the_lease_as_it_is(locker, server, id).await
}

/// A nested call's `expire` longer than the held lease has left raises the
/// lease (the server's PTTL is then about a minute, not the outer's second),
/// and the outer guard knows: past its own `expire` it still holds. One
/// asking for less than is left changes nothing and sends nothing.
#[tokio::test]
async fn a_nested_expire_longer_than_what_is_left_raises_the_lease() {
    let server = RedisServer::start();
    let locker = Locker::new(server.url()).unwrap();
    let (before, inside, lost) = short_lease_calls_long(&locker, &server, 10).await.unwrap();
    assert!((0..=1000).contains(&before), "PTTL {before} before");
    assert!(
        (50_000..=60_000).contains(&inside),
        "PTTL {inside} ms inside a nested call with expire = 60"
    );
    assert!(!lost, "the raised lease was lost past the outer's expire");
    assert!(!server.exists(&account(10)), "held after the outer call");

    let (inside, quiet) = long_lease_calls_short(&locker, &server, 11).await.unwrap();
    assert!(
        inside > 20_000,
        "PTTL {inside} ms: a nested call shortened the lease"
    );
    assert!(quiet, "a nested call with a shorter expire reached Redis");

    // No `expire` written on the nested call: the outer's 2 s lease is
    // not raised to the default 10 s.
    let inside = short_lease_calls_default(&locker, &server, 12)
        .await
        .unwrap();
    assert!(
        (0..=2000).contains(&inside),
        "PTTL {inside} ms: a nested call without `expire` raised the lease"
    );
}

/// Sleeps `pause` in a nested call asking for `renew` (with an `expire`
/// below what the outer has left, so it does not raise the lease); whether
/// the lock was still held at the end.
#[redis_lock(name = "account:{id}", expire = "500ms", renew, acquire_time = 0, locker = locker, guard = g)]
async fn renewed_inside(
    locker: &Locker,
    server: &RedisServer,
    id: u32,
    pause: Duration,
) -> Result<bool, LockError> {
    tokio::time::sleep(pause).await;
    Ok(!g.is_lost() && server.exists(&account(id)))
}

/// Whether the lock outlived this call's own lease while the nested call
/// ran, and whether it ran out within 5 s once the nested call was over.
#[redis_lock(name = "account:{id}", expire = "1s", locker = locker, guard = g)]
async fn unrenewed_outside(
    locker: &Locker,
    server: &RedisServer,
    id: u32,
    cut_short: bool,
) -> Result<(bool, bool), LockError> {
    let inside = if cut_short {
        // Dropped mid-body: its renewal must stop all the same.
        let nested = renewed_inside(locker, server, id, Duration::from_secs(30));
        let cut = tokio::time::timeout(Duration::from_millis(300), nested).await;
        assert!(cut.is_err(), "{cut:?}");
        true
    } else {
        renewed_inside(locker, server, id, Duration::from_millis(2500)).await?
    };
    let ran_out = tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .is_ok();
    Ok((inside, ran_out))
}

/// A nested call with `renew` keeps an unrenewed lease (1 s) alive while its
/// body runs (2.5 s); once it returns, or is dropped, the lease is the
/// outer's again: not renewed, it runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nested_renew_keeps_the_lease_alive_while_it_runs() {
    let server = RedisServer::start();
    let locker = Locker::new(server.url()).unwrap();
    let (inside, ran_out) = unrenewed_outside(&locker, &server, 12, false)
        .await
        .unwrap();
    assert!(
        inside,
        "the lock ran out while the nested call with renew ran"
    );
    assert!(ran_out, "still renewed after the nested call returned");
    assert!(!server.exists(&account(12)));

    let (_, ran_out) = unrenewed_outside(&locker, &server, 13, true).await.unwrap();
    assert!(ran_out, "still renewed after the nested call was dropped");
    assert!(!server.exists(&account(13)));
}
