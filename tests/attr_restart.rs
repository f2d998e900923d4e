//! Redis restarting under annotated functions: calls made while it is down
//! keep trying for their acquire time, then fail with a connection error (no
//! hang, no panic, body not run); a call that overlaps a short restart gets
//! the lock once Redis is back; and sync and async annotated functions work
//! again after a restart between two calls and in the middle of a running
//! loop.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lockattr::{LockError, Locker, redis_lock};
use support::attrs::counted;
use support::lockers::setup;

counted!(#[redis_lock(name = "restart:{id}", expire = 30, acquire_time = 2, locker = locker)] fn sync_call(locker, id, runs) -> LockError);

#[redis_lock(name = "restart:{id}", expire = 30, acquire_time = 2, locker = locker)]
async fn async_call(locker: &Locker, id: u32, runs: &AtomicU32) -> Result<u32, LockError> {
    runs.fetch_add(1, Ordering::SeqCst);
    tokio::task::yield_now().await;
    Ok(id)
}

/// The acquire time of the annotated functions.
const ACQUIRE_TIME: Duration = Duration::from_secs(2);

/// Generous: acquire_time (2 s) + 1 s, and the refused connection is immediate.
const PROMPT: Duration = Duration::from_secs(3);

/// A call made while Redis is down keeps trying for its acquire time, then
/// fails with a connection error.
#[tokio::test]
async fn calls_during_an_outage_fail_after_their_acquire_time_and_work_again() {
    let (mut server, locker) = setup();
    let runs = AtomicU32::new(0);
    assert_eq!(sync_call(&locker, 1, &runs).unwrap(), 1);
    assert_eq!(async_call(&locker, 2, &runs).await.unwrap(), 2);

    server.kill();
    for round in 0..3 {
        let start = Instant::now();
        let err = sync_call(&locker, 1, &runs).expect_err("Redis is down");
        let took = start.elapsed();
        assert!(err.is_connection(), "round {round}: sync call gave {err:?}");
        assert!(
            took >= ACQUIRE_TIME,
            "round {round}: sync call gave up after {took:?}"
        );
        assert!(took < PROMPT, "round {round}: sync call took {took:?}");

        let start = Instant::now();
        let err = async_call(&locker, 2, &runs)
            .await
            .expect_err("Redis is down");
        let took = start.elapsed();
        assert!(
            err.is_connection(),
            "round {round}: async call gave {err:?}"
        );
        assert!(
            took >= ACQUIRE_TIME,
            "round {round}: async call gave up after {took:?}"
        );
        assert!(took < PROMPT, "round {round}: async call took {took:?}");
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "a body ran while Redis was down"
    );

    server.restart();
    assert_eq!(
        sync_call(&locker, 1, &runs).unwrap(),
        1,
        "sync call after the restart"
    );
    assert_eq!(
        async_call(&locker, 2, &runs).await.unwrap(),
        2,
        "async call after the restart"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 4);
}

/// Redis restarts while the Locker's connection is idle: the next calls
/// must not fail (the Locker notices the dropped connection and reconnects).
#[tokio::test]
async fn a_restart_between_calls_goes_unnoticed() {
    let (mut server, locker) = setup();
    let runs = AtomicU32::new(0);
    assert_eq!(sync_call(&locker, 1, &runs).unwrap(), 1);
    server.restart();
    assert_eq!(
        sync_call(&locker, 1, &runs).unwrap(),
        1,
        "sync call right after a restart"
    );
    server.restart();
    assert_eq!(
        async_call(&locker, 1, &runs).await.unwrap(),
        1,
        "async call right after a restart"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

/// What one call of a loop gave.
struct Outcome {
    at: Instant,
    took: Duration,
    result: Result<(), String>,
    connection_error: bool,
}

fn record(start: Instant, result: Result<u32, LockError>) -> Outcome {
    Outcome {
        at: start,
        took: start.elapsed(),
        connection_error: result.as_ref().err().is_some_and(LockError::is_connection),
        result: result.map(drop).map_err(|e| e.to_string()),
    }
}

/// Sync and async loops of calls while Redis is killed for 0.8 s and
/// started again: every call gets its lock, those made during the outage
/// once Redis is back (their acquire time is 2 s). Besides the loops, whose
/// calls may or may not start inside the outage, one sync and one async call
/// are made while Redis is certainly down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_of_calls_survives_a_restart() {
    let (mut server, locker) = setup();
    let stop = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicU32::new(0));

    let sync_loop = {
        let (locker, stop, runs) = (locker.clone(), stop.clone(), runs.clone());
        std::thread::spawn(move || {
            let mut outcomes = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let start = Instant::now();
                outcomes.push(record(start, sync_call(&locker, 1, &runs)));
                std::thread::sleep(Duration::from_millis(20));
            }
            outcomes
        })
    };
    let async_loop = {
        let (locker, stop, runs) = (locker.clone(), stop.clone(), runs.clone());
        tokio::spawn(async move {
            let mut outcomes = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let start = Instant::now();
                outcomes.push(record(start, async_call(&locker, 2, &runs).await));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            outcomes
        })
    };

    tokio::time::sleep(Duration::from_millis(400)).await;
    let killed_at = Instant::now();
    server.kill();
    // Redis is down (`kill` waited for the process): these two calls start
    // inside the outage whatever the loops are doing.
    let (sync_single, async_single) = {
        let (sync_locker, sync_runs) = (locker.clone(), runs.clone());
        let sync_single = std::thread::spawn(move || {
            let start = Instant::now();
            record(start, sync_call(&sync_locker, 3, &sync_runs))
        });
        let (async_locker, async_runs) = (locker.clone(), runs.clone());
        let async_single = tokio::spawn(async move {
            let start = Instant::now();
            record(start, async_call(&async_locker, 4, &async_runs).await)
        });
        (sync_single, async_single)
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    let restarting_at = Instant::now();
    server.restart();
    let back_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::SeqCst);

    let sync_single = sync_single.join().expect("the sync call panicked");
    let async_single = async_single.await.expect("the async call panicked");
    let sync_outcomes = sync_loop.join().expect("the sync loop panicked");
    let async_outcomes = async_loop.await.expect("the async loop panicked");
    for (what, single, outcomes) in [
        ("sync", sync_single, sync_outcomes),
        ("async", async_single, async_outcomes),
    ] {
        // The outage (0.8 s) is shorter than the acquire time (2 s): no call
        // fails; one made while Redis is down gets its lock once it is back.
        assert!(single.at >= killed_at && single.at < restarting_at);
        for o in outcomes.iter().chain([&single]) {
            assert!(o.took < PROMPT, "{what}: a call took {:?}", o.took);
            if let Err(e) = &o.result {
                panic!(
                    "{what}: a call failed across a 0.8 s outage, within its acquire time \
                     (connection error: {}): {e}",
                    o.connection_error
                );
            }
        }
        let before = outcomes
            .iter()
            .filter(|o| o.at + o.took < killed_at)
            .count();
        let during = outcomes
            .iter()
            .chain([&single])
            .filter(|o| o.at >= killed_at && o.at < restarting_at);
        let after = outcomes.iter().filter(|o| o.at >= back_at).count();
        assert!(before > 0, "{what}: no call before the outage");
        for o in during {
            assert!(
                o.at + o.took >= restarting_at,
                "{what}: a call made while Redis was down returned before it was back"
            );
        }
        assert!(after > 0, "{what}: no call after the restart");
    }
}
