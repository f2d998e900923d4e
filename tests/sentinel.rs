//! Redis Sentinel: a Locker made with `Locker::sentinel` asks the sentinels
//! where the master is and locks there; after a failover (the master killed
//! or frozen, the replica promoted) the same Locker follows the new master,
//! with connection errors (`is_connection()`) only while the switch lasts;
//! a waiter caught in a failover returns within its acquire time, with the
//! lock or a clear error; a demoted old master gets no writes; a
//! password-protected master (`master_auth`) and sentinels with passwords
//! of their own work, and a missing password, an unknown master name or
//! sentinels that are all down give clear errors within bounds, never hangs.
//!
//! Every test starts its own set (master, replica, three sentinels on free
//! loopback ports; see `support/sentinel.rs`): about 2-3 s each, and a
//! failover adds about 3 s. The long ones (a failover each) are marked
//! "Long:" below.

use crate::support;

use std::time::{Duration, Instant};

use lockattr::{LockError, LockGuard, Locker, LockerBuilder, RedisAddr, redis_lock};
use support::deployments::{hold_for, lock_error, release_now, spawn_try_lock, try_lock};
use support::free_port;
use support::lock_key;
use support::sentinel::{Auth, SETTLE, SentinelSet};

/// Connect and response timeouts of the Lockers below.
const QUICK: Duration = Duration::from_millis(500);
/// Upper bound for an error that should come within the connect/response
/// timeouts (plus an acquire time, where one is given): generous slack.
const BOUND: Duration = Duration::from_secs(5);
/// Upper bound used to detect a hang (the test fails instead of blocking).
const HANG: Duration = Duration::from_secs(40);

/// A builder of a Locker on the master `name` through `sentinels`, with
/// short connect and response timeouts ([`QUICK`]).
fn quick_builder<I>(name: &str, sentinels: I) -> LockerBuilder
where
    I: IntoIterator,
    I::Item: RedisAddr,
{
    Locker::sentinel_builder(name, sentinels)
        .connect_timeout(QUICK)
        .response_timeout(QUICK)
}

/// A Locker on the set's master through its sentinels, with short timeouts.
fn quick_locker(set: &SentinelSet) -> Locker {
    quick_builder(&set.name, set.sentinel_urls())
        .build()
        .unwrap()
}

async fn no_hang<T>(what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(HANG, f)
        .await
        .unwrap_or_else(|_| panic!("{what} did not return within {HANG:?}"))
}

/// One acquisition of `name` by `locker` with `acquire_time`, which must
/// fail without hanging ([`no_hang`], as `what`): its error, and when it
/// was asked for.
async fn refused(
    locker: &Locker,
    what: &str,
    name: &str,
    acquire_time: Duration,
) -> (LockError, Instant) {
    let start = Instant::now();
    let err = no_hang(what, try_lock(locker, name, acquire_time))
        .await
        .unwrap_err();
    (err, start)
}

/// The error's message and those of its sources.
fn chain(err: &LockError) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(e) = source {
        text.push_str(" <- ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

/// Takes `name` with no acquire time, again every 200 ms while the Locker
/// reports connection errors (a failover under way), for at most `within`.
/// Any other error fails the test. Returns the guard and the errors seen.
async fn acquire_through_switch(
    locker: &Locker,
    name: &str,
    within: Duration,
) -> (LockGuard, Vec<LockError>) {
    let start = Instant::now();
    let mut errors = Vec::new();
    loop {
        let attempt = no_hang(
            "acquire during a failover",
            try_lock(locker, name, Duration::ZERO),
        )
        .await;
        match attempt {
            Ok(guard) => return (guard, errors),
            Err(e) => {
                assert!(
                    e.is_connection(),
                    "during the switch, expected a connection error, got {e:?}"
                );
                errors.push(e);
            }
        }
        assert!(
            start.elapsed() < within,
            "no lock within {within:?}; errors: {errors:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `holder` takes `name`, a task waits for it through `waiter` (20 s of
/// acquire time), `holder` releases: returns how long after the release
/// the waiter got the lock.
async fn hand_over(holder: &Locker, waiter: &Locker, name: &str) -> Duration {
    let guard = holder.lock(name).acquire().await.unwrap();
    let waiting = spawn_try_lock(waiter, name, Duration::from_secs(20));
    // Let it start waiting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = release_now(guard).await;
    let (got, at) = no_hang("the waiter", waiting).await.unwrap();
    got.unwrap_or_else(|e| panic!("the waiter for {name}: {e:?}"))
        .release()
        .await
        .unwrap();
    at.saturating_duration_since(released_at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_the_master_the_sentinels_name() {
    let set = SentinelSet::start("lockattr-basic");
    let master = set.master_port();
    let locker = Locker::sentinel(&set.name, set.sentinel_urls()).unwrap();
    locker.ping().await.unwrap();

    let guard = locker.lock("order:1").acquire().await.unwrap();
    assert!(guard.fencing_token() > 0);
    let key = lock_key("order:1");
    assert!(set.exists_on(master, &key), "the lock is not on the master");
    assert_eq!(set.role_of(master).as_deref(), Some("master"));

    // Another Locker through the same sentinels sees it held.
    let other = Locker::sentinel(&set.name, set.sentinel_urls()).unwrap();
    let err = lock_error(&other, "order:1", Duration::from_millis(300)).await;
    assert!(err.is_timeout(), "{err:?}");

    guard.release().await.unwrap();
    assert!(
        !set.exists_on(master, &key),
        "released, yet the key is there"
    );
    let guard = other.lock("order:1").acquire().await.unwrap();
    guard.release().await.unwrap();

    // The blocking API, from a thread without a runtime.
    let blocking = locker.clone();
    std::thread::spawn(move || {
        blocking.ping_blocking().unwrap();
        let guard = blocking.lock("order:2").acquire_blocking().unwrap();
        guard.release_blocking().unwrap();
    })
    .join()
    .unwrap();

    // A prefix and a database of the master's.
    let tuned = Locker::sentinel_builder(set.name.as_str(), set.sentinel_urls())
        .prefix("app:")
        .master_db(3)
        .build()
        .unwrap();
    let guard = tuned.lock("order:3").acquire().await.unwrap();
    let mut db3 = set.master_client();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut db3).unwrap();
    let in_db3: i64 = redis::cmd("EXISTS")
        .arg("app:{order:3}")
        .query(&mut db3)
        .unwrap();
    assert_eq!(in_db3, 1, "the lock is not in db 3 of the master");
    assert!(
        set.keys_on(master, "app:*").is_empty(),
        "the lock is in db 0"
    );
    guard.release().await.unwrap();
}

/// Long: one failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_locker_follows_the_master_after_a_failover() {
    let mut set = SentinelSet::start("lockattr-failover");
    let old = set.master_port();
    let locker = quick_locker(&set);
    // A second Locker that has waited once: it listens on the old master.
    let peer = quick_locker(&set);
    hand_over(&locker, &peer, "handover").await;
    let before = locker.lock("fenced").acquire().await.unwrap();
    let token_before = before.fencing_token();
    before.release().await.unwrap();
    // Held through the failover, with a lease longer than the test.
    let held = hold_for(&locker, "held", Duration::from_secs(60)).await;
    set.wait_replicated();

    set.kill_master();
    let (guard, errors) = acquire_through_switch(&locker, "fenced", SETTLE).await;
    let new = set.wait_for_failover(SETTLE);
    assert_ne!(new, old);
    // The first attempts hit the dead master: errors, never a lock.
    assert!(
        !errors.is_empty(),
        "the first acquire after the master died succeeded"
    );
    assert!(
        set.exists_on(new, &lock_key("fenced")),
        "the lock is not on the new master"
    );
    // The fence counter came over with the data: tokens still grow.
    assert!(
        guard.fencing_token() > token_before,
        "token {} after the failover, {token_before} before",
        guard.fencing_token()
    );
    guard.release().await.unwrap();
    assert!(!set.exists_on(new, &lock_key("fenced")));

    // The lock held across the failover is still this guard's on the new
    // master: it extends and releases there.
    held.extend(Duration::from_secs(60)).await.unwrap();
    held.release().await.unwrap();
    assert!(!set.exists_on(new, &lock_key("held")));

    // Once the switch is over, no more errors.
    for i in 0..5 {
        locker.ping().await.unwrap();
        let guard = try_lock(&locker, &format!("after:{i}"), Duration::ZERO)
            .await
            .unwrap();
        guard.release().await.unwrap();
    }

    // Waiters hear releases on the new master: handed the lock at the
    // release, not at the end of their acquire time (20 s).
    let after = hand_over(&locker, &peer, "handover").await;
    assert!(
        after < BOUND,
        "the waiter got the lock {after:?} after the release"
    );

    // The old master back, as a replica of the new one: locks still go to
    // the new master.
    set.restart_old_master_as_replica();
    let guard = locker.lock("back").acquire().await.unwrap();
    assert!(set.exists_on(new, &lock_key("back")));
    assert_eq!(set.role_of(old).as_deref(), Some("slave"));
    guard.release().await.unwrap();
}

/// Long: one failover while a waiter waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_caught_in_a_failover_returns_within_its_acquire_time() {
    const PATIENT: Duration = Duration::from_secs(20);
    let mut set = SentinelSet::start("lockattr-waiter");
    let holder = quick_locker(&set);
    let waiter = quick_locker(&set);
    let held = hold_for(&holder, "queue", Duration::from_secs(60)).await;

    let waiting = tokio::spawn(async move {
        let result = try_lock(&waiter, "queue", PATIENT).await;
        (result, Instant::now(), waiter)
    });
    // The waiter is waiting, and what it left on the master is on the replica.
    tokio::time::sleep(Duration::from_millis(500)).await;
    set.wait_replicated();
    let wait_started = Instant::now();

    set.kill_master();
    let new = set.wait_for_failover(SETTLE);

    // The holder releases on the new master (its first calls may still
    // find the switch under way).
    let start = Instant::now();
    loop {
        match no_hang("extend", held.extend(Duration::from_secs(60))).await {
            Ok(()) => break,
            Err(e) => assert!(e.is_connection(), "extend: {e:?}"),
        }
        assert!(
            start.elapsed() < SETTLE,
            "the holder never reached the new master"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let released_at = Instant::now();
    held.release().await.unwrap();

    let (result, returned_at, waiter) = no_hang("the waiter", waiting).await.unwrap();
    let waited = returned_at - wait_started;
    assert!(
        waited < PATIENT + BOUND,
        "the waiter returned after {waited:?}, its acquire time is {PATIENT:?}"
    );
    match result {
        Ok(guard) => {
            // Never while the holder still held it.
            assert!(
                returned_at >= released_at,
                "the waiter got the lock {:?} before the holder released it",
                released_at - returned_at
            );
            assert!(set.exists_on(new, &lock_key("queue")));
            guard.release().await.unwrap();
            eprintln!(
                "the waiter got the lock {:?} after the release",
                returned_at - released_at
            );
        }
        Err(e) => {
            assert!(
                e.is_connection() || e.is_timeout(),
                "the waiter's error is neither a connection error nor a timeout: {e:?}"
            );
            eprintln!("the waiter returned an error after {waited:?}: {e}");
        }
    }
    // Either way, its Locker works on the new master.
    let guard = waiter.lock("queue").acquire().await.unwrap();
    assert!(set.exists_on(new, &lock_key("queue")));
    guard.release().await.unwrap();
}

/// Long: one failover. The old master is frozen, not killed, so the
/// Locker's connection to it stays open; once the replica is promoted the
/// old master is thawed and made a replica of the new one (`REPLICAOF`),
/// and answers writes with READONLY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_master_is_left_for_the_new_one() {
    let mut set = SentinelSet::start("lockattr-demoted");
    let old = set.master_port();
    let locker = quick_locker(&set);
    let guard = locker.lock("before").acquire().await.unwrap();
    guard.release().await.unwrap();
    set.wait_replicated();

    set.freeze_master();
    let new = set.wait_for_failover(SETTLE);
    set.thaw(old);
    set.demote(old);
    assert_eq!(set.role_of(old).as_deref(), Some("slave"));

    let (guard, errors) = acquire_through_switch(&locker, "after", SETTLE).await;
    assert!(
        errors.len() <= 1,
        "more than one failed attempt after the demotion: {errors:?}"
    );
    assert!(
        set.exists_on(new, &lock_key("after")),
        "the lock is not on the new master"
    );
    guard.release().await.unwrap();
    for i in 0..3 {
        let guard = try_lock(&locker, &format!("after:{i}"), Duration::ZERO)
            .await
            .unwrap();
        assert!(set.exists_on(new, &lock_key(&format!("after:{i}"))));
        guard.release().await.unwrap();
    }
}

/// `tasks` grants at once, each of a name of its own (`<prefix>-<i>`),
/// each released once held, each waiting up to `wait`: the failures.
async fn burst(locker: &Locker, prefix: &str, tasks: usize, wait: Duration) -> Vec<LockError> {
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let locker = locker.clone();
            let name = format!("{prefix}-{i}");
            tokio::spawn(async move {
                let guard = try_lock(&locker, &name, wait).await?;
                guard.release().await.map(drop)
            })
        })
        .collect();
    let mut failures = Vec::new();
    for handle in handles {
        if let Err(e) = handle.await.unwrap() {
            failures.push(e);
        }
    }
    failures
}

/// Long: one failover, as [`a_demoted_master_is_left_for_the_new_one`],
/// with grants that wait for the replica and share their `WAIT`s: the
/// connections of those `WAIT`s, opened on the old master, leave it too (a
/// `WAIT` there answers that it cannot be used on a replica, a write
/// READONLY).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_that_wait_for_replicas_leave_a_demoted_master() {
    let mut set = SentinelSet::start("lockattr-demoted-acks");
    let old = set.master_port();
    let locker = quick_builder(&set.name, set.sentinel_urls())
        .min_replicas(1)
        .build()
        .unwrap();
    // Enough at once that every connection of `WAIT`s opens on the old master.
    let failures = burst(&locker, "before", 40, SETTLE).await;
    assert!(failures.is_empty(), "{failures:?}");
    set.wait_replicated();

    set.freeze_master();
    let new = set.wait_for_failover(SETTLE);
    set.thaw(old);
    set.demote(old);

    for round in 0..3 {
        let prefix = format!("after{round}");
        let failures = burst(&locker, &prefix, 40, SETTLE).await;
        assert!(failures.is_empty(), "round {round}: {failures:?}");
        // Granted by the new master: its counters are there.
        let counter = format!("{}:fence", lock_key(&format!("{prefix}-0")));
        assert!(
            set.exists_on(new, &counter),
            "{counter} is not on the new master"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_auth_for_a_master_with_a_password() {
    const DATA: &str = "data-secret";
    const SENTINELS: &str = "sentinel-secret";
    let set = SentinelSet::start_with_auth(
        "lockattr-auth",
        Auth {
            data: Some(DATA.into()),
            sentinels: Some(SENTINELS.into()),
        },
    );
    let master = set.master_port();
    let build = |urls: Vec<String>, auth: Option<&str>| {
        let mut builder = quick_builder(&set.name, urls);
        if let Some(pw) = auth {
            builder = builder.master_auth("default", pw);
        }
        builder.build().unwrap()
    };

    let locker = build(set.sentinel_urls(), Some(DATA));
    let guard = locker.lock("secret").acquire().await.unwrap();
    assert!(set.exists_on(master, &lock_key("secret")));
    guard.release().await.unwrap();

    // Refusals: a clear error (naming authentication), at once, and never
    // the password.
    let cases = [
        ("no master_auth", build(set.sentinel_urls(), None)),
        (
            "a wrong master password",
            build(set.sentinel_urls(), Some("wrong-secret")),
        ),
        (
            "no sentinel password",
            build(set.sentinel_urls_without_password(), Some(DATA)),
        ),
    ];
    for (what, locker) in cases {
        for acquire_time in [Duration::ZERO, Duration::from_secs(1)] {
            let (err, start) = refused(&locker, what, "secret", acquire_time).await;
            let elapsed = start.elapsed();
            let text = chain(&err);
            assert!(
                elapsed < acquire_time + BOUND,
                "{what}: the error came after {elapsed:?}"
            );
            assert!(!err.is_timeout(), "{what}: {err:?}");
            assert!(
                text.to_lowercase().contains("auth"),
                "{what}: the error does not say authentication failed: {text}"
            );
            for secret in [DATA, SENTINELS, "wrong-secret"] {
                assert!(
                    !format!("{text} {err:?}").contains(secret),
                    "{what}: the error shows a password: {err:?}"
                );
            }
        }
        let start = Instant::now();
        let err = no_hang(what, locker.ping()).await.unwrap_err();
        assert!(
            start.elapsed() < BOUND,
            "{what}: ping took {:?}",
            start.elapsed()
        );
        assert!(
            chain(&err).to_lowercase().contains("auth"),
            "{what}: {err:?}"
        );
    }
    let left: Vec<String> = set
        .keys_on(master, "lockattr:*")
        .into_iter()
        .filter(|k| !k.ends_with(":fence"))
        .collect();
    assert!(left.is_empty(), "a lock is left: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_master_name_is_a_clear_error() {
    let set = SentinelSet::start("lockattr-known");
    let urls = set.sentinel_urls();
    let locker = quick_builder("no-such-master", urls.iter().map(String::as_str))
        .build()
        .unwrap();

    let start = Instant::now();
    let err = no_hang("ping", locker.ping()).await.unwrap_err();
    assert!(start.elapsed() < BOUND, "ping took {:?}", start.elapsed());
    assert!(
        chain(&err).contains("no-such-master"),
        "the error does not name the master: {}",
        chain(&err)
    );

    for acquire_time in [Duration::ZERO, Duration::from_secs(1)] {
        let (err, start) = refused(&locker, "acquire", "x", acquire_time).await;
        let elapsed = start.elapsed();
        assert!(
            elapsed < acquire_time + BOUND,
            "the error came after {elapsed:?}"
        );
        assert!(!err.is_timeout(), "{err:?}");
        assert!(
            chain(&err).contains("no-such-master"),
            "the error does not name the master: {}",
            chain(&err)
        );
    }
    // The sentinels' own master is untouched, and reachable by its name.
    assert!(set.keys_on(set.master_port(), "*").is_empty());
    quick_locker(&set).ping().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_all_down_give_connection_errors() {
    // No sentinel at all: refused when the Locker is made.
    let err = Locker::sentinel("lockattr-none", Vec::<String>::new()).unwrap_err();
    assert!(matches!(err, LockError::InvalidInput { .. }), "{err:?}");

    // Nobody listens at these ports.
    let nobody: Vec<String> = (0..3)
        .map(|_| format!("redis://127.0.0.1:{}/", free_port()))
        .collect();
    let locker = quick_builder("lockattr-nobody", nobody.clone())
        .build()
        .unwrap();
    assert_down(&locker).await;

    let mut set = SentinelSet::start("lockattr-down");
    // One sentinel that answers is enough.
    let mut some_down = nobody.clone();
    some_down.push(set.sentinel_urls()[2].clone());
    let partial = quick_builder(&set.name, some_down).build().unwrap();
    let guard = partial.lock("some").acquire().await.unwrap();
    assert!(set.exists_on(set.master_port(), &lock_key("some")));
    guard.release().await.unwrap();

    // All of them down, the master up: no way to find it.
    set.kill_sentinels();
    assert_down(&quick_locker(&set)).await;
}

/// A Locker whose sentinels are all down: connection errors, within bounds.
async fn assert_down(locker: &Locker) {
    let start = Instant::now();
    let err = no_hang("ping", locker.ping()).await.unwrap_err();
    assert!(err.is_connection(), "ping: {err:?}");
    assert!(start.elapsed() < BOUND, "ping took {:?}", start.elapsed());
    for acquire_time in [Duration::ZERO, Duration::from_secs(1)] {
        let (err, start) = refused(locker, "acquire", "x", acquire_time).await;
        assert!(err.is_connection(), "acquire: {err:?}");
        assert!(
            start.elapsed() < acquire_time + BOUND,
            "acquire ({acquire_time:?}) took {:?}",
            start.elapsed()
        );
    }
    let blocking = locker.clone();
    let start = Instant::now();
    let err = tokio::task::spawn_blocking(move || blocking.ping_blocking())
        .await
        .unwrap()
        .unwrap_err();
    assert!(err.is_connection(), "ping_blocking: {err:?}");
    assert!(start.elapsed() < BOUND);
}

#[redis_lock(name = "sentinel:job:{id}", locker = locker)]
fn locked_job(locker: &Locker, id: u32, set: &SentinelSet) -> Result<bool, LockError> {
    Ok(set.exists_on(set.master_port(), &lock_key(&format!("sentinel:job:{id}"))))
}

#[redis_lock(name = "sentinel:job:{id}", locker = locker)]
async fn locked_job_async(locker: &Locker, id: u32, set: &SentinelSet) -> Result<bool, LockError> {
    Ok(set.exists_on(set.master_port(), &lock_key(&format!("sentinel:job:{id}"))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_locks_through_a_sentinel_locker() {
    let set = SentinelSet::start("lockattr-attr");
    let locker = quick_locker(&set);
    assert!(locked_job_async(&locker, 1, &set).await.unwrap());
    std::thread::scope(|scope| {
        scope.spawn(|| assert!(locked_job(&locker, 2, &set).unwrap()));
    });
    assert!(
        set.keys_on(set.master_port(), "lockattr:*")
            .iter()
            .all(|k| k.ends_with(":fence")),
        "a lock is left after the calls"
    );

    // Held by another Locker: the attribute reports the busy lock.
    let other = quick_locker(&set);
    let _held = hold_for(&other, "sentinel:job:3", Duration::from_secs(30)).await;
    let err = locked_job_busy(&locker, 3, &set).await.unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
}

#[redis_lock(name = "sentinel:job:{id}", acquire_time = 0, locker = locker)]
async fn locked_job_busy(locker: &Locker, id: u32, set: &SentinelSet) -> Result<bool, LockError> {
    Ok(set.exists_on(set.master_port(), &lock_key(&format!("sentinel:job:{id}"))))
}
