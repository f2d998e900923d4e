//! A frozen Redis (SIGSTOP: the socket accepts, nothing answers) with a
//! Locker built with 300 ms connect and response timeouts: an annotated call,
//! sync or async, returns a connection error within acquire_time + 2 s
//! instead of hanging, whether its connection was already open or not; after
//! the thaw, calls work again, and a failed call leaves no lock behind.

use crate::support;

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lockattr::{LockError, Locker, redis_lock};
use support::attrs::counted;
use support::lockers::quick_locker;
use support::{RedisServer, lock_key};

counted!(#[redis_lock(name = "frozen:{id}", expire = 30, acquire_time = 1, locker = locker)] fn sync_call(locker, id, runs) -> LockError);
counted!(#[redis_lock(name = "frozen:{id}", expire = 30, acquire_time = 1, locker = locker)] async fn async_call(locker, id, runs) -> LockError);

/// acquire_time (1 s) + 2 s.
const BOUND: Duration = Duration::from_secs(3);

fn assert_prompt_connection_error(result: Result<u32, LockError>, took: Duration, what: &str) {
    match result {
        Err(e) => assert!(
            e.is_connection(),
            "{what}: expected a connection error, got {e:?}"
        ),
        Ok(v) => panic!("{what}: a frozen server granted the lock ({v})"),
    }
    assert!(
        took < BOUND,
        "{what}: took {took:?} against a frozen server"
    );
}

#[test]
fn calls_against_a_frozen_server_fail_promptly() {
    let rt = support::current_thread();
    let server = RedisServer::start();
    let locker = quick_locker(&server);
    let runs = AtomicU32::new(0);
    // Open the connection first.
    assert_eq!(sync_call(&locker, 1, &runs).unwrap(), 1);
    assert_eq!(rt.block_on(async_call(&locker, 1, &runs)).unwrap(), 1);

    server.freeze(); // a panic below still thaws: RedisServer's Drop sends SIGCONT
    let fresh = quick_locker(&server); // never connected before the freeze
    for (i, l) in [&locker, &fresh].into_iter().enumerate() {
        let start = Instant::now();
        let r = sync_call(l, 10 + i as u32, &runs);
        assert_prompt_connection_error(r, start.elapsed(), &format!("sync call, locker {i}"));

        let start = Instant::now();
        let r = rt.block_on(async_call(l, 20 + i as u32, &runs));
        assert_prompt_connection_error(r, start.elapsed(), &format!("async call, locker {i}"));
    }
    server.thaw();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "a body ran against a frozen server"
    );

    // Thawed: calls work again (on lock names not tried during the freeze).
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < Duration::from_secs(5) {
        match rt.block_on(async_call(&locker, 2, &runs)) {
            Ok(_) => break,
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "async calls still fail 5 s after the thaw: {last:?}"
    );
    assert_eq!(sync_call(&locker, 3, &runs).unwrap(), 3);
    assert_eq!(sync_call(&fresh, 4, &runs).unwrap(), 4);
    assert_eq!(rt.block_on(async_call(&fresh, 5, &runs)).unwrap(), 5);
}

/// A call that failed against the frozen server must not leave its lock
/// behind. Its acquisition script, sent on the open connection just before
/// the answer timed out, runs when Redis thaws; nobody owns that lock (the
/// caller got an error), so it has to be given back soon after the thaw,
/// not sit there for the whole 30 s lease. Four calls, each on its own
/// already connected Locker, sync and async in turn.
#[test]
fn a_call_that_failed_during_the_freeze_leaves_no_lock_behind() {
    let rt = support::current_thread();
    let server = RedisServer::start();
    let lockers: Vec<Locker> = (0..4).map(|_| quick_locker(&server)).collect();
    let runs = AtomicU32::new(0);
    for (i, locker) in lockers.iter().enumerate() {
        // Open each connection first, the way the frozen call will use it.
        let id = i as u32;
        if i % 2 == 0 {
            assert_eq!(sync_call(locker, id, &runs).unwrap(), id);
        } else {
            assert_eq!(rt.block_on(async_call(locker, id, &runs)).unwrap(), id);
        }
    }

    server.freeze();
    let ids = [30, 31, 32, 33];
    for (i, (locker, id)) in lockers.iter().zip(ids).enumerate() {
        let start = Instant::now();
        if i % 2 == 0 {
            let r = sync_call(locker, id, &runs);
            assert_prompt_connection_error(r, start.elapsed(), "sync call");
        } else {
            let r = rt.block_on(async_call(locker, id, &runs));
            assert_prompt_connection_error(r, start.elapsed(), "async call");
        }
    }
    server.thaw();
    let thawed = Instant::now();

    let left_behind: Vec<(String, i64)> = ids
        .into_iter()
        .map(|id| lock_key(&format!("frozen:{id}")))
        .filter(|key| support::eventually(Duration::from_secs(5), || !server.exists(key)).is_none())
        .map(|key| {
            let pttl = server.pttl(&key);
            (key, pttl)
        })
        .collect();
    assert!(
        left_behind.is_empty(),
        "locks of calls that failed during the freeze are still held {:?} after the thaw, \
         owned by nobody, until their 30 s lease ends: {left_behind:?} (key, PTTL ms)",
        thawed.elapsed()
    );
    // Their names are usable again.
    for (locker, id) in lockers.iter().zip(ids) {
        assert_eq!(sync_call(locker, id, &runs).unwrap(), id);
    }
}
