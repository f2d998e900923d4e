//! Read-write locks on one server (`Locker::read_lock`, `write_lock`): many
//! readers or one writer; writer-preferring; a writer's release admits all
//! waiting readers at once and the last reader's release hands over to the
//! waiting writer, both through pub/sub; per-reader leases, renewal and the
//! lost signal; fencing; timeouts; Redlock refused; independent of the
//! lock and the semaphore of the same name.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lockattr::{LockError, LockGuard, Locker};
use support::kinds::{
    LONG, RwCensus, assert_all_expire, assert_gives_up, assert_refused_by_redlock,
    assert_still_waiting, assert_timed_out, assert_within, del, free_now, got_within,
    held_at_least, leased, lost_within, read_long, redlock_of_three, renewing, run_tasks,
    setup_short_retention, spawn_stamped, within, within_blocking, woken, write_long,
};
use support::lockers::setup;
use support::waiters::queued;
use support::{RedisServer, keys};

/// A waiter on its own task: when it got in, and its guard.
fn spawn_waiter(
    locker: &Locker,
    name: &'static str,
    reading: bool,
) -> tokio::task::JoinHandle<(Instant, LockGuard)> {
    spawn_stamped(locker, move |locker| async move {
        if reading {
            read_long(&locker, name).await
        } else {
            write_long(&locker, name).await
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_overlap_and_a_writer_excludes_everyone() {
    let server = RedisServer::start();
    let census = RwCensus::default();
    run_tasks(12, |t| {
        let url = server.url();
        let census = census.clone();
        async move {
            let locker = Locker::new(&url).unwrap();
            for i in 0..8 {
                if (t + i) % 4 == 0 {
                    let guard = write_long(&locker, "doc").await;
                    census.writer_in();
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    census.writer_out();
                    guard.release().await.unwrap();
                } else {
                    let guard = read_long(&locker, "doc").await;
                    census.reader_in();
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    census.reader_out();
                    guard.release().await.unwrap();
                }
            }
        }
    })
    .await;
    assert!(
        !census.broken(),
        "a writer was inside with another writer or a reader"
    );
    assert!(census.most_readers() >= 2, "readers never overlapped");
    // Nothing held is left; every key left expires.
    assert!(server.keys(&keys::reader_keys("doc")).is_empty());
    assert!(!server.exists(&keys::rw("doc").lock));
    assert_all_expire(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_is_not_starved_by_a_stream_of_readers() {
    let server = RedisServer::start();
    let stop = Arc::new(AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..4 {
        let locker = Locker::new(server.url()).unwrap();
        let stop = stop.clone();
        readers.push(tokio::spawn(async move {
            // Overlapping readers: the lock is never free of readers while
            // they run, unless a writer holds it back.
            while !stop.load(Ordering::SeqCst) {
                let guard = read_long(&locker, "feed").await;
                tokio::time::sleep(Duration::from_millis(40)).await;
                guard.release().await.unwrap();
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let writer = Locker::new(server.url()).unwrap();
    let asked = Instant::now();
    let guard = tokio::time::timeout(Duration::from_secs(2), write_long(&writer, "feed"))
        .await
        .expect("the writer was starved by readers for 2 s (expire 30 s)");
    assert!(server.keys(&keys::reader_keys("feed")).is_empty());
    let waited = asked.elapsed();
    guard.release().await.unwrap();
    stop.store(true, Ordering::SeqCst);
    for reader in readers {
        reader.await.unwrap();
    }
    assert!(waited < Duration::from_secs(2), "{waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hand_overs_admit_all_leading_readers_then_the_writer() {
    let (server, locker) = setup();
    // The waiters' own Locker, as in another process: releases reach them
    // through pub/sub.
    let waiters = Locker::new(server.url()).unwrap();
    let first_writer = write_long(&locker, "h").await;
    let mut readers = Vec::new();
    for n in 1..=3 {
        readers.push(spawn_waiter(&waiters, "h", true));
        assert!(
            queued(&server, &keys::rw("h").queue, n),
            "reader {n} did not queue"
        );
    }
    let second_writer = spawn_waiter(&waiters, "h", false);
    assert!(
        queued(&server, &keys::rw("h").queue, 4),
        "the second writer did not queue"
    );
    let late_reader = spawn_waiter(&waiters, "h", true);
    assert!(
        queued(&server, &keys::rw("h").queue, 5),
        "the late reader did not queue"
    );
    // A newcomer reader does not pass the queued writer.
    let newcomer = within(locker.read_lock("h"), Duration::ZERO).await;
    assert_timed_out(&newcomer);

    let released = Instant::now();
    first_writer.release().await.unwrap();
    let mut guards = Vec::new();
    for reader in readers {
        // Sooner than the once-a-second recheck: woken by the release.
        let guard = woken(
            reader,
            Duration::from_secs(2),
            released,
            "a waiting reader was not admitted within 2 s of the writer's release",
        )
        .await;
        guards.push(guard);
    }
    assert_eq!(server.keys(&keys::reader_keys("h")).len(), 3);
    let pause = Duration::from_millis(100);
    assert_still_waiting(&second_writer, pause, "the writer entered with readers").await;
    assert!(
        !late_reader.is_finished(),
        "a reader passed the queued writer"
    );

    // The last reader's release hands over to the writer.
    let last = guards.pop().unwrap();
    for guard in guards {
        guard.release().await.unwrap();
    }
    assert_still_waiting(&second_writer, pause, "the writer entered with a reader").await;
    let released = Instant::now();
    last.release().await.unwrap();
    let wait = Duration::from_secs(2);
    let writer = woken(
        second_writer,
        wait,
        released,
        "the writer was not handed the lock within 2 s",
    )
    .await;
    assert!(!late_reader.is_finished());
    let released = Instant::now();
    writer.release().await.unwrap();
    let reader = woken(
        late_reader,
        wait,
        released,
        "the late reader was not admitted",
    )
    .await;
    reader.release().await.unwrap();
}

#[tokio::test]
async fn fencing_writers_increase_and_readers_see_the_last_write() {
    let (_server, locker) = setup();
    let fresh = read_long(&locker, "f").await;
    assert_eq!(fresh.fencing_token(), 0, "no write yet");
    fresh.release().await.unwrap();
    let first = write_long(&locker, "f").await;
    let t1 = first.fencing_token();
    assert!(t1 > 0);
    first.release().await.unwrap();
    let a = read_long(&locker, "f").await;
    let b = read_long(&locker, "f").await;
    assert_eq!((a.fencing_token(), b.fencing_token()), (t1, t1));
    a.release().await.unwrap();
    b.release().await.unwrap();
    let second = write_long(&locker, "f").await;
    let t2 = second.fencing_token();
    assert!(t2 > t1, "{t2} after {t1}");
    second.release().await.unwrap();
    let c = read_long(&locker, "f").await;
    assert_eq!(c.fencing_token(), t2);
    c.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_timeouts_are_honoured_both_ways() {
    let (server, locker) = setup();
    let (wait, most) = (Duration::from_millis(300), Duration::from_secs(2));
    let writer = write_long(&locker, "t").await;
    assert_gives_up(locker.read_lock("t"), wait, most).await;
    writer.release().await.unwrap();

    let a = read_long(&locker, "t").await;
    let b = read_long(&locker, "t").await;
    assert_gives_up(locker.write_lock("t"), wait, most).await;
    // The writer that gave up left the queue: readers come in again.
    let c = free_now(locker.read_lock("t")).await;
    for guard in [a, b, c] {
        guard.release().await.unwrap();
    }
    assert!(server.keys(&keys::reader_keys("t")).is_empty());
}

#[test]
fn sync_acquire_blocking_works() {
    let (server, locker) = setup();
    let a = locker.read_lock("s").acquire_blocking().unwrap();
    let b = locker.read_lock("s").acquire_blocking().unwrap();
    let refused = within_blocking(locker.write_lock("s"), Duration::ZERO);
    assert_timed_out(&refused);
    a.release_blocking().unwrap();
    // Dropping a guard releases it.
    drop(b);
    let w = within_blocking(locker.write_lock("s"), Duration::from_secs(5)).unwrap();
    assert!(server.exists(&keys::rw("s").lock));
    w.release_blocking().unwrap();
    assert!(!server.exists(&keys::rw("s").lock));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_lease_is_its_own_renewed_and_lost_alone() {
    let (server, locker) = setup();
    // Renewed: held past several leases.
    let renewed = renewing(locker.read_lock("l"), Duration::from_millis(400)).await;
    // Not renewed: frees its share when its lease ends (as a crash would).
    let short = leased(locker.read_lock("l"), Duration::from_millis(400)).await;
    assert_eq!(server.keys(&keys::reader_keys("l")).len(), 2);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!renewed.is_lost());
    assert!(short.is_lost(), "a reader's lease outlived its expiry");
    let keys = server.keys(&keys::reader_keys("l"));
    assert_eq!(keys.len(), 1, "{keys:?}");
    // A writer is kept out by the renewed reader alone.
    let writer = within(locker.write_lock("l"), Duration::from_millis(200)).await;
    assert_timed_out(&writer);
    // The renewed reader's key taken away: its lost signal fires.
    del(&server, &keys[0]);
    let lost = lost_within(
        &renewed,
        Duration::from_secs(3),
        "no lost signal within 3 s",
    )
    .await;
    assert!(matches!(lost, LockError::Lost { .. }), "{lost:?}");
    // Extension works on a reader's own key.
    let reader = leased(locker.read_lock("l"), Duration::from_secs(2)).await;
    reader.extend(Duration::from_secs(10)).await.unwrap();
    let key = server.keys(&keys::reader_keys("l")).pop().unwrap();
    assert!(server.pttl(&key) > 5_000, "{}", server.pttl(&key));
    reader.release().await.unwrap();
    drop(short);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_waiting_future_leaves_the_queue() {
    let (server, locker) = setup();
    let reader = read_long(&locker, "d").await;
    let waiting = spawn_waiter(&locker, "d", false);
    assert!(queued(&server, &keys::rw("d").queue, 1));
    waiting.abort();
    // Its entry gone, readers are admitted again at once.
    assert!(
        queued(&server, &keys::rw("d").queue, 0),
        "the aborted writer stayed queued"
    );
    let other = free_now(locker.read_lock("d")).await;
    other.release().await.unwrap();
    reader.release().await.unwrap();
    assert!(!server.exists(&keys::rw("d").lock));
}

#[tokio::test]
async fn a_redlock_refuses_read_write_locks() {
    let (servers, locker) = redlock_of_three();
    for e in [
        locker.read_lock("x").acquire().await.unwrap_err(),
        locker.write_lock("x").acquire().await.unwrap_err(),
    ] {
        assert_refused_by_redlock(&e, "read-write lock", &servers);
    }
}

#[tokio::test]
async fn a_lock_a_semaphore_and_a_read_write_lock_of_one_name_are_independent() {
    let (_server, locker) = setup();
    let lock = locker.lock("x").acquire().await.unwrap();
    let permit = locker.semaphore("x", 1).acquire().await.unwrap();
    let writer = free_now(locker.write_lock("x")).await;
    // And the other way round: the writer does not keep the lock out.
    lock.release().await.unwrap();
    let again = free_now(locker.lock("x")).await;
    for guard in [again, permit, writer] {
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_hold_at_least_keeps_a_writer_out_until_then() {
    let (_server, locker) = setup();
    let reader = held_at_least(locker.read_lock("hold"), LONG, Duration::from_millis(800)).await;
    let taken = Instant::now();
    reader.release().await.unwrap();
    let writer = write_long(&locker, "hold").await;
    let waited = taken.elapsed();
    assert!(
        waited >= Duration::from_millis(750) && waited < Duration::from_secs(3),
        "the writer got in after {waited:?}, the reader held at least 800 ms"
    );
    writer.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_reader_releases_its_share() {
    let (_server, locker) = setup();
    let panicking = {
        let locker = locker.clone();
        tokio::spawn(async move {
            let _guard = read_long(&locker, "p").await;
            panic!("the reader fails");
        })
    };
    assert!(panicking.await.is_err());
    let asked = Instant::now();
    let writer = got_within(locker.write_lock("p"), Duration::from_secs(5)).await;
    // Released on the way out, not at the 30 s lease's end.
    assert_within(asked, Duration::from_secs(2));
    writer.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_reading_its_own_name_waits_for_itself() {
    let (_server, locker) = setup();
    let writer = write_long(&locker, "own").await;
    // Not re-entered: the read side waits for the writer, here until its
    // acquire timeout.
    let nested = within(locker.read_lock("own"), Duration::from_millis(200)).await;
    assert_timed_out(&nested);
    writer.release().await.unwrap();
}

/// A reader released within its `hold_at_least` keeps its share until the
/// hold ends, then nothing of the lock stays: the index of readers expires
/// with the hold, without another call on the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_released_within_its_hold_leaves_no_key_behind() {
    let (server, locker) = setup_short_retention();
    for n in 0..20 {
        let (expire, hold) = (Duration::from_millis(600), Duration::from_millis(400));
        let reader = held_at_least(locker.read_lock(format!("report:{n}")), expire, hold).await;
        reader.release().await.unwrap();
    }
    // The holds keep the readers' shares: a writer waits for them.
    let busy = within(locker.write_lock("report:0"), Duration::ZERO).await;
    assert_timed_out(&busy);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let left = server.keys("lockattr:*");
    assert!(left.is_empty(), "keys stay after the holds: {left:?}");
}

/// Every key of a read-write lock expires: after the readers' and the
/// writer's leases plus the retention, none is left, whichever side held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_readers_and_writers_leave_no_key_behind() {
    let (server, locker) = setup_short_retention();
    let mut guards = Vec::new();
    for n in 0..20 {
        let name = format!("page:{n}");
        let side = if n % 2 == 0 {
            locker.read_lock(&name)
        } else {
            locker.write_lock(&name)
        };
        guards.push(leased(side, Duration::from_millis(300)).await);
    }
    // As a crashed holder would: no release, no Drop.
    std::mem::forget(guards);
    for key in server.keys("lockattr:*") {
        let ttl = server.pttl(&key);
        assert!((0..=500).contains(&ttl), "{key} has PTTL {ttl}");
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    let left = server.keys("lockattr:*");
    assert!(left.is_empty(), "keys stay after the leases: {left:?}");
}
