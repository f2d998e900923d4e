//! Semaphores on one server (`Locker::semaphore`): at most N holders, each
//! with its own token, lease and fencing token; first come first served;
//! hand-over wakes the oldest waiter at once; a mismatch of `permits` is
//! refused; renewal and the lost signal work per permit.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockattr::{LockError, Locker};
use support::lockers::setup;
use support::waiters::queued;
use support::{RedisServer, eventually, keys, lock_key};

/// The permit keys of semaphore `name` under the default prefix.
fn permit_keys(server: &RedisServer, name: &str) -> Vec<String> {
    server.keys(&keys::permit_keys(name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn never_more_than_three_holders_among_sixteen_contenders() {
    let server = RedisServer::start();
    let inside = Arc::new(AtomicUsize::new(0));
    let max_inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..16 {
        let url = server.url();
        let (inside, max_inside) = (inside.clone(), max_inside.clone());
        tasks.push(tokio::spawn(async move {
            // Four Lockers: tasks of one process and of "other" processes.
            let locker = Locker::new(&url).unwrap();
            let mut fences = Vec::new();
            for _ in 0..6 {
                let guard = locker
                    .semaphore("gpu", 3)
                    .expire(Duration::from_secs(30))
                    .acquire_timeout(Duration::from_secs(60))
                    .acquire()
                    .await
                    .unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                max_inside.fetch_max(now, Ordering::SeqCst);
                fences.push(guard.fencing_token());
                tokio::time::sleep(Duration::from_millis(2 + t % 3)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
            fences
        }));
    }
    let mut fences = Vec::new();
    for task in tasks {
        fences.extend(task.await.unwrap());
    }
    let max = max_inside.load(Ordering::SeqCst);
    assert!(max <= 3, "{max} holders at once with 3 permits");
    assert_eq!(max, 3, "the semaphore never let 3 hold at once");
    // Every acquisition had a fencing token of its own.
    let n = fences.len();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), n, "two holders shared a fencing token");
    assert!(permit_keys(&server, "gpu").is_empty(), "a permit was left");
}

#[tokio::test]
async fn holders_have_their_own_tokens_and_increasing_fences() {
    let (server, locker) = setup();
    let a = locker.semaphore("s", 2).acquire().await.unwrap();
    let b = locker.semaphore("s", 2).acquire().await.unwrap();
    assert!(b.fencing_token() > a.fencing_token());
    let keys = permit_keys(&server, "s");
    assert_eq!(keys.len(), 2, "{keys:?}");
    let owners: Vec<_> = keys.iter().map(|k| server.owner(k).unwrap()).collect();
    assert_ne!(owners[0], owners[1]);
    // A third finds both taken.
    let third = locker
        .semaphore("s", 2)
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await;
    assert!(matches!(third, Err(LockError::Timeout { .. })), "{third:?}");
    // A release frees exactly one permit.
    a.release().await.unwrap();
    let c = locker
        .semaphore("s", 2)
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await
        .unwrap();
    assert!(c.fencing_token() > b.fencing_token());
    b.release().await.unwrap();
    c.release().await.unwrap();
    assert!(permit_keys(&server, "s").is_empty());
    // Every key left has an expiry.
    for key in server.keys("lockattr:*") {
        assert!(server.pttl(&key) > 0, "{key} has no expiry");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_permit_to_the_oldest_waiter_at_once() {
    let (server, locker) = setup();
    // The waiters' own Locker, as in another process: the release reaches
    // them through pub/sub.
    let waiters = Locker::new(server.url()).unwrap();
    let long = Duration::from_secs(30);
    let a = locker
        .semaphore("q", 2)
        .expire(long)
        .acquire()
        .await
        .unwrap();
    let b = locker
        .semaphore("q", 2)
        .expire(long)
        .acquire()
        .await
        .unwrap();
    let first = {
        let locker = waiters.clone();
        tokio::spawn(async move {
            let guard = locker
                .semaphore("q", 2)
                .expire(long)
                .acquire_timeout(long)
                .acquire()
                .await
                .unwrap();
            (Instant::now(), guard)
        })
    };
    assert!(
        queued(&server, &keys::sem("q").queue, 1),
        "the first waiter did not queue"
    );
    let second = {
        let locker = waiters.clone();
        tokio::spawn(async move {
            let guard = locker
                .semaphore("q", 2)
                .expire(long)
                .acquire_timeout(long)
                .acquire()
                .await
                .unwrap();
            (Instant::now(), guard)
        })
    };
    assert!(
        queued(&server, &keys::sem("q").queue, 2),
        "the second waiter did not queue"
    );
    // A newcomer does not pass them.
    let newcomer = locker
        .semaphore("q", 2)
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await;
    assert!(newcomer.is_err(), "{newcomer:?}");
    let released = Instant::now();
    a.release().await.unwrap();
    let (at, first_guard) = tokio::time::timeout(Duration::from_secs(2), first)
        .await
        .expect("the oldest waiter was not woken within 2 s of the release")
        .unwrap();
    // Sooner than a waiter's periodic recheck (1 s): woken by the release.
    let woken = at.duration_since(released);
    assert!(woken < Duration::from_millis(800), "woken after {woken:?}");
    assert!(!second.is_finished(), "the later waiter was served first");
    b.release().await.unwrap();
    let (_, second_guard) = tokio::time::timeout(Duration::from_secs(2), second)
        .await
        .expect("the second waiter was not woken within 2 s")
        .unwrap();
    assert!(second_guard.fencing_token() > first_guard.fencing_token());
    first_guard.release().await.unwrap();
    second_guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_whose_lease_ran_out_goes_to_the_oldest_waiter_not_a_newcomer() {
    let (server, locker) = setup();
    // A holder that never releases (as if its process had died).
    let crashed = locker
        .semaphore("e", 1)
        .expire(Duration::from_millis(800))
        .acquire()
        .await
        .unwrap();
    std::mem::forget(crashed);
    let taken = Instant::now();
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .semaphore("e", 1)
                .expire(Duration::from_secs(30))
                .acquire_timeout(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap()
        })
    };
    assert!(queued(&server, &keys::sem("e").queue, 1));
    // Newcomers keep trying through the expiry: none may pass the waiter.
    let mut passed = 0;
    while taken.elapsed() < Duration::from_millis(1_500) {
        if let Ok(g) = locker
            .semaphore("e", 1)
            .acquire_timeout(Duration::ZERO)
            .acquire()
            .await
        {
            passed += 1;
            g.release().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let guard = tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .expect("the waiter did not get the expired permit")
        .unwrap();
    assert_eq!(passed, 0, "a newcomer took the permit before the waiter");
    assert!(taken.elapsed() >= Duration::from_millis(790));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn another_number_of_permits_is_refused() {
    let (_server, locker) = setup();
    let held = locker.semaphore("m", 3).acquire().await.unwrap();
    let other = locker
        .semaphore("m", 4)
        .acquire_timeout(Duration::from_secs(1))
        .acquire()
        .await;
    match other {
        Err(LockError::PermitsMismatch {
            name,
            permits,
            recorded,
        }) => {
            assert_eq!((name.as_str(), permits, recorded), ("m", 4, 3));
        }
        other => panic!("not refused: {other:?}"),
    }
    let message = locker
        .semaphore("m", 2)
        .acquire()
        .await
        .unwrap_err()
        .to_string();
    assert!(message.contains("same `permits`"), "{message}");
    // The same number still works.
    let second = locker.semaphore("m", 3).acquire().await.unwrap();
    second.release().await.unwrap();
    held.release().await.unwrap();
    // Refused before Redis: no permits, too many.
    for bad in [0, lockattr::MAX_PERMITS + 1] {
        let e = locker.semaphore("z", bad).acquire().await.unwrap_err();
        assert!(
            matches!(
                e,
                LockError::InvalidInput {
                    what: "permits",
                    ..
                }
            ),
            "{e:?}"
        );
    }
    let most = locker
        .semaphore("big", lockattr::MAX_PERMITS)
        .acquire()
        .await
        .unwrap();
    most.release().await.unwrap();
}

#[tokio::test]
async fn a_lock_and_a_semaphore_of_one_name_do_not_clash() {
    let (server, locker) = setup();
    let lock = locker.lock("gpu").acquire().await.unwrap();
    let permit = locker
        .semaphore("gpu", 1)
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await
        .unwrap();
    assert!(server.exists(&lock_key("gpu")));
    assert!(server.exists(&keys::permit_key("gpu", 0)));
    lock.release().await.unwrap();
    assert!(server.exists(&keys::permit_key("gpu", 0)));
    permit.release().await.unwrap();
    assert!(!server.exists(&keys::permit_key("gpu", 0)));
}

#[tokio::test]
async fn renewal_keeps_a_permit_past_its_lease() {
    let (server, locker) = setup();
    let guard = locker
        .semaphore("r", 2)
        .expire(Duration::from_millis(600))
        .renew(true)
        .acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert!(!guard.is_lost());
    let keys = permit_keys(&server, "r");
    assert_eq!(keys.len(), 1, "{keys:?}");
    // Still this guard's: a full semaphore shows it.
    let other = locker.semaphore("r", 2).acquire().await.unwrap();
    let full = locker
        .semaphore("r", 2)
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await;
    assert!(full.is_err());
    guard.extend(Duration::from_secs(5)).await.unwrap();
    guard.release().await.unwrap();
    other.release().await.unwrap();
}

#[tokio::test]
async fn a_deleted_permit_is_reported_lost_and_only_its_holder_is() {
    let (server, locker) = setup();
    fn renewed(locker: &Locker) -> lockattr::LockBuilder<'_> {
        locker
            .semaphore("l", 2)
            .expire(Duration::from_millis(900))
            .renew(true)
    }
    // The first free permit is taken first: `guard` holds permit 0.
    let guard = renewed(&locker).acquire().await.unwrap();
    let keep = renewed(&locker).acquire().await.unwrap();
    let key = "lockattr:{l}:sem:permit:0";
    assert!(server.exists(key));
    let _: i64 = redis::cmd("DEL")
        .arg(key)
        .query(&mut server.client())
        .unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("the loss of a renewed permit was not signalled");
    assert!(lost.is_lost(), "{lost:?}");
    assert!(guard.is_lost());
    assert!(!keep.is_lost(), "the other holder was reported lost");
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotOwned { .. } | LockError::Lost { .. })
    ));
    keep.release().await.unwrap();
}

#[test]
fn blocking_acquire_and_release() {
    let (server, locker) = setup();
    let a = locker.semaphore("b", 2).acquire_blocking().unwrap();
    let b = locker.semaphore("b", 2).acquire_blocking().unwrap();
    let waiter = {
        let locker = locker.clone();
        std::thread::spawn(move || {
            locker
                .semaphore("b", 2)
                .acquire_timeout(Duration::from_secs(10))
                .acquire_blocking()
                .map(|g| (Instant::now(), g))
        })
    };
    assert!(queued(&server, &keys::sem("b").queue, 1));
    let released = Instant::now();
    a.release_blocking().unwrap();
    let (at, c) = waiter.join().unwrap().unwrap();
    let woken = at.duration_since(released);
    assert!(woken < Duration::from_millis(800), "woken after {woken:?}");
    drop(c);
    drop(b);
    assert!(
        eventually(Duration::from_secs(2), || permit_keys(&server, "b")
            .is_empty())
        .is_some()
    );
}

#[tokio::test]
async fn a_redlock_refuses_semaphores() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let locker = Locker::redlock(servers.iter().map(RedisServer::url)).unwrap();
    let e = locker.semaphore("x", 2).acquire().await.unwrap_err();
    assert!(
        matches!(
            e,
            LockError::InvalidInput {
                what: "semaphore",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("Redlock"), "{e}");
    assert!(servers.iter().all(|s| s.keys("*").is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_stops_waiting_does_not_get_the_permit() {
    let (server, locker) = setup();
    let long = Duration::from_secs(30);
    let holder = locker
        .semaphore("c", 1)
        .expire(long)
        .acquire()
        .await
        .unwrap();
    let wait = |locker: Locker| async move {
        let guard = locker
            .semaphore("c", 1)
            .expire(long)
            .acquire_timeout(long)
            .acquire()
            .await
            .unwrap();
        (Instant::now(), guard)
    };
    let gone = tokio::spawn(wait(locker.clone()));
    assert!(queued(&server, &keys::sem("c").queue, 1));
    let next = tokio::spawn(wait(locker.clone()));
    assert!(queued(&server, &keys::sem("c").queue, 2));
    // The first waiter's caller goes away: it leaves the queue.
    gone.abort();
    assert!(gone.await.unwrap_err().is_cancelled());
    assert!(
        queued(&server, &keys::sem("c").queue, 1),
        "the cancelled waiter stayed queued"
    );
    let released = Instant::now();
    holder.release().await.unwrap();
    let (at, guard) = tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("the permit went to the waiter that had gone")
        .unwrap();
    let woken = at.duration_since(released);
    assert!(woken < Duration::from_millis(800), "woken after {woken:?}");
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_at_least_keeps_a_released_permit_until_the_hold_ends() {
    let (_server, locker) = setup();
    let guard = locker
        .semaphore("h", 1)
        .expire(Duration::from_secs(10))
        .hold_at_least(Duration::from_millis(1_000))
        .acquire()
        .await
        .unwrap();
    let taken = Instant::now();
    guard.release().await.unwrap();
    let busy = locker
        .semaphore("h", 1)
        .acquire_timeout(Duration::ZERO)
        .acquire()
        .await;
    assert!(busy.is_err(), "the permit was free before the hold ended");
    let next = locker
        .semaphore("h", 1)
        .acquire_timeout(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    let waited = taken.elapsed();
    assert!(
        waited >= Duration::from_millis(950),
        "taken after {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(1_900),
        "taken after {waited:?}"
    );
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_missing_password_is_reported_as_such() {
    let server = RedisServer::start_with(&["--requirepass", "sesame"]);
    let locker = Locker::new(server.url()).unwrap();
    let started = Instant::now();
    let e = locker
        .semaphore("p", 8)
        .acquire_timeout(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap_err();
    let message = e.to_string();
    assert!(message.contains("NOAUTH"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}
