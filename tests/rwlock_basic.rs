//! Read-write locks on one server (`Locker::read_lock`, `write_lock`): many
//! readers or one writer; writer-preferring; a writer's release admits all
//! waiting readers at once and the last reader's release hands over to the
//! waiting writer, both through pub/sub; per-reader leases, renewal and the
//! lost signal; fencing; timeouts; Redlock refused; independent of the
//! lock and the semaphore of the same name.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockattr::{LockError, LockGuard, Locker};
use support::lockers::setup;
use support::waiters::queued;
use support::{RedisServer, keys};

const LONG: Duration = Duration::from_secs(30);

async fn read(locker: &Locker, name: &str) -> LockGuard {
    locker
        .read_lock(name)
        .expire(LONG)
        .acquire_timeout(LONG)
        .acquire()
        .await
        .unwrap()
}

async fn write(locker: &Locker, name: &str) -> LockGuard {
    locker
        .write_lock(name)
        .expire(LONG)
        .acquire_timeout(LONG)
        .acquire()
        .await
        .unwrap()
}

/// A waiter on its own task: when it got in, and its guard.
fn spawn_waiter(
    locker: &Locker,
    name: &'static str,
    reading: bool,
) -> tokio::task::JoinHandle<(Instant, LockGuard)> {
    let locker = locker.clone();
    tokio::spawn(async move {
        let guard = if reading {
            read(&locker, name).await
        } else {
            write(&locker, name).await
        };
        (Instant::now(), guard)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_overlap_and_a_writer_excludes_everyone() {
    let server = RedisServer::start();
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let broken = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for t in 0..12 {
        let url = server.url();
        let (readers, writers, most_readers, broken) = (
            readers.clone(),
            writers.clone(),
            most_readers.clone(),
            broken.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let locker = Locker::new(&url).unwrap();
            for i in 0..8 {
                if (t + i) % 4 == 0 {
                    let guard = write(&locker, "doc").await;
                    if writers.fetch_add(1, Ordering::SeqCst) != 0
                        || readers.load(Ordering::SeqCst) != 0
                    {
                        broken.store(true, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    writers.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                } else {
                    let guard = read(&locker, "doc").await;
                    let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                    most_readers.fetch_max(now, Ordering::SeqCst);
                    if writers.load(Ordering::SeqCst) != 0 {
                        broken.store(true, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    readers.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert!(
        !broken.load(Ordering::SeqCst),
        "a writer was inside with another writer or a reader"
    );
    assert!(
        most_readers.load(Ordering::SeqCst) >= 2,
        "readers never overlapped"
    );
    // Nothing held is left; every key left expires.
    assert!(server.keys(&keys::reader_keys("doc")).is_empty());
    assert!(!server.exists(&keys::rw("doc").lock));
    for key in server.keys("lockattr:*") {
        assert!(server.pttl(&key) > 0, "{key} has no expiry");
    }
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
                let guard = read(&locker, "feed").await;
                tokio::time::sleep(Duration::from_millis(40)).await;
                guard.release().await.unwrap();
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let writer = Locker::new(server.url()).unwrap();
    let asked = Instant::now();
    let guard = tokio::time::timeout(Duration::from_secs(2), write(&writer, "feed"))
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
    let first_writer = write(&locker, "h").await;
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
    let newcomer = locker
        .read_lock("h")
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await;
    assert!(
        matches!(newcomer, Err(LockError::Timeout { .. })),
        "{newcomer:?}"
    );

    let released = Instant::now();
    first_writer.release().await.unwrap();
    let mut guards = Vec::new();
    for reader in readers {
        let (at, guard) = tokio::time::timeout(Duration::from_secs(2), reader)
            .await
            .expect("a waiting reader was not admitted within 2 s of the writer's release")
            .unwrap();
        // Sooner than the once-a-second recheck: woken by the release.
        let woken = at.duration_since(released);
        assert!(woken < Duration::from_millis(800), "woken after {woken:?}");
        guards.push(guard);
    }
    assert_eq!(server.keys(&keys::reader_keys("h")).len(), 3);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !second_writer.is_finished(),
        "the writer entered with readers"
    );
    assert!(
        !late_reader.is_finished(),
        "a reader passed the queued writer"
    );

    // The last reader's release hands over to the writer.
    let last = guards.pop().unwrap();
    for guard in guards {
        guard.release().await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !second_writer.is_finished(),
        "the writer entered with a reader"
    );
    let released = Instant::now();
    last.release().await.unwrap();
    let (at, writer) = tokio::time::timeout(Duration::from_secs(2), second_writer)
        .await
        .expect("the writer was not handed the lock within 2 s")
        .unwrap();
    let woken = at.duration_since(released);
    assert!(woken < Duration::from_millis(800), "woken after {woken:?}");
    assert!(!late_reader.is_finished());
    let released = Instant::now();
    writer.release().await.unwrap();
    let (at, reader) = tokio::time::timeout(Duration::from_secs(2), late_reader)
        .await
        .expect("the late reader was not admitted")
        .unwrap();
    assert!(at.duration_since(released) < Duration::from_millis(800));
    reader.release().await.unwrap();
}

#[tokio::test]
async fn fencing_writers_increase_and_readers_see_the_last_write() {
    let (_server, locker) = setup();
    let fresh = read(&locker, "f").await;
    assert_eq!(fresh.fencing_token(), 0, "no write yet");
    fresh.release().await.unwrap();
    let first = write(&locker, "f").await;
    let t1 = first.fencing_token();
    assert!(t1 > 0);
    first.release().await.unwrap();
    let a = read(&locker, "f").await;
    let b = read(&locker, "f").await;
    assert_eq!((a.fencing_token(), b.fencing_token()), (t1, t1));
    a.release().await.unwrap();
    b.release().await.unwrap();
    let second = write(&locker, "f").await;
    let t2 = second.fencing_token();
    assert!(t2 > t1, "{t2} after {t1}");
    second.release().await.unwrap();
    let c = read(&locker, "f").await;
    assert_eq!(c.fencing_token(), t2);
    c.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_timeouts_are_honoured_both_ways() {
    let (server, locker) = setup();
    let writer = write(&locker, "t").await;
    let asked = Instant::now();
    let reader = locker
        .read_lock("t")
        .acquire_timeout(Duration::from_millis(300))
        .acquire()
        .await;
    let waited = asked.elapsed();
    assert!(
        matches!(reader, Err(LockError::Timeout { .. })),
        "{reader:?}"
    );
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    writer.release().await.unwrap();

    let a = read(&locker, "t").await;
    let b = read(&locker, "t").await;
    let asked = Instant::now();
    let writer = locker
        .write_lock("t")
        .acquire_timeout(Duration::from_millis(300))
        .acquire()
        .await;
    let waited = asked.elapsed();
    assert!(
        matches!(writer, Err(LockError::Timeout { .. })),
        "{writer:?}"
    );
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(2),
        "{waited:?}"
    );
    // The writer that gave up left the queue: readers come in again.
    let c = locker
        .read_lock("t")
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await
        .unwrap();
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
    let refused = locker
        .write_lock("s")
        .acquire_timeout(Duration::ZERO)
        .acquire_blocking();
    assert!(
        matches!(refused, Err(LockError::Timeout { .. })),
        "{refused:?}"
    );
    a.release_blocking().unwrap();
    // Dropping a guard releases it.
    drop(b);
    let w = locker
        .write_lock("s")
        .acquire_timeout(Duration::from_secs(5))
        .acquire_blocking()
        .unwrap();
    assert!(server.exists(&keys::rw("s").lock));
    w.release_blocking().unwrap();
    assert!(!server.exists(&keys::rw("s").lock));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_lease_is_its_own_renewed_and_lost_alone() {
    let (server, locker) = setup();
    // Renewed: held past several leases.
    let renewed = locker
        .read_lock("l")
        .expire(Duration::from_millis(400))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    // Not renewed: frees its share when its lease ends (as a crash would).
    let short = locker
        .read_lock("l")
        .expire(Duration::from_millis(400))
        .acquire()
        .await
        .unwrap();
    assert_eq!(server.keys(&keys::reader_keys("l")).len(), 2);
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!renewed.is_lost());
    assert!(short.is_lost(), "a reader's lease outlived its expiry");
    let keys = server.keys(&keys::reader_keys("l"));
    assert_eq!(keys.len(), 1, "{keys:?}");
    // A writer is kept out by the renewed reader alone.
    let writer = locker
        .write_lock("l")
        .acquire_timeout(Duration::from_millis(200))
        .acquire()
        .await;
    assert!(
        matches!(writer, Err(LockError::Timeout { .. })),
        "{writer:?}"
    );
    // The renewed reader's key taken away: its lost signal fires.
    let _: () = redis::cmd("DEL")
        .arg(&keys[0])
        .query(&mut server.client())
        .unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(3), renewed.lost())
        .await
        .expect("no lost signal within 3 s");
    assert!(matches!(lost, LockError::Lost { .. }), "{lost:?}");
    // Extension works on a reader's own key.
    let reader = locker
        .read_lock("l")
        .expire(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    reader.extend(Duration::from_secs(10)).await.unwrap();
    let key = server.keys(&keys::reader_keys("l")).pop().unwrap();
    assert!(server.pttl(&key) > 5_000, "{}", server.pttl(&key));
    reader.release().await.unwrap();
    drop(short);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_waiting_future_leaves_the_queue() {
    let (server, locker) = setup();
    let reader = read(&locker, "d").await;
    let waiting = spawn_waiter(&locker, "d", false);
    assert!(queued(&server, &keys::rw("d").queue, 1));
    waiting.abort();
    // Its entry gone, readers are admitted again at once.
    assert!(
        queued(&server, &keys::rw("d").queue, 0),
        "the aborted writer stayed queued"
    );
    let other = locker
        .read_lock("d")
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await
        .unwrap();
    other.release().await.unwrap();
    reader.release().await.unwrap();
    assert!(!server.exists(&keys::rw("d").lock));
}

#[tokio::test]
async fn a_redlock_refuses_read_write_locks() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let locker = Locker::redlock(servers.iter().map(RedisServer::url)).unwrap();
    for e in [
        locker.read_lock("x").acquire().await.unwrap_err(),
        locker.write_lock("x").acquire().await.unwrap_err(),
    ] {
        assert!(
            matches!(
                e,
                LockError::InvalidInput {
                    what: "read-write lock",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains("Redlock"), "{e}");
    }
    assert!(servers.iter().all(|s| s.keys("*").is_empty()));
}

#[tokio::test]
async fn a_lock_a_semaphore_and_a_read_write_lock_of_one_name_are_independent() {
    let (_server, locker) = setup();
    let lock = locker.lock("x").acquire().await.unwrap();
    let permit = locker.semaphore("x", 1).acquire().await.unwrap();
    let writer = locker
        .write_lock("x")
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await
        .unwrap();
    // And the other way round: the writer does not keep the lock out.
    lock.release().await.unwrap();
    let again = locker
        .lock("x")
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await
        .unwrap();
    for guard in [again, permit, writer] {
        guard.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_hold_at_least_keeps_a_writer_out_until_then() {
    let (_server, locker) = setup();
    let reader = locker
        .read_lock("hold")
        .expire(LONG)
        .hold_at_least(Duration::from_millis(800))
        .acquire()
        .await
        .unwrap();
    let taken = Instant::now();
    reader.release().await.unwrap();
    let writer = write(&locker, "hold").await;
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
            let _guard = read(&locker, "p").await;
            panic!("the reader fails");
        })
    };
    assert!(panicking.await.is_err());
    let asked = Instant::now();
    let writer = locker
        .write_lock("p")
        .acquire_timeout(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    // Released on the way out, not at the 30 s lease's end.
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    writer.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_reading_its_own_name_waits_for_itself() {
    let (_server, locker) = setup();
    let writer = write(&locker, "own").await;
    // Not re-entered: the read side waits for the writer, here until its
    // acquire timeout.
    let nested = locker
        .read_lock("own")
        .acquire_timeout(Duration::from_millis(200))
        .acquire()
        .await;
    assert!(
        matches!(nested, Err(LockError::Timeout { .. })),
        "{nested:?}"
    );
    writer.release().await.unwrap();
}

/// A reader released within its `hold_at_least` keeps its share until the
/// hold ends, then nothing of the lock stays: the index of readers expires
/// with the hold, without another call on the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_released_within_its_hold_leaves_no_key_behind() {
    let server = RedisServer::start();
    let locker = Locker::builder(server.url())
        .fence_retention(Duration::from_millis(200))
        .build()
        .unwrap();
    for n in 0..20 {
        let reader = locker
            .read_lock(format!("report:{n}"))
            .expire(Duration::from_millis(600))
            .hold_at_least(Duration::from_millis(400))
            .acquire()
            .await
            .unwrap();
        reader.release().await.unwrap();
    }
    // The holds keep the readers' shares: a writer waits for them.
    let busy = locker
        .write_lock("report:0")
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await;
    assert!(matches!(busy, Err(LockError::Timeout { .. })), "{busy:?}");
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let left = server.keys("lockattr:*");
    assert!(left.is_empty(), "keys stay after the holds: {left:?}");
}

/// Every key of a read-write lock expires: after the readers' and the
/// writer's leases plus the retention, none is left, whichever side held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_readers_and_writers_leave_no_key_behind() {
    let server = RedisServer::start();
    let locker = Locker::builder(server.url())
        .fence_retention(Duration::from_millis(200))
        .build()
        .unwrap();
    let mut guards = Vec::new();
    for n in 0..20 {
        let name = format!("page:{n}");
        let side = if n % 2 == 0 {
            locker.read_lock(&name)
        } else {
            locker.write_lock(&name)
        };
        guards.push(
            side.expire(Duration::from_millis(300))
                .acquire()
                .await
                .unwrap(),
        );
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
