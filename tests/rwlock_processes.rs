//! Read-write locks across OS processes: the test re-executes its own test
//! binary as child processes (`--exact <worker>`).
//!
//! - 4 children each read and write many times; inside, each counts itself
//!   on a separate store server (readers and writers, checked and counted
//!   in one script call), pauses, counts itself out. Several readers must
//!   be seen inside at once, never a writer with anyone else.
//! - A child takes the read side and is SIGKILLed while holding it: its
//!   share is free when its lease ends, not before.
//! - A child takes the read side of 50 names and is SIGKILLed: once their
//!   leases and the retention are over, no key of any of them is left.

use crate::support;

use std::time::Duration;

use lockattr::Locker;
use support::kinds::{
    DONE, HOLDING, LOCK_URL, STORE_URL, assert_taken_as_the_lease_ended, kill, kill_a_holder,
    leased_blocking, number, run_workers, short_retention, start_holder, within_blocking, worker,
};
use support::{RedisServer, keys};

const CHILDREN: usize = 4;
const ITERATIONS: usize = 24;
/// Set for the child that reads many names.
const MANY: &str = "LOCKATTR_RW_MANY";

/// Counts a reader (`r`) or a writer (`w`) in: notes a breach of the
/// rule (a writer with anyone, a reader with a writer) and the most readers.
const ENTER: &str = r"
local readers = tonumber(redis.call('get', 'readers') or 0)
local writers = tonumber(redis.call('get', 'writers') or 0)
if ARGV[1] == 'w' then
  if readers > 0 or writers > 0 then redis.call('incr', 'breaches') end
  redis.call('incr', 'writers')
else
  if writers > 0 then redis.call('incr', 'breaches') end
  readers = redis.call('incr', 'readers')
  if readers > tonumber(redis.call('get', 'most') or 0) then redis.call('set', 'most', readers) end
end
return 1
";

#[test]
fn child_worker() {
    let Some((locker, mut store)) = worker() else {
        return;
    };
    let enter = redis::Script::new(ENTER);
    for i in 0..ITERATIONS {
        let writing = i % 4 == 3;
        let request = if writing {
            locker.write_lock("catalog")
        } else {
            locker.read_lock("catalog")
        };
        let guard = within_blocking(
            request.expire(Duration::from_secs(30)),
            Duration::from_secs(60),
        )
        .unwrap();
        let _: i64 = enter
            .arg(if writing { "w" } else { "r" })
            .invoke(&mut store)
            .unwrap();
        std::thread::sleep(Duration::from_millis(if writing { 2 } else { 15 }));
        let counter = if writing { "writers" } else { "readers" };
        let _: i64 = redis::cmd("DECR").arg(counter).query(&mut store).unwrap();
        guard.release_blocking().unwrap();
    }
    println!("{DONE} {}", std::process::id());
}

#[test]
fn processes_share_reads_and_exclude_writes() {
    // The store holds the test's own counters only, without a TTL (see
    // support::audit).
    let (locks, store) = run_workers(CHILDREN, &["*"]);
    assert_eq!(store.get("breaches"), None, "a writer was not alone");
    let most = number(&store, "most");
    assert!(most >= 2, "readers of different processes never overlapped");
    assert_eq!(store.get("readers").as_deref(), Some("0"));
    assert_eq!(store.get("writers").as_deref(), Some("0"));
    assert!(locks.keys(&keys::reader_keys("catalog")).is_empty());
    assert!(!locks.exists(&keys::rw("catalog").lock));
}

/// Takes the read side with a 2 s lease, says so, and sleeps until killed.
#[test]
fn child_reader() {
    let (Ok(lock_url), Err(_), Err(_)) = (
        std::env::var(LOCK_URL),
        std::env::var(STORE_URL),
        std::env::var(MANY),
    ) else {
        return;
    };
    let locker = Locker::new(&lock_url).unwrap();
    let _guard = leased_blocking(locker.read_lock("killed"), Duration::from_secs(2));
    println!("{HOLDING}");
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn a_killed_readers_share_is_free_when_its_lease_ends() {
    // SIGKILL: no release, no Drop.
    let (_locks, locker, held, _) = kill_a_holder("child_reader");
    // Another reader is not kept out meanwhile.
    let reader = within_blocking(locker.read_lock("killed"), Duration::ZERO).unwrap();
    reader.release_blocking().unwrap();
    let busy = within_blocking(locker.write_lock("killed"), Duration::ZERO);
    assert!(busy.is_err(), "the writer got in before the lease ended");
    let guard = within_blocking(locker.write_lock("killed"), Duration::from_secs(10)).unwrap();
    assert_taken_as_the_lease_ended(held.elapsed());
    guard.release_blocking().unwrap();
}

/// Takes the read side of `report:0` .. `report:49` with a 300 ms lease,
/// says so, and sleeps until killed.
#[test]
fn child_reader_of_many() {
    let (Ok(lock_url), Ok(_)) = (std::env::var(LOCK_URL), std::env::var(MANY)) else {
        return;
    };
    let locker = short_retention(&lock_url);
    let lease = Duration::from_millis(300);
    let guards: Vec<_> = (0..50)
        .map(|n| leased_blocking(locker.read_lock(format!("report:{n}")), lease))
        .collect();
    println!("{HOLDING}");
    std::thread::sleep(Duration::from_secs(60));
    drop(guards);
}

#[test]
fn killed_readers_of_many_names_leave_no_key_behind() {
    let locks = RedisServer::start();
    let url = locks.url();
    let (child, _) = start_holder(
        "child_reader_of_many",
        &[(LOCK_URL, url.as_str()), (MANY, "1")],
    );
    // SIGKILL: no release, no Drop.
    kill(child);
    // Past every lease (300 ms) plus the retention (200 ms).
    std::thread::sleep(Duration::from_millis(1_000));
    let left = locks.keys("lockattr:*");
    assert!(
        left.is_empty(),
        "{} keys of dead readers stay: {:?}",
        left.len(),
        &left[..left.len().min(5)]
    );
}
