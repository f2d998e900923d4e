//! Fencing tokens end to end, with the storage of `examples/fencing.rs`: a
//! holder paused past its lease has its write refused once a later holder
//! has written, whether it took the lock with the builder or through the
//! attribute; the holder of the latest token writes as often as it likes.

use crate::support;

#[path = "../examples/common/fenced.rs"]
mod fenced;

use std::time::Duration;

use fenced::{FencedStore, Write};
use lockattr::{LockError, Locker, LostReason, redis_lock};
use support::RedisServer;
use support::lockers::setup;

/// A lease the "paused" holder outlives.
const SHORT: Duration = Duration::from_millis(200);
/// Longer than `SHORT`, with room for a slow machine.
const PAUSE: Duration = Duration::from_millis(500);

/// A holder paused past its lease writes after the next holder: refused,
/// and the record keeps the next holder's value.
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_holders_write_is_refused() {
    let server = RedisServer::start();
    // The fenced store's record (the application's data), without a TTL.
    server.allow_untimed("rec");
    let mut store = FencedStore::open(&server.url()).await.unwrap();
    let first = Locker::new(server.url()).unwrap();
    let second = Locker::new(server.url()).unwrap();

    let paused = first.lock("fenced").expire(SHORT).acquire().await.unwrap();
    tokio::time::sleep(PAUSE).await;
    assert!(paused.is_lost(), "the lease ran out during the pause");

    let next = second.lock("fenced").acquire().await.unwrap();
    assert!(next.fencing_token() > paused.fencing_token());
    let written = store.write("rec", next.fencing_token(), "next").await;
    assert_eq!(written.unwrap(), Write::Applied);

    let stale = store.write("rec", paused.fencing_token(), "stale").await;
    assert_eq!(
        stale.unwrap(),
        Write::Stale {
            seen: next.fencing_token()
        }
    );
    assert_eq!(store.read("rec").await.unwrap().as_deref(), Some("next"));
    // Writing again under the same, latest token is the same holder: fine.
    let again = store.write("rec", next.fencing_token(), "next again").await;
    assert_eq!(again.unwrap(), Write::Applied);
    next.release().await.unwrap();
    assert!(paused.release().await.unwrap_err().is_not_owned());
}

#[derive(Debug)]
enum JobError {
    Lock(LockError),
    Stale { seen: u64 },
}

impl From<LockError> for JobError {
    fn from(e: LockError) -> Self {
        JobError::Lock(e)
    }
}

/// Writes `value` under the lock, after `pause`; the storage checks the
/// token the attribute's guard carries.
#[redis_lock(name = "fenced-job", expire = SHORT, acquire_time = 5, locker = locker, guard = g)]
async fn job(
    locker: &Locker,
    store: &mut FencedStore,
    value: &str,
    pause: Duration,
) -> Result<u64, JobError> {
    tokio::time::sleep(pause).await;
    match store.write("job", g.fencing_token(), value).await.unwrap() {
        Write::Applied => Ok(g.fencing_token()),
        Write::Stale { seen } => Err(JobError::Stale { seen }),
    }
}

/// The same through `#[redis_lock]`: the paused call's write is refused
/// (the body's own error is what it returns), the prompt call's stands.
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_annotated_call_cannot_overwrite_a_later_one() {
    let server = RedisServer::start();
    // The fenced store's record (the application's data), without a TTL.
    server.allow_untimed("job");
    let locker_a = Locker::new(server.url()).unwrap();
    let locker_b = Locker::new(server.url()).unwrap();
    let mut store_a = FencedStore::open(&server.url()).await.unwrap();
    let mut store_b = FencedStore::open(&server.url()).await.unwrap();

    let paused =
        tokio::spawn(async move { job(&locker_a, &mut store_a, "paused", PAUSE + PAUSE).await });
    // The prompt call waits for the paused call's lease to run out.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let prompt = job(&locker_b, &mut store_b, "prompt", Duration::ZERO).await;
    let token = prompt.expect("the lock is free once the paused call's lease ran out");

    match paused.await.unwrap() {
        Err(JobError::Stale { seen }) => assert_eq!(seen, token),
        Err(JobError::Lock(e)) => panic!("the paused call failed to lock: {e}"),
        Ok(token) => panic!("the paused call's write went through under token {token}"),
    }
    let mut store = FencedStore::open(&server.url()).await.unwrap();
    assert_eq!(store.read("job").await.unwrap().as_deref(), Some("prompt"));
}

/// With `on_lost = "error"` a body that finished after losing its lock
/// reports the loss even when its write did not need fencing.
#[redis_lock(name = "fenced-report", expire = SHORT, acquire_time = 0, locker = locker, on_lost = "error")]
async fn report(locker: &Locker, pause: Duration) -> Result<(), LockError> {
    tokio::time::sleep(pause).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_that_outlived_its_lease_reports_it() {
    let (_server, locker) = setup();
    report(&locker, Duration::ZERO).await.unwrap();
    match report(&locker, PAUSE).await {
        Err(LockError::Lost { name, reason, .. }) => {
            assert_eq!(name, "fenced-report");
            assert_eq!(reason, LostReason::Expired);
        }
        other => panic!("expected Lost, got {other:?}"),
    }
}
