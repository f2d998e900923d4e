//! Semaphores across OS processes: the test re-executes its own test binary
//! as child processes (`--exact <worker>`).
//!
//! - 4 children each run a sync `#[redis_lock(permits = 2)]` function many
//!   times; inside, each counts itself on a separate store server (INCR,
//!   a pause, DECR), remembering the most it saw. At most 2 may be inside.
//! - A child takes a permit and is SIGKILLed while holding it: the permit
//!   is free when its lease ends, not before.

mod support;

use std::time::{Duration, Instant};

use lockattr::{Locker, redis_lock};
use support::children::{read_until, run_children};
use support::{BodyError as Error, RedisServer, child_test, keys, wait_child};

const CHILDREN: usize = 4;
const ITERATIONS: usize = 25;
/// Where the lock server is, for a child.
const LOCK_URL: &str = "LOCKATTR_SEM_LOCK_URL";
/// Where the store server is, for a child.
const STORE_URL: &str = "LOCKATTR_SEM_STORE_URL";
/// What a child prints when its loop is done.
const DONE: &str = "LOCKATTR_SEM_CHILD_DONE";
/// What the holding child prints once it holds its permit.
const HOLDING: &str = "LOCKATTR_SEM_HOLDING";

/// Counts itself in, pauses, counts itself out; records the most inside.
#[redis_lock(name = "pool", permits = 2, expire = 30, acquire_time = 60, locker = locker)]
fn work(locker: &Locker, store: &mut redis::Connection) -> Result<(), Error> {
    let inside: i64 = redis::cmd("INCR").arg("inside").query(store)?;
    let _: i64 = redis::Script::new(
        "if tonumber(redis.call('get', KEYS[1]) or 0) < tonumber(ARGV[1]) then \
         return redis.call('set', KEYS[1], ARGV[1]) and 1 end return 0",
    )
    .key("most")
    .arg(inside)
    .invoke(store)?;
    std::thread::sleep(Duration::from_millis(2));
    let _: i64 = redis::cmd("DECR").arg("inside").query(store)?;
    Ok(())
}

#[test]
fn child_worker() {
    let (Ok(lock_url), Ok(store_url)) = (std::env::var(LOCK_URL), std::env::var(STORE_URL)) else {
        return;
    };
    let locker = Locker::new(&lock_url).unwrap();
    let mut store = redis::Client::open(store_url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    for _ in 0..ITERATIONS {
        work(&locker, &mut store).unwrap();
    }
    println!("{DONE} {}", std::process::id());
}

#[test]
fn processes_never_exceed_the_permits() {
    let locks = RedisServer::start();
    let store = RedisServer::start();
    // The test's own counters, not lockattr's keys.
    store.allow_untimed("inside");
    store.allow_untimed("most");
    let (lock_url, store_url) = (locks.url(), store.url());
    run_children(
        "child_worker",
        CHILDREN,
        &[
            (LOCK_URL, lock_url.as_str()),
            (STORE_URL, store_url.as_str()),
        ],
        DONE,
        Duration::from_secs(120),
    );
    let most: i64 = store.get("most").unwrap().parse().unwrap();
    assert!(most <= 2, "{most} processes held one of 2 permits at once");
    assert_eq!(most, 2, "never 2 holders at once: not a semaphore of 2");
    assert_eq!(store.get("inside").as_deref(), Some("0"));
    assert!(locks.keys(&keys::permit_keys("pool")).is_empty());
}

/// Takes a permit with a 2 s lease, says so, and sleeps until killed.
#[test]
fn child_holder() {
    let (Ok(lock_url), Err(_)) = (std::env::var(LOCK_URL), std::env::var(STORE_URL)) else {
        return;
    };
    let locker = Locker::new(&lock_url).unwrap();
    let guard = locker
        .semaphore("killed", 1)
        .expire(Duration::from_secs(2))
        .acquire_blocking()
        .unwrap();
    println!("{HOLDING} {}", guard.fencing_token());
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_killed_holders_permit_is_free_when_its_lease_ends() {
    let locks = RedisServer::start();
    let url = locks.url();
    let mut child = child_test("child_holder", &[(LOCK_URL, url.as_str())])
        .spawn()
        .expect("spawn child test process");
    let held_fence: u64 = read_until(&mut child, HOLDING).parse().unwrap();
    let held = Instant::now();
    // SIGKILL: no release, no Drop.
    child.kill().unwrap();
    let _ = wait_child(child, Duration::from_secs(10));
    let locker = Locker::new(&url).unwrap();
    let busy = locker
        .semaphore("killed", 1)
        .acquire_timeout(Duration::ZERO)
        .acquire_blocking();
    assert!(busy.is_err(), "the permit was free before its lease ended");
    let guard = locker
        .semaphore("killed", 1)
        .acquire_timeout(Duration::from_secs(10))
        .acquire_blocking()
        .unwrap();
    let waited = held.elapsed();
    assert!(
        waited >= Duration::from_millis(1_900),
        "taken after {waited:?}, before the 2 s lease ended"
    );
    assert!(
        waited < Duration::from_secs(4),
        "taken only after {waited:?}"
    );
    assert!(guard.fencing_token() > held_fence);
    guard.release_blocking().unwrap();
}
