//! `#[redis_lock(hold_at_least = ...)]`: a body that finishes sooner leaves
//! the lock held until the hold has passed (its time left set to what
//! remains of the hold, by the server's clock), on every way out: a value,
//! `?`, a panic, a dropped future; then it expires and the next caller gets
//! it. A body longer than the hold releases as usual. With `renew` the lease
//! is renewed while the body runs. A reentrant nested call never shortens
//! the outer call's hold; a lock that is no longer the guard's is left
//! alone. And the point of it all: three replicas whose clocks differ run a
//! periodic job once per period.

use crate::support;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lockattr::{LockError, Locker, LostReason, redis_lock};
use support::attrs::{AppError, pttl_within};
use support::lockers::setup;
use support::{RedisServer, current_thread, eventually, lock_key};

/// The hold of the functions below; their lease is 30 s.
const HOLD: Duration = Duration::from_secs(2);

/// Which way the body leaves.
#[derive(Clone, Copy, Debug)]
enum Exit {
    Value,
    QuestionMark,
    Panic,
    /// Never, on its own: the caller drops the future.
    Hang,
}

/// The error `?` passes on.
fn not_a_number() -> std::num::ParseIntError {
    "not a number".parse::<u32>().unwrap_err()
}

fn leave(exit: Exit) -> Result<u32, AppError> {
    match exit {
        Exit::Value => Ok(1),
        Exit::QuestionMark => Ok("not a number".parse::<u32>()?),
        Exit::Panic => panic!("boom in the body"),
        Exit::Hang => unreachable!("the async body never leaves on its own"),
    }
}

#[redis_lock(name = "{name}", expire = 30, hold_at_least = 2, acquire_time = 0, locker = locker)]
async fn job(locker: &Locker, name: &str, exit: Exit) -> Result<u32, AppError> {
    tokio::task::yield_now().await;
    if let Exit::Hang = exit {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    leave(exit)
}

#[redis_lock(name = "{name}", expire = "30s", hold_at_least = "2000ms", acquire_time = 0, locker = locker)]
fn job_sync(locker: &Locker, name: &str, exit: Exit) -> Result<u32, AppError> {
    leave(exit)
}

/// Another caller of the same lock: one attempt, no hold.
#[redis_lock(name = "{name}", acquire_time = 0, locker = locker)]
fn second(locker: &Locker, name: &str) -> Result<(), LockError> {
    Ok(())
}

/// After a call that began at `start` and left its body at once: the lock
/// stays (time left at most the hold, well below the 30 s lease), a second
/// caller is refused, the lock expires when the hold has passed (not
/// before), and the second caller then gets it.
fn assert_kept_for_the_hold(server: &RedisServer, locker: &Locker, name: &str, start: Instant) {
    let key = lock_key(name);
    let hold_ms = HOLD.as_millis() as i64;
    // A dropped async guard releases in the background: wait for it.
    let (set, left) = pttl_within(server, &key, hold_ms);
    assert!(
        set.is_some(),
        "PTTL {left} ms after the call: expected what remains of the {hold_ms} ms hold (lease 30 s)"
    );
    assert!(
        left > hold_ms - 1_500,
        "PTTL {left} ms: far less than what remains of the hold"
    );
    match second(locker, name) {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("a second caller during the hold: {other:?}, expected a timeout"),
    }
    let freed = eventually(Duration::from_secs(5), || !server.exists(&key));
    assert!(
        freed.is_some(),
        "still held 5 s later, PTTL {} ms",
        server.pttl(&key)
    );
    let after = start.elapsed();
    assert!(
        after >= HOLD,
        "the lock was given up {after:?} after the call began, before the {HOLD:?} hold"
    );
    second(locker, name).expect("a second caller once the hold has passed");
}

/// A server, a Locker of it, and the time the test's call begins.
fn started() -> (RedisServer, Locker, Instant) {
    let (server, locker) = setup();
    (server, locker, Instant::now())
}

/// Asserts that `out` is the parse error the body's `?` passed on.
fn passed_the_parse_error(out: &Result<u32, AppError>) {
    assert!(
        matches!(out, Err(AppError::Parse(e)) if *e == not_a_number()),
        "{out:?}"
    );
}

/// Asserts that `again`, a call made again within the hold, timed out.
fn refused_within_the_hold(again: Result<u32, AppError>) {
    assert!(
        matches!(again, Err(AppError::Lock(LockError::Timeout { .. }))),
        "called again within the hold: {again:?}"
    );
}

#[test]
fn async_value_keeps_the_lock_for_the_hold() {
    let rt = current_thread();
    let (server, locker, start) = started();
    let out = rt.block_on(job(&locker, "hold:value", Exit::Value));
    assert!(matches!(out, Ok(1)), "{out:?}");
    refused_within_the_hold(rt.block_on(job(&locker, "hold:value", Exit::Value)));
    assert_kept_for_the_hold(&server, &locker, "hold:value", start);
}

#[test]
fn async_question_mark_keeps_the_lock_for_the_hold() {
    let (server, locker, start) = started();
    let out = current_thread().block_on(job(&locker, "hold:qm", Exit::QuestionMark));
    passed_the_parse_error(&out);
    assert_kept_for_the_hold(&server, &locker, "hold:qm", start);
}

#[test]
fn async_panic_keeps_the_lock_for_the_hold() {
    let rt = current_thread();
    let (server, locker, start) = started();
    let payload = catch_unwind(AssertUnwindSafe(|| {
        rt.block_on(job(&locker, "hold:panic", Exit::Panic))
    }))
    .expect_err("the panic reaches the caller");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom in the body"));
    assert_kept_for_the_hold(&server, &locker, "hold:panic", start);
}

#[test]
fn dropped_future_keeps_the_lock_for_the_hold_not_the_lease() {
    let (server, locker, start) = started();
    let out = current_thread().block_on(async {
        tokio::time::timeout(
            Duration::from_millis(200),
            job(&locker, "hold:dropped", Exit::Hang),
        )
        .await
    });
    assert!(out.is_err(), "the body hangs: the timeout drops it");
    assert_kept_for_the_hold(&server, &locker, "hold:dropped", start);
}

#[test]
fn sync_value_keeps_the_lock_for_the_hold() {
    let (server, locker, start) = started();
    let out = job_sync(&locker, "hold:sync", Exit::Value);
    assert!(matches!(out, Ok(1)), "{out:?}");
    refused_within_the_hold(job_sync(&locker, "hold:sync", Exit::Value));
    assert_kept_for_the_hold(&server, &locker, "hold:sync", start);
}

#[test]
fn sync_question_mark_keeps_the_lock_for_the_hold() {
    let (server, locker, start) = started();
    let out = job_sync(&locker, "hold:sync-qm", Exit::QuestionMark);
    passed_the_parse_error(&out);
    assert_kept_for_the_hold(&server, &locker, "hold:sync-qm", start);
}

#[test]
fn sync_panic_keeps_the_lock_for_the_hold() {
    let (server, locker, start) = started();
    let payload = catch_unwind(AssertUnwindSafe(|| {
        job_sync(&locker, "hold:sync-panic", Exit::Panic)
    }))
    .expect_err("the panic reaches the caller");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom in the body"));
    assert_kept_for_the_hold(&server, &locker, "hold:sync-panic", start);
}

#[redis_lock(name = "{name}", expire = 30, hold_at_least = "300ms", locker = locker)]
async fn long_job(locker: &Locker, name: &str, entered: &AtomicU32) -> Result<(), LockError> {
    entered.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    Ok(())
}

#[redis_lock(name = "{name}", expire = 30, hold_at_least = "300ms", locker = locker)]
fn long_job_sync(locker: &Locker, name: &str, entered: &AtomicU32) -> Result<(), LockError> {
    entered.fetch_add(1, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(1_500));
    Ok(())
}

/// A waiter's lease is 20 s: after a hand-over, the lock has that much left.
#[redis_lock(name = "{name}", expire = 20, acquire_time = 10, locker = locker)]
fn waiter(locker: &Locker, name: &str) -> Result<(), LockError> {
    std::thread::sleep(Duration::from_millis(300));
    Ok(())
}

/// Runs `call` (a body of 1.5 s, hold 300 ms) while a waiter queues behind
/// it: right after the call, the lock is the waiter's, handed over by the
/// release with the waiter's 20 s lease; without a waiter, the key is gone.
fn assert_released_as_usual(call: impl Fn(&Locker, &str, &AtomicU32) -> Result<(), LockError>) {
    let (server, locker) = setup();
    let entered = Arc::new(AtomicU32::new(0));
    let key = lock_key("hold:long");

    call(&locker, "hold:long", &entered).unwrap();
    assert!(!server.exists(&key), "released at once after a long body");

    let queued = {
        let (locker, entered) = (locker.clone(), entered.clone());
        std::thread::spawn(move || {
            while entered.load(Ordering::SeqCst) < 2 {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(200));
            waiter(&locker, "hold:long")
        })
    };
    call(&locker, "hold:long", &entered).unwrap();
    let left = server.pttl(&key);
    assert!(
        (18_000..=20_000).contains(&left),
        "right after a long body the lock should be the waiter's (lease 20 s), PTTL {left} ms"
    );
    queued.join().unwrap().expect("the waiter got the lock");
}

#[test]
fn async_body_longer_than_the_hold_releases_as_usual() {
    assert_released_as_usual(|locker, name, entered| {
        current_thread().block_on(long_job(locker, name, entered))
    });
}

#[test]
fn sync_body_longer_than_the_hold_releases_as_usual() {
    assert_released_as_usual(long_job_sync);
}

/// Renewed every second back to 3 s; the hold is 2 s.
#[redis_lock(name = "{name}", expire = 3, hold_at_least = 2, renew, locker = locker)]
async fn renewed(locker: &Locker, name: &str, body: Duration) -> Result<(), LockError> {
    tokio::time::sleep(body).await;
    Ok(())
}

#[test]
fn renewal_runs_with_the_body_and_stops_at_the_release() {
    let (server, locker) = setup();
    let rt = current_thread();
    // Renewed once (at 1 s, back to 3 s); released at 1.4 s within the
    // hold: what remains of the hold is left, not the renewed lease.
    let start = Instant::now();
    rt.block_on(renewed(&locker, "hold:renew", Duration::from_millis(1_400)))
        .unwrap();
    let left = server.pttl(&lock_key("hold:renew"));
    let remains = HOLD.saturating_sub(start.elapsed()).as_millis() as i64;
    assert!(
        left > 0 && left <= remains + 50,
        "PTTL {left} ms after the release: expected what remains of the hold ({remains} ms), \
         not the renewed 3 s lease"
    );
    assert!(
        eventually(Duration::from_secs(3), || !server
            .exists(&lock_key("hold:renew")))
        .is_some()
    );

    // A body that outlives its lease is kept by renewal, then released at
    // once: the hold has passed.
    let key = lock_key("hold:renew-long");
    let running = std::thread::spawn({
        let locker = locker.clone();
        move || {
            current_thread().block_on(renewed(
                &locker,
                "hold:renew-long",
                Duration::from_millis(4_500),
            ))
        }
    });
    std::thread::sleep(Duration::from_millis(3_800));
    assert!(server.exists(&key), "renewed past its 3 s lease");
    running.join().unwrap().unwrap();
    assert!(!server.exists(&key), "released at once after the hold");
}

#[redis_lock(name = "hold:nested", hold_at_least = "300ms", locker = locker)]
async fn inner_short(locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "hold:nested", hold_at_least = 2, locker = locker)]
async fn inner_long(locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "hold:nested", hold_at_least = 2, locker = locker)]
async fn outer_long(locker: &Locker) -> Result<(), LockError> {
    inner_short(locker).await
}

#[redis_lock(name = "hold:nested", hold_at_least = "300ms", locker = locker)]
async fn outer_short(locker: &Locker) -> Result<(), LockError> {
    inner_long(locker).await
}

#[redis_lock(name = "hold:nested", locker = locker)]
async fn outer_plain(locker: &Locker) -> Result<(), LockError> {
    inner_long(locker).await
}

#[test]
fn a_nested_call_never_shortens_the_hold() {
    let (server, locker) = setup();
    let rt = current_thread();
    let key = lock_key("hold:nested");
    type Call = for<'a> fn(
        &'a Locker,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<(), LockError>> + 'a>,
    >;
    let cases: [(&str, Call); 3] = [
        ("outer 2 s, nested 300 ms", |l| Box::pin(outer_long(l))),
        ("outer 300 ms, nested 2 s", |l| Box::pin(outer_short(l))),
        ("outer none, nested 2 s", |l| Box::pin(outer_plain(l))),
    ];
    for (case, call) in cases {
        rt.block_on(call(&locker)).unwrap();
        let left = server.pttl(&key);
        assert!(
            (1_000..=2_000).contains(&left),
            "{case}: PTTL {left} ms, expected what remains of the 2 s hold"
        );
        assert!(
            eventually(Duration::from_secs(4), || !server.exists(&key)).is_some(),
            "{case}: never expired"
        );
    }
}

#[redis_lock(name = "hold:lost", expire = 30, hold_at_least = 2, locker = locker)]
async fn loses_its_lock(locker: &Locker, server: &RedisServer) -> Result<(), LockError> {
    let key = lock_key("hold:lost");
    let mut con = server.client();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("another owner")
        .arg("PX")
        .arg(5_000)
        .query(&mut con)
        .unwrap();
    Ok(())
}

#[test]
fn a_lost_lock_is_left_to_its_new_owner() {
    let (server, locker) = setup();
    // The release finds the lock taken: the call says it was lost.
    let lost = current_thread()
        .block_on(loses_its_lock(&locker, &server))
        .expect_err("a lost lock reported Ok");
    assert!(
        matches!(
            lost,
            LockError::Lost {
                reason: LostReason::Taken,
                ..
            }
        ),
        "{lost:?}"
    );
    let key = lock_key("hold:lost");
    assert_eq!(server.get(&key).as_deref(), Some("another owner"));
    let left = server.pttl(&key);
    assert!(
        left > 4_000,
        "the other owner's lock was changed: PTTL {left} ms (its lease 5 s, the hold 2 s)"
    );
}

// ---- Three replicas, one run per period ----

/// The length of a period in the replica tests.
const PERIOD: Duration = Duration::from_millis(500);
/// How far behind the first replica's clock each replica's runs.
const SKEW: [Duration; 3] = [
    Duration::ZERO,
    Duration::from_millis(150),
    Duration::from_millis(300),
];
const PERIODS: usize = 6;

#[redis_lock(name = "report:{period}", expire = 5, hold_at_least = "450ms", acquire_time = 0, locker = locker)]
async fn report(locker: &Locker, period: usize, runs: &[AtomicU32]) -> Result<(), LockError> {
    runs[period].fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[redis_lock(name = "report:{period}", expire = 5, acquire_time = 0, locker = locker)]
async fn report_without_hold(
    locker: &Locker,
    period: usize,
    runs: &[AtomicU32],
) -> Result<(), LockError> {
    runs[period].fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// A job of the replica tests, called with the replica's Locker, the
/// period and the runs per period.
type Job = for<'a> fn(
    &'a Locker,
    usize,
    &'a [AtomicU32],
) -> std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<(), LockError>> + 'a>,
>;

/// Three replicas, each on a thread of its own with its own runtime and
/// Locker, run `job` at the start of every period by their own clock
/// (`SKEW` apart); the runs per period.
fn replicas(url: String, job: Job) -> Vec<u32> {
    let runs: Arc<Vec<AtomicU32>> = Arc::new((0..PERIODS).map(|_| AtomicU32::new(0)).collect());
    let first = Instant::now() + Duration::from_millis(300);
    let threads: Vec<_> = SKEW
        .iter()
        .map(|&skew| {
            let (url, runs) = (url.clone(), runs.clone());
            std::thread::spawn(move || {
                let locker = Locker::new(url).unwrap();
                current_thread().block_on(async {
                    for period in 0..PERIODS {
                        let at = first + PERIOD * period as u32 + skew;
                        tokio::time::sleep_until(at.into()).await;
                        match job(&locker, period, &runs).await {
                            Ok(()) | Err(LockError::Timeout { .. }) => {}
                            Err(e) => panic!("period {period}: {e}"),
                        }
                    }
                })
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    runs.iter().map(|r| r.load(Ordering::SeqCst)).collect()
}

#[test]
fn three_replicas_run_a_periodic_job_once_per_period() {
    let server = RedisServer::start();
    let runs = replicas(server.url(), |l, p, r| Box::pin(report(l, p, r)));
    assert_eq!(runs, vec![1; PERIODS], "runs per period");
}

/// Why the hold is needed: each replica's run takes a moment, so without
/// it a replica whose clock is late finds the period's lock free and runs
/// the job again.
#[test]
fn without_the_hold_late_replicas_run_the_job_again() {
    let server = RedisServer::start();
    let runs = replicas(server.url(), |l, p, r| {
        Box::pin(report_without_hold(l, p, r))
    });
    assert!(runs.iter().all(|&n| n >= 1), "runs per period: {runs:?}");
    assert!(
        runs.iter().any(|&n| n > 1),
        "no period ran twice without the hold: {runs:?}"
    );
}
