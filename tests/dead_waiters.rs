//! Dead waiters (past their deadline, their process gone without leaving
//! the queue) are dropped a bounded number at a time: a release or an
//! attempt drops at most a hundred of them and leaves the rest to the next
//! call or to the queue's expiry, so no call blocks Redis for long however
//! many waiters died. A live waiter behind them still gets the name, told
//! to ask again when the release stopped short of it. Locks, write locks
//! and semaphores alike.

use crate::support;

use std::future::Future;
use std::time::Duration;

use lockattr::{LockError, LockGuard};
use support::RedisServer;
use support::keys::{self, KeyNames};
use support::lockers::{locker, setup};
use support::takes;
use support::waiters::{queue_len, queued};

/// Dead waiters queued ahead of the live one.
const DEAD: usize = 10_000;
/// At most this many are dropped by one call.
const BOUND: usize = 100;
/// The live waiter's lease and acquire time.
const LEASE: Duration = Duration::from_secs(5);
const WAIT: Duration = Duration::from_secs(20);

/// Queues `count` dead waiters of `keys` (deadline long past), with the
/// entry tag `tag` (a read-write lock's `w:`, empty otherwise); both keys
/// live a minute.
fn bury(server: &RedisServer, keys: &KeyNames, count: usize, tag: &str) {
    let mut pipe = redis::pipe();
    for i in 0..count {
        let token = format!("dead{i:05}");
        pipe.cmd("RPUSH").arg(&keys.queue).arg(&token).ignore();
        pipe.cmd("HSET")
            .arg(&keys.waiters)
            .arg(&token)
            .arg(format!("1:1000:1:{tag}gone\n1\ndead"))
            .ignore();
    }
    pipe.cmd("PEXPIRE").arg(&keys.queue).arg(60_000).ignore();
    pipe.cmd("PEXPIRE").arg(&keys.waiters).arg(60_000).ignore();
    pipe.query::<()>(&mut server.client()).unwrap();
}

/// Buries [`DEAD`] waiters of `keys` behind `holder`, then starts `waiter`
/// (of another Locker, so it queues in Redis, behind the dead), releases
/// `holder`, and asserts that the live waiter got the name, and that no
/// script call dropped more than [`BOUND`] entries on the way: the queue's
/// pops are at most `BOUND + 1` per script call made since the release.
async fn a_live_waiter_behind_the_dead<F>(
    server: &RedisServer,
    keys: &KeyNames,
    tag: &str,
    holder: LockGuard,
    waiter: F,
) where
    F: Future<Output = Result<LockGuard, LockError>> + Send + 'static,
{
    bury(server, keys, DEAD, tag);
    let waiting = tokio::spawn(waiter);
    assert!(queued(server, &keys.queue, DEAD + 1), "the waiter queued");
    let before = server.command_calls();
    holder.release().await.unwrap();
    let taken = tokio::time::timeout(WAIT, waiting)
        .await
        .expect("the live waiter is not stranded")
        .unwrap()
        .expect("the live waiter gets the name");
    let after = server.command_calls();
    let since =
        |command: &str| after.get(command).unwrap_or(&0) - before.get(command).unwrap_or(&0);
    let (pops, scripts) = (
        since("lpop"),
        since("evalsha") + since("fcall") + since("eval"),
    );
    assert!(
        pops <= (BOUND as u64 + 1) * scripts,
        "{pops} pops in {scripts} script calls: more than {BOUND} dead entries in one call"
    );
    let left = queue_len(&mut server.client(), &keys.queue);
    assert!(left < DEAD, "the dead entries go ({left} of {DEAD} left)");
    taken.release().await.unwrap();
}

// Multi-threaded: `queued` blocks its thread while the waiter runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_release_drops_a_bounded_number_of_dead_waiters() {
    let (server, first) = setup();
    let second = locker(&server);
    let holder = takes::take_now(&first, "dead", Duration::from_secs(30)).await;
    let waiter = async move { takes::try_take(&second, "dead", LEASE, WAIT).await };
    a_live_waiter_behind_the_dead(&server, &keys::lock("dead"), "", holder, waiter).await;
}

// Multi-threaded: `queued` blocks its thread while the waiter runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_lock_release_drops_a_bounded_number_of_dead_waiters() {
    let (server, first) = setup();
    let second = locker(&server);
    let holder = takes::try_write(&first, "dead", Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    let waiter = async move { takes::try_write(&second, "dead", LEASE, WAIT).await };
    a_live_waiter_behind_the_dead(&server, &keys::rw("dead"), "w:", holder, waiter).await;
}

// Multi-threaded: `queued` blocks its thread while the waiter runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_release_drops_a_bounded_number_of_dead_waiters() {
    let (server, first) = setup();
    let second = locker(&server);
    let holder = takes::try_permit(&first, "dead", 1, Duration::from_secs(30), Duration::ZERO)
        .await
        .unwrap();
    let waiter = async move { takes::try_permit(&second, "dead", 1, LEASE, WAIT).await };
    a_live_waiter_behind_the_dead(&server, &keys::sem("dead"), "", holder, waiter).await;
}

/// Dead waiters for sets are entries of the waiters hash only (the queue
/// holds the marker `-` for them). A release that pops the marker drops a
/// bounded number of them; the rest wait for the next such release, or for
/// the hash's expiry.
#[tokio::test]
async fn a_release_drops_a_bounded_number_of_dead_set_waiters() {
    let (server, first) = setup();
    let keys = keys::lock("dead-set");
    let holder = takes::take_now(&first, "dead-set", Duration::from_secs(30)).await;
    let mut pipe = redis::pipe();
    pipe.cmd("RPUSH").arg(&keys.queue).arg("-").ignore();
    for i in 0..DEAD {
        pipe.cmd("HSET")
            .arg(&keys.waiters)
            .arg(format!("dead{i:05}"))
            .arg("1:1000:1:gone\n1\ndead")
            .ignore();
    }
    pipe.cmd("PEXPIRE").arg(&keys.queue).arg(60_000).ignore();
    pipe.cmd("PEXPIRE").arg(&keys.waiters).arg(60_000).ignore();
    pipe.query::<()>(&mut server.client()).unwrap();
    let before = server.command_calls();
    holder.release().await.unwrap();
    let after = server.command_calls();
    let dropped = after.get("hdel").unwrap_or(&0) - before.get("hdel").unwrap_or(&0);
    assert!(
        (1..=BOUND as u64).contains(&dropped),
        "one release dropped {dropped} dead set waiters"
    );
    let left: usize = redis::cmd("HLEN")
        .arg(&keys.waiters)
        .query(&mut server.client())
        .unwrap();
    assert_eq!(left, DEAD - usize::try_from(dropped).unwrap());
    // The rest go with the next release that pops a marker, or when the
    // hash expires.
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&keys.waiters)
        .query(&mut server.client())
        .unwrap();
    assert!(ttl > 0, "the dead entries left never expire ({ttl})");
}
