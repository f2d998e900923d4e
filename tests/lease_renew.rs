//! The watchdog (automatic lease renewal, builder API): a renewed 300 ms
//! lease stays held, under its owner's token, through a body many times
//! longer (async on both runtime flavours, and blocking); renewal stops on
//! release, drop, panic and task abort (no script call afterwards); it never
//! brings back a lock that was stolen, deleted, or lost with a Redis
//! restart; 50 leases of one Locker share their round trips; a frozen Redis
//! makes the guard lost (`Unrenewed`) without recreating anything; fencing
//! tokens keep increasing across processes and expiries.
use crate::support;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use lockattr::{LockError, LockGuard, Locker, LostReason};
use support::asserts::assert_lost;
use support::lockers::locker;
use support::wakeups::{
    hold_blocking, hold_renewed, hold_renewed_blocking, try_within, try_within_blocking,
};
use support::{
    RedisServer, child_test, current_thread, eventually, lock_key, multi_thread, wait_child,
};

/// The lease of every renewed guard here: renewed every 100 ms.
const LEASE: Duration = Duration::from_millis(300);
/// How long a renewed lock is held: several leases.
const HOLD: Duration = Duration::from_secs(2);
/// Generous bound for what should happen within one renewal period.
const NOTICE: Duration = Duration::from_secs(2);

/// Tells `child_fencer` it runs as a child, and where Redis is.
const CHILD_URL: &str = "LOCKATTR_LEASE_CHILD_URL";
/// What the child prints before its fencing token.
const TOKEN: &str = "LOCKATTR_CHILD_FENCING_TOKEN";

fn renewed_blocking(locker: &Locker, name: &str) -> LockGuard {
    hold_renewed_blocking(locker, name, LEASE)
}

async fn renewed(locker: &Locker, name: &str) -> LockGuard {
    hold_renewed(locker, name, LEASE).await
}

/// Lock script calls since start (EVAL, EVALSHA and FCALL, NOSCRIPT and
/// missing-function answers included).
fn script_calls(server: &RedisServer) -> u64 {
    let calls = server.command_calls();
    [
        "eval",
        "evalsha",
        "eval_ro",
        "evalsha_ro",
        "fcall",
        "fcall_ro",
    ]
    .iter()
    .filter_map(|c| calls.get(*c))
    .sum()
}

// ---- 1. Held through a long body ----------------------------------------

/// From when `name` shows up, for [`HOLD`], samples it every 50 ms: it keeps
/// the holder's token with 0 < PTTL <= the lease, and another Locker's single
/// attempt (after several leases) times out.
fn watch_held(server: &RedisServer, name: &str) {
    let key = lock_key(name);
    assert!(
        eventually(Duration::from_secs(5), || server.exists(&key)).is_some(),
        "the holder never got the lock"
    );
    let token = server.get(&key).expect("the holder's token");
    let other = locker(server);
    let start = Instant::now();
    let (mut samples, mut tried) = (0, false);
    while start.elapsed() < HOLD {
        let at = start.elapsed();
        assert_eq!(
            server.get(&key),
            Some(token.clone()),
            "lock gone or changed at {at:?}"
        );
        let pttl = server.pttl(&key);
        assert!(0 < pttl && pttl <= 300, "PTTL {pttl} at {at:?}");
        if !tried && at > HOLD / 2 {
            let err = try_within_blocking(&other, name, Duration::ZERO).unwrap_err();
            assert!(err.is_timeout(), "{err:?}");
            tried = true;
        }
        samples += 1;
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(tried && samples >= 20, "{samples} samples");
}

/// Tells the holder that the watcher is done.
type Watched = tokio::sync::oneshot::Receiver<()>;

/// Runs `hold` (acquire, hold [`HOLD`], wait for the watcher, release) on a
/// thread of its own while [`watch_held`] samples the lock; the release is Ok.
fn held_through_a_long_body(hold: impl FnOnce(Locker, Watched) -> Result<(), LockError> + Send) {
    let server = RedisServer::start();
    let holders = locker(&server);
    let (done, watched) = tokio::sync::oneshot::channel();
    std::thread::scope(|s| {
        let holder = s.spawn(move || hold(holders, watched));
        watch_held(&server, "long");
        done.send(()).unwrap();
        holder.join().unwrap().unwrap();
    });
    assert!(!server.exists(&lock_key("long")));
}

async fn hold_async(locker: Locker, watched: Watched) -> Result<(), LockError> {
    let guard = renewed(&locker, "long").await;
    assert!(guard.is_renewed());
    tokio::time::sleep(HOLD).await;
    watched.await.unwrap();
    assert!(!guard.is_lost());
    guard.release().await
}

/// Async, in a task of a multi-thread runtime.
#[test]
fn renewal_keeps_a_short_lease_held_multi_thread() {
    held_through_a_long_body(|locker, watched| {
        multi_thread().block_on(async { tokio::spawn(hold_async(locker, watched)).await.unwrap() })
    });
}

/// Async, in a task of a current-thread runtime (idle in a timer meanwhile).
#[test]
fn renewal_keeps_a_short_lease_held_current_thread_task() {
    held_through_a_long_body(|locker, watched| {
        current_thread()
            .block_on(async { tokio::spawn(hold_async(locker, watched)).await.unwrap() })
    });
}

/// Blocking: the holder's thread sleeps, the I/O thread renews.
#[test]
fn renewal_keeps_a_short_lease_held_blocking() {
    held_through_a_long_body(|locker, watched| {
        let guard = renewed_blocking(&locker, "long");
        std::thread::sleep(HOLD);
        watched.blocking_recv().unwrap();
        assert!(!guard.is_lost());
        guard.release_blocking()
    });
}

// ---- 2. Renewal stops when the guard goes ---------------------------------

/// While `name` is held elsewhere: lock scripts run (renewals, about one per
/// 100 ms) and the key exists. Makes the quiet check below meaningful.
fn assert_renewing(server: &RedisServer, name: &str) {
    let before = script_calls(server);
    std::thread::sleep(Duration::from_millis(500));
    let during = script_calls(server) - before;
    assert!(
        during >= 2,
        "only {during} script calls in 500 ms of renewal"
    );
    assert!(server.exists(&lock_key(name)));
}

/// After the guard of `name` is gone: the key is absent within 2 s, and stays
/// absent for 1 s (10 renewal periods) during which no lock script runs at
/// all (nothing else is held on this server, so any call would be a renewal).
fn assert_renewal_stopped(server: &RedisServer, name: &str) {
    let key = lock_key(name);
    assert!(
        eventually(NOTICE, || !server.exists(&key)).is_some(),
        "the lock is still held after its guard went"
    );
    std::thread::sleep(Duration::from_millis(100)); // the release's own script
    let before = script_calls(server);
    assert!(
        eventually(Duration::from_secs(1), || server.exists(&key)).is_none(),
        "the lock came back"
    );
    let after = script_calls(server) - before;
    assert_eq!(after, 0, "{after} lock scripts ran after the guard went");
}

/// `release()` and `release_blocking()` stop the renewal before they return.
#[test]
fn renewal_stops_after_release() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let rt = multi_thread();
    let guard = rt.block_on(renewed(&locker, "rel"));
    assert_renewing(&server, "rel");
    rt.block_on(guard.release()).unwrap();
    assert!(!server.exists(&lock_key("rel")));
    assert_renewal_stopped(&server, "rel");

    let guard = renewed_blocking(&locker, "rel");
    assert_renewing(&server, "rel");
    guard.release_blocking().unwrap();
    assert_renewal_stopped(&server, "rel");
}

/// Dropping a guard, async or blocking, stops its renewal.
#[test]
fn renewal_stops_when_the_guard_is_dropped() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let rt = current_thread();
    let guard = rt.block_on(renewed(&locker, "drop"));
    assert_renewing(&server, "drop");
    drop(guard);
    assert_renewal_stopped(&server, "drop");

    let guard = renewed_blocking(&locker, "drop");
    assert_renewing(&server, "drop");
    drop(guard);
    assert!(
        !server.exists(&lock_key("drop")),
        "a blocking drop releases at once"
    );
    assert_renewal_stopped(&server, "drop");
}

/// A thread that panics while holding a renewed blocking guard: the unwind
/// drops it, which releases the lock and ends its renewal.
#[test]
fn renewal_stops_when_a_thread_holding_the_guard_panics() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let (acquired, wait) = mpsc::channel();
    let (go, panic_now) = mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let _guard = renewed_blocking(&locker, "panic");
        acquired.send(()).unwrap();
        panic_now.recv().unwrap();
        panic!("deliberate panic while holding a renewed lock");
    });
    wait.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_renewing(&server, "panic");
    go.send(()).unwrap();
    assert!(thread.join().is_err(), "the thread did not panic");
    assert!(!server.exists(&lock_key("panic")));
    assert_renewal_stopped(&server, "panic");
}

/// Aborting a tokio task that holds a renewed async guard stops its renewal.
#[test]
fn renewal_stops_when_a_task_holding_the_guard_is_aborted() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let rt = multi_thread();
    let (acquired, wait) = mpsc::channel();
    let task = rt.spawn(async move {
        let _guard = renewed(&locker, "abort").await;
        acquired.send(()).unwrap();
        std::future::pending::<()>().await;
    });
    wait.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_renewing(&server, "abort");
    task.abort();
    assert!(rt.block_on(task).unwrap_err().is_cancelled());
    assert_renewal_stopped(&server, "abort");
}

// ---- 3. No resurrection ----------------------------------------------------

/// A lock overwritten from outside with another token (60 s): the next
/// renewal finds it taken; the guard is lost (`Taken`) within 2 s, and the
/// other owner's value and TTL are left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_never_touches_a_stolen_lock() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let key = lock_key("stolen");
    let guard = renewed(&locker, "stolen").await;
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("another-owner")
        .arg("PX")
        .arg(60_000)
        .query(&mut server.client())
        .unwrap();
    let lost = tokio::time::timeout(NOTICE, guard.lost())
        .await
        .expect("not lost within 2 s");
    assert_eq!(assert_lost(&lost, "stolen"), LostReason::Taken);
    tokio::time::sleep(Duration::from_millis(500)).await; // 5 renewal periods
    assert_eq!(server.get(&key).as_deref(), Some("another-owner"));
    let pttl = server.pttl(&key);
    assert!(
        (55_000..=60_000).contains(&pttl),
        "the other owner's TTL became {pttl}"
    );
    assert!(guard.release().await.unwrap_err().is_not_owned());
    assert_eq!(server.get(&key).as_deref(), Some("another-owner"));
}

/// A lock deleted from outside: the guard is lost (`Taken`) within 2 s, and
/// the key stays absent.
#[test]
fn renewal_never_recreates_a_deleted_lock() {
    let server = RedisServer::start();
    let key = lock_key("deleted");
    let guard = renewed_blocking(&locker(&server), "deleted");
    let _: i64 = redis::cmd("DEL")
        .arg(&key)
        .query(&mut server.client())
        .unwrap();
    let lost = guard.lost_blocking(NOTICE).expect("not lost within 2 s");
    assert_eq!(assert_lost(&lost, "deleted"), LostReason::Taken);
    assert!(eventually(Duration::from_millis(500), || server.exists(&key)).is_none());
    assert!(guard.release_blocking().unwrap_err().is_not_owned());
}

// ---- 4. Batching -------------------------------------------------------------

/// 50 renewed guards of one Locker, 300 ms leases, held 1.5 s, all kept
/// held. One script call per lease per period would be 50 x 15 = 750 calls;
/// the watchdog renews the leases due around the same time together, so
/// about 15 to 30 calls are expected. The bound, 150, is 5x that: it fails
/// for per-lease renewal, not for a slow machine.
#[test]
fn renewals_of_many_guards_share_their_round_trips() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let guards: Vec<LockGuard> = (0..50)
        .map(|i| renewed_blocking(&locker, &format!("many:{i}")))
        .collect();
    let before = script_calls(&server);
    std::thread::sleep(Duration::from_millis(1_500));
    let calls = script_calls(&server) - before;
    assert!(
        calls >= 5,
        "only {calls} script calls: are the leases renewed?"
    );
    assert!(
        calls < 150,
        "{calls} script calls for 50 leases over 1.5 s: not batched"
    );
    assert_eq!(server.held_locks().len(), 50);
    assert!(guards.iter().all(|g| !g.is_lost()));
    for guard in guards {
        guard.release_blocking().unwrap();
    }
    assert!(server.held_locks().is_empty());
}

// ---- 5. and 6. Redis restarted or frozen -------------------------------------

/// A restart without persistence empties Redis: the next renewal finds the
/// key gone, so the guard is lost (`Taken`), and the lock is not recreated;
/// the next holder still gets a larger fencing token.
/// (A 2 s lease here, so that the renewal gets through again before the
/// lease would run out by time.)
#[test]
fn redis_restart_loses_the_lock_and_renewal_does_not_recreate_it() {
    let mut server = RedisServer::start();
    let locker = locker(&server);
    let key = lock_key("restart");
    let guard = hold_renewed_blocking(&locker, "restart", Duration::from_secs(2));
    std::thread::sleep(Duration::from_millis(800)); // one renewal
    server.restart();
    let lost = guard
        .lost_blocking(Duration::from_secs(5))
        .expect("not lost within 5 s");
    assert_eq!(assert_lost(&lost, "restart"), LostReason::Taken);
    assert!(eventually(Duration::from_secs(1), || server.exists(&key)).is_none());
    let lost_token = guard.fencing_token();
    assert!(guard.release_blocking().unwrap_err().is_not_owned());
    // Free for anyone at once, and the restart, which lost the fencing
    // counter too, did not send tokens back below the lost holder's.
    let again = try_within_blocking(&locker, "restart", Duration::ZERO).unwrap();
    assert!(again.fencing_token() > lost_token);
    again.release_blocking().unwrap();
}

/// Redis frozen (SIGSTOP) for longer than the 600 ms lease: the guard turns
/// lost by time (`Unrenewed`), not at the freeze itself (the lease left then
/// is at least 600 - 200 ms; 200 ms asserted, for slow machines) and within
/// 2 s more; after the thaw, the lock is not recreated and is free for
/// another Locker at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_redis_makes_a_renewed_guard_lost_unrenewed() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let key = lock_key("frozen");
    let guard = hold_renewed(&locker, "frozen", Duration::from_millis(600)).await;
    tokio::time::sleep(Duration::from_millis(500)).await; // renewed a few times
    assert!(!guard.is_lost());
    server.freeze(); // a panic below still thaws: RedisServer's Drop sends SIGCONT
    let frozen_at = Instant::now();
    let lost = tokio::time::timeout(Duration::from_millis(2_600), guard.lost()).await;
    let after = frozen_at.elapsed();
    let lost = lost.expect("not lost within the lease + 2 s of the freeze");
    assert_eq!(assert_lost(&lost, "frozen"), LostReason::Unrenewed);
    assert!(
        after >= Duration::from_millis(200),
        "lost {after:?} after the freeze"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.thaw();
    assert!(guard.is_lost());
    assert!(eventually(Duration::from_secs(1), || server.exists(&key)).is_none());
    let other = Locker::new(server.url()).unwrap();
    let taken = try_within(&other, "frozen", Duration::ZERO).await.unwrap();
    assert!(taken.fencing_token() > guard.fencing_token());
    taken.release().await.unwrap();
    drop(guard);
}

// ---- 7. Fencing tokens ---------------------------------------------------------

/// The child of the fencing test; does nothing unless started by it. Holds
/// the renewed lock `fence` for 500 ms, then prints [`TOKEN`] and its token.
#[test]
fn child_fencer() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let guard = renewed_blocking(&Locker::new(&url).unwrap(), "fence");
    std::thread::sleep(Duration::from_millis(500));
    assert!(!guard.is_lost());
    println!("{TOKEN} {}", guard.fencing_token());
    guard.release_blocking().unwrap();
}

/// Fencing tokens strictly increase: this process and a child process take
/// the renewed lock `fence` in turn (each held past its lease), then a 100 ms
/// lease is left to expire and the lock taken again.
#[test]
fn fencing_tokens_increase_across_processes_and_expiry() {
    let server = RedisServer::start();
    let url = server.url();
    let locker = locker(&server);
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let guard = renewed_blocking(&locker, "fence");
        std::thread::sleep(Duration::from_millis(500));
        tokens.push(guard.fencing_token());
        guard.release_blocking().unwrap();

        let child = child_test("child_fencer", &[(CHILD_URL, url.as_str())])
            .spawn()
            .expect("spawn child test process");
        let output = wait_child(child, Duration::from_secs(30));
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success(),
            "child failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
        );
        let token = stdout
            .lines()
            .find_map(|l| {
                l.split_once(TOKEN)
                    .map(|(_, t)| t.trim().parse::<u64>().unwrap())
            })
            .unwrap_or_else(|| {
                panic!("the child did not lock\nstdout:\n{stdout}\nstderr:\n{stderr}")
            });
        tokens.push(token);
    }
    let expiring = hold_blocking(&locker, "fence", Duration::from_millis(100));
    tokens.push(expiring.fencing_token());
    std::thread::sleep(Duration::from_millis(300));
    assert!(!server.exists(&lock_key("fence")));
    let again = try_within_blocking(&locker, "fence", Duration::ZERO).unwrap();
    tokens.push(again.fencing_token());
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens {tokens:?}"
    );
    again.release_blocking().unwrap();
    assert!(expiring.release_blocking().unwrap_err().is_not_owned());
}
