//! Read-write locks through Redis Sentinel: a Locker made with
//! `Locker::sentinel` keeps readers and the writer on the master the
//! sentinels name, and the last reader's release hands over to the writer.

use crate::support;

use std::time::{Duration, Instant};

use lockattr::Locker;
use support::kinds::{assert_still_waiting, got_within, spawn_stamped, woken};
use support::sentinel::SentinelSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_lock_through_sentinel() {
    let set = SentinelSet::start("lockattr-rw");
    let master = set.master_port();
    let locker = Locker::sentinel(&set.name, set.sentinel_urls()).unwrap();
    let other = Locker::sentinel(&set.name, set.sentinel_urls()).unwrap();
    let a = locker.read_lock("catalog").acquire().await.unwrap();
    let b = other.read_lock("catalog").acquire().await.unwrap();
    assert_eq!(
        set.keys_on(master, "lockattr:{catalog}:rw:read:*").len(),
        2,
        "the readers are not on the master"
    );
    let writer = spawn_stamped(&other, |other| async move {
        got_within(other.write_lock("catalog"), Duration::from_secs(30)).await
    });
    let pause = Duration::from_millis(300);
    assert_still_waiting(&writer, pause, "the writer entered with readers").await;
    a.release().await.unwrap();
    b.release().await.unwrap();
    let released = Instant::now();
    let guard = woken(
        writer,
        Duration::from_secs(2),
        released,
        "the writer was not handed the lock",
    )
    .await;
    assert!(set.exists_on(master, "lockattr:{catalog}:rw:write"));
    guard.release().await.unwrap();
}
