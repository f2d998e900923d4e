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
//! Sync functions do not re-enter by default: a thread that waits in a
//! thread pool runs other jobs, and a job for the same lock cannot be told
//! from a nested call. A nested sync call, from a sync or an async body, and
//! a call from a job that rayon runs on the waiting thread, wait like anyone
//! else. With `reentrant = true` on both the holding call and the nested
//! one, a sync lock is re-entered on the thread that holds it (counted, as
//! parking_lot's `ReentrantMutex` does): same lease, no round trip, only the
//! outermost exit releases (a nested value, `return`, `?` or caught panic
//! does not; a panic in the outermost body does); another thread never
//! re-enters, and a job rayon runs on the holding thread does (the hazard
//! the docs warn about, pinned in section 11).

use crate::support;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use lockattr::{LockError, Locker, LostReason, redis_lock};
use support::lockers::setup;
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
    let (server, locker) = setup();
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
    let (server, locker) = setup();
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
    let (server, locker) = setup();
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
    let (server, locker) = setup();
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
    let (server, locker) = setup();
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
    let (server, locker) = setup();
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

/// `on_lost = "ignore"`: the outer call returns what the nested call got
/// (by default its own loss would be returned instead).
#[redis_lock(name = "account:{id}", expire = "300ms", on_lost = "ignore", locker = locker)]
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
    let (_server, locker) = setup();
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
    let (server, locker) = setup();
    assert!(
        counts_async(&locker, &server, 8).await.unwrap(),
        "async nested call reached Redis"
    );
    // The counts see the outer call's own commands.
    assert!(
        commands(&server)
            .iter()
            .any(|(name, n)| (name == "evalsha" || name == "fcall") && *n >= 2)
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

/// With a TTL, as every key a test leaves behind should have.
fn write_counter(server: &RedisServer, value: u64) {
    let () = redis::cmd("SET")
        .arg(COUNTER)
        .arg(value)
        .arg("PX")
        .arg(60_000)
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
    let (server, locker) = setup();
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
    let (server, locker) = setup();
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
/// ran, and whether it ran out within 5 s once the nested call was over
/// (`on_lost = "ignore"`: it reports that itself, in its `Ok`).
#[redis_lock(name = "account:{id}", expire = "1s", on_lost = "ignore", locker = locker, guard = g)]
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
    let (server, locker) = setup();
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

// ---- 11. `reentrant = true` on a sync fn: re-entered on the same thread, counted ----

/// The error of a body that fails on its own, next to the lock's.
#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Inner,
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

fn fails() -> Result<(), AppError> {
    Err(AppError::Inner)
}

/// A nested sync call that would wait 5 s for a lock held elsewhere.
#[redis_lock(name = "account:{id}", acquire_time = 5, reentrant = true, locker = locker, guard = g)]
fn withdraw_here(locker: &Locker, id: u32) -> Result<u64, LockError> {
    Ok(g.fencing_token())
}

/// What a sync outer call saw around a nested call on its own lock.
#[derive(Debug)]
struct Seen {
    outer: u64,
    inner: u64,
    took: Duration,
    /// No command reached Redis during the nested call.
    quiet: bool,
    /// The key was still there after the nested call returned.
    held: bool,
    /// A stranger trying once, after the nested call returned.
    stranger: Result<(), LockError>,
}

#[redis_lock(name = "account:{id}", expire = 30, reentrant = true, locker = locker, guard = g)]
fn transfer_here(locker: &Locker, server: &RedisServer, id: u32) -> Result<Seen, LockError> {
    let before = commands(server);
    let start = Instant::now();
    let inner = withdraw_here(locker, id)?;
    let took = start.elapsed();
    let quiet = commands(server) == before;
    let held = server.exists(&account(id));
    let stranger = support::stranger_takes(server, &format!("account:{id}"));
    Ok(Seen {
        outer: g.fencing_token(),
        inner,
        took,
        quiet,
        held,
        stranger,
    })
}

/// Calls itself `depth` times on the same lock: every level's token, and
/// whether the lock was still held after each nested call returned.
#[redis_lock(name = "account:{id}", expire = 30, acquire_time = 5, reentrant = true, locker = locker, guard = g)]
fn recurse(
    locker: &Locker,
    server: &RedisServer,
    id: u32,
    depth: u32,
) -> Result<(Vec<u64>, bool), LockError> {
    let mut tokens = vec![g.fencing_token()];
    let mut held = true;
    if depth > 0 {
        let (inner, inner_held) = recurse(locker, server, id, depth - 1)?;
        tokens.extend(inner);
        held = inner_held && server.exists(&account(id));
    }
    Ok((tokens, held))
}

/// Sync, `reentrant = true`: a nested call on the lock its thread holds goes
/// straight in (it would wait 5 s otherwise), with the outer lease (same
/// fencing token) and no round trip; the lock is still held after it
/// returns, against a stranger too, and released only by the outermost
/// call; the same four levels deep, by recursion.
#[test]
fn sync_reentrant_calls_reenter_on_the_same_thread() {
    let (server, locker) = setup();
    let seen = transfer_here(&locker, &server, 30).unwrap();
    assert_eq!(
        seen.inner, seen.outer,
        "the nested call took a lock of its own: {seen:?}"
    );
    assert!(
        seen.took < Duration::from_secs(1),
        "the nested call waited: {seen:?}"
    );
    assert!(seen.quiet, "the nested call reached Redis: {seen:?}");
    assert!(
        seen.held,
        "the nested call released the outer lock: {seen:?}"
    );
    assert!(
        matches!(seen.stranger, Err(LockError::Timeout { .. })),
        "a stranger got the lock after the nested call: {seen:?}"
    );
    assert!(
        !server.exists(&account(30)),
        "held after the outermost call"
    );
    support::stranger_takes(&server, "account:30").unwrap();

    let (tokens, held) = recurse(&locker, &server, 30, 3).unwrap();
    assert_eq!(tokens.len(), 4);
    assert!(tokens.iter().all(|t| *t == tokens[0]), "{tokens:?}");
    assert!(
        tokens[0] > seen.outer,
        "a new outermost call takes a new lease"
    );
    assert!(held, "a nested call released the lock");
    assert!(
        !server.exists(&account(30)),
        "held after the outermost call"
    );
    // Alone, the nested function takes the lock itself.
    assert!(withdraw_here(&locker, 30).unwrap() > tokens[0]);
    assert!(!server.exists(&account(30)));
}

/// Tries the lock for 300 ms.
#[redis_lock(name = "account:{id}", acquire_time = "300ms", reentrant = true, locker = locker, guard = g)]
fn try_briefly(locker: &Locker, id: u32) -> Result<u64, LockError> {
    Ok(g.fencing_token())
}

/// The body's token, what a thread spawned from the body got, and a nested
/// call on this thread afterwards.
#[redis_lock(name = "account:{id}", expire = 30, reentrant = true, locker = locker, guard = g)]
fn spawns_a_thread(
    locker: &Locker,
    id: u32,
) -> Result<(u64, Result<u64, LockError>, u64), LockError> {
    let spawned = std::thread::scope(|s| s.spawn(|| try_briefly(locker, id)).join().unwrap());
    let nested = try_briefly(locker, id)?;
    Ok((g.fencing_token(), spawned, nested))
}

/// Holds the lock until told to go.
#[redis_lock(name = "account:{id}", expire = 30, acquire_time = 10, reentrant = true, locker = locker, guard = g)]
fn hold_here(
    locker: &Locker,
    id: u32,
    entered: &mpsc::Sender<()>,
    go: &mpsc::Receiver<()>,
) -> Result<u64, LockError> {
    entered.send(()).unwrap();
    go.recv().unwrap();
    Ok(g.fencing_token())
}

/// Another thread never re-enters a sync lock: a thread spawned from the
/// body times out while a nested call on the body's thread re-enters; a
/// thread calling the same function while another holds the lock waits,
/// and gets a new lease once the first returns.
#[test]
fn another_thread_does_not_reenter_a_sync_lock() {
    let (server, locker) = setup();
    let (outer, spawned, nested) = spawns_a_thread(&locker, 31).unwrap();
    assert!(
        matches!(spawned, Err(LockError::Timeout { .. })),
        "a thread spawned from the body got in: {spawned:?}"
    );
    assert_eq!(nested, outer);
    assert!(!server.exists(&account(31)));

    let (a_in_tx, a_in) = mpsc::channel();
    let (a_go, a_go_rx) = mpsc::channel();
    let (b_in_tx, b_in) = mpsc::channel();
    let (b_go, b_go_rx) = mpsc::channel();
    let a = std::thread::spawn({
        let locker = locker.clone();
        move || hold_here(&locker, 32, &a_in_tx, &a_go_rx)
    });
    a_in.recv_timeout(Duration::from_secs(5)).unwrap();
    let b = std::thread::spawn({
        let locker = locker.clone();
        move || hold_here(&locker, 32, &b_in_tx, &b_go_rx)
    });
    assert!(
        b_in.recv_timeout(Duration::from_millis(500)).is_err(),
        "the second thread entered while the first held"
    );
    a_go.send(()).unwrap();
    let first = a.join().unwrap().unwrap();
    b_in.recv_timeout(Duration::from_secs(5))
        .expect("the second thread never got the freed lock");
    b_go.send(()).unwrap();
    let second = b.join().unwrap().unwrap();
    assert!(
        second > first,
        "token {second} after {first}: not a new lease"
    );
    assert!(!server.exists(&account(32)));
}

/// How a nested body leaves.
#[derive(Clone, Copy, Debug)]
enum Exit {
    Value,
    Return,
    Question,
    Panic,
}

#[redis_lock(name = "account:{id}", acquire_time = 0, reentrant = true, locker = locker, guard = g)]
fn leaves(locker: &Locker, id: u32, how: Exit) -> Result<u64, AppError> {
    let token = g.fencing_token();
    match how {
        Exit::Value => {}
        Exit::Return => return Ok(token),
        Exit::Question => fails()?,
        Exit::Panic => panic!("the nested body panics"),
    }
    Ok(token)
}

/// `leaves` with `on_lost = "error"`: the body runs as a closure.
#[redis_lock(name = "account:{id}", acquire_time = 0, reentrant = true, on_lost = "error", locker = locker, guard = g)]
fn leaves_checked(locker: &Locker, id: u32, how: Exit) -> Result<u64, AppError> {
    let token = g.fencing_token();
    match how {
        Exit::Value => {}
        Exit::Return => return Ok(token),
        Exit::Question => fails()?,
        Exit::Panic => panic!("the nested body panics"),
    }
    Ok(token)
}

/// Every way out of a nested call, with and without `on_lost`: what went
/// wrong (the nested call's outcome, or the lock no longer held after it).
#[redis_lock(name = "account:{id}", expire = 30, reentrant = true, locker = locker, guard = g)]
fn survives_nested_exits(
    locker: &Locker,
    server: &RedisServer,
    id: u32,
) -> Result<Vec<String>, AppError> {
    let token = g.fencing_token();
    let mut problems = Vec::new();
    for how in [Exit::Value, Exit::Return, Exit::Question, Exit::Panic] {
        for checked in [false, true] {
            let inner = catch_unwind(AssertUnwindSafe(|| match checked {
                false => leaves(locker, id, how),
                true => leaves_checked(locker, id, how),
            }));
            let expected = match (how, &inner) {
                (Exit::Panic, Err(_)) => true,
                (Exit::Question, Ok(Err(AppError::Inner))) => true,
                (Exit::Value | Exit::Return, Ok(Ok(t))) => *t == token,
                _ => false,
            };
            if !expected {
                problems.push(format!("{how:?} (on_lost: {checked}): {:?}", inner.ok()));
            }
            if !server.exists(&account(id)) {
                problems.push(format!("{how:?} (on_lost: {checked}) deleted the key"));
            }
            if support::stranger_takes(server, &format!("account:{id}")).is_ok() {
                problems.push(format!("{how:?} (on_lost: {checked}) let a stranger in"));
            }
        }
    }
    // The count came back down, not below: still re-entered.
    if leaves(locker, id, Exit::Value)? != token {
        problems.push("no longer re-entered after the nested exits".into());
    }
    Ok(problems)
}

#[redis_lock(name = "account:{id}", expire = 30, reentrant = true, locker = locker)]
fn panics_after_nesting(locker: &Locker, id: u32) -> Result<(), AppError> {
    leaves(locker, id, Exit::Value)?;
    panic!("the outermost body panics");
}

/// A nested call's value, `return`, `?` error and caught panic leave the
/// outer lock held (nothing released, no stranger gets in); a panic in the
/// outermost body releases it, and leaves nothing behind on the thread: a
/// later call there waits for a stranger's lock like anyone else.
#[test]
fn only_the_outermost_exit_releases_a_sync_lock() {
    let (server, locker) = setup();
    let problems = survives_nested_exits(&locker, &server, 33).unwrap();
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(
        !server.exists(&account(33)),
        "held after the outermost call"
    );

    let panicked = catch_unwind(AssertUnwindSafe(|| panics_after_nesting(&locker, 34)));
    assert!(panicked.is_err());
    assert!(
        !server.exists(&account(34)),
        "a panic in the outermost body kept the lock"
    );
    let stranger = Locker::new(server.url()).unwrap();
    let held = stranger.lock("account:34").acquire_blocking().unwrap();
    let here = leaves(&locker, 34, Exit::Value);
    assert!(
        matches!(here, Err(AppError::Lock(LockError::Timeout { .. }))),
        "the thread still counted itself inside the lock: {here:?}"
    );
    held.release_blocking().unwrap();
    leaves(&locker, 34, Exit::Value).unwrap();
}

/// A default (non-reentrant) sync outer call holding the lock: a nested
/// `reentrant = true` call does not get in.
#[redis_lock(name = "account:{id}", expire = 30, locker = locker)]
fn plain_outer(locker: &Locker, id: u32) -> Result<Result<u64, AppError>, AppError> {
    Ok(leaves(locker, id, Exit::Value))
}

/// A `reentrant = true` outer call: a nested default call does not get in.
#[redis_lock(name = "account:{id}", expire = 30, reentrant = true, locker = locker)]
fn reentrant_outer(locker: &Locker, id: u32) -> Result<Result<u64, LockError>, LockError> {
    Ok(withdraw(locker, id))
}

/// An async body holding the lock: a nested sync `reentrant = true` call
/// does not get in (the async call chain is not the thread's).
#[redis_lock(name = "account:{id}", expire = 30, locker = locker)]
async fn async_outer(locker: &Locker, id: u32) -> Result<Result<u64, AppError>, AppError> {
    tokio::task::yield_now().await;
    Ok(leaves(locker, id, Exit::Value))
}

/// Sync reentry needs `reentrant = true` on both calls: the one holding the
/// lock and the nested one; an async body's lock is not re-entered by a
/// sync call either. Each nested call waits and times out.
#[tokio::test]
async fn sync_reentry_needs_both_calls_to_ask() {
    let (server, locker) = setup();
    let inner = plain_outer(&locker, 35).unwrap();
    assert!(
        matches!(inner, Err(AppError::Lock(LockError::Timeout { .. }))),
        "{inner:?}"
    );
    let inner = reentrant_outer(&locker, 35).unwrap();
    assert!(matches!(inner, Err(LockError::Timeout { .. })), "{inner:?}");
    let inner = async_outer(&locker, 35).await.unwrap();
    assert!(
        matches!(inner, Err(AppError::Lock(LockError::Timeout { .. }))),
        "{inner:?}"
    );
    assert!(!server.exists(&account(35)));
}

#[redis_lock(name = "account:{id}", expire = 60, acquire_time = 0, reentrant = true, locker = locker)]
fn needs_a_minute_here(locker: &Locker, server: &RedisServer, id: u32) -> Result<i64, LockError> {
    Ok(server.pttl(&account(id)))
}

#[redis_lock(name = "account:{id}", expire = "1s", reentrant = true, locker = locker)]
fn short_sync_lease_calls_long(
    locker: &Locker,
    server: &RedisServer,
    id: u32,
) -> Result<(i64, i64), LockError> {
    let before = server.pttl(&account(id));
    let inside = needs_a_minute_here(locker, server, id)?;
    Ok((before, inside))
}

/// `on_lost = "ignore"`: the outer call returns what the nested call got.
#[redis_lock(name = "account:{id}", expire = "300ms", reentrant = true, on_lost = "ignore", locker = locker)]
fn outlives_sync_lease(
    locker: &Locker,
    id: u32,
    ran: &AtomicU32,
) -> Result<Result<u64, LockError>, LockError> {
    std::thread::sleep(Duration::from_millis(500));
    Ok(counted_here(locker, id, ran))
}

#[redis_lock(name = "account:{id}", acquire_time = 0, reentrant = true, locker = locker, guard = g)]
fn counted_here(locker: &Locker, id: u32, ran: &AtomicU32) -> Result<u64, LockError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(g.fencing_token())
}

/// A nested sync call's own `expire`, longer than the lease has left,
/// raises the lease, as an async one does; a lease lost meanwhile is not
/// re-entered (nor taken anew): `Err(Lost)`, the body does not run.
#[test]
fn a_nested_sync_call_keeps_its_options_and_a_lost_lock_is_not_reentered() {
    let (server, locker) = setup();
    let (before, inside) = short_sync_lease_calls_long(&locker, &server, 36).unwrap();
    assert!((0..=1000).contains(&before), "PTTL {before} before");
    assert!(
        (50_000..=60_000).contains(&inside),
        "PTTL {inside} ms inside a nested call with expire = 60"
    );
    assert!(!server.exists(&account(36)));

    let ran = AtomicU32::new(0);
    let inner = outlives_sync_lease(&locker, 37, &ran).unwrap();
    assert!(
        matches!(
            inner,
            Err(LockError::Lost {
                reason: LostReason::Expired,
                ..
            })
        ),
        "{inner:?}"
    );
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "a nested body ran on a lost lock"
    );
    assert!(
        !server.exists(&account(37)),
        "the nested call took the lock anew"
    );
}

#[redis_lock(name = ["account:{a}", "account:{b}"], acquire_time = 0, reentrant = true, locker = locker, guard = g)]
fn pair_here(locker: &Locker, a: u32, b: u32) -> Result<u64, LockError> {
    Ok(g.fencing_token_of(&format!("account:{a}")).unwrap())
}

/// Holds {40, 41, 42}; calls a nested single lock, a nested subset, and a
/// nested set reaching outside.
#[redis_lock(name = ["account:40", "account:41", "account:42"], reentrant = true, locker = locker, guard = g)]
#[allow(clippy::type_complexity)]
fn set_outer_here(
    locker: &Locker,
) -> Result<
    (
        u64,
        Result<u64, AppError>,
        Result<u64, LockError>,
        Result<u64, LockError>,
    ),
    LockError,
> {
    let forty = g.fencing_token_of("account:40").unwrap();
    let single = leaves(locker, 40, Exit::Value);
    let subset = pair_here(locker, 40, 42);
    let outside = pair_here(locker, 41, 43);
    Ok((forty, single, subset, outside))
}

/// A single lock whose nested call locks a set around it.
#[redis_lock(name = "account:{id}", reentrant = true, locker = locker)]
fn single_then_pair_here(locker: &Locker, id: u32) -> Result<Result<u64, LockError>, LockError> {
    Ok(pair_here(locker, id, id + 1))
}

/// Sync sets with `reentrant = true`, as async ones: a nested call whose
/// names the thread holds goes straight in; one that needs a name it does
/// not hold next to names it holds is refused (hold-and-wait), and takes
/// nothing.
#[test]
fn sync_sets_reenter_on_the_same_thread() {
    let (server, locker) = setup();
    let (forty, single, subset, outside) = set_outer_here(&locker).unwrap();
    assert_eq!(single.unwrap(), forty);
    assert_eq!(subset.unwrap(), forty);
    let err = outside.unwrap_err();
    assert!(matches!(err, LockError::InvalidInput { .. }), "{err:?}");
    assert!(err.to_string().contains("account:43"), "{err}");
    for id in 40..=43 {
        assert!(!server.exists(&account(id)), "account:{id} left held");
    }
    let inner = single_then_pair_here(&locker, 44).unwrap();
    assert!(
        matches!(inner, Err(LockError::InvalidInput { .. })),
        "{inner:?}"
    );
    assert!(!server.exists(&account(44)) && !server.exists(&account(45)));
}

/// Which thread ran one item, and whether it got the lock.
#[redis_lock(name = "counter", expire = 30, acquire_time = "200ms", reentrant = true, locker = locker)]
fn bump_here(
    locker: &Locker,
    server: &RedisServer,
    sections: &Sections,
) -> Result<std::thread::ThreadId, LockError> {
    sections.run(|| {
        let value = read_counter(server);
        write_counter(server, value + 1);
    });
    Ok(std::thread::current().id())
}

/// `bump_around` with `reentrant = true`: the thread holding the lock, and
/// each item's outcome.
#[redis_lock(name = "counter", expire = 30, reentrant = true, locker = locker)]
#[allow(clippy::type_complexity)]
fn bump_around_here(
    locker: &Locker,
    server: &RedisServer,
    sections: &Sections,
    n: usize,
) -> Result<
    (
        std::thread::ThreadId,
        Vec<Result<std::thread::ThreadId, LockError>>,
    ),
    LockError,
> {
    use rayon::prelude::*;
    Ok(sections.run(|| {
        let value = read_counter(server);
        let inner = (0..n)
            .into_par_iter()
            .map(|_| bump_here(locker, server, sections))
            .collect();
        write_counter(server, value + 1);
        (std::thread::current().id(), inner)
    }))
}

/// The hazard the docs warn about, pinned: with `reentrant = true`, items
/// rayon runs on the thread waiting inside the locked body (its `join`
/// runs one half there) re-enter the lock while that body is mid-way:
/// critical sections overlap. Items on other threads never get in.
#[test]
fn sync_reentry_from_a_work_stealing_pool_enters_on_the_waiting_thread_only() {
    let (server, locker) = setup();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    let sections = Sections::default();
    let (holder, inner) = pool
        .install(|| bump_around_here(&locker, &server, &sections, 12))
        .unwrap();
    let mut entered = 0;
    for result in &inner {
        match result {
            Ok(thread) => {
                assert_eq!(*thread, holder, "an item entered on another thread");
                entered += 1;
            }
            Err(LockError::Timeout { .. }) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(entered > 0, "no item re-entered on the holding thread");
    assert_eq!(sections.overlaps.load(Ordering::SeqCst), entered);
    assert!(!server.exists(&lock_key(COUNTER)));
}
