//! The read-write locks and the semaphores as their tests (and the tests of
//! the operator calls) spell them again and again: a request of any kind
//! taken with a lease or within a wait, a waiter on a task of its own and
//! when it got in, who is inside at once, and the asserts on what came
//! back. Each acquisition is the public builder chain it names, nothing
//! more: the test still writes the `Locker` call that makes the request.

use std::fmt::Debug;
use std::future::Future;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockattr::{LockBuilder, LockError, LockGuard, LockInfo, Locker};
use tokio::task::JoinHandle;

use super::children::{read_until, run_children};
use super::lockers::labelled;
use super::takes::{try_read, try_write};
use super::{RedisServer, child_test, wait_child};

/// A lease and a wait far longer than a test: 30 s.
pub const LONG: Duration = Duration::from_secs(30);

/// The read side of `name`, lease [`LONG`], waiting up to [`LONG`].
pub async fn read_long(locker: &Locker, name: &str) -> LockGuard {
    try_read(locker, name, LONG, LONG).await.unwrap()
}

/// The write side of `name`, lease [`LONG`], waiting up to [`LONG`].
pub async fn write_long(locker: &Locker, name: &str) -> LockGuard {
    try_write(locker, name, LONG, LONG).await.unwrap()
}

/// `request` (of any kind, lease as it is) waiting up to `wait`: the
/// outcome.
pub async fn within(request: LockBuilder<'_>, wait: Duration) -> Result<LockGuard, LockError> {
    request.acquire_timeout(wait).acquire().await
}

/// [`within`] for a sync caller.
pub fn within_blocking(request: LockBuilder<'_>, wait: Duration) -> Result<LockGuard, LockError> {
    request.acquire_timeout(wait).acquire_blocking()
}

/// [`within`], which must succeed.
pub async fn got_within(request: LockBuilder<'_>, wait: Duration) -> LockGuard {
    within(request, wait).await.unwrap()
}

/// `request`, which must be free now (no wait).
pub async fn free_now(request: LockBuilder<'_>) -> LockGuard {
    got_within(request, Duration::ZERO).await
}

/// `request` with a lease of `expire` (the default wait), which must
/// succeed.
pub async fn leased(request: LockBuilder<'_>, expire: Duration) -> LockGuard {
    request.expire(expire).acquire().await.unwrap()
}

/// [`leased`] for a sync caller.
pub fn leased_blocking(request: LockBuilder<'_>, expire: Duration) -> LockGuard {
    request.expire(expire).acquire_blocking().unwrap()
}

/// `request` with a lease of `expire` that it renews (the default wait),
/// which must succeed.
pub async fn renewing(request: LockBuilder<'_>, expire: Duration) -> LockGuard {
    request.expire(expire).renew(true).acquire().await.unwrap()
}

/// `request` with a lease of `expire`, held at least `hold` (the default
/// wait), which must succeed.
pub async fn held_at_least(
    request: LockBuilder<'_>,
    expire: Duration,
    hold: Duration,
) -> LockGuard {
    request
        .expire(expire)
        .hold_at_least(hold)
        .acquire()
        .await
        .unwrap()
}

/// Runs `acquire` on a task of its own, given a clone of `locker`.
pub fn spawn_on<T, F>(locker: &Locker, acquire: impl FnOnce(Locker) -> F) -> JoinHandle<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    tokio::spawn(acquire(locker.clone()))
}

/// Runs `acquire` on a task of its own, given a clone of `locker`: what it
/// got, and when it got it.
pub fn spawn_stamped<T, F>(
    locker: &Locker,
    acquire: impl FnOnce(Locker) -> F,
) -> JoinHandle<(Instant, T)>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let acquiring = acquire(locker.clone());
    tokio::spawn(async move {
        let got = acquiring.await;
        (Instant::now(), got)
    })
}

/// Waits up to `within` for `task`, which must end well: what it returned.
/// Panics with `what` when it did not end in time.
pub async fn joined<T>(task: JoinHandle<T>, within: Duration, what: &str) -> T {
    tokio::time::timeout(within, task)
        .await
        .expect(what)
        .unwrap()
}

/// Waits up to `within` for `task`, stamped by [`spawn_stamped`], which
/// must end well and [`assert_woken`] by the release at `released`: what
/// it got. Panics with `what` when it did not end in time.
pub async fn woken<T>(
    task: JoinHandle<(Instant, T)>,
    within: Duration,
    released: Instant,
    what: &str,
) -> T {
    let (at, got) = joined(task, within, what).await;
    assert_woken(at, released);
    got
}

/// Sleeps `pause`, then asserts that `task` is still waiting (has not
/// finished); `what` says what happened otherwise.
pub async fn assert_still_waiting<T>(task: &JoinHandle<T>, pause: Duration, what: &str) {
    tokio::time::sleep(pause).await;
    assert!(!task.is_finished(), "{what}");
}

/// Runs `task(t)` for each `t` in `0..count`, each on a task of its own,
/// then waits for them all, which must end well: what each returned, in
/// order.
pub async fn run_tasks<T, F>(count: usize, mut task: impl FnMut(usize) -> F) -> Vec<T>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let running: Vec<JoinHandle<T>> = (0..count).map(|t| tokio::spawn(task(t))).collect();
    let mut done = Vec::new();
    for each in running {
        done.push(each.await.unwrap());
    }
    done
}

/// Asserts that `at` came less than 800 ms after `released`: sooner than a
/// waiter's once-a-second recheck, so woken by the release itself.
pub fn assert_woken(at: Instant, released: Instant) {
    let woken = at.duration_since(released);
    assert!(woken < Duration::from_millis(800), "woken after {woken:?}");
}

/// Asserts that `outcome` is a [`LockError::Timeout`].
pub fn assert_timed_out<T: Debug>(outcome: &Result<T, LockError>) {
    assert!(
        matches!(outcome, Err(LockError::Timeout { .. })),
        "{outcome:?}"
    );
}

/// Asserts that `waited` is at least `least` and less than `most`.
pub fn assert_waited(waited: Duration, least: Duration, most: Duration) {
    assert!(waited >= least && waited < most, "{waited:?}");
}

/// Asserts that less than `limit` has passed since `since`.
pub fn assert_within(since: Instant, limit: Duration) {
    let took = since.elapsed();
    assert!(took < limit, "{took:?}");
}

/// Asserts that `request` gives up with a timeout once it waited `wait`,
/// and in less than `most`.
pub async fn assert_gives_up(request: LockBuilder<'_>, wait: Duration, most: Duration) {
    let asked = Instant::now();
    let outcome = within(request, wait).await;
    let waited = asked.elapsed();
    assert_timed_out(&outcome);
    assert_waited(waited, wait, most);
}

/// Asserts that `err` is a [`LockError::InvalidInput`] about `what`.
pub fn assert_invalid(err: &LockError, what: &str) {
    assert!(
        matches!(err, LockError::InvalidInput { what: w, .. } if *w == what),
        "{err:?}"
    );
}

/// Waits up to `within` for `guard`'s lost signal: the error it carries.
/// Panics with `what` when none came in time.
pub async fn lost_within(guard: &LockGuard, within: Duration, what: &str) -> LockError {
    tokio::time::timeout(within, guard.lost())
        .await
        .expect(what)
}

/// Deletes `key` on `server` (as an operator, or a crash, would): how many
/// keys went.
pub fn del(server: &RedisServer, key: &str) -> i64 {
    redis::cmd("DEL")
        .arg(key)
        .query(&mut server.client())
        .unwrap()
}

/// Asserts that every key of lockattr's left on `server` has an expiry.
pub fn assert_all_expire(server: &RedisServer) {
    for key in server.keys("lockattr:*") {
        assert!(server.pttl(&key) > 0, "{key} has no expiry");
    }
}

/// A Locker of the server at `url` whose fence counters (and records)
/// outlive a lease by 200 ms.
pub fn short_retention(url: &str) -> Locker {
    Locker::builder(url)
        .fence_retention(Duration::from_millis(200))
        .build()
        .unwrap()
}

/// A server of our own and a [`short_retention`] Locker of it.
pub fn setup_short_retention() -> (RedisServer, Locker) {
    let server = RedisServer::start();
    let locker = short_retention(&server.url());
    (server, locker)
}

/// Three servers of our own.
pub fn three_servers() -> Vec<RedisServer> {
    (0..3).map(|_| RedisServer::start()).collect()
}

/// [`three_servers`] and a Redlock of them.
pub fn redlock_of_three() -> (Vec<RedisServer>, Locker) {
    let servers = three_servers();
    let locker = Locker::redlock(servers.iter().map(RedisServer::url)).unwrap();
    (servers, locker)
}

/// Asserts that a Redlock refused a request of kind `what` with `err`,
/// saying so, and that none of `servers` holds any key.
pub fn assert_refused_by_redlock(err: &LockError, what: &str, servers: &[RedisServer]) {
    assert_invalid(err, what);
    assert!(err.to_string().contains("Redlock"), "{err}");
    assert!(servers.iter().all(|s| s.keys("*").is_empty()));
}

/// A server of our own and a Locker of it for each of `labels` (see
/// [`labelled`]), in that order.
pub fn labelled_lockers<const N: usize>(labels: [&str; N]) -> (RedisServer, [Locker; N]) {
    let server = RedisServer::start();
    let lockers = labels.map(|label| labelled(&server, label));
    (server, lockers)
}

/// Asserts that the owner token of the value at `key` on `server` (its
/// first line, 32 characters) shows nowhere in `shown`, what an operator
/// call returned.
pub fn assert_token_hidden(server: &RedisServer, key: &str, shown: &impl Debug) {
    let value = server.get(key).unwrap();
    let token = value.lines().next().unwrap();
    assert_eq!(token.len(), 32, "{value:?}");
    assert!(!format!("{shown:?}").contains(token));
}

/// Asks `ops` every 10 ms, for up to `limit`, until the held lock `name`
/// has `waiters` waiters: what it saw then.
pub async fn inspect_until_waiters(
    ops: &Locker,
    name: &str,
    waiters: usize,
    limit: Duration,
) -> LockInfo {
    let start = Instant::now();
    loop {
        let info = ops.inspect(name).await.unwrap().unwrap();
        if info.waiters == waiters {
            return info;
        }
        assert!(start.elapsed() < limit, "{info:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The number of keys matching `pattern` on each of `nodes`.
pub fn keys_per_node(nodes: &[RedisServer], pattern: &str) -> Vec<usize> {
    nodes.iter().map(|n| n.keys(pattern).len()).collect()
}

/// Who is inside a read-write lock, as its holders count themselves in and
/// out: whether a writer was ever in with anyone, or a reader with a
/// writer, and the most readers in at once. Clones count together.
#[derive(Clone, Default)]
pub struct RwCensus {
    readers: Arc<AtomicUsize>,
    writers: Arc<AtomicUsize>,
    most_readers: Arc<AtomicUsize>,
    broken: Arc<AtomicBool>,
}

impl RwCensus {
    /// A writer comes in: a breach if anyone is inside.
    pub fn writer_in(&self) {
        if self.writers.fetch_add(1, Ordering::SeqCst) != 0
            || self.readers.load(Ordering::SeqCst) != 0
        {
            self.broken.store(true, Ordering::SeqCst);
        }
    }

    /// A writer goes out.
    pub fn writer_out(&self) {
        self.writers.fetch_sub(1, Ordering::SeqCst);
    }

    /// A reader comes in: a breach if a writer is inside.
    pub fn reader_in(&self) {
        let now = self.readers.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_readers.fetch_max(now, Ordering::SeqCst);
        if self.writers.load(Ordering::SeqCst) != 0 {
            self.broken.store(true, Ordering::SeqCst);
        }
    }

    /// A reader goes out.
    pub fn reader_out(&self) {
        self.readers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether a writer was ever in with anyone, or a reader with a writer.
    pub fn broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst)
    }

    /// The most readers that were in at once.
    pub fn most_readers(&self) -> usize {
        self.most_readers.load(Ordering::SeqCst)
    }
}

/// How many holders of a semaphore are inside, as they count themselves
/// in and out, and the most that were in at once. Clones count together.
#[derive(Clone, Default)]
pub struct Census {
    inside: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl Census {
    /// A holder comes in.
    pub fn enter(&self) {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
    }

    /// A holder goes out.
    pub fn leave(&self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    /// The most holders that were in at once.
    pub fn most(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
}

/// For a child process: the variable that holds the lock server's URL.
pub const LOCK_URL: &str = "LOCKATTR_KINDS_LOCK_URL";
/// For a child process: the variable that holds the store server's URL.
pub const STORE_URL: &str = "LOCKATTR_KINDS_STORE_URL";
/// What a worker child prints (with its pid) when its loop is done.
pub const DONE: &str = "LOCKATTR_KINDS_CHILD_DONE";
/// What a holding child prints once it holds.
pub const HOLDING: &str = "LOCKATTR_KINDS_HOLDING";

/// In a worker child: a Locker of the lock server ([`LOCK_URL`]) and a
/// connection to the store ([`STORE_URL`]); `None` unless started so.
pub fn worker() -> Option<(Locker, redis::Connection)> {
    let (lock_url, store_url) = (
        std::env::var(LOCK_URL).ok()?,
        std::env::var(STORE_URL).ok()?,
    );
    let locker = Locker::new(&lock_url).unwrap();
    let store = redis::Client::open(store_url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    Some((locker, store))
}

/// Starts a lock server and a store (whose keys matching `untimed` may
/// have no TTL), then runs `count` children of the test `child_worker` of
/// this binary, told their URLs, and asserts that each printed [`DONE`]
/// within 120 s (see [`run_children`]): the lock server and the store.
#[track_caller] // the child is a test of the caller's file
pub fn run_workers(count: usize, untimed: &[&str]) -> (RedisServer, RedisServer) {
    let locks = RedisServer::start();
    let store = RedisServer::start();
    for pattern in untimed {
        store.allow_untimed(pattern);
    }
    let (lock_url, store_url) = (locks.url(), store.url());
    run_children(
        "child_worker",
        count,
        &[
            (LOCK_URL, lock_url.as_str()),
            (STORE_URL, store_url.as_str()),
        ],
        DONE,
        Duration::from_secs(120),
    );
    (locks, store)
}

/// The number `server` holds at `key`.
pub fn number(server: &RedisServer, key: &str) -> i64 {
    server.get(key).unwrap().parse().unwrap()
}

/// Starts the test `test` of this binary as a child with `envs`, and reads
/// its stdout until it prints [`HOLDING`]: the child, and what followed.
#[track_caller] // the child is a test of the caller's file
pub fn start_holder(test: &str, envs: &[(&str, &str)]) -> (Child, String) {
    let mut child = child_test(test, envs)
        .spawn()
        .expect("spawn child test process");
    let said = read_until(&mut child, HOLDING);
    (child, said)
}

/// SIGKILLs `child` (no release, no Drop) and reaps it (within 10 s).
pub fn kill(mut child: Child) {
    child.kill().unwrap();
    let _ = wait_child(child, Duration::from_secs(10));
}

/// Starts a lock server, and the test `test` of this binary as a child told
/// its URL ([`LOCK_URL`]); once the child says it holds ([`HOLDING`]),
/// notes the time and [`kill`]s it. The server, a Locker of it, when the
/// child held, and what it said after [`HOLDING`].
#[track_caller] // the child is a test of the caller's file
pub fn kill_a_holder(test: &str) -> (RedisServer, Locker, Instant, String) {
    let locks = RedisServer::start();
    let url = locks.url();
    let (child, said) = start_holder(test, &[(LOCK_URL, url.as_str())]);
    let held = Instant::now();
    kill(child);
    let locker = Locker::new(&url).unwrap();
    (locks, locker, held, said)
}

/// Asserts that what a killed child held with a 2 s lease was taken
/// `waited` after, as that lease ended: not before, and not long after.
pub fn assert_taken_as_the_lease_ended(waited: Duration) {
    let (lease_end, late) = (Duration::from_millis(1_900), Duration::from_secs(4));
    assert!(
        waited >= lease_end,
        "taken after {waited:?}, before the 2 s lease ended"
    );
    assert!(waited < late, "taken only after {waited:?}");
}
