//! The documented hazard of asynchronous replication (see `docs/faults.md`,
//! "Failover"): with the default `min_replicas(0)`, a lock written to a
//! Sentinel master that dies before its replica received the write is gone
//! once the sentinels promote that replica, and a second caller takes the
//! same name while the first guard still holds its lease. This test shows
//! that it happens, so that what `LockerBuilder::min_replicas` exists for
//! is shown against real servers; it asserts the double holder, not a fix.
//!
//! How the lock's write is kept from the replica: the replica is frozen
//! (SIGSTOP), which alone is not enough, since the kernel keeps taking the
//! replication stream into the frozen replica's socket buffers and the
//! replica applies it once thawed. So the test first writes far more than
//! those buffers hold (large values, each with a TTL) and waits until the
//! master reports megabytes of the stream still queued in its own output
//! buffer for the replica: from then on the kernel buffers are full, and
//! whatever the master writes next (the lock) stays in the master's memory
//! behind that backlog. Filling buffers was chosen over cutting the link
//! (`CLIENT KILL TYPE replica`) because the replica stays a healthy,
//! promotable replica of the master in the sentinels' eyes, and it needs
//! no setting that the replica must not reconnect in time. The test checks
//! that it worked: the lock key is absent on the promoted replica before the
//! second caller asks.

use crate::support;

use std::time::{Duration, Instant};

use lockattr::{LockError, Locker};
use support::eventually;
use support::lock_key;
use support::sentinel::{SETTLE, SentinelSet};

/// The first holder's lease: far longer than the test.
const LEASE: Duration = Duration::from_secs(30);
/// Size of each filler value, and how many of them: 48 MiB in all, past
/// what the loopback socket buffers take (about 4 MiB measured here; the
/// receive side may grow to `net.ipv4.tcp_rmem`'s maximum, 32 MiB on some
/// kernels, hence the margin) and under the master's output buffer limit
/// for replicas (`client-output-buffer-limit replica 256mb 64mb 60`), so
/// the link stays up.
const FILLER_VALUE: usize = 1024 * 1024;
const FILLER_KEYS: usize = 48;
/// What the master must still hold for the replica, in its own memory,
/// before the lock is taken.
const QUEUED_AT_LEAST: u64 = 8 * 1024 * 1024;

/// `omem` of the master's replica connections (`CLIENT LIST TYPE replica`):
/// bytes of the replication stream the master holds and has not yet handed
/// to the kernel. 0 when there is no replica connection.
fn queued_for_replica(set: &SentinelSet) -> u64 {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("replica")
        .query(&mut set.master_client())
        .expect("CLIENT LIST TYPE replica");
    list.lines()
        .flat_map(str::split_whitespace)
        .filter_map(|field| field.strip_prefix("omem="))
        .filter_map(|n| n.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_min_replicas_a_failover_to_a_replica_that_never_saw_the_lock_gives_it_to_a_second_holder()
 {
    let started = Instant::now();
    let mut set = SentinelSet::start("lockattr-replica-loss");
    let old_master = set.master_port();
    let replica = set.replica_port();
    let name = "report:nightly";
    let key = lock_key(name);

    // The default: grants do not wait for replicas.
    let first = Locker::sentinel_builder(set.name.as_str(), set.sentinel_urls())
        .min_replicas(0)
        .build()
        .unwrap();
    // Connected, scripts loaded, and all of it on the replica already: the
    // next acquisition is one request to the master.
    support::warm_up(&first, "warm-up").await;
    set.wait_replicated();

    // Freeze the replica and fill the link until the master has to keep
    // the rest of the stream in its own output buffer.
    set.replica().freeze();
    let filler = vec![b'x'; FILLER_VALUE];
    {
        let mut master = set.master_client();
        for i in 0..FILLER_KEYS {
            let _: () = redis::cmd("SET")
                .arg(format!("replica-loss:filler:{i}"))
                .arg(&filler)
                .arg("EX")
                .arg(600)
                .query(&mut master)
                .expect("SET filler");
        }
    }
    let queued = eventually(Duration::from_secs(10), || {
        queued_for_replica(&set) >= QUEUED_AT_LEAST
    });
    let backlog = queued_for_replica(&set);
    assert!(
        queued.is_some(),
        "the master holds only {backlog} bytes for the frozen replica after \
         {} MiB of writes: its link does not back up",
        FILLER_KEYS * FILLER_VALUE / (1024 * 1024)
    );

    // The first holder: granted by the master alone, its write queued
    // behind the backlog.
    let holder = first
        .lock(name)
        .expire(LEASE)
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await
        .expect("the first acquisition");
    let granted_at = Instant::now();
    assert!(
        set.exists_on(old_master, &key),
        "the lock is not on the master"
    );
    assert!(
        queued_for_replica(&set) >= backlog,
        "the master's backlog for the replica shrank while it was frozen"
    );

    // The master dies with the lock in its memory only; the replica comes
    // back at once (so that the sentinels find it answering when they pick
    // one to promote), reads what its socket held, and sees the link close.
    set.kill_master();
    set.replica().thaw();
    let promoted = set.wait_for_failover(SETTLE);
    assert_eq!(promoted, replica, "the sentinels promoted another server");
    let failover_took = granted_at.elapsed();

    // The write never reached it: the lock is absent on the new master.
    assert!(
        !set.exists_on(promoted, &key),
        "the promoted replica has the lock key: the write reached it (the \
         backlog of {backlog} bytes did not hold it back)"
    );

    // A second caller, through the same sentinels, with a short acquire
    // time: it gets the lock while the first guard's lease still runs.
    let second = Locker::sentinel_builder(set.name.as_str(), set.sentinel_urls())
        .build()
        .unwrap();
    let taken = second
        .lock(name)
        .expire(LEASE)
        .acquire_timeout(Duration::from_secs(2))
        .acquire()
        .await;
    let still_leased = granted_at.elapsed();
    let other = taken.expect("the second caller did not get the lock");
    assert!(
        still_leased < LEASE,
        "the first lease ended ({still_leased:?}) before the second caller asked"
    );
    assert!(
        !holder.is_lost(),
        "the first guard knows it lost the lock; it should still think it holds it"
    );
    assert!(
        set.exists_on(promoted, &key),
        "the second lock is not there"
    );
    // The fence counter was lost with the lock and starts again from the
    // new master's clock: tokens still increase from one holder to the next.
    assert!(
        other.fencing_token() > holder.fencing_token(),
        "fencing token {} after {}",
        other.fencing_token(),
        holder.fencing_token()
    );
    eprintln!(
        "backlog {backlog} bytes; failover {failover_took:?} after the grant; \
         second holder {still_leased:?} into a {LEASE:?} lease; tokens {} then {}",
        holder.fencing_token(),
        other.fencing_token()
    );

    other.release().await.unwrap();
    // The first holder learns only now, from Redis, that the lock was not
    // its own any more.
    let late = holder.release().await;
    assert!(
        matches!(late, Err(LockError::NotOwned { .. })),
        "the first holder's release on a lock it lost: {late:?}"
    );
    eprintln!("test took {:?}", started.elapsed());
}
