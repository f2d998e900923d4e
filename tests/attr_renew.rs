//! `renew` and `on_lost` through the attribute: a renewed lease outlives its
//! `expire` for as long as the body runs, and its renewal stops on every way
//! out (value, `?`, panic, dropped future); a lock lost mid-body (deleted
//! from outside, or a lease run out) stops an `on_lost = "abort"` body at
//! once, turns the body's `Ok` into `Err(Lost)` by default (and with
//! `on_lost = "error"`), and leaves the body's result alone with
//! `on_lost = "ignore"`; `guard = g` lets the body watch for the loss itself
//! (`g.lost()`, `g.lost_blocking(..)`).

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lockattr::{LockError, Locker, LostReason, redis_lock};
use support::asserts::lost_reason;
use support::attrs::AppError;
use support::lockers::setup;
use support::{RedisServer, eventually, lock_key};

/// Asserts that `key` stays absent for `span`.
fn stays_gone(server: &RedisServer, key: &str, span: Duration) {
    let start = Instant::now();
    while start.elapsed() < span {
        assert!(
            !server.exists(key),
            "{key} came back {:?} after it was freed",
            start.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// DELs `key` from outside; the number of keys deleted.
fn delete(server: &RedisServer, key: &str) -> i64 {
    redis::cmd("DEL")
        .arg(key)
        .query(&mut server.client())
        .unwrap()
}

/// What the body saw at one point: the key's PTTL, and a stranger's try.
type Seen = (i64, Result<(), LockError>);

fn assert_held_throughout(seen: &[Seen]) {
    assert_eq!(seen.len(), 4);
    for (i, (pttl, stranger)) in seen.iter().enumerate() {
        assert!(*pttl > 0, "look {i}: PTTL {pttl} (lease 300 ms, renewed)");
        assert!(
            matches!(stranger, Err(LockError::Timeout { .. })),
            "look {i}: a stranger got {stranger:?}"
        );
    }
}

// ---- 1. a renewed lease outlives its expire ----

#[redis_lock(name = "renew:async", expire = "300ms", renew, acquire_time = 0, locker = locker)]
async fn renewed_async(locker: &Locker, server: &RedisServer) -> Result<Vec<Seen>, LockError> {
    let stranger = Locker::new(server.url())?;
    let mut seen = Vec::new();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let tried = stranger.lock("renew:async").acquire_timeout(Duration::ZERO);
        seen.push((
            server.pttl(&lock_key("renew:async")),
            tried.acquire().await.map(drop),
        ));
    }
    Ok(seen)
}

#[redis_lock(name = "renew:sync", expire = "300ms", renew, acquire_time = 0, locker = locker)]
fn renewed_sync(locker: &Locker, server: &RedisServer) -> Result<Vec<Seen>, LockError> {
    let stranger = Locker::new(server.url())?;
    let mut seen = Vec::new();
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(500));
        let tried = stranger.lock("renew:sync").acquire_timeout(Duration::ZERO);
        seen.push((
            server.pttl(&lock_key("renew:sync")),
            tried.acquire_blocking().map(drop),
        ));
    }
    Ok(seen)
}

/// A 2 s async body under a 300 ms renewed lease holds the lock throughout;
/// the lock is freed when the call returns and stays free.
#[tokio::test]
async fn renewed_async_body_outlives_its_lease() {
    let (server, locker) = setup();
    let seen = renewed_async(&locker, &server).await.unwrap();
    assert_held_throughout(&seen);
    assert!(!server.exists(&lock_key("renew:async")));
    stays_gone(&server, &lock_key("renew:async"), Duration::from_secs(1));
}

/// The same for a sync body.
#[test]
fn renewed_sync_body_outlives_its_lease() {
    let (server, locker) = setup();
    let seen = renewed_sync(&locker, &server).unwrap();
    assert_held_throughout(&seen);
    assert!(!server.exists(&lock_key("renew:sync")));
    stays_gone(&server, &lock_key("renew:sync"), Duration::from_secs(1));
}

// ---- 2. renewal stops on every way out ----

#[derive(Clone, Copy)]
enum Exit {
    QuestionMark,
    Panic,
    Hang,
}

// The bodies outlast a renewal period (2 s / 3) before they leave.
#[redis_lock(name = "exit:{id}", expire = "2s", renew, acquire_time = 0, locker = locker)]
fn sync_exit(locker: &Locker, id: &str, exit: Exit) -> Result<u32, AppError> {
    std::thread::sleep(Duration::from_millis(800));
    match exit {
        Exit::QuestionMark => Ok("not a number".parse::<u32>()?),
        Exit::Panic => panic!("boom in the renewed sync body"),
        Exit::Hang => unreachable!("a sync body cannot be dropped"),
    }
}

#[redis_lock(name = "exit:{id}", expire = "2s", renew, acquire_time = 0, locker = &locker)]
async fn async_exit(locker: Locker, id: &'static str, exit: Exit) -> Result<u32, AppError> {
    tokio::time::sleep(Duration::from_millis(800)).await;
    match exit {
        Exit::QuestionMark => Ok("not a number".parse::<u32>()?),
        Exit::Panic => panic!("boom in the renewed async body"),
        Exit::Hang => {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok(0)
        }
    }
}

/// After the call left: the lock is gone within 1 s, sooner than the 2 s
/// lease renewed every 667 ms could run out on its own (so it was
/// released), and no renewal brings it back.
fn assert_freed(server: &RedisServer, id: &str) {
    let key = lock_key(&format!("exit:{id}"));
    assert!(
        eventually(Duration::from_secs(1), || !server.exists(&key)).is_some(),
        "{key} still held 1 s after the call left (PTTL {})",
        server.pttl(&key)
    );
    stays_gone(server, &key, Duration::from_secs(1));
}

/// Every way out of a renewed body frees the lock, each on its own lock,
/// side by side: `?` (sync, async), a panic (sync on its thread, async in a
/// spawned task), a task aborted mid-body, a future dropped by `timeout`.
#[test]
fn renewal_stops_on_every_way_out() {
    let (server, locker) = setup();
    let runtime = support::multi_thread();
    let (server, locker, runtime) = (&server, &locker, &runtime);
    std::thread::scope(|s| {
        s.spawn(move || {
            let outcome = sync_exit(locker, "q-sync", Exit::QuestionMark);
            assert!(matches!(outcome, Err(AppError::Parse(_))), "{outcome:?}");
            assert_freed(server, "q-sync");
        });
        s.spawn(move || {
            let outcome =
                runtime.block_on(async_exit(locker.clone(), "q-async", Exit::QuestionMark));
            assert!(matches!(outcome, Err(AppError::Parse(_))), "{outcome:?}");
            assert_freed(server, "q-async");
        });
        s.spawn(move || {
            let thread = std::thread::spawn({
                let locker = locker.clone();
                move || sync_exit(&locker, "p-sync", Exit::Panic)
            });
            assert!(thread.join().is_err(), "the panic must reach join");
            assert_freed(server, "p-sync");
        });
        s.spawn(move || {
            let task = runtime.spawn(async_exit(locker.clone(), "p-async", Exit::Panic));
            assert!(runtime.block_on(task).unwrap_err().is_panic());
            assert_freed(server, "p-async");
        });
        s.spawn(move || {
            let task = runtime.spawn(async_exit(locker.clone(), "abort", Exit::Hang));
            std::thread::sleep(Duration::from_millis(1500));
            assert!(server.exists(&lock_key("exit:abort")), "held mid-body");
            task.abort();
            assert!(runtime.block_on(task).unwrap_err().is_cancelled());
            assert_freed(server, "abort");
        });
        s.spawn(move || {
            let call = async_exit(locker.clone(), "timeout", Exit::Hang);
            // Made inside the runtime: a timer needs one.
            let outcome = runtime
                .block_on(async { tokio::time::timeout(Duration::from_millis(1500), call).await });
            assert!(outcome.is_err(), "a 60 s body cannot finish in 1.5 s");
            assert_freed(server, "timeout");
        });
    });
}

// ---- 3, 4. on_lost = "abort" ----

/// The body of the `on_lost = "abort"` functions: flags entering, works for
/// `work`, flags getting past its await.
async fn long_body(entered: &AtomicBool, after: &AtomicBool, work: Duration) {
    entered.store(true, Ordering::SeqCst);
    tokio::time::sleep(work).await;
    after.store(true, Ordering::SeqCst);
}

#[redis_lock(name = "abort:renewed", expire = "300ms", renew, on_lost = "abort", locker = locker)]
async fn abortable_renewed(
    locker: &Locker,
    entered: &AtomicBool,
    after: &AtomicBool,
) -> Result<(), LockError> {
    long_body(entered, after, Duration::from_secs(10)).await;
    Ok(())
}

/// A renewed lock deleted from outside: the 10 s body is dropped within
/// about a renewal period (100 ms; bound 2 s) and the call says `Taken`.
#[tokio::test]
async fn abort_on_a_deleted_renewed_lock() {
    let (server, locker) = setup();
    let (entered, after) = (AtomicBool::new(false), AtomicBool::new(false));
    let deleter = async {
        while !entered.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Past the 300 ms lease: renewal kept it.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let deleted = delete(&server, &lock_key("abort:renewed"));
        assert_eq!(deleted, 1, "the renewed lock was gone before the DEL");
        Instant::now()
    };
    let (outcome, deleted_at) = tokio::join!(abortable_renewed(&locker, &entered, &after), deleter);
    let since_del = deleted_at.elapsed();
    let err = outcome.expect_err("the lock was deleted mid-body");
    assert_eq!(lost_reason(&err), Some(LostReason::Taken), "{err:?}");
    assert!(
        since_del < Duration::from_secs(2),
        "returned {since_del:?} after the DEL"
    );
    assert!(
        !after.load(Ordering::SeqCst),
        "the body went on after its await"
    );
}

#[redis_lock(name = "abort:expiring", expire = "300ms", on_lost = "abort", locker = locker)]
async fn abortable_expiring(
    locker: &Locker,
    entered: &AtomicBool,
    after: &AtomicBool,
) -> Result<(), LockError> {
    long_body(entered, after, Duration::from_secs(5)).await;
    Ok(())
}

/// Without renewal the lease runs out after 300 ms: the 5 s body is dropped
/// then (not before; bound 2 s) and the call says `Expired`.
#[tokio::test]
async fn abort_when_the_lease_runs_out() {
    let (server, locker) = setup();
    let (entered, after) = (AtomicBool::new(false), AtomicBool::new(false));
    let start = Instant::now();
    let err = abortable_expiring(&locker, &entered, &after)
        .await
        .expect_err("the lease ran out mid-body");
    let took = start.elapsed();
    assert_eq!(lost_reason(&err), Some(LostReason::Expired), "{err:?}");
    assert!(entered.load(Ordering::SeqCst));
    assert!(
        !after.load(Ordering::SeqCst),
        "the body went on after its await"
    );
    assert!(
        took >= Duration::from_millis(300),
        "aborted after {took:?}, inside the lease"
    );
    assert!(took < Duration::from_secs(2), "aborted only after {took:?}");
    assert!(!server.exists(&lock_key("abort:expiring")));
}

// ---- 5. on_lost = "error" ----

/// How an `on_lost = "error"` body goes.
#[derive(Clone, Copy)]
struct Plan {
    /// How long it works.
    work: Duration,
    /// Deletes its lock from outside first.
    delete: bool,
    /// Returns its own error.
    fail: bool,
}

#[redis_lock(name = "error:sync", expire = lease, on_lost = "error", locker = locker)]
fn error_mode_sync(
    locker: &Locker,
    server: &RedisServer,
    lease: Duration,
    plan: Plan,
    finished: &AtomicBool,
) -> Result<u32, AppError> {
    if plan.delete {
        delete(server, &lock_key("error:sync"));
    }
    std::thread::sleep(plan.work);
    finished.store(true, Ordering::SeqCst);
    if plan.fail {
        return Err(AppError::Refused);
    }
    Ok(7)
}

#[redis_lock(name = "error:async", expire = lease, on_lost = "error", locker = locker)]
async fn error_mode_async(
    locker: &Locker,
    server: &RedisServer,
    lease: Duration,
    plan: Plan,
    finished: &AtomicBool,
) -> Result<u32, AppError> {
    if plan.delete {
        delete(server, &lock_key("error:async"));
    }
    tokio::time::sleep(plan.work).await;
    finished.store(true, Ordering::SeqCst);
    if plan.fail {
        return Err(AppError::Refused);
    }
    Ok(7)
}

/// The cases of `on_lost = "error"`, run through `call`: a body outliving
/// its 300 ms lease finishes and its `Ok` becomes `Err(Lost(Expired))`; its
/// own `Err` is kept; a lock deleted from outside (30 s lease, no renewal)
/// is found at release: `Err(Lost(Taken))`; a body within its lease is `Ok`.
fn error_mode_cases(mut call: impl FnMut(Duration, Plan, &AtomicBool) -> Result<u32, AppError>) {
    let (short, long) = (Duration::from_millis(300), Duration::from_secs(30));
    let (work, none) = (Duration::from_millis(600), Duration::ZERO);
    let cases = [
        (short, work, false, false, Some(LostReason::Expired)),
        (short, work, false, true, None),
        (long, none, true, false, Some(LostReason::Taken)),
        (long, none, true, true, None),
        (short, none, false, false, None),
    ];
    for (lease, work, delete, fail, lost) in cases {
        let finished = AtomicBool::new(false);
        let outcome = call(lease, Plan { work, delete, fail }, &finished);
        let what = format!("lease {lease:?}, work {work:?}, delete {delete}, fail {fail}");
        assert!(
            finished.load(Ordering::SeqCst),
            "{what}: the body did not finish"
        );
        match (lost, &outcome) {
            (Some(reason), Err(AppError::Lock(e))) => {
                assert_eq!(lost_reason(e), Some(reason), "{what}: {e:?}");
                // When the loss was seen, and that the body ran on after it.
                let LockError::Lost {
                    lost_after: Some(_),
                    ran_on: Some(ran_on),
                    ..
                } = e
                else {
                    panic!("{what}: the loss says not when, nor that the body ran on: {e:?}");
                };
                assert!(
                    *ran_on <= Duration::from_secs(2),
                    "{what}: ran on {ran_on:?}"
                );
                let said = e.to_string();
                assert!(
                    said.contains("its result was not returned"),
                    "{what}: {said}"
                );
            }
            (None, Err(AppError::Refused)) if fail => {}
            (None, Ok(7)) if !fail => {}
            _ => panic!("{what}: {outcome:?}"),
        }
    }
}

/// `on_lost = "error"` on a sync fn.
#[test]
fn error_mode_sync_reports_the_loss_after_the_body() {
    let (server, locker) = setup();
    error_mode_cases(|lease, plan, finished| {
        error_mode_sync(&locker, &server, lease, plan, finished)
    });
    assert!(server.held_locks().is_empty());
}

/// `on_lost = "error"` on an async fn.
#[test]
fn error_mode_async_reports_the_loss_after_the_body() {
    let (server, locker) = setup();
    let runtime = support::current_thread();
    error_mode_cases(|lease, plan, finished| {
        runtime.block_on(error_mode_async(&locker, &server, lease, plan, finished))
    });
    assert!(server.held_locks().is_empty());
}

// ---- 6. by default the loss is returned; `on_lost = "ignore"` keeps the Ok ----

/// A body that outlives its 300 ms lease (600 ms of work, no renewal), or,
/// with `delete_first`, deletes its lock from outside first and works
/// within its lease (100 ms): the loss is then found by the release.
macro_rules! outliving {
    ($sync:ident, $async_:ident, $name:literal $(, $on_lost:tt)?) => {
        #[redis_lock(name = $name, expire = "300ms", locker = locker, guard = g $(, on_lost = $on_lost)?)]
        fn $sync(locker: &Locker, server: &RedisServer, delete_first: bool) -> Result<(bool, bool), LockError> {
            if delete_first {
                delete(server, &lock_key($name));
            }
            let before = g.is_lost();
            std::thread::sleep(work(delete_first));
            Ok((before, g.is_lost()))
        }

        #[redis_lock(name = $name, expire = "300ms", locker = locker, guard = g $(, on_lost = $on_lost)?)]
        async fn $async_(locker: &Locker, server: &RedisServer, delete_first: bool) -> Result<(bool, bool), LockError> {
            if delete_first {
                delete(server, &lock_key($name));
            }
            let before = g.is_lost();
            tokio::time::sleep(work(delete_first)).await;
            Ok((before, g.is_lost()))
        }
    };
}

fn work(delete_first: bool) -> Duration {
    Duration::from_millis(if delete_first { 100 } else { 600 })
}

outliving!(outlives_sync, outlives_async, "default:outlives");
outliving!(ignores_sync, ignores_async, "ignore:outlives", "ignore");

/// Asserts a default function's outcome: `Err(Lost)` with `reason`, saying
/// when the lock was lost and that the body ran on: `expired`, at the end of
/// the 300 ms lease, and the body ran on for the rest of its 600 ms;
/// otherwise (deleted, no renewal to see it), found at the release after
/// the body's 100 ms.
fn assert_lost(outcome: Result<(bool, bool), LockError>, reason: LostReason, expired: bool) {
    let e = match outcome {
        Err(e) => e,
        Ok(seen) => panic!("a lost lock reported Ok({seen:?})"),
    };
    let LockError::Lost {
        reason: got,
        lost_after: Some(after),
        ran_on: Some(ran_on),
        ..
    } = &e
    else {
        panic!("not a Lost saying when and for how long the body ran on: {e:?}");
    };
    assert_eq!(*got, reason, "{e}");
    let message = e.to_string();
    if expired {
        assert!(
            after <= &Duration::from_millis(300),
            "lost after {after:?}: {e}"
        );
        assert!(
            after >= &Duration::from_millis(200),
            "lost after {after:?}: {e}"
        );
        assert!(
            ran_on >= &Duration::from_millis(250),
            "ran on {ran_on:?}: {e}"
        );
        assert!(
            ran_on <= &Duration::from_millis(2000),
            "ran on {ran_on:?}: {e}"
        );
        assert!(message.contains("ran on for"), "{message}");
    } else {
        assert!(
            after >= &Duration::from_millis(100),
            "lost after {after:?}: {e}"
        );
        assert_eq!(ran_on, &Duration::ZERO, "{e}");
        assert!(
            message.contains("ran to its end without knowing"),
            "{message}"
        );
    }
    for said in [
        "lost while held",
        "after it was taken",
        "its result was not returned",
    ] {
        assert!(message.contains(said), "{said:?} not in: {message}");
    }
}

/// No `on_lost`: a body that outlives its lease, or whose lock is deleted
/// under it, runs to its end, and the function returns `Err(Lost)` instead
/// of the body's `Ok`, saying when and why the lock was lost and that the
/// body ran on.
#[tokio::test]
async fn by_default_a_lost_lock_is_returned_as_an_error() {
    let (server, locker) = setup();
    assert_lost(
        outlives_sync(&locker, &server, false),
        LostReason::Expired,
        true,
    );
    assert_lost(
        outlives_async(&locker, &server, false).await,
        LostReason::Expired,
        true,
    );
    // Deleted under the body (30 s would be left): found at the release.
    assert_lost(
        outlives_sync(&locker, &server, true),
        LostReason::Taken,
        false,
    );
    assert_lost(
        outlives_async(&locker, &server, true).await,
        LostReason::Taken,
        false,
    );
    assert!(server.held_locks().is_empty());
}

/// `on_lost = "ignore"`: the body's `Ok` stands; the guard said lost by
/// then (the loss is only a WARN event and `is_lost()`).
#[tokio::test]
async fn on_lost_ignore_returns_the_body_result() {
    let (server, locker) = setup();
    assert_eq!(
        ignores_sync(&locker, &server, false).unwrap(),
        (false, true)
    );
    assert_eq!(
        ignores_async(&locker, &server, false).await.unwrap(),
        (false, true)
    );
    // Deleted under a body within its lease: not seen before the release.
    assert_eq!(
        ignores_sync(&locker, &server, true).unwrap(),
        (false, false)
    );
    assert_eq!(
        ignores_async(&locker, &server, true).await.unwrap(),
        (false, false)
    );
    assert!(server.held_locks().is_empty());
}

// ---- 7. the body watches for the loss itself ----

// `on_lost = "ignore"`: these bodies report the loss themselves, in their
// `Ok`.

#[redis_lock(name = "watch:async", expire = "300ms", renew, on_lost = "ignore", locker = locker, guard = g)]
async fn watches_async(
    locker: &Locker,
    work: Duration,
    entered: &AtomicBool,
) -> Result<Option<LostReason>, LockError> {
    entered.store(true, Ordering::SeqCst);
    tokio::select! {
        () = tokio::time::sleep(work) => Ok(None),
        lost = g.lost() => Ok(lost_reason(&lost)),
    }
}

#[redis_lock(name = "watch:sync", expire = "300ms", renew, on_lost = "ignore", locker = locker, guard = g)]
fn watches_sync(
    locker: &Locker,
    work: Duration,
    entered: &AtomicBool,
) -> Result<Option<LostReason>, LockError> {
    entered.store(true, Ordering::SeqCst);
    Ok(g.lost_blocking(work).as_ref().and_then(lost_reason))
}

fn delete_when_entered(server: &RedisServer, key: &str, entered: &AtomicBool) -> Instant {
    assert!(eventually(Duration::from_secs(5), || entered.load(Ordering::SeqCst)).is_some());
    std::thread::sleep(Duration::from_millis(500));
    let deleted = delete(server, key);
    assert_eq!(deleted, 1, "{key} was gone before the DEL");
    Instant::now()
}

/// `g.lost()` in a `select!`: work that finishes within a renewed lease wins;
/// a lock deleted from outside ends the wait within 2 s, with `Taken`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_selects_on_lost() {
    let server = Arc::new(RedisServer::start());
    let locker = Locker::new(server.url()).unwrap();
    let entered = Arc::new(AtomicBool::new(false));
    let quick = watches_async(&locker, Duration::from_millis(700), &entered).await;
    assert_eq!(quick.unwrap(), None, "renewed past its 300 ms lease");

    let call = {
        let (locker, entered) = (locker.clone(), entered.clone());
        tokio::spawn(async move { watches_async(&locker, Duration::from_secs(10), &entered).await })
    };
    entered.store(false, Ordering::SeqCst);
    let deleted_at = delete_when_entered(&server, &lock_key("watch:async"), &entered);
    let outcome = call.await.unwrap();
    assert_eq!(outcome.unwrap(), Some(LostReason::Taken));
    assert!(deleted_at.elapsed() < Duration::from_secs(2));
}

/// `g.lost_blocking(..)` in a sync body, likewise.
#[test]
fn sync_body_waits_on_lost_blocking() {
    let (server, locker) = setup();
    let entered = AtomicBool::new(false);
    let quick = watches_sync(&locker, Duration::from_millis(700), &entered);
    assert_eq!(quick.unwrap(), None, "renewed past its 300 ms lease");

    entered.store(false, Ordering::SeqCst);
    std::thread::scope(|s| {
        let call = s.spawn(|| watches_sync(&locker, Duration::from_secs(10), &entered));
        let deleted_at = delete_when_entered(&server, &lock_key("watch:sync"), &entered);
        assert_eq!(call.join().unwrap().unwrap(), Some(LostReason::Taken));
        assert!(deleted_at.elapsed() < Duration::from_secs(2));
    });
}
