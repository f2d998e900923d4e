//! Redis down, restarted or frozen: every call answers (an error within its
//! time limits, never a hang or a panic), and the Locker works again once
//! Redis is back. A caller that may wait (acquire time above zero) keeps
//! trying through an outage until its acquire time ends, so it rides out a
//! short restart; with an acquire time of zero the error comes at once.
use crate::support;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use std::fmt::Debug;

use lockattr::{LockError, Locker};
use support::lockers::{self, quick_locker, setup};
use support::outages::{
    attempt, attempt_blocking, fence_of, spawn_take, take_leased, take_leased_blocking, try_wait,
    try_wait_blocking,
};
use support::proxy::Proxy;
use support::takes::{try_take, try_take_blocking};
use support::waiters::{queued, spawn_waiter};
use support::{RedisServer, keys, lock_key};

/// Acquire timeout used while Redis is unavailable.
const WAIT: Duration = Duration::from_secs(1);
/// Upper bound for any answer while Redis is unavailable: the acquire
/// timeout plus generous slack (the timeouts below are 300 ms).
const BOUND: Duration = Duration::from_secs(4);
/// Upper bound used to detect a hang (the test fails instead of blocking).
const HANG: Duration = Duration::from_secs(15);

/// Runs `f` on its own thread; fails the test if it does not return within `HANG`.
fn no_hang<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(HANG)
        .unwrap_or_else(|_| panic!("{what} did not return within {HANG:?}"))
}

async fn no_hang_async<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(HANG, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not return within {HANG:?}"))
}

fn assert_connection(err: &LockError, elapsed: Duration, what: &str) {
    assert!(
        matches!(err, LockError::Connection { .. }),
        "{what}: expected Connection, got {err:?}"
    );
    assert!(elapsed < BOUND, "{what}: answered after {elapsed:?}");
}

/// Takes the lock `name` the blocking way, on a thread of its own (failing
/// the test if it hangs: `label`), expects it taken (`expect`), and
/// releases it.
fn no_hang_take_and_release_blocking(locker: &Locker, name: &str, label: &str, expect: &str) {
    let (l, name) = (locker.clone(), name.to_owned());
    let guard = no_hang(label, move || l.lock(name).acquire_blocking()).expect(expect);
    guard.release_blocking().unwrap();
}

/// Starts the call `call` makes, fails the test if it hangs (`label`), and
/// asserts that it answers a connection error within `BOUND` (`what`).
async fn assert_connection_async<T: Debug, F: Future<Output = Result<T, LockError>>>(
    label: &str,
    what: &str,
    call: impl FnOnce() -> F,
) {
    let start = Instant::now();
    let err = no_hang_async(label, call()).await.unwrap_err();
    assert_connection(&err, start.elapsed(), what);
}

/// Makes the blocking call `call`, which must fail: `what`, its error and
/// how long it took.
fn timed_err<T: Debug>(
    what: &'static str,
    call: impl FnOnce() -> Result<T, LockError>,
) -> (&'static str, LockError, Duration) {
    let start = Instant::now();
    let err = call().unwrap_err();
    (what, err, start.elapsed())
}

/// Asserts that `err` is `NotOwned` or a connection error: what a guard
/// answers after its server restarted.
fn assert_not_owned_or_connection(err: &LockError) {
    assert!(
        err.is_not_owned() || err.is_connection(),
        "unexpected {err:?}"
    );
}

/// Asserts that a caller whose acquire time was `wait` gave up after
/// `took`: not before `wait`, and less than 2 s after it.
fn assert_gave_up_at_its_time(took: Duration, wait: Duration) {
    assert!(
        took >= wait,
        "gave up after {took:?}, before its acquire time"
    );
    assert!(
        took < wait + Duration::from_secs(2),
        "gave up after {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_server_gives_connection_errors_then_restart_works_async() {
    let (mut server, locker) = setup();
    let held = locker.lock("held").acquire().await.unwrap();
    server.kill();

    for name in ["a", "held"] {
        assert_connection_async("acquire", "acquire", || try_wait(&locker, name, WAIT)).await;
    }
    assert_connection_async("extend", "extend", || held.extend(Duration::from_secs(1))).await;
    assert_connection_async("release", "release", || held.release()).await;
    assert_connection_async("ping", "ping", || locker.ping()).await;

    server.restart();
    // The first call after the server is back succeeds (the failed attempts
    // above dropped the broken connection; a new one is opened on demand).
    let guard = no_hang_async("acquire after restart", locker.lock("a").acquire())
        .await
        .expect("first acquire after restart");
    guard.release().await.unwrap();
    let guard = try_wait(&locker, "held", WAIT).await.unwrap();
    guard.release().await.unwrap();
}

#[test]
fn killed_server_gives_connection_errors_then_restart_works_blocking() {
    let (mut server, locker) = setup();
    let held = locker.lock("held").acquire_blocking().unwrap();
    server.kill();

    let l = locker.clone();
    let (results, held) = no_hang("blocking calls on a dead server", move || {
        let mut results = Vec::new();
        for name in ["a", "held"] {
            results.push(timed_err("acquire_blocking", || {
                try_wait_blocking(&l, name, WAIT)
            }));
        }
        results.push(timed_err("extend_blocking", || {
            held.extend_blocking(Duration::from_secs(1))
        }));
        results.push(timed_err("reacquire_blocking", || {
            held.reacquire_blocking()
        }));
        results.push(timed_err("ping_blocking", || l.ping_blocking()));
        (results, held)
    });
    for (what, err, elapsed) in &results {
        assert_connection(err, *elapsed, what);
    }
    // Dropping a blocking guard while Redis is down returns (no panic, no hang).
    let start = Instant::now();
    no_hang("drop of a blocking guard", move || drop(held));
    assert!(start.elapsed() < BOUND);

    server.restart();
    no_hang_take_and_release_blocking(
        &locker,
        "a",
        "acquire_blocking after restart",
        "first blocking acquire after restart",
    );
}

#[tokio::test]
async fn restart_while_idle_the_first_call_succeeds() {
    let (mut server, locker) = setup();
    support::warm_up(&locker, "idle").await;
    // The Locker's connection breaks while nobody uses it.
    server.restart();
    let guard = locker
        .lock("idle")
        .acquire()
        .await
        .expect("first async call after a restart");
    guard.release().await.unwrap();

    server.restart();
    no_hang_take_and_release_blocking(
        &locker,
        "idle",
        "blocking acquire after restart",
        "first blocking call after a restart",
    );
}

/// `ping` is the health check: right after a restart Redis is up, so the
/// first ping must say so (like lock operations, it should retry once on a
/// connection that broke while idle).
#[tokio::test]
async fn restart_while_idle_the_first_ping_succeeds() {
    let (mut server, locker) = setup();
    locker.ping().await.unwrap();
    server.restart();
    locker.ping().await.expect("first ping after a restart");

    server.restart();
    let l = locker.clone();
    no_hang("ping_blocking after restart", move || l.ping_blocking())
        .expect("first blocking ping after a restart");
}

#[tokio::test]
async fn restart_in_the_middle_of_a_hold() {
    let (mut server, locker) = setup();
    let a = take_leased(&locker, "m", Duration::from_secs(30)).await;
    let b = take_leased_blocking(&locker, "m2", Duration::from_secs(30));
    let c = take_leased(&locker, "m3", Duration::from_secs(30)).await;
    server.restart();

    // The restarted server lost the locks: release answers (NotOwned, or a
    // connection error), never a panic or a hang.
    let err = no_hang_async("release after restart", a.release())
        .await
        .unwrap_err();
    assert_not_owned_or_connection(&err);
    let err = no_hang("release_blocking after restart", move || {
        b.release_blocking()
    })
    .unwrap_err();
    assert_not_owned_or_connection(&err);
    let err = no_hang_async("extend after restart", c.extend(Duration::from_secs(5)))
        .await
        .unwrap_err();
    assert_not_owned_or_connection(&err);
    assert!(
        !server.exists(&lock_key("m3")),
        "extend revived a lost lock"
    );
    drop(c);

    // New acquisitions of the same names work.
    for name in ["m", "m2", "m3"] {
        let guard = try_wait(&locker, name, WAIT).await.unwrap();
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_server_gives_errors_not_hangs_async() {
    let server = RedisServer::start();
    let locker = quick_locker(&server);
    let to_release = take_leased(&locker, "f1", Duration::from_secs(30)).await;
    let to_extend = take_leased(&locker, "f2", Duration::from_secs(30)).await;
    server.freeze();

    assert_connection_async("acquire", "acquire on a frozen server", || {
        try_wait(&locker, "f3", WAIT)
    })
    .await;
    assert_connection_async("extend", "extend on a frozen server", || {
        to_extend.extend(Duration::from_secs(5))
    })
    .await;
    assert_connection_async("reacquire", "reacquire on a frozen server", || {
        to_extend.reacquire()
    })
    .await;
    assert_connection_async("release", "release on a frozen server", || {
        to_release.release()
    })
    .await;

    // Many at once.
    let start = Instant::now();
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let locker = locker.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let result = try_wait(&locker, &format!("many-{}", i % 10), WAIT).await;
                (result.map(|g| g.fencing_token()), started.elapsed())
            })
        })
        .collect();
    for task in tasks {
        let (result, elapsed) = no_hang_async("50 concurrent acquires", task).await.unwrap();
        let err = result.expect_err("nothing can be acquired from a frozen server");
        assert_connection(&err, elapsed, "one of 50 concurrent acquires");
    }
    assert!(start.elapsed() < BOUND, "{:?}", start.elapsed());

    server.thaw();
    // Works again (a name not involved in the freeze).
    let guard = no_hang_async(
        "acquire after thaw",
        locker.lock("after").acquire_timeout(WAIT).acquire(),
    )
    .await
    .expect("acquire after thaw");
    guard.release().await.unwrap();
    drop(to_extend);
}

#[test]
fn frozen_server_gives_errors_not_hangs_blocking() {
    let server = RedisServer::start();
    let locker = quick_locker(&server);
    let to_release = take_leased_blocking(&locker, "f1", Duration::from_secs(30));
    let to_extend = take_leased_blocking(&locker, "f2", Duration::from_secs(30));
    server.freeze();

    let l = locker.clone();
    let (results, to_extend) = no_hang("blocking calls on a frozen server", move || {
        let results = vec![
            timed_err("acquire_blocking", || try_wait_blocking(&l, "f3", WAIT)),
            timed_err("extend_blocking", || {
                to_extend.extend_blocking(Duration::from_secs(5))
            }),
            timed_err("reacquire_blocking", || to_extend.reacquire_blocking()),
            timed_err("release_blocking", || to_release.release_blocking()),
        ];
        (results, to_extend)
    });
    for (what, err, elapsed) in &results {
        assert_connection(err, *elapsed, what);
    }

    // Many threads at once.
    let start = Instant::now();
    let threads: Vec<_> = (0..50)
        .map(|i| {
            let locker = locker.clone();
            std::thread::spawn(move || {
                let started = Instant::now();
                let result = try_wait_blocking(&locker, &format!("many-{}", i % 10), WAIT);
                (result.map(|g| g.fencing_token()), started.elapsed())
            })
        })
        .collect();
    let outcomes = no_hang("50 concurrent blocking acquires", move || {
        threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect::<Vec<_>>()
    });
    for (result, elapsed) in outcomes {
        let err = result.expect_err("nothing can be acquired from a frozen server");
        assert_connection(&err, elapsed, "one of 50 concurrent blocking acquires");
    }
    assert!(start.elapsed() < BOUND, "{:?}", start.elapsed());

    // A blocking guard dropped while the server is frozen: Drop returns.
    no_hang("drop of a blocking guard on a frozen server", move || {
        drop(to_extend)
    });

    server.thaw();
    let l = locker.clone();
    let guard = no_hang("acquire_blocking after thaw", move || {
        l.lock("after").acquire_timeout(WAIT).acquire_blocking()
    })
    .expect("acquire_blocking after thaw");
    guard.release_blocking().unwrap();
}

/// An acquisition that failed with a connection error must not leave the lock
/// held: the library promises to "give back whatever this token may hold".
/// On a frozen server the request sits in the server's socket buffer and runs
/// when the server resumes, after the caller was told it failed.
#[test]
fn failed_acquire_on_a_frozen_server_leaves_no_lock_after_thaw() {
    let server = RedisServer::start();
    let locker = quick_locker(&server);
    // Warm up the connection and the script cache.
    locker
        .lock("warm")
        .acquire_blocking()
        .unwrap()
        .release_blocking()
        .unwrap();
    server.freeze();
    let err = try_take_blocking(&locker, "phantom", Duration::from_secs(30), WAIT).unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    std::thread::sleep(Duration::from_millis(500));
    server.thaw();

    // Nobody holds "phantom": it must be free, long before its 30 s lease ends.
    let start = Instant::now();
    let result = try_wait_blocking(&locker, "phantom", Duration::from_secs(3));
    match result {
        Ok(guard) => guard.release_blocking().unwrap(),
        Err(e) => panic!(
            "the lock of a failed acquisition is still held after thaw ({e}); \
             PTTL {} ms, after {:?}",
            server.pttl(&lock_key("phantom")),
            start.elapsed()
        ),
    }
}

#[tokio::test]
async fn failed_async_acquire_on_a_frozen_server_leaves_no_lock_after_thaw() {
    let server = RedisServer::start();
    let locker = quick_locker(&server);
    support::warm_up(&locker, "warm").await;
    server.freeze();
    let err = try_take(&locker, "phantom", Duration::from_secs(30), WAIT)
        .await
        .unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    server.thaw();
    let result = try_wait(&locker, "phantom", Duration::from_secs(3)).await;
    match result {
        Ok(guard) => guard.release().await.unwrap(),
        Err(e) => panic!(
            "the lock of a failed acquisition is still held after thaw ({e}); PTTL {} ms",
            server.pttl(&lock_key("phantom"))
        ),
    }
}

/// As above, on a server that has never run the release script: the give-back
/// must not depend on the server's script cache.
#[test]
fn failed_first_acquire_on_a_frozen_server_leaves_no_lock_after_thaw() {
    let server = RedisServer::start();
    let locker = quick_locker(&server);
    // Loads the acquire script only: this guard is not released until the end.
    let warm = locker.lock("warm").acquire_blocking().unwrap();
    server.freeze();
    let err = try_take_blocking(&locker, "phantom", Duration::from_secs(30), WAIT).unwrap_err();
    assert!(err.is_connection(), "{err:?}");
    std::thread::sleep(Duration::from_millis(500));
    server.thaw();

    let freed = support::eventually(Duration::from_secs(3), || {
        !server.exists(&lock_key("phantom"))
    });
    assert!(
        freed.is_some(),
        "the failed acquisition still holds the lock after thaw: PTTL {} ms",
        server.pttl(&lock_key("phantom"))
    );
    warm.release_blocking().unwrap();
}

// ---- Waiters ride out short outages ----------------------------------------

/// Long enough that only a wake-up, not expiry, hands the lock over.
const LONG: Duration = Duration::from_secs(30);
/// A waiter's acquire time that outlasts every outage below.
const PATIENT: Duration = Duration::from_secs(20);

/// Kills the server, keeps it down for `down`, and starts it again (empty)
/// on the same port; the moment it answers again.
fn bounce(server: &mut RedisServer, down: Duration) -> Instant {
    server.kill();
    std::thread::sleep(down);
    server.restart();
    Instant::now()
}

/// A waiter with 20 s of acquire time whose Redis restarts (down 300 ms,
/// back empty) keeps waiting through the outage and gets the lock, which
/// the restart freed, soon after Redis is back (generous bound: 5 s) and
/// well within its acquire time. Before, it returned `Connection` as soon
/// as its subscriber connection dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_rides_out_a_redis_restart() {
    let mut server = RedisServer::start();
    let (holders, waiters) = (lockers::locker(&server), lockers::locker(&server));
    let holder = holders.lock("bounce").expire(LONG).acquire().await.unwrap();
    let waiter = spawn_waiter(&waiters, "bounce", LONG, PATIENT);
    assert!(
        queued(&server, &keys::lock("bounce").queue, 1),
        "the waiter never queued"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let back = bounce(&mut server, Duration::from_millis(300));
    let (outcome, returned_at) = no_hang_async("the waiter", waiter).await.unwrap();
    let guard = outcome.unwrap_or_else(|e| panic!("the waiter gave up over a restart: {e:?}"));
    let late = returned_at.saturating_duration_since(back);
    assert!(
        late < Duration::from_secs(5),
        "got the lock {late:?} after the restart"
    );
    assert!(server.exists(&support::lock_key("bounce")));
    guard.release().await.unwrap();
    drop(holder);
}

/// The same through `acquire_blocking`, with Redis already down when the
/// caller starts: it waits for Redis to come back within its acquire time.
#[test]
fn blocking_caller_waits_for_redis_to_come_back() {
    let (mut server, locker) = setup();
    locker.ping_blocking().unwrap();
    server.kill();
    let caller = {
        let locker = locker.clone();
        std::thread::spawn(move || {
            let outcome = try_take_blocking(&locker, "late", LONG, PATIENT);
            (outcome, Instant::now())
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !caller.is_finished(),
        "the caller gave up while Redis was down"
    );
    server.restart();
    let back = Instant::now();
    let (outcome, returned_at) = no_hang("the blocking caller", move || caller.join().unwrap());
    let guard = outcome.unwrap_or_else(|e| panic!("the caller gave up: {e:?}"));
    let late = returned_at.saturating_duration_since(back);
    assert!(
        late < Duration::from_secs(5),
        "got the lock {late:?} after Redis was back"
    );
    guard.release_blocking().unwrap();
}

/// An acquire time of zero asks for one attempt: with Redis down, the
/// error comes at once (generous bound: 1 s), async and blocking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_acquire_timeout_fails_at_once_while_redis_is_down() {
    let (mut server, locker) = setup();
    locker.ping().await.unwrap();
    server.kill();
    for round in 0..3 {
        let start = Instant::now();
        let err = attempt(&locker, "once").await.unwrap_err();
        let took = start.elapsed();
        assert!(err.is_connection(), "round {round}: {err:?}");
        assert!(
            took < Duration::from_secs(1),
            "round {round}: took {took:?}"
        );
    }
    let l = locker.clone();
    let (err, took) = tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        let err = attempt_blocking(&l, "once").unwrap_err();
        (err, start.elapsed())
    })
    .await
    .unwrap();
    assert!(err.is_connection(), "blocking: {err:?}");
    assert!(took < Duration::from_secs(1), "blocking: took {took:?}");
}

/// A caller whose acquire time (2 s) ends while Redis is down gets the
/// last connection error, after its acquire time and within about it
/// (generous bound: + 2 s), and nothing of it is left in Redis once it is
/// back. Before, it got the error at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_whose_acquire_time_ends_while_redis_is_down_gets_a_connection_error() {
    let mut server = RedisServer::start();
    let (holders, waiters) = (lockers::locker(&server), lockers::locker(&server));
    let wait = Duration::from_secs(2);
    // Down before the first attempt: a plain acquisition.
    holders.ping().await.unwrap();
    waiters.ping().await.unwrap();
    server.kill();
    let start = Instant::now();
    let err = no_hang_async(
        "an acquisition on a dead server",
        waiters.lock("down").acquire_timeout(wait).acquire(),
    )
    .await
    .unwrap_err();
    let took = start.elapsed();
    assert!(matches!(err, LockError::Connection { .. }), "{err:?}");
    assert_gave_up_at_its_time(took, wait);

    // Down while queued behind a holder.
    server.restart();
    let holder = holders.lock("down").expire(LONG).acquire().await.unwrap();
    let start = Instant::now();
    let waiter = spawn_take(&waiters, "down", LONG, wait);
    assert!(
        queued(&server, &keys::lock("down").queue, 1),
        "the waiter never queued"
    );
    server.kill();
    let err = no_hang_async("a queued waiter", waiter)
        .await
        .unwrap()
        .unwrap_err();
    let took = start.elapsed();
    assert!(matches!(err, LockError::Connection { .. }), "{err:?}");
    assert_gave_up_at_its_time(took, wait);
    drop(holder);
}

/// Retries use a new owner token, so an earlier attempt that runs late can
/// never undo a later one. A waiter (acquire time 10 s, 300 ms timeouts)
/// tries a free lock while Redis is frozen for 1.5 s: its attempts time
/// out, their tokens are given back (on their own connections, and again
/// once Redis answers), and after the thaw it gets the lock. The lock it
/// returns is really its own: the fencing token is the latest, the lock is
/// still held a second later (no late give-back freed it), and its
/// release succeeds. Before, the waiter returned `Connection`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_gets_a_lock_of_its_own_after_a_frozen_server_thaws() {
    let server = RedisServer::start();
    let locker = quick_locker(&server);
    support::warm_up(&locker, "thaw").await;
    server.freeze();
    let waiter = spawn_take(&locker, "thaw", LONG, Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.thaw();
    let guard = no_hang_async("the waiter", waiter)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("the waiter gave up over a freeze: {e:?}"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let fence = fence_of(&server, "thaw");
    assert_eq!(guard.fencing_token(), fence, "a later owner took the lock");
    assert!(
        server.exists(&support::lock_key("thaw")),
        "a late give-back freed the waiter's lock"
    );
    guard.release().await.expect("the lock is the waiter's own");
}

/// The case for a new token per retry. A waiter's first attempt on a free
/// lock is held up on its way (a proxy delays it by 2 s; the response
/// timeout is 300 ms), so it times out and is given back on its own
/// connection, behind it. The link gets fast again at once, and the retry
/// takes the lock. Then the late attempt and its give-back reach Redis:
/// they must not touch the retry's lock, which they would if the retry had
/// used the same owner token (the give-back would delete it). Three seconds
/// later the lock is still the waiter's: same fencing token, held, refused
/// to another caller, and released by its guard. Before, the waiter
/// returned `Connection` after the first timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_answer_of_an_abandoned_attempt_never_frees_the_retry_lock() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    let locker = Locker::builder(proxy.url())
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    // Connection open, scripts loaded.
    support::warm_up(&locker, "warm").await;
    proxy.set_delay(Duration::from_secs(2));
    let waiter = spawn_take(&locker, "late", LONG, Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(600)).await;
    proxy.set_delay(Duration::ZERO);
    let guard = no_hang_async("the waiter", waiter)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("the waiter gave up over a slow link: {e:?}"));
    // The delayed attempt and its give-back arrive meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        server.exists(&support::lock_key("late")),
        "the late give-back of the first attempt freed the retry's lock"
    );
    let fence = fence_of(&server, "late");
    assert_eq!(guard.fencing_token(), fence);
    let other = lockers::locker(&server);
    let refused = attempt(&other, "late").await.unwrap_err();
    assert!(refused.is_timeout(), "{refused:?}");
    guard.release().await.expect("the lock is the waiter's own");
}
