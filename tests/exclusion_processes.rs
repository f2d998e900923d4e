//! Mutual exclusion across OS processes: the test re-executes its own test
//! binary as 4 concurrent child processes (`--exact child_worker`, which
//! libtest and nextest both accept), each running a sync `#[redis_lock]`
//! function that increments a Redis counter non-atomically (GET, a short
//! sleep, SET), after waiting for all of them to start. The counter must
//! equal the total number of calls.

use crate::support;

use std::time::Duration;

use lockattr::{Locker, redis_lock};
use support::children::{run_children, start_together};
use support::wakeups::{assert_all_counted, connection};
use support::{BodyError as Error, RedisServer};

const CHILDREN: usize = 4;
const ITERATIONS: usize = 30;
/// Tells `child_worker` it runs as a child, and where Redis is.
const CHILD_URL: &str = "LOCKATTR_CHILD_URL";
/// What a child prints when its loop is done, so the parent knows the
/// worker really ran (a filtered-out test also exits with success).
const DONE: &str = "LOCKATTR_CHILD_DONE";

/// Read, pause, write: loses updates unless callers are kept apart.
#[redis_lock(name = "counter", expire = 30, acquire_time = 30, locker = locker)]
fn bump(locker: &Locker, counter: &mut redis::Connection) -> Result<(), Error> {
    let value: Option<u64> = redis::cmd("GET").arg("counter").query(counter)?;
    std::thread::sleep(Duration::from_micros(500));
    let _: () = redis::cmd("SET")
        .arg("counter")
        .arg(value.unwrap_or(0) + 1)
        .query(counter)?;
    Ok(())
}

/// The worker loop; does nothing unless started by the parent test.
#[test]
fn child_worker() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let locker = Locker::new(&url).unwrap();
    let mut counter = connection(&url);
    // Start together, so that the processes really contend.
    start_together(&url, CHILDREN);
    for _ in 0..ITERATIONS {
        bump(&locker, &mut counter).unwrap();
    }
    println!("{DONE} {}", std::process::id());
}

#[test]
fn processes_lose_no_update() {
    let server = RedisServer::start();
    // The test's own counters, without a TTL (see support::audit).
    server.allow_untimed("counter");
    server.allow_untimed("started");
    let url = server.url();
    run_children(
        "child_worker",
        CHILDREN,
        &[(CHILD_URL, url.as_str())],
        DONE,
        Duration::from_secs(60),
    );
    assert_all_counted(&server, CHILDREN * ITERATIONS);
}
