//! Semaphores on one server (`Locker::semaphore`): at most N holders, each
//! with its own token, lease and fencing token; first come first served;
//! hand-over wakes the oldest waiter at once; a mismatch of `permits` is
//! refused; renewal and the lost signal work per permit.

use crate::support;

use std::time::{Duration, Instant};

use lockattr::{LockError, Locker};
use support::kinds::{
    Census, assert_all_expire, assert_invalid, assert_refused_by_redlock, assert_timed_out,
    assert_waited, assert_within, assert_woken, del, free_now, got_within, held_at_least, joined,
    leased, lost_within, redlock_of_three, renewing, run_tasks, spawn_on, spawn_stamped, within,
    within_blocking, woken,
};
use support::lockers::{locker, setup};
use support::takes::try_permit;
use support::waiters::queued;
use support::{RedisServer, eventually, keys, lock_key};

/// The permit keys of semaphore `name` under the default prefix.
fn permit_keys(server: &RedisServer, name: &str) -> Vec<String> {
    server.keys(&keys::permit_keys(name))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn never_more_than_three_holders_among_sixteen_contenders() {
    let server = RedisServer::start();
    let census = Census::default();
    let mut fences = run_tasks(16, |t| {
        let url = server.url();
        let census = census.clone();
        async move {
            // Four Lockers: tasks of one process and of "other" processes.
            let locker = Locker::new(&url).unwrap();
            let mut fences = Vec::new();
            for _ in 0..6 {
                let (expire, wait) = (Duration::from_secs(30), Duration::from_secs(60));
                let guard = try_permit(&locker, "gpu", 3, expire, wait).await.unwrap();
                census.enter();
                fences.push(guard.fencing_token());
                tokio::time::sleep(Duration::from_millis(2 + t as u64 % 3)).await;
                census.leave();
                guard.release().await.unwrap();
            }
            fences
        }
    })
    .await
    .concat();
    let max = census.most();
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
    let third = within(locker.semaphore("s", 2), Duration::ZERO).await;
    assert_timed_out(&third);
    // A release frees exactly one permit.
    a.release().await.unwrap();
    let c = free_now(locker.semaphore("s", 2)).await;
    assert!(c.fencing_token() > b.fencing_token());
    b.release().await.unwrap();
    c.release().await.unwrap();
    assert!(permit_keys(&server, "s").is_empty());
    // Every key left has an expiry.
    assert_all_expire(&server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_permit_to_the_oldest_waiter_at_once() {
    let (server, locker) = setup();
    // The waiters' own Locker, as in another process: the release reaches
    // them through pub/sub.
    let waiters = Locker::new(server.url()).unwrap();
    let long = Duration::from_secs(30);
    let a = leased(locker.semaphore("q", 2), long).await;
    let b = leased(locker.semaphore("q", 2), long).await;
    let first = spawn_stamped(&waiters, |locker| async move {
        try_permit(&locker, "q", 2, long, long).await.unwrap()
    });
    assert!(
        queued(&server, &keys::sem("q").queue, 1),
        "the first waiter did not queue"
    );
    let second = spawn_stamped(&waiters, |locker| async move {
        try_permit(&locker, "q", 2, long, long).await.unwrap()
    });
    assert!(
        queued(&server, &keys::sem("q").queue, 2),
        "the second waiter did not queue"
    );
    // A newcomer does not pass them.
    let newcomer = within(locker.semaphore("q", 2), Duration::ZERO).await;
    assert!(newcomer.is_err(), "{newcomer:?}");
    let released = Instant::now();
    a.release().await.unwrap();
    let two = Duration::from_secs(2);
    // Sooner than a waiter's periodic recheck (1 s): woken by the release.
    let first_guard = woken(
        first,
        two,
        released,
        "the oldest waiter was not woken within 2 s of the release",
    )
    .await;
    assert!(!second.is_finished(), "the later waiter was served first");
    b.release().await.unwrap();
    let (_, second_guard) = joined(second, two, "the second waiter was not woken within 2 s").await;
    assert!(second_guard.fencing_token() > first_guard.fencing_token());
    first_guard.release().await.unwrap();
    second_guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_whose_lease_ran_out_goes_to_the_oldest_waiter_not_a_newcomer() {
    let (server, locker) = setup();
    // A holder that never releases (as if its process had died).
    let crashed = leased(locker.semaphore("e", 1), Duration::from_millis(800)).await;
    std::mem::forget(crashed);
    let taken = Instant::now();
    let waiter = spawn_on(&locker, |locker| async move {
        let long = Duration::from_secs(30);
        try_permit(&locker, "e", 1, long, long).await.unwrap()
    });
    assert!(queued(&server, &keys::sem("e").queue, 1));
    // Newcomers keep trying through the expiry: none may pass the waiter.
    let mut passed = 0;
    while taken.elapsed() < Duration::from_millis(1_500) {
        if let Ok(g) = within(locker.semaphore("e", 1), Duration::ZERO).await {
            passed += 1;
            g.release().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let three = Duration::from_secs(3);
    let guard = joined(waiter, three, "the waiter did not get the expired permit").await;
    assert_eq!(passed, 0, "a newcomer took the permit before the waiter");
    assert!(taken.elapsed() >= Duration::from_millis(790));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn another_number_of_permits_is_refused() {
    let (_server, locker) = setup();
    let held = locker.semaphore("m", 3).acquire().await.unwrap();
    let other = within(locker.semaphore("m", 4), Duration::from_secs(1)).await;
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
        assert_invalid(&e, "permits");
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
    let permit = free_now(locker.semaphore("gpu", 1)).await;
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
    let guard = renewing(locker.semaphore("r", 2), Duration::from_millis(600)).await;
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert!(!guard.is_lost());
    let keys = permit_keys(&server, "r");
    assert_eq!(keys.len(), 1, "{keys:?}");
    // Still this guard's: a full semaphore shows it.
    let other = locker.semaphore("r", 2).acquire().await.unwrap();
    let full = within(locker.semaphore("r", 2), Duration::ZERO).await;
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
    del(&server, key);
    let three = Duration::from_secs(3);
    let lost = lost_within(
        &guard,
        three,
        "the loss of a renewed permit was not signalled",
    )
    .await;
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
            within_blocking(locker.semaphore("b", 2), Duration::from_secs(10))
                .map(|g| (Instant::now(), g))
        })
    };
    assert!(queued(&server, &keys::sem("b").queue, 1));
    let released = Instant::now();
    a.release_blocking().unwrap();
    let (at, c) = waiter.join().unwrap().unwrap();
    assert_woken(at, released);
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
    let (servers, locker) = redlock_of_three();
    let e = locker.semaphore("x", 2).acquire().await.unwrap_err();
    assert_refused_by_redlock(&e, "semaphore", &servers);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_stops_waiting_does_not_get_the_permit() {
    let (server, locker) = setup();
    let long = Duration::from_secs(30);
    let holder = leased(locker.semaphore("c", 1), long).await;
    let wait =
        |locker: Locker| async move { try_permit(&locker, "c", 1, long, long).await.unwrap() };
    let gone = spawn_stamped(&locker, wait);
    assert!(queued(&server, &keys::sem("c").queue, 1));
    let next = spawn_stamped(&locker, wait);
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
    let five = Duration::from_secs(5);
    let guard = woken(
        next,
        five,
        released,
        "the permit went to the waiter that had gone",
    )
    .await;
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_at_least_keeps_a_released_permit_until_the_hold_ends() {
    let (_server, locker) = setup();
    let (expire, hold) = (Duration::from_secs(10), Duration::from_millis(1_000));
    let guard = held_at_least(locker.semaphore("h", 1), expire, hold).await;
    let taken = Instant::now();
    guard.release().await.unwrap();
    let busy = within(locker.semaphore("h", 1), Duration::ZERO).await;
    assert!(busy.is_err(), "the permit was free before the hold ended");
    let next = got_within(locker.semaphore("h", 1), Duration::from_secs(5)).await;
    let waited = taken.elapsed();
    assert_waited(
        waited,
        Duration::from_millis(950),
        Duration::from_millis(1_900),
    );
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_missing_password_is_reported_as_such() {
    let server = RedisServer::start_with(&["--requirepass", "sesame"]);
    let locker = locker(&server);
    let started = Instant::now();
    let e = within(locker.semaphore("p", 8), Duration::from_secs(5))
        .await
        .unwrap_err();
    let message = e.to_string();
    assert!(message.contains("NOAUTH"), "{message}");
    assert_within(started, Duration::from_secs(2));
}
