//! The lost-lock signal of a guard (builder API): `is_lost`, `lost().await`
//! and `lost_blocking(timeout)`. Without renewal a guard is lost when its
//! lease ends (`Expired`), and `extend` pushes that out; with renewal, a
//! lock deleted from outside is noticed by the next renewal (`Taken`);
//! `extend`/`reacquire` that find the lock gone mark it lost too. Lost is
//! sticky, `tokio::select!` on `lost()` stops work early, and the error says
//! which lock and what to do.
use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lockattr::{LockError, LockGuard, LostReason};
use support::asserts::assert_lost;
use support::lockers::setup;
use support::wakeups::{connection, hold, hold_blocking, hold_renewed, hold_renewed_blocking};
use support::{RedisServer, eventually, lock_key};

/// The lease of the short-lived guards here.
const LEASE: Duration = Duration::from_millis(300);
/// A lease that never ends during a test.
const LONG: Duration = Duration::from_secs(30);
/// Generous bound for a loss due within one lease or one renewal period.
const NOTICE: Duration = Duration::from_secs(2);

/// Deletes the lock `name` from outside.
fn delete(server: &RedisServer, name: &str) {
    let n: i64 = redis::cmd("DEL")
        .arg(lock_key(name))
        .query(&mut server.client())
        .unwrap();
    assert_eq!(n, 1, "the lock was not there to delete");
}

/// Deletes the lock `name` from another thread after `after`.
fn delete_later(url: String, name: &str, after: Duration) -> std::thread::JoinHandle<()> {
    let key = lock_key(name);
    std::thread::spawn(move || {
        std::thread::sleep(after);
        let mut client = connection(&url);
        let _: i64 = redis::cmd("DEL").arg(key).query(&mut client).unwrap();
    })
}

// ---- 1. Without renewal: lost when the lease ends ----------------------------

/// A 300 ms lease held 600 ms: not lost at first; `lost()` resolves with
/// `Expired` no sooner than 300 ms after the acquisition started (the lease
/// counts from the request) and within 1 s more; the release then finds the
/// key expired: `NotOwned`.
#[tokio::test]
async fn unrenewed_guard_is_lost_when_its_lease_ends() {
    let (server, locker) = setup();
    let start = Instant::now();
    let guard = hold(&locker, "short", LEASE).await;
    assert!(!guard.is_lost());
    assert!(!guard.is_renewed());
    let lost = tokio::time::timeout(NOTICE, guard.lost())
        .await
        .expect("not lost within 2 s");
    let at = start.elapsed();
    assert!(at >= LEASE, "lost {at:?} after the acquisition started");
    assert!(
        at < LEASE + Duration::from_secs(1),
        "lost only after {at:?}"
    );
    assert_eq!(assert_lost(&lost, "short"), LostReason::Expired);
    assert!(guard.is_lost());
    tokio::time::sleep((start + 2 * LEASE).saturating_duration_since(Instant::now())).await;
    assert!(guard.is_lost());
    assert!(!server.exists(&lock_key("short")));
    assert!(guard.release().await.unwrap_err().is_not_owned());
}

/// `lost_blocking(5 s)` returns the loss at the lease's end, well before 5 s.
/// (The guard counts the lease from when it sent the request, Redis from
/// when it ran it: the key may outlive the guard's lease by a round trip, so
/// the release waits until the key is surely gone.)
#[test]
fn lost_blocking_returns_when_the_lease_ends() {
    let (server, locker) = setup();
    let start = Instant::now();
    let guard = hold_blocking(&locker, "short", LEASE);
    assert!(!guard.is_lost());
    let lost = guard
        .lost_blocking(Duration::from_secs(5))
        .expect("lost_blocking(5 s) timed out");
    let at = start.elapsed();
    assert!(
        at >= LEASE && at < NOTICE,
        "lost_blocking returned after {at:?}"
    );
    assert_eq!(assert_lost(&lost, "short"), LostReason::Expired);
    assert!(eventually(NOTICE, || !server.exists(&lock_key("short"))).is_some());
    assert!(guard.release_blocking().unwrap_err().is_not_owned());
}

/// On a 30 s lease, `lost_blocking(50 ms)` and a 50 ms timeout on `lost()`
/// end empty after about 50 ms; the guard is not lost and releases fine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_the_loss_of_a_held_lease_times_out() {
    let (_server, locker) = setup();
    let wait = Duration::from_millis(50);
    let guard = hold(&locker, "held", LONG).await;
    let guard = tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        assert!(guard.lost_blocking(wait).is_none());
        let took = start.elapsed();
        assert!(took >= wait && took < Duration::from_secs(1), "{took:?}");
        guard
    })
    .await
    .unwrap();
    let start = Instant::now();
    assert!(tokio::time::timeout(wait, guard.lost()).await.is_err());
    assert!(start.elapsed() >= wait);
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
}

// ---- 2. extend pushes the loss out ----------------------------------------

/// Extending a 300 ms lease by 1 s at 200 ms keeps the guard unlost at 600 ms
/// (and until about 1.3 s), after which it is lost (`Expired`).
async fn extended_guard(extend: impl AsyncFnOnce(LockGuard) -> LockGuard) {
    let (server, locker) = setup();
    let start = Instant::now();
    let guard = hold(&locker, "ext", LEASE).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let guard = extend(guard).await;
    tokio::time::sleep((start + 2 * LEASE).saturating_duration_since(Instant::now())).await;
    assert!(
        !guard.is_lost(),
        "lost at {:?} despite the extension",
        start.elapsed()
    );
    assert!(server.exists(&lock_key("ext")));
    let lost = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("not lost within 3 s of the extended lease");
    let at = start.elapsed();
    assert!(
        at >= Duration::from_millis(1_100),
        "lost at {at:?}: the extension was not counted"
    );
    assert_eq!(assert_lost(&lost, "ext"), LostReason::Expired);
}

#[tokio::test]
async fn extend_pushes_the_loss_out() {
    extended_guard(async |guard| {
        guard.extend(Duration::from_secs(1)).await.unwrap();
        guard
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_blocking_pushes_the_loss_out() {
    extended_guard(async |guard| {
        tokio::task::spawn_blocking(move || {
            guard.extend_blocking(Duration::from_secs(1)).unwrap();
            guard
        })
        .await
        .unwrap()
    })
    .await;
}

// ---- 3. Deleted from outside ------------------------------------------------

/// With renewal, a DEL from outside is noticed by the next renewal: `lost()`
/// resolves within 2 s (the period is 100 ms) with `Taken`. Lost is sticky:
/// with the guard's own token written back (read before the DEL), the guard
/// stays lost, and `lost()` answers at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_notices_an_outside_delete_and_the_loss_sticks() {
    let (server, locker) = setup();
    let key = lock_key("del");
    let guard = hold_renewed(&locker, "del", LEASE).await;
    let token = server.get(&key).unwrap();
    delete(&server, "del");
    let lost = tokio::time::timeout(NOTICE, guard.lost())
        .await
        .expect("the delete was not noticed within 2 s");
    assert_eq!(assert_lost(&lost, "del"), LostReason::Taken);
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(&token)
        .arg("PX")
        .arg(30_000)
        .query(&mut server.client())
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(guard.is_lost(), "a lost guard became unlost");
    let again = tokio::time::timeout(Duration::from_millis(100), guard.lost())
        .await
        .expect("lost() of a lost guard did not answer at once");
    assert_eq!(assert_lost(&again, "del"), LostReason::Taken);
    drop(guard);
}

/// Blocking twin: `lost_blocking` returns `Taken` within 2 s of a DEL, and
/// again at once afterwards.
#[test]
fn lost_blocking_notices_an_outside_delete() {
    let (server, locker) = setup();
    let guard = hold_renewed_blocking(&locker, "del", LEASE);
    delete(&server, "del");
    let lost = guard.lost_blocking(NOTICE).expect("not noticed within 2 s");
    assert_eq!(assert_lost(&lost, "del"), LostReason::Taken);
    let start = Instant::now();
    assert!(guard.lost_blocking(Duration::from_secs(5)).is_some());
    assert!(start.elapsed() < Duration::from_secs(1));
    assert!(guard.release_blocking().unwrap_err().is_not_owned());
}

/// Without renewal nobody asks Redis: a deleted lock goes unnoticed until
/// `extend` or `reacquire` finds it gone; they answer `NotOwned`, and the
/// guard is lost (`Taken`) from then on.
#[test]
fn extend_and_reacquire_finding_the_lock_gone_mark_it_lost() {
    let (server, locker) = setup();
    let extended = hold_blocking(&locker, "e", LONG);
    let reacquired = hold_blocking(&locker, "r", LONG);
    delete(&server, "e");
    delete(&server, "r");
    std::thread::sleep(Duration::from_millis(300));
    assert!(!extended.is_lost() && !reacquired.is_lost());
    let err = extended
        .extend_blocking(Duration::from_secs(1))
        .unwrap_err();
    assert!(err.is_not_owned(), "{err:?}");
    let err = reacquired.reacquire_blocking().unwrap_err();
    assert!(err.is_not_owned(), "{err:?}");
    for (guard, name) in [(&extended, "e"), (&reacquired, "r")] {
        assert!(guard.is_lost());
        let lost = guard.lost_blocking(Duration::ZERO).expect("lost");
        assert_eq!(assert_lost(&lost, name), LostReason::Taken);
        assert!(!server.exists(&lock_key(name)), "the lock was recreated");
    }
}

// ---- 4. Stopping work with select! ------------------------------------------

/// Ten seconds of work in 20 ms steps, counted in `steps`.
async fn work(steps: Arc<AtomicU32>) -> Result<(), LockError> {
    for _ in 0..500 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        steps.fetch_add(1, Ordering::SeqCst);
    }
    Ok(())
}

/// Races the work against `guard.lost()` (the documented pattern); returns
/// the loss, and checks the work stopped early and does not go on.
async fn race(guard: &LockGuard) -> LockError {
    let steps = Arc::new(AtomicU32::new(0));
    let start = Instant::now();
    let lost = tokio::select! {
        done = work(steps.clone()) => panic!("the work ran to its end: {done:?}"),
        lost = guard.lost() => lost,
    };
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "stopped after {:?}",
        start.elapsed()
    );
    let stopped_at = steps.load(Ordering::SeqCst);
    assert!(stopped_at > 0 && stopped_at < 250, "{stopped_at} steps");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(steps.load(Ordering::SeqCst), stopped_at, "the work went on");
    lost
}

/// A renewed lock deleted from outside 300 ms in stops the work (`Taken`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_on_lost_stops_work_when_the_lock_is_taken() {
    let (server, locker) = setup();
    let guard = hold_renewed(&locker, "job", LEASE).await;
    let deleter = delete_later(server.url(), "job", Duration::from_millis(300));
    let lost = race(&guard).await;
    assert_eq!(assert_lost(&lost, "job"), LostReason::Taken);
    deleter.join().unwrap();
    assert!(guard.release().await.unwrap_err().is_not_owned());
}

/// Without renewal, work longer than the lease is stopped at its end (`Expired`).
#[tokio::test]
async fn select_on_lost_stops_work_when_the_lease_ends() {
    let (_server, locker) = setup();
    let guard = hold(&locker, "job", LEASE).await;
    let lost = race(&guard).await;
    assert_eq!(assert_lost(&lost, "job"), LostReason::Expired);
}

/// The blocking pattern: `lost_blocking` as the pause between steps ends the
/// loop within 2 s of a DEL from outside.
#[test]
fn lost_blocking_as_a_pause_ends_a_poll_loop() {
    let (server, locker) = setup();
    let guard = hold_renewed_blocking(&locker, "poller", LEASE);
    let deleter = delete_later(server.url(), "poller", Duration::from_millis(300));
    let start = Instant::now();
    let mut polls = 0;
    let lost = loop {
        polls += 1;
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the loop never ended"
        );
        if let Some(lost) = guard.lost_blocking(Duration::from_millis(50)) {
            break lost;
        }
    };
    deleter.join().unwrap();
    assert_eq!(assert_lost(&lost, "poller"), LostReason::Taken);
    assert!(polls >= 3, "lost after {polls} polls, before the delete");
    assert!(
        eventually(Duration::from_millis(300), || server
            .exists(&lock_key("poller")))
        .is_none()
    );
}

// ---- 5. The error ----------------------------------------------------------

/// `LockError::Lost` names the lock and its reason, gives the fencing-token
/// advice in one readable sentence, and classifies as lost only.
#[test]
fn lost_error_names_the_lock_and_advises_fencing() {
    let (_server, locker) = setup();
    let guard = hold_blocking(&locker, "report:2024", Duration::from_millis(100));
    let err = guard.lost_blocking(NOTICE).expect("not lost");
    assert_eq!(assert_lost(&err, "report:2024"), LostReason::Expired);
    let msg = err.to_string();
    assert!(msg.contains("`report:2024`"), "{msg}");
    assert!(msg.contains(&LostReason::Expired.to_string()), "{msg}");
    assert!(msg.contains("fencing token"), "{msg}");
    assert!(
        !msg.contains("  "),
        "a run of spaces in the message: {msg:?}"
    );
    assert!(err.is_lost());
    assert!(!err.is_timeout() && !err.is_not_owned() && !err.is_connection());
    let debug = format!("{err:?}");
    assert!(
        debug.contains("Lost") && debug.contains("Expired"),
        "{debug}"
    );
    let taken = LockError::Lost {
        name: "report:2024".into(),
        reason: LostReason::Taken,
        lost_after: None,
        ran_on: None,
    };
    assert!(taken.to_string().contains(&LostReason::Taken.to_string()));
}
