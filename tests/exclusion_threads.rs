//! Mutual exclusion under contention, sync: 8 OS threads, each with its own
//! Locker (as if separate processes), run a `#[redis_lock]` function that
//! increments a Redis counter non-atomically (GET, a short sleep, SET).
//! No update may be lost, and no two bodies may overlap.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockattr::{Locker, redis_lock};
use support::wakeups::assert_exclusive_run;
use support::{BodyError as Error, RedisServer};

const THREADS: usize = 8;
const ITERATIONS: usize = 50;

/// Read, pause, write: loses updates unless callers are kept apart.
#[redis_lock(name = "counter", expire = 30, acquire_time = 30, locker = locker)]
fn bump(
    locker: &Locker,
    counter: &mut redis::Connection,
    inside: &AtomicUsize,
    max_inside: &AtomicUsize,
) -> Result<(), Error> {
    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
    max_inside.fetch_max(now, Ordering::SeqCst);
    let value: Option<u64> = redis::cmd("GET").arg("counter").query(counter)?;
    std::thread::sleep(Duration::from_micros(500));
    std::thread::yield_now();
    let _: () = redis::cmd("SET")
        .arg("counter")
        .arg(value.unwrap_or(0) + 1)
        .query(counter)?;
    inside.fetch_sub(1, Ordering::SeqCst);
    Ok(())
}

#[test]
fn threads_with_their_own_lockers_lose_no_update() {
    let server = RedisServer::start();
    // The test's own counter, without a TTL (see support::audit).
    server.allow_untimed("counter");
    let inside = AtomicUsize::new(0);
    let max_inside = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (server, inside, max_inside) = (&server, &inside, &max_inside);
                s.spawn(move || {
                    let locker = Locker::new(server.url()).unwrap();
                    let mut counter = server.client();
                    for _ in 0..ITERATIONS {
                        bump(&locker, &mut counter, inside, max_inside).unwrap();
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("worker thread panicked");
        }
    });
    assert_exclusive_run(&server, &max_inside, THREADS * ITERATIONS);
}
