//! Semaphores across OS processes: the test re-executes its own test binary
//! as child processes (`--exact <worker>`).
//!
//! - 4 children each run a sync `#[redis_lock(permits = 2)]` function many
//!   times; inside, each counts itself on a separate store server (INCR,
//!   a pause, DECR), remembering the most it saw. At most 2 may be inside.
//! - A child takes a permit and is SIGKILLed while holding it: the permit
//!   is free when its lease ends, not before.

use crate::support;

use std::time::Duration;

use lockattr::{Locker, redis_lock};
use support::kinds::{
    DONE, HOLDING, LOCK_URL, STORE_URL, assert_taken_as_the_lease_ended, kill_a_holder,
    leased_blocking, number, run_workers, within_blocking, worker,
};
use support::{BodyError as Error, keys};

const CHILDREN: usize = 4;
const ITERATIONS: usize = 25;

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
    let Some((locker, mut store)) = worker() else {
        return;
    };
    for _ in 0..ITERATIONS {
        work(&locker, &mut store).unwrap();
    }
    println!("{DONE} {}", std::process::id());
}

#[test]
fn processes_never_exceed_the_permits() {
    // The test's own counters, not lockattr's keys.
    let (locks, store) = run_workers(CHILDREN, &["inside", "most"]);
    let most = number(&store, "most");
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
    let guard = leased_blocking(locker.semaphore("killed", 1), Duration::from_secs(2));
    println!("{HOLDING} {}", guard.fencing_token());
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_killed_holders_permit_is_free_when_its_lease_ends() {
    // SIGKILL: no release, no Drop.
    let (_locks, locker, held, said) = kill_a_holder("child_holder");
    let held_fence: u64 = said.parse().unwrap();
    let busy = within_blocking(locker.semaphore("killed", 1), Duration::ZERO);
    assert!(busy.is_err(), "the permit was free before its lease ended");
    let guard = within_blocking(locker.semaphore("killed", 1), Duration::from_secs(10)).unwrap();
    assert_taken_as_the_lease_ended(held.elapsed());
    assert!(guard.fencing_token() > held_fence);
    guard.release_blocking().unwrap();
}
