//! Waiting without polling: a waiter for a held lock queues its token in
//! `<prefix>{name}:queue`, sleeps on the Locker's one pub/sub connection, and
//! is woken when the holder releases (the release hands it the lock), when
//! the holder's lease ends, or when its own acquire timeout ends. These tests
//! check the wake-ups (across Lockers, threads and processes), how few lock
//! scripts a waiter runs while it sleeps, FIFO order, one pub/sub connection
//! per Locker, and that lost messages, cancelled or crashed waiters, a Redis
//! restart and a timeout racing a hand-off neither stall the queue nor leave
//! a lock or a key behind; and that a subscriber link that goes silent (a
//! proxy stops passing its traffic, the socket stays open) neither keeps a
//! handed-over waiter waiting nor holds waiters past their acquire time, and
//! is replaced.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lockattr::{LockError, LockGuard, Locker};
use support::asserts::assert_timeout;
use support::lockers::locker;
use support::proxy::Proxy;
use support::takes::{try_take, try_take_blocking};
use support::waiters::{queue_tokens, spawn_waiter};
use support::wakeups::{
    WaiterTask, behind_a_proxy, connection, fence_value, finish_within, hold, hold_blocking,
    keys_but_fences, release_and_join, release_and_join_blocking, set_acl_user, thread_waiter,
    try_within, try_within_blocking,
};
use support::{RedisServer, child_test, eventually, keys, lock_key, wait_child};

/// A lease long enough that expiry never rescues a waiter in these tests.
const LONG: Duration = Duration::from_secs(30);
/// An acquire timeout long enough that only a wake-up ends the wait.
const PATIENT: Duration = Duration::from_secs(20);

/// Tells `child_waiter` it runs as a child, and where Redis is.
const CHILD_URL: &str = "LOCKATTR_WAKEUP_CHILD_URL";
/// The lock the child waits for.
const CHILD_NAME: &str = "LOCKATTR_WAKEUP_CHILD_NAME";
/// The child's lease, in milliseconds.
const CHILD_EXPIRE_MS: &str = "LOCKATTR_WAKEUP_CHILD_EXPIRE_MS";
/// What the child prints when it got the lock, followed by the Unix time in ms.
const ACQUIRED: &str = "LOCKATTR_CHILD_ACQUIRED";

/// Lock scripts that ran to completion since the server started: EVAL and
/// EVALSHA (and their `_RO` and FCALL forms), an EVALSHA answered NOSCRIPT
/// (then loaded and sent again) counted once.
fn script_runs(server: &RedisServer) -> u64 {
    server
        .completed_calls()
        .into_iter()
        .filter(|(name, _)| {
            matches!(
                name.as_str(),
                "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro"
            )
        })
        .map(|(_, runs)| runs)
        .sum()
}

/// What a waiter woken by a release shows: it returned within a second of
/// the release, with a larger fencing token than the holder's, and at most
/// 6 lock scripts ran during the wait (one is the holder's release): it did
/// not poll.
fn assert_woken(after_release: Duration, runs: u64, token: u64, holders_token: u64) {
    assert!(
        after_release < Duration::from_secs(1),
        "the waiter returned {after_release:?} after the release"
    );
    assert!(token > holders_token);
    assert!(
        runs <= 6,
        "{runs} lock scripts ran during the wait: the waiter polls"
    );
}

/// The lock's keys other than its fencing counter that exist now.
fn lock_state_keys(server: &RedisServer, name: &str) -> Vec<String> {
    [
        lock_key(name),
        keys::lock(name).queue,
        keys::lock(name).waiters,
    ]
    .into_iter()
    .filter(|k| server.exists(k))
    .collect()
}

fn unix_millis() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis()
}

/// [`eventually`] for async tests: polls `cond` every 5 ms for at most `within`.
async fn until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() >= within {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits (polling, for at most `within`) until `n` tokens are queued for
/// the lock `name`; true when they were.
async fn queued_within(server: &RedisServer, name: &str, n: usize, within: Duration) -> bool {
    until(within, || {
        queue_tokens(server, &keys::lock(name).queue).len() == n
    })
    .await
}

/// Waits until `subscribers` pub/sub connections are open (one per waiting
/// Locker), then 300 ms more: the waiters have subscribed and asked once
/// more since, so they sleep on the lease they were last told.
async fn settle(server: &RedisServer, subscribers: usize) {
    assert!(
        until(Duration::from_secs(5), || server.pubsub_clients()
            == subscribers)
        .await,
        "{} pub/sub connections, expected {subscribers}",
        server.pubsub_clients()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// Sleeps the calling thread until `at` (sub-millisecond precision).
fn sleep_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

// ---- 1. Wake-up on release, across Lockers -------------------------------

/// A waiter on another Locker (another connection) is woken by the release:
/// it returns within 1 s of it, having run at most 5 lock scripts in a wait
/// of about a second (a polling waiter runs a hundred or more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_wakes_a_waiter_of_another_locker() {
    let server = RedisServer::start();
    let (holders, waiters) = (locker(&server), locker(&server));
    let holder = hold(&holders, "wake", LONG).await;
    let first = holder.fencing_token();
    let before = script_runs(&server);
    let waiter = spawn_waiter(&waiters, "wake", LONG, PATIENT);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    let (outcome, after_release) = release_and_join(holder, waiter).await;
    let (guard, runs) = (outcome.unwrap(), script_runs(&server) - before);
    assert_woken(after_release, runs, guard.fencing_token(), first);
    guard.release().await.unwrap();
}

/// The same for `acquire_blocking` in a plain thread, with a blocking holder.
#[test]
fn release_wakes_a_blocking_waiter_of_another_locker() {
    let server = RedisServer::start();
    let (holders, waiters) = (locker(&server), locker(&server));
    let holder = hold_blocking(&holders, "wake b", LONG);
    let first = holder.fencing_token();
    let before = script_runs(&server);
    let waiter = thread_waiter(&waiters, "wake b", LONG, PATIENT);
    std::thread::sleep(Duration::from_secs(1));
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    let (outcome, after_release) = release_and_join_blocking(holder, waiter);
    let (guard, runs) = (outcome.unwrap(), script_runs(&server) - before);
    assert_woken(after_release, runs, guard.fencing_token(), first);
    guard.release_blocking().unwrap();
}

// ---- 2. Wake-up on release, across processes -----------------------------

/// The waiter of the process tests; does nothing unless started by one. Sets
/// `ready:<name>` just before it starts waiting, then prints [`ACQUIRED`]
/// and the Unix time in ms when it got the lock.
#[test]
fn child_waiter() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let name = std::env::var(CHILD_NAME).expect("lock name");
    let expire_ms: u64 = std::env::var(CHILD_EXPIRE_MS)
        .expect("lease")
        .parse()
        .expect("lease in ms");
    let locker = Locker::new(&url).unwrap();
    let mut client = connection(&url);
    let _: () = redis::cmd("SET")
        .arg(format!("ready:{name}"))
        .arg(std::process::id())
        .query(&mut client)
        .unwrap();
    let guard =
        try_take_blocking(&locker, &name, Duration::from_millis(expire_ms), PATIENT).unwrap();
    println!("{ACQUIRED} {}", unix_millis());
    guard.release_blocking().unwrap();
}

/// A waiter in another OS process is woken by the release: it gets the
/// lock within 1 s of it (clock: the system time, shared by both processes),
/// and the whole wait of about a second costs at most 5 lock scripts of it.
#[test]
fn release_wakes_a_waiter_in_another_process() {
    let server = RedisServer::start();
    // The child's `ready:` flag, without a TTL (see support::audit).
    server.allow_untimed("ready:*");
    let url = server.url();
    let holder = hold_blocking(&locker(&server), "wake p", LONG);
    let before = script_runs(&server);
    let child = child_test(
        "child_waiter",
        &[
            (CHILD_URL, url.as_str()),
            (CHILD_NAME, "wake p"),
            (CHILD_EXPIRE_MS, "30000"),
        ],
    )
    .spawn()
    .expect("spawn child test process");
    assert!(
        eventually(Duration::from_secs(20), || server.exists("ready:wake p")).is_some(),
        "the child never started waiting"
    );
    std::thread::sleep(Duration::from_secs(1));
    let released_ms = unix_millis();
    holder.release_blocking().unwrap();
    let output = wait_child(child, Duration::from_secs(30));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "child failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    let acquired_ms: u128 = stdout
        .lines()
        .find_map(|l| l.split_once(ACQUIRED).map(|(_, ms)| ms))
        .unwrap_or_else(|| panic!("the child did not wait\nstdout:\n{stdout}\nstderr:\n{stderr}"))
        .trim()
        .parse()
        .unwrap();
    let runs = script_runs(&server) - before;
    assert!(
        acquired_ms >= released_ms,
        "the child got the lock {} ms before the release",
        released_ms - acquired_ms
    );
    assert!(
        acquired_ms - released_ms < 1000,
        "the child got the lock {} ms after the release",
        acquired_ms - released_ms
    );
    // The holder's release, the child's own release, at most 5 while waiting.
    assert!(
        runs <= 7,
        "{runs} lock scripts ran during the wait: the waiter polls"
    );
}

// ---- 3. Wake-up at the holder's expiry -----------------------------------

/// Checks a waiter that found the lock held until about `expires_at`: it got
/// it no earlier than that (the key cannot vanish sooner; 20 ms for clock
/// granularity) and within 1 s after, with a few lock scripts.
fn assert_taken_at_expiry(took: Instant, expires_at: Instant, runs: u64) {
    let early = Duration::from_millis(20);
    assert!(
        took + early >= expires_at,
        "took a lock {:?} before its holder's lease ended",
        expires_at - took
    );
    let late = took.saturating_duration_since(expires_at);
    assert!(
        late < Duration::from_secs(1),
        "took an expired lock {late:?} after its lease ended"
    );
    assert!(
        runs <= 5,
        "{runs} lock scripts ran while waiting for the lease to end: the waiter polls"
    );
}

/// A lock whose holder vanished (written with a raw `SET .. PX 600`, no
/// Locker behind it) is taken when its lease ends, without polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_takes_a_vanished_holders_lock_at_expiry() {
    let server = RedisServer::start();
    let waiters = locker(&server);
    let set_at = Instant::now();
    let _: () = redis::cmd("SET")
        .arg(lock_key("gone"))
        .arg("0123456789abcdef0123456789abcdef")
        .arg("PX")
        .arg(600)
        .query(&mut server.client())
        .unwrap();
    let before = script_runs(&server);
    let guard = try_take(&waiters, "gone", LONG, PATIENT).await.unwrap();
    let took = Instant::now();
    let runs = script_runs(&server) - before;
    assert_taken_at_expiry(took, set_at + Duration::from_millis(600), runs);
    guard.release().await.unwrap();
    assert!(lock_state_keys(&server, "gone").is_empty());
}

/// The same for a holder on another Locker that forgot its guard
/// (`mem::forget`: never released) with a 600 ms lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_takes_a_forgotten_guards_lock_at_expiry() {
    let server = RedisServer::start();
    let (holders, waiters) = (locker(&server), locker(&server));
    let acquired_from = Instant::now();
    let holder = hold(&holders, "forgotten", Duration::from_millis(600)).await;
    let first = holder.fencing_token();
    std::mem::forget(holder);
    let before = script_runs(&server);
    let guard = try_take(&waiters, "forgotten", LONG, PATIENT)
        .await
        .unwrap();
    let took = Instant::now();
    let runs = script_runs(&server) - before;
    assert_taken_at_expiry(took, acquired_from + Duration::from_millis(600), runs);
    assert!(guard.fencing_token() > first);
    guard.release().await.unwrap();
}

/// A waiter queued behind another one takes the lock when that one's lease
/// ends, if that one got the lock handed over and then vanished with it
/// (its guard forgotten, lease 1 s): the second waiter's lease timer must
/// follow the lock's new holder, not the old holder's 30 s lease. It gets
/// the lock within 1 s + 1.5 s of slack after the first release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_behind_a_vanished_new_holder_takes_the_lock_at_its_expiry() {
    let server = RedisServer::start();
    let (holders, a_locker, b_locker) = (locker(&server), locker(&server), locker(&server));
    let holder = hold(&holders, "relay", LONG).await;
    let a = spawn_waiter(&a_locker, "relay", Duration::from_secs(1), PATIENT);
    let three = Duration::from_secs(3);
    assert!(
        queued_within(&server, "relay", 1, three).await,
        "A never queued"
    );
    let b = spawn_waiter(&b_locker, "relay", LONG, PATIENT);
    assert!(
        queued_within(&server, "relay", 2, three).await,
        "B never queued"
    );
    settle(&server, 2).await;
    let released_at = Instant::now();
    holder.release().await.unwrap();
    let (outcome, _) = a.await.unwrap();
    let a_guard = outcome.unwrap();
    let a_fence = a_guard.fencing_token();
    // A vanishes while holding the lock: never released, its 1 s lease frees it.
    std::mem::forget(a_guard);
    let (outcome, returned_at) = b.await.unwrap();
    let b_guard = outcome.unwrap();
    let late = returned_at.duration_since(released_at);
    assert!(
        late < Duration::from_millis(2_500),
        "B got the lock {late:?} after the release (A's lease is 1 s)"
    );
    assert!(b_guard.fencing_token() > a_fence);
    b_guard.release().await.unwrap();
}

// ---- 4. The acquire timeout ----------------------------------------------

/// Checks a waiter for the held lock `name` whose acquire time `wait` ran
/// out: a Timeout, after `wait` and within 1 s, and nothing of it left in
/// the queue or among the waiters.
fn assert_gave_up(
    server: &RedisServer,
    name: &str,
    outcome: Result<LockGuard, LockError>,
    wait: Duration,
    elapsed: Duration,
) {
    assert_timeout(&outcome.expect_err("a timeout"), name, wait);
    assert!(elapsed >= wait, "gave up after {elapsed:?}");
    assert!(
        elapsed < Duration::from_secs(1),
        "gave up after {elapsed:?}"
    );
    assert!(!server.exists(&keys::lock(name).queue), "left in the queue");
    assert!(
        !server.exists(&keys::lock(name).waiters),
        "left among the waiters"
    );
}

/// Checks an attempt with an acquire time of zero at the held lock `name`:
/// a Timeout within 200 ms, one lock script since `before`, never queued.
fn assert_one_attempt(
    server: &RedisServer,
    name: &str,
    outcome: Result<LockGuard, LockError>,
    elapsed: Duration,
    before: u64,
) {
    assert_timeout(&outcome.expect_err("a timeout"), name, Duration::ZERO);
    assert!(elapsed < Duration::from_millis(200), "took {elapsed:?}");
    assert_eq!(script_runs(server) - before, 1, "one attempt");
    assert!(!server.exists(&keys::lock(name).queue), "queued");
    assert!(
        !server.exists(&keys::lock(name).waiters),
        "registered as a waiter"
    );
}

/// A waiter whose acquire timeout (500 ms) ends while the lock is held gives
/// up after it, not before and not much later (< 1 s), and is out of the
/// queue when it returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_timeout_ends_the_wait() {
    let server = RedisServer::start();
    let (holders, waiters) = (locker(&server), locker(&server));
    let holder = hold(&holders, "busy", LONG).await;
    let wait = Duration::from_millis(500);
    let start = Instant::now();
    let outcome = try_take(&waiters, "busy", LONG, wait).await;
    let elapsed = start.elapsed();
    assert_gave_up(&server, "busy", outcome, wait, elapsed);
    holder.release().await.unwrap();
    assert!(lock_state_keys(&server, "busy").is_empty());
}

/// The same through `acquire_blocking`.
#[test]
fn acquire_timeout_ends_the_blocking_wait() {
    let server = RedisServer::start();
    let (holders, waiters) = (locker(&server), locker(&server));
    let holder = hold_blocking(&holders, "busy b", LONG);
    let wait = Duration::from_millis(500);
    let start = Instant::now();
    let outcome = try_take_blocking(&waiters, "busy b", LONG, wait);
    let elapsed = start.elapsed();
    assert_gave_up(&server, "busy b", outcome, wait, elapsed);
    holder.release_blocking().unwrap();
    assert!(lock_state_keys(&server, "busy b").is_empty());
}

/// An acquire timeout of zero runs exactly one lock script, returns Timeout
/// at once (< 200 ms), and never queues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_acquire_timeout_makes_one_attempt_and_never_queues() {
    let server = RedisServer::start();
    let (holders, waiters) = (locker(&server), locker(&server));
    let holder = hold(&holders, "once", LONG).await;
    // Connect first, so the attempts below are timed alone.
    waiters.ping().await.unwrap();

    let before = script_runs(&server);
    let start = Instant::now();
    let outcome = try_within(&waiters, "once", Duration::ZERO).await;
    let elapsed = start.elapsed();
    assert_one_attempt(&server, "once", outcome, elapsed, before);

    let blocking = waiters.clone();
    let before = script_runs(&server);
    let start = Instant::now();
    let outcome =
        tokio::task::spawn_blocking(move || try_within_blocking(&blocking, "once", Duration::ZERO))
            .await
            .unwrap();
    let elapsed = start.elapsed();
    assert_one_attempt(&server, "once", outcome, elapsed, before);

    holder.release().await.unwrap();
    // And a free lock is taken with a zero timeout.
    let guard = try_within(&waiters, "once", Duration::ZERO).await.unwrap();
    guard.release().await.unwrap();
}

// ---- 5. A release racing a new waiter ------------------------------------

/// No wake-up is lost when the release races a waiter that is just starting:
/// 25 rounds, the holder releases 0–2 ms (a sweep) after the waiter starts,
/// the lease is 30 s so expiry cannot rescue it; every waiter gets the lock
/// within 2 s. The loop's side of this race (a hand-over before the waiter
/// listens, during its attempt, while it sleeps) is checked in every order
/// by the explorer (`wait::tests`, "no lost wake-up"); these rounds keep
/// what only a server shows: the subscription's timing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_racing_a_new_waiter_loses_no_wake_up() {
    let server = RedisServer::start();
    let (holders, waiters) = (locker(&server), locker(&server));
    for round in 0..25_u64 {
        let holder = hold(&holders, "race", LONG).await;
        let delay = Duration::from_micros((round * 293) % 2_001);
        let start = Instant::now();
        let releaser = std::thread::spawn(move || {
            sleep_until(start + delay);
            holder.release_blocking()
        });
        let outcome = try_take(&waiters, "race", LONG, Duration::from_secs(5)).await;
        let took = start.elapsed();
        releaser.join().unwrap().unwrap();
        let guard =
            outcome.unwrap_or_else(|e| panic!("round {round} (release after {delay:?}): {e}"));
        assert!(
            took < Duration::from_secs(2),
            "round {round} (release after {delay:?}): the waiter got the lock after {took:?}"
        );
        guard.release().await.unwrap();
    }
    assert!(
        eventually(Duration::from_secs(2), || lock_state_keys(&server, "race")
            .is_empty())
        .is_some(),
        "left behind: {:?}",
        lock_state_keys(&server, "race")
    );
}

// ---- 6. FIFO --------------------------------------------------------------

/// Waiters get the lock in the order they started waiting: five waiters on
/// five Lockers, started 100 ms apart (each one queued before the next
/// starts), record their turn and hold the lock for 10 ms. While they wait,
/// the queue and the waiters' hash hold all five and carry a TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_get_the_lock_in_arrival_order() {
    let server = RedisServer::start();
    let holder = hold(&locker(&server), "fifo", LONG).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    let mut queued_in_time = Vec::new();
    for i in 0..5_usize {
        let waiters = locker(&server);
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let guard = try_take(&waiters, "fifo", LONG, PATIENT).await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(10)).await;
            guard.release().await.unwrap();
        }));
        let start = Instant::now();
        queued_in_time.push(queued_within(&server, "fifo", i + 1, Duration::from_secs(2)).await);
        tokio::time::sleep(Duration::from_millis(100).saturating_sub(start.elapsed())).await;
    }
    let queue = queue_tokens(&server, &keys::lock("fifo").queue);
    let waiters_ttl = server.pttl(&keys::lock("fifo").waiters);
    let queue_ttl = server.pttl(&keys::lock("fifo").queue);
    let registered: usize = redis::cmd("HLEN")
        .arg(keys::lock("fifo").waiters)
        .query(&mut server.client())
        .unwrap();
    holder.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    assert_eq!(queued_in_time, vec![true; 5], "each waiter queued in time");
    assert_eq!(queue.len(), 5, "{queue:?}");
    assert_eq!(
        registered,
        5,
        "one entry per waiter in {}",
        keys::lock("fifo").waiters
    );
    assert!(queue_ttl > 0, "the queue has no TTL: {queue_ttl}");
    assert!(
        waiters_ttl > 0,
        "the waiters' hash has no TTL: {waiters_ttl}"
    );
    assert!(
        eventually(Duration::from_secs(2), || lock_state_keys(&server, "fifo")
            .is_empty())
        .is_some(),
        "left behind: {:?}",
        lock_state_keys(&server, "fifo")
    );
}

// ---- 7. One pub/sub connection per Locker --------------------------------

/// Starts one waiter per name through `locker`, waits until each is queued
/// (or 5 s), and returns the tasks.
async fn wait_on_each(server: &RedisServer, locker: &Locker, names: &[String]) -> Vec<WaiterTask> {
    let tasks: Vec<_> = names
        .iter()
        .map(|name| spawn_waiter(locker, name, LONG, PATIENT))
        .collect();
    until(Duration::from_secs(5), || {
        server.keys("lockattr:*:queue").len() == names.len()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    tasks
}

/// 50 tasks waiting on 50 different held names through one Locker share one
/// pub/sub connection (`CLIENT LIST TYPE pubsub`: exactly one), and all of
/// them are woken when the locks are released; a second round through the
/// same Locker works the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_pubsub_connection_serves_all_waiters_of_a_locker() {
    let server = RedisServer::start();
    // The holders' Locker never waits, so the only subscriptions are the
    // waiters'. (Tasks of the holders' own Locker would wait in their
    // process, not in Redis: see `local_queue`.)
    let (holding, locker) = (locker(&server), locker(&server));
    let names: Vec<String> = (0..50).map(|i| format!("many:{i}")).collect();
    for round in 0..2 {
        let mut holders = Vec::new();
        for name in &names {
            holders.push(hold(&holding, name, LONG).await);
        }
        let tasks = wait_on_each(&server, &locker, &names).await;
        assert_eq!(
            server.pubsub_clients(),
            1,
            "round {round}: pub/sub connections with 50 waiters on one Locker"
        );
        for holder in holders.drain(..) {
            holder.release().await.unwrap();
        }
        let released_at = Instant::now();
        for task in tasks {
            let (outcome, returned_at) = task.await.unwrap();
            let late = returned_at.duration_since(released_at);
            assert!(
                late < Duration::from_secs(3),
                "round {round}: a waiter got its lock {late:?} after the releases"
            );
            outcome.unwrap().release().await.unwrap();
        }
    }
    assert!(server.pubsub_clients() <= 1);
    let left = keys_but_fences(&server);
    assert!(left.is_empty(), "left behind: {left:?}");
}

// ---- 8. The subscriber connection killed ---------------------------------

/// A waiter whose pub/sub connection is killed (`CLIENT KILL TYPE pubsub`)
/// still gets the lock within 2 s of the release (lease 30 s, so not by
/// expiry): released at once after the kill (the hand-off message is lost),
/// and 300 ms after it (after a reconnect).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_survives_its_subscriber_connection_being_killed() {
    let server = RedisServer::start();
    let (holders, waiters) = (locker(&server), locker(&server));
    for (i, pause) in [Duration::ZERO, Duration::from_millis(300)]
        .into_iter()
        .enumerate()
    {
        let name = format!("killed:{i}");
        let holder = hold(&holders, &name, LONG).await;
        let waiter = spawn_waiter(&waiters, &name, LONG, PATIENT);
        assert!(
            until(Duration::from_secs(3), || queue_tokens(
                &server,
                &keys::lock(&name).queue
            )
            .len()
                == 1
                && server.pubsub_clients() == 1)
            .await,
            "the waiter never queued and subscribed (queue {:?}, {} pub/sub connections)",
            queue_tokens(&server, &keys::lock(&name).queue),
            server.pubsub_clients()
        );
        let killed: u64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query(&mut server.client())
            .unwrap();
        assert_eq!(killed, 1);
        tokio::time::sleep(pause).await;
        let (outcome, late) = release_and_join(holder, waiter).await;
        let guard = outcome.unwrap_or_else(|e| panic!("pause {pause:?}: {e}"));
        assert!(
            late < Duration::from_secs(2),
            "pause {pause:?}: the waiter got the lock {late:?} after the release"
        );
        guard.release().await.unwrap();
        assert!(lock_state_keys(&server, &name).is_empty());
    }
}

// ---- 9. A cancelled waiter ------------------------------------------------

/// A waiter whose future is dropped (its task aborted) while first in the
/// queue does not hold up the next one: B, queued behind A, gets the lock
/// within 1 s of the release and holds it under its own token, whether the
/// release comes at once after the abort (racing A's exit from the queue)
/// or 200 ms later; nothing of A is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waiter_does_not_hold_up_the_queue() {
    let server = RedisServer::start();
    let (holders, a_locker, b_locker) = (locker(&server), locker(&server), locker(&server));
    for (i, pause) in [Duration::ZERO, Duration::from_millis(200)]
        .into_iter()
        .enumerate()
    {
        let name = format!("cancel:{i}");
        let holder = hold(&holders, &name, LONG).await;
        let a = spawn_waiter(&a_locker, &name, LONG, PATIENT);
        let three = Duration::from_secs(3);
        assert!(
            queued_within(&server, &name, 1, three).await,
            "A never queued"
        );
        let b = spawn_waiter(&b_locker, &name, LONG, PATIENT);
        assert!(
            queued_within(&server, &name, 2, three).await,
            "B never queued"
        );
        let tokens = queue_tokens(&server, &keys::lock(&name).queue);
        let (a_token, b_token) = (tokens[0].clone(), tokens[1].clone());
        a.abort();
        assert!(a.await.unwrap_err().is_cancelled());
        tokio::time::sleep(pause).await;
        let (outcome, late) = release_and_join(holder, b).await;
        let guard = outcome.unwrap_or_else(|e| panic!("pause {pause:?}: {e}"));
        assert!(
            late < Duration::from_secs(1),
            "pause {pause:?}: B got the lock {late:?} after the release"
        );
        assert_eq!(
            server.owner(&lock_key(&name)).as_deref(),
            Some(b_token.as_str())
        );
        guard.release().await.unwrap();
        assert!(
            eventually(Duration::from_secs(1), || lock_state_keys(&server, &name)
                .is_empty())
            .is_some(),
            "pause {pause:?}: left behind: {:?} (lock held by {:?}; A was {a_token})",
            lock_state_keys(&server, &name),
            server.get(&lock_key(&name))
        );
    }
}

// ---- 10. A crashed waiter --------------------------------------------------

/// A waiter that crashed (a child process, SIGKILLed while first in the
/// queue, its lease 1 s) costs the waiter behind it at most that lease: B
/// gets the lock within 1 s + 1.5 s of slack after the holder's release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_waiter_costs_at_most_its_own_lease() {
    let server = RedisServer::start();
    // The child's `ready:` flag, without a TTL (see support::audit).
    server.allow_untimed("ready:*");
    let url = server.url();
    let (holders, b_locker) = (locker(&server), locker(&server));
    let holder = hold(&holders, "crash", LONG).await;
    let mut child = child_test(
        "child_waiter",
        &[
            (CHILD_URL, url.as_str()),
            (CHILD_NAME, "crash"),
            (CHILD_EXPIRE_MS, "1000"),
        ],
    )
    .spawn()
    .expect("spawn child test process");
    let child_queued = queued_within(&server, "crash", 1, Duration::from_secs(20)).await;
    if !child_queued {
        let _ = child.kill();
        let output = child.wait_with_output().unwrap();
        panic!(
            "the child never queued\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let b = spawn_waiter(&b_locker, "crash", LONG, PATIENT);
    assert!(
        queued_within(&server, "crash", 2, Duration::from_secs(3)).await,
        "B never queued"
    );
    let b_token = queue_tokens(&server, &keys::lock("crash").queue)[1].clone();
    child.kill().unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        !stdout.contains(ACQUIRED),
        "the child got the lock before it was killed:\n{stdout}"
    );
    settle(&server, 1).await;
    let (outcome, late) = release_and_join(holder, b).await;
    let guard = outcome.unwrap();
    assert!(
        late < Duration::from_millis(2_500),
        "B got the lock {late:?} after the release (the crashed waiter's lease is 1 s)"
    );
    assert_eq!(
        server.owner(&lock_key("crash")).as_deref(),
        Some(b_token.as_str())
    );
    guard.release().await.unwrap();
}

// ---- 11. Redis restarted while waiting -------------------------------------

/// Checks the end of a wait across a restart: within 5 s of the server being
/// back, either the lock (it is free on the empty server) or an error that
/// is not a Timeout.
fn assert_restart_outcome(
    outcome: Result<LockGuard, LockError>,
    late: Duration,
) -> Option<LockGuard> {
    assert!(
        late < Duration::from_secs(5),
        "the waiter returned {late:?} after the restart ({outcome:?})"
    );
    match outcome {
        Ok(guard) => Some(guard),
        Err(e) => {
            assert!(!e.is_timeout(), "{e}");
            eprintln!("the wait ended with: {e}");
            None
        }
    }
}

/// A waiter whose Redis restarts (lock and queue gone) gets the lock or a
/// clear error within a few seconds of the restart; it never hangs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restart_while_waiting_ends_the_wait() {
    let mut server = RedisServer::start();
    let (holders, waiters) = (locker(&server), locker(&server));
    let holder = hold(&holders, "restart", LONG).await;
    let waiter = spawn_waiter(&waiters, "restart", LONG, PATIENT);
    queued_within(&server, "restart", 1, Duration::from_secs(3)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished());
    server.restart();
    let back = Instant::now();
    let (outcome, returned_at) =
        finish_within(waiter, Duration::from_secs(30), "the waiter hangs").await;
    if let Some(guard) = assert_restart_outcome(outcome, returned_at.duration_since(back)) {
        assert!(server.exists(&lock_key("restart")));
        guard.release().await.unwrap();
    }
    drop(holder);
}

/// The same through `acquire_blocking`.
#[test]
fn redis_restart_while_waiting_ends_the_blocking_wait() {
    let mut server = RedisServer::start();
    let (holders, waiters) = (locker(&server), locker(&server));
    let holder = hold_blocking(&holders, "restart b", LONG);
    let waiter = thread_waiter(&waiters, "restart b", LONG, PATIENT);
    eventually(Duration::from_secs(3), || {
        queue_tokens(&server, &keys::lock("restart b").queue).len() == 1
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiter.is_finished());
    server.restart();
    let back = Instant::now();
    assert!(
        eventually(Duration::from_secs(30), || waiter.is_finished()).is_some(),
        "the waiter hangs"
    );
    let (outcome, returned_at) = waiter.join().unwrap();
    if let Some(guard) = assert_restart_outcome(outcome, returned_at.duration_since(back)) {
        assert!(server.exists(&lock_key("restart b")));
        guard.release_blocking().unwrap();
    }
    drop(holder);
}

// ---- 12. The acquire timeout racing a hand-off ----------------------------

/// A waiter whose acquire timeout (300 ms) ends just when the release hands
/// it the lock (11 rounds, the release swept from 25 ms before to 25 ms
/// after the deadline in steps of 5 ms): either it returns the lock, and the
/// lock is really its own (latest fencing token, release succeeds), or it
/// returns Timeout and then nobody holds the lock and its queue is gone
/// within 1 s. Every order of that race in the loop is explored by
/// `wait::tests` (the first holder's release between any two steps of the
/// waiter, its deadline included); these rounds check it on a real server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_timeout_ending_at_hand_off_leaves_no_lock_behind() {
    let server = RedisServer::start();
    let (holders, waiters) = (locker(&server), locker(&server));
    let wait = Duration::from_millis(300);
    let (mut got, mut timed_out) = (0, 0);
    for round in 0..11_u64 {
        let holder = hold(&holders, "deadline", LONG).await;
        let start = Instant::now();
        let release_at =
            start + wait - Duration::from_millis(25) + Duration::from_millis(5 * round);
        let releaser = std::thread::spawn(move || {
            sleep_until(release_at);
            holder.release_blocking()
        });
        let outcome = try_take(&waiters, "deadline", LONG, wait).await;
        releaser.join().unwrap().unwrap();
        match outcome {
            Ok(guard) => {
                got += 1;
                let fence = fence_value(&server, "deadline");
                assert_eq!(guard.fencing_token(), fence, "round {round}");
                assert!(server.exists(&lock_key("deadline")), "round {round}");
                guard
                    .release()
                    .await
                    .unwrap_or_else(|e| panic!("round {round}: {e}"));
            }
            Err(LockError::Timeout { .. }) => timed_out += 1,
            Err(e) => panic!("round {round}: {e}"),
        }
        assert!(
            until(Duration::from_secs(1), || lock_state_keys(
                &server, "deadline"
            )
            .is_empty())
            .await,
            "round {round}: left behind: {:?}",
            lock_state_keys(&server, "deadline")
        );
    }
    eprintln!("{got} waiters got the lock, {timed_out} timed out");
}

// ---- 13. No keys left behind ----------------------------------------------

/// After a contended run (4 Lockers × 50 acquisitions of one name, async and
/// blocking), and after waiters that timed out or were cancelled, the only
/// key left is the fencing counter: no lock, queue or waiters' hash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_run_leaves_only_fence_keys() {
    let server = RedisServer::start();
    let mut tasks = Vec::new();
    for worker in 0..4 {
        let locker = locker(&server);
        if worker % 2 == 0 {
            tasks.push(tokio::spawn(async move {
                for _ in 0..50 {
                    let guard = try_take(&locker, "leak", LONG, PATIENT).await.unwrap();
                    tokio::task::yield_now().await;
                    guard.release().await.unwrap();
                }
            }));
        } else {
            tasks.push(tokio::task::spawn_blocking(move || {
                for _ in 0..50 {
                    let guard = try_take_blocking(&locker, "leak", LONG, PATIENT).unwrap();
                    guard.release_blocking().unwrap();
                }
            }));
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let fence_only = || server.keys("lockattr:*") == vec![keys::lock("leak").fence];
    assert!(
        eventually(Duration::from_secs(2), fence_only).is_some(),
        "after the contended run: {:?}",
        server.keys("lockattr:*")
    );

    // Waiters that time out, and waiters whose callers go away.
    let holders = locker(&server);
    let holder = hold(&holders, "leak", LONG).await;
    let mut quitters = Vec::new();
    for i in 0..6_u64 {
        let locker = locker(&server);
        quitters.push(tokio::spawn(async move {
            let acquire = locker
                .lock("leak")
                .expire(LONG)
                .acquire_timeout(Duration::from_millis(100 + 50 * i))
                .acquire();
            if i % 2 == 0 {
                // Timed out by its own acquire timeout.
                assert!(acquire.await.unwrap_err().is_timeout());
            } else {
                // Its caller stops waiting first.
                let waited = tokio::time::timeout(Duration::from_millis(50 * i), acquire).await;
                assert!(waited.is_err(), "got a held lock");
            }
        }));
    }
    for task in quitters {
        task.await.unwrap();
    }
    holder.release().await.unwrap();
    assert!(
        eventually(Duration::from_secs(2), fence_only).is_some(),
        "after waiters gave up: {:?}",
        server.keys("lockattr:*")
    );
}

// ---- 14. A subscriber link that goes silent ---------------------------------

/// The SUBSCRIBE command as RESP sends its name (a bulk string of its own),
/// for the proxy to stall the subscriber link on: a script's source that
/// mentions the word, loaded on the command connection, does not match.
const SUBSCRIBE_COMMAND: &[u8] = b"$9\r\nSUBSCRIBE\r\n";

/// Subscribers (of any channel) of `name`'s release notices on `server`.
fn channel_subscribers(server: &RedisServer, name: &str) -> usize {
    let counts: Vec<(String, usize)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(keys::lock(name).channel)
        .query(&mut server.client())
        .expect("PUBSUB NUMSUB");
    counts.first().map_or(0, |(_, n)| *n)
}

/// Releases `holder` and waits (at most 25 s) for `waiter`: its outcome,
/// and how long after the release it returned.
async fn release_and_wait(
    holder: LockGuard,
    waiter: WaiterTask,
) -> (Result<LockGuard, LockError>, Duration) {
    let released_at = Instant::now();
    holder.release().await.unwrap();
    let (outcome, returned_at) =
        finish_within(waiter, Duration::from_secs(25), "the waiter hangs").await;
    (outcome, returned_at.duration_since(released_at))
}

/// A holder on `server` directly, and a waiter whose Locker reaches
/// `server` through a proxy (both its command and its subscriber
/// connection), waiting on `name` and subscribed to its channel.
async fn waiter_behind_a_proxy(server: &RedisServer, name: &str) -> (Proxy, LockGuard, WaiterTask) {
    let proxy = Proxy::start(server.port);
    let holder = hold(&locker(server), name, LONG).await;
    let waiters = Locker::new(proxy.url()).unwrap();
    let waiter = spawn_waiter(&waiters, name, LONG, PATIENT);
    assert!(
        until(Duration::from_secs(5), || queue_tokens(
            server,
            &keys::lock(name).queue
        )
        .len()
            == 1
            && channel_subscribers(server, name) == 1)
        .await,
        "the waiter never queued and subscribed"
    );
    // It heard the confirmation and asked Redis once more since.
    tokio::time::sleep(Duration::from_millis(300)).await;
    (proxy, holder, waiter)
}

/// A waiter (acquire time 20 s) whose subscriber link goes silent (the
/// socket stays open, nothing passes: `stall_matching(SUBSCRIBE_COMMAND)`) while
/// its command connection still works: the holder's release hands it the
/// lock in Redis, the message never arrives, and the waiter still has the
/// lock within about a second of the release (bound: 2.5 s), by asking
/// Redis. Before, it slept on until its acquire time or the holder's lease
/// ran out (20 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handed_over_waiter_learns_it_over_a_silent_subscriber_link() {
    let server = RedisServer::start();
    let (proxy, holder, waiter) = waiter_behind_a_proxy(&server, "silent").await;
    proxy.stall_matching(SUBSCRIBE_COMMAND);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (outcome, late) = release_and_wait(holder, waiter).await;
    let guard = outcome.unwrap();
    assert!(
        late < Duration::from_millis(2_500),
        "the waiter got the lock {late:?} after the release handed it over"
    );
    guard.release().await.unwrap();
}

/// A release that hands the lock to a waiter of its own Locker wakes that
/// waiter from the release's answer, not through the subscriber
/// connection: here no notice can arrive (every SUBSCRIBE is stalled), yet
/// the waiter returns with the lock at once, without asking Redis again.
/// Before, it learned of the hand-over only from its next once-a-second
/// check (about 900 ms later, one more lock script). The waiter waits in
/// its process (see `local_queue`), not in Redis's queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_of_the_releasing_locker_is_woken_by_the_release_itself() {
    let (server, proxy, shared) = behind_a_proxy();
    proxy.stall_matching(SUBSCRIBE_COMMAND);
    let holder = hold(&shared, "own", LONG).await;
    let waiter = spawn_waiter(&shared, "own", LONG, PATIENT);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "the waiter did not wait");
    assert!(
        queue_tokens(&server, &keys::lock("own").queue).is_empty(),
        "the waiter queued in Redis"
    );
    assert_eq!(
        channel_subscribers(&server, "own"),
        0,
        "the proxy let the SUBSCRIBE through"
    );
    let scripts_before = script_runs(&server);
    let (outcome, late) = release_and_wait(holder, waiter).await;
    let guard = outcome.unwrap();
    // The release, and nothing from the waiter.
    assert_eq!(script_runs(&server) - scripts_before, 1);
    assert!(
        late < Duration::from_millis(600),
        "the waiter got the lock {late:?} after its own Locker handed it over"
    );
    assert!(server.owner(&lock_key("own")).is_some());
    guard.release().await.unwrap();
}

/// Eight waiters with 2 s of acquire time each, on a Locker whose
/// SUBSCRIBE is never answered (the link is silent from the start), for a
/// lock that stays held: every one returns within its acquire time and a
/// bit (bound: 3.5 s after they started), none waits on another's
/// SUBSCRIBE. Before, their SUBSCRIBE timeouts ran one after another under
/// one lock: they returned after 2, 3, ..., 9 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_on_a_silent_subscriber_link_return_within_their_acquire_time() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port);
    proxy.stall_matching(SUBSCRIBE_COMMAND);
    let holder = hold(&locker(&server), "eight", LONG).await;
    let waiters = Locker::new(proxy.url()).unwrap();
    waiters.ping().await.unwrap();
    let wait = Duration::from_secs(2);
    let start = Instant::now();
    let tasks: Vec<_> = (0..8)
        .map(|_| spawn_waiter(&waiters, "eight", LONG, wait))
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        let (outcome, returned_at) =
            finish_within(task, Duration::from_secs(20), "a waiter hangs").await;
        let took = returned_at.duration_since(start);
        assert!(
            took < Duration::from_millis(3_500),
            "waiter {i} returned after {took:?} ({outcome:?})"
        );
        match outcome {
            Err(LockError::Timeout { .. }) => {}
            other => panic!("waiter {i}: expected Timeout, got {other:?}"),
        }
    }
    holder.release().await.unwrap();
}

/// A subscriber connection that goes silent is noticed by its health check
/// (a PING goes unanswered) and replaced: the proxy accepts a new
/// connection within a few seconds, though the waiter's lock stays held and
/// nothing else happens. Once the link passes traffic again, hand-overs
/// are messages again: the release hands the waiter the lock and the
/// waiter returns without asking Redis (the release is the only lock
/// script that ran meanwhile), within a second. Before, the silent
/// connection was kept forever and nothing was opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_subscriber_connection_is_replaced() {
    let server = RedisServer::start();
    let (proxy, holder, waiter) = waiter_behind_a_proxy(&server, "replaced").await;
    let accepted = proxy.accepted();
    proxy.stall_matching(SUBSCRIBE_COMMAND);
    assert!(
        until(Duration::from_secs(5), || proxy.accepted() > accepted).await,
        "no new connection within 5 s of the subscriber link going silent"
    );
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    proxy.resume();
    // Subscribed again (on the new connection or a later one), and the
    // waiter heard it and asked Redis once more.
    assert!(
        until(Duration::from_secs(5), || channel_subscribers(
            &server, "replaced"
        ) >= 1)
        .await,
        "never subscribed again after the link came back"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = script_runs(&server);
    let (outcome, late) = release_and_wait(holder, waiter).await;
    let runs = script_runs(&server) - before;
    let guard = outcome.unwrap();
    assert!(
        late < Duration::from_secs(1),
        "handed over {late:?} after the release"
    );
    assert_eq!(
        runs, 1,
        "lock scripts between the release and the waiter's return: the waiter \
         asked Redis instead of hearing the hand-over"
    );
    guard.release().await.unwrap();
}

/// A waiter whose Redis user may not SUBSCRIBE (an ACL) cannot hear
/// release notices; it checks the lock often instead and gets it within a
/// second of the release (lease 30 s, acquire time 20 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_that_may_not_subscribe_still_gets_the_lock_soon() {
    let server = RedisServer::start();
    let rules = ["on", ">secret", "~*", "&*", "+@all", "-subscribe"];
    set_acl_user(&server, "nosub", &rules);
    let holder = hold(&locker(&server), "acl", LONG).await;
    let waiters = Locker::new(format!("redis://nosub:secret@127.0.0.1:{}/", server.port)).unwrap();
    let waiter = spawn_waiter(&waiters, "acl", LONG, PATIENT);
    assert!(
        queued_within(&server, "acl", 1, Duration::from_secs(5)).await,
        "the waiter never queued"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    assert_eq!(channel_subscribers(&server, "acl"), 0);
    let (outcome, late) = release_and_wait(holder, waiter).await;
    let guard = outcome.unwrap();
    assert!(
        late < Duration::from_secs(1),
        "got the lock {late:?} after the release"
    );
    guard.release().await.unwrap();
}
