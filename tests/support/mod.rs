//! The support of the integration tests: the redis-server processes and
//! their keyspace audit (the workspace's `lockattr-test-support` crate,
//! shared with the CLI's tests), the key names (computed by the runtime's
//! own layout), and the helpers several test files share.

#![allow(dead_code)] // each test file uses a part of this module

pub mod asserts;
pub mod attrs;
pub mod children;
pub mod cluster;
pub mod deployments;
pub mod keys;
pub mod kinds;
pub mod lockers;
pub mod outages;
pub mod proxy;
pub mod replicas;
pub mod sentinel;
pub mod takes;
pub mod waiters;
pub mod wakeups;

use std::panic::Location;
use std::process::{Command, Stdio};
use std::time::Duration;

pub use keys::lock_key;
#[allow(unused_imports)] // each test file uses a part of them
pub use lockattr_test_support::{RedisServer, audit, eventually, free_port, wait_child};

/// A command that runs the test `test` of the calling test file in a child
/// process of this very test binary (libtest and nextest both accept
/// `--exact`), with `envs` set. The child's stdout and stderr are piped.
#[track_caller]
pub fn child_test(test: &str, envs: &[(&str, &str)]) -> Command {
    child_test_of(Location::caller(), test, envs)
}

/// [`child_test`] for the test file of `caller`: in the suite's one binary
/// (`tests/integration.rs`) a test's full name starts with its file's
/// module (`runtime_wakeup::child_waiter`); in a binary of its own it is
/// the bare name.
pub fn child_test_of(caller: &Location<'_>, test: &str, envs: &[(&str, &str)]) -> Command {
    let exe = std::env::current_exe().expect("current test binary");
    let name = match module_path!().strip_prefix("integration::") {
        Some(_) => {
            let file = std::path::Path::new(caller.file());
            let module = file.file_stem().and_then(|s| s.to_str());
            format!("{}::{test}", module.expect("a test file's name"))
        }
        None => test.to_owned(),
    };
    let mut command = Command::new(exe);
    command
        .args(["--exact", &name, "--nocapture", "--test-threads=1"])
        .envs(envs.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// The error of a test body that locks and talks to Redis itself.
#[derive(Debug)]
#[allow(dead_code)] // the fields are read through Debug, in panic messages
pub enum BodyError {
    Lock(lockattr::LockError),
    Redis(redis::RedisError),
}

impl From<lockattr::LockError> for BodyError {
    fn from(e: lockattr::LockError) -> Self {
        BodyError::Lock(e)
    }
}

impl From<redis::RedisError> for BodyError {
    fn from(e: redis::RedisError) -> Self {
        BodyError::Redis(e)
    }
}

/// A current-thread tokio runtime with I/O and timers.
pub fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A multi-thread tokio runtime with 2 workers, I/O and timers.
pub fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// The mutual-exclusion stress, for any Locker: `lockers.len() * 4` tokio
/// tasks (task `t` uses `lockers[t % len]`) each take the locks `names` in
/// turn, `rounds` times, and increment that name's counter on `store`
/// without atomicity (GET, a yield, SET). Asserts that no update was lost
/// and that no two holders of a name were ever inside at once. Run it on a
/// multi-thread runtime.
pub async fn contend(
    lockers: &[lockattr::Locker],
    names: &[String],
    rounds: usize,
    store: &RedisServer,
) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let inside: Arc<Vec<AtomicUsize>> =
        Arc::new(names.iter().map(|_| AtomicUsize::new(0)).collect());
    let overlaps = Arc::new(AtomicUsize::new(0));
    // The counters are the test's own keys, without a TTL.
    for name in names {
        store.allow_untimed(&audit::literal(name));
    }
    let tasks = lockers.len() * 4;
    let mut running = Vec::new();
    for t in 0..tasks {
        let locker = lockers[t % lockers.len()].clone();
        let (names, url) = (names.to_vec(), store.url());
        let (inside, overlaps) = (inside.clone(), overlaps.clone());
        running.push(tokio::spawn(async move {
            let client = redis::Client::open(url).unwrap();
            let mut con = client.get_multiplexed_async_connection().await.unwrap();
            for round in 0..rounds {
                let n = round % names.len();
                let guard = locker
                    .lock(&names[n])
                    .acquire_timeout(Duration::from_secs(30))
                    .acquire()
                    .await
                    .unwrap();
                if inside[n].fetch_add(1, Ordering::SeqCst) > 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let value: Option<u64> = redis::cmd("GET")
                    .arg(&names[n])
                    .query_async(&mut con)
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
                let _: () = redis::cmd("SET")
                    .arg(&names[n])
                    .arg(value.unwrap_or(0) + 1)
                    .query_async(&mut con)
                    .await
                    .unwrap();
                inside[n].fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
        }));
    }
    for task in running {
        task.await.expect("a contending task panicked");
    }
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two holders were inside at once"
    );
    for (n, name) in names.iter().enumerate() {
        let expected = (0..tasks * rounds)
            .filter(|i| i % rounds % names.len() == n)
            .count();
        assert_eq!(
            store.get(name),
            Some(expected.to_string()),
            "updates of {name} were lost"
        );
    }
}

/// Takes and releases the lock `name`: the Locker's connection is then
/// open and its scripts loaded, so what a test measures next is not that.
pub async fn warm_up(locker: &lockattr::Locker, name: &str) {
    let guard = locker.lock(name).acquire().await.expect("warm-up acquire");
    guard.release().await.expect("warm-up release");
}

/// Another Locker takes `name` in one attempt and lets it go.
pub fn stranger_takes(server: &RedisServer, name: &str) -> Result<(), lockattr::LockError> {
    lockattr::Locker::new(server.url())?
        .lock(name)
        .acquire_timeout(Duration::ZERO)
        .acquire_blocking()?
        .release_blocking()
}
