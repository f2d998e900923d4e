//! What a semaphore promises its operators and its callers, against a real
//! redis-server:
//!
//! - A permit handed to a waiter that was SIGKILLed while queued (by its
//!   holder's release, or by a newcomer's request after the holder's lease
//!   ran out) shows in `inspect_semaphore` with the fencing token of the
//!   hand-over, and `force_unlock_permit` with that token frees it: the next
//!   caller gets the permit at once, not after the dead waiter's lease.
//! - The number of permits a semaphore is in use with is known as long as a
//!   permit is held, however long its holder renews it past the retention,
//!   and after a hand-over: a caller asking for another number is refused
//!   with `PermitsMismatch`, never given a permit.

use crate::support;

use std::time::{Duration, Instant};

use lockattr::{LockError, Locker};
use support::kinds::{
    assert_timed_out, assert_within, del, free_now, got_within, joined, leased,
    setup_short_retention, spawn_on, within, within_blocking,
};
use support::lockers::{labelled, setup};
use support::takes::try_permit;
use support::waiters::queued;
use support::{RedisServer, child_test, eventually, keys, wait_child};

/// Where the lock server is, for a child.
const LOCK_URL: &str = "LOCKATTR_SEMP_LOCK_URL";
/// The semaphore a child waits for.
const NAME: &str = "LOCKATTR_SEMP_NAME";
/// What a child prints if it ever gets its permit (it should be killed first).
const GOT: &str = "LOCKATTR_SEMP_GOT";
/// The lease a waiting child asks for: far longer than the tests run.
const DEAD_LEASE: Duration = Duration::from_secs(120);

/// Queues for a permit of the 1-permit semaphore `$NAME` (a lease of
/// [`DEAD_LEASE`]) and says so if it ever gets it; killed while queued.
#[test]
fn child_waiter() {
    let (Ok(url), Ok(name)) = (std::env::var(LOCK_URL), std::env::var(NAME)) else {
        return;
    };
    let locker = Locker::builder(url.as_str())
        .label("dead-waiter")
        .build()
        .unwrap();
    let request = locker.semaphore(&name, 1).expire(DEAD_LEASE);
    let guard = within_blocking(request, Duration::from_secs(120)).unwrap();
    println!("{GOT} {}", guard.fencing_token());
    std::thread::sleep(Duration::from_secs(120));
}

/// A child process queued for semaphore `name`, then SIGKILLed: its entry
/// stays in the queue (nobody gives it back).
fn queue_a_dead_waiter(server: &RedisServer, name: &str) {
    let url = server.url();
    let mut child = child_test("child_waiter", &[(LOCK_URL, url.as_str()), (NAME, name)])
        .spawn()
        .expect("spawn child test process");
    let in_queue = queued(server, &keys::sem(name).queue, 1);
    // SIGKILL: no give-back, no Drop.
    child.kill().unwrap();
    let output = wait_child(child, Duration::from_secs(10));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        in_queue,
        "the child did not queue\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(!stdout.contains(GOT), "the child got a permit: {stdout}");
    assert!(
        queued(server, &keys::sem(name).queue, 1),
        "the killed waiter left the queue"
    );
}

/// Listens on semaphore `name`'s channel for hand-over notices.
fn listen(server: &RedisServer, name: &str) -> redis::Connection {
    let mut con = server.client();
    con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    con.send_packed_command(
        &redis::cmd("SUBSCRIBE")
            .arg(keys::sem(name).channel)
            .get_packed_command(),
    )
    .unwrap();
    // The subscription's confirmation.
    let _ = con.recv_response().unwrap();
    con
}

/// The fencing token of the next hand-over notice (`<token>:<fence>:<lease>`)
/// heard on `con` that names a waiter.
fn handed_token(con: &mut redis::Connection) -> u64 {
    loop {
        let message = con.recv_response().expect("a hand-over notice");
        let parts: Vec<redis::Value> = redis::from_redis_value(message).unwrap();
        let kind: String = redis::from_redis_value(parts[0].clone()).unwrap();
        if kind != "message" {
            continue;
        }
        let notice: String = redis::from_redis_value(parts[2].clone()).unwrap();
        let mut fields = notice.split(':');
        let (waiter, fence, lease) = (
            fields.next().unwrap(),
            fields.next().unwrap(),
            fields.next().unwrap(),
        );
        if waiter != "-" {
            assert_eq!(lease, DEAD_LEASE.as_millis().to_string(), "{notice}");
            return fence.parse().unwrap();
        }
    }
}

/// What the operators see of the permit handed to the dead waiter, and
/// that freeing it by its token lets the next caller in at once.
async fn force_the_dead_waiters_permit(server: &RedisServer, name: &str, handed: u64) {
    assert!(handed > 0, "the notice carried no fencing token");
    let ops = labelled(server, "ops");
    let info = ops.inspect_semaphore(name).await.unwrap().expect("held");
    assert_eq!(info.permits, 1, "{info:?}");
    assert_eq!(info.holders.len(), 1, "{info:?}");
    let permit = &info.holders[0];
    assert_eq!(
        permit.fencing_token, handed,
        "the handed permit does not show the hand-over's token: {info:?}"
    );
    assert!(permit.ttl > Duration::from_secs(60), "{info:?}");
    assert_eq!(permit.holder.as_ref().unwrap().label, "dead-waiter");
    // The waiters' queue is empty now: the dead waiter holds the permit.
    assert_eq!(info.waiters, 0, "{info:?}");
    // The handed permit records the semaphore's number of permits: with the
    // record gone (as after its expiry), another number is refused.
    del(server, &keys::permits_record(name));
    let other = within(ops.semaphore(name, 2), Duration::ZERO).await;
    assert!(
        matches!(
            other,
            Err(LockError::PermitsMismatch {
                permits: 2,
                recorded: 1,
                ..
            })
        ),
        "the handed permit does not keep the number of permits: {other:?}"
    );
    assert!(
        ops.force_unlock_permit(name, permit.fencing_token)
            .await
            .unwrap(),
        "the dead waiter's permit was not freed"
    );
    let started = Instant::now();
    let next = within(ops.semaphore(name, 1), Duration::ZERO)
        .await
        .expect("the forced permit is free at once");
    assert_within(started, Duration::from_secs(2));
    assert!(next.fencing_token() > handed);
    next.release().await.unwrap();
    assert_eq!(ops.inspect_semaphore(name).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_released_to_a_killed_waiter_can_be_forced_free() {
    let (server, locker) = setup();
    let name = "released";
    let holder = leased(locker.semaphore(name, 1), Duration::from_secs(60)).await;
    queue_a_dead_waiter(&server, name);
    let mut notices = listen(&server, name);
    holder.release().await.unwrap();
    let handed = handed_token(&mut notices);
    force_the_dead_waiters_permit(&server, name, handed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_handed_to_a_killed_waiter_by_a_newcomer_can_be_forced_free() {
    let (server, locker) = setup();
    let name = "expired";
    // A holder that never releases: its lease runs out.
    let crashed = leased(locker.semaphore(name, 1), Duration::from_millis(1_500)).await;
    std::mem::forget(crashed);
    queue_a_dead_waiter(&server, name);
    let mut notices = listen(&server, name);
    let permit = keys::permit_key(name, 0);
    assert!(
        eventually(Duration::from_secs(5), || !server.exists(&permit)).is_some(),
        "the crashed holder's lease did not run out"
    );
    // A newcomer finds the permit free and hands it to the (dead) waiter
    // queued before it.
    let newcomer = within(locker.semaphore(name, 1), Duration::ZERO).await;
    assert_timed_out(&newcomer);
    let handed = handed_token(&mut notices);
    force_the_dead_waiters_permit(&server, name, handed).await;
}

/// A renewed 500 ms permit of semaphore `name` of `permits`, taken at
/// once (a caller that would wait keeps the record for its wait).
async fn renewed(locker: &Locker, name: &str, permits: u32) -> lockattr::LockGuard {
    let request = locker.semaphore(name, permits).expire(LEASE).renew(true);
    free_now(request).await
}

/// The lease of the renewed holders.
const LEASE: Duration = Duration::from_millis(500);

/// Long past a lease plus the 200 ms retention (when the record of the
/// number expires, with nobody taking a permit meanwhile).
const PAST_RETENTION: Duration = Duration::from_millis(1_600);

/// A caller asking for each of `asked` permits of `name` is refused,
/// naming `recorded`.
async fn refused(locker: &Locker, name: &str, asked: &[u32], recorded: i64) {
    for &permits in asked {
        for wait in [Duration::ZERO, Duration::from_secs(1)] {
            let started = Instant::now();
            let other = try_permit(locker, name, permits, Duration::from_secs(30), wait).await;
            match other {
                Err(LockError::PermitsMismatch {
                    permits: asked,
                    recorded: seen,
                    ..
                }) => assert_eq!((asked, seen), (permits, recorded)),
                other => {
                    panic!("{permits} permits of `{name}` (in use with {recorded}): {other:?}")
                }
            }
            assert!(started.elapsed() < Duration::from_millis(900));
        }
    }
}

/// Sleeps [`PAST_RETENTION`]; `holder` still holds after it.
async fn still_held_past_retention(holder: &lockattr::LockGuard) {
    tokio::time::sleep(PAST_RETENTION).await;
    assert!(!holder.is_lost());
}

/// The operators see `permits`, the number semaphore `name` is in use
/// with, and one permit held; a caller asking that number is served at once.
async fn seen_and_served(locker: &Locker, name: &str, permits: u32) {
    let info = locker.inspect_semaphore(name).await.unwrap().unwrap();
    assert_eq!((info.permits, info.holders.len()), (permits, 1), "{info:?}");
    let same = free_now(locker.semaphore(name, permits)).await;
    same.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_holder_keeps_the_number_of_permits_known() {
    let (_server, locker) = setup_short_retention();
    let name = "deploy";
    let holder = renewed(&locker, name, 3).await;
    still_held_past_retention(&holder).await;
    // More permits (a rolling deploy raising `permits`), and fewer.
    refused(&locker, name, &[5, 2, 1], 3).await;
    // The operators see the semaphore's number, not the permits held; the
    // same number is served.
    seen_and_served(&locker, name, 3).await;
    holder.release().await.unwrap();
}

/// The holders left are all in permits a caller asking fewer does not
/// look at: it is refused all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_beyond_a_smaller_number_is_seen() {
    let (server, locker) = setup_short_retention();
    let name = "shrink";
    let first = renewed(&locker, name, 5).await;
    let second = renewed(&locker, name, 5).await;
    let third = renewed(&locker, name, 5).await;
    let fourth = renewed(&locker, name, 5).await;
    assert!(server.exists(&keys::permit_key(name, 3)));
    for guard in [first, second, third] {
        guard.release().await.unwrap();
    }
    still_held_past_retention(&fourth).await;
    let only_permit_3 = || {
        assert_eq!(
            server.keys(&keys::permit_keys(name)),
            [keys::permit_key(name, 3)]
        )
    };
    only_permit_3();
    refused(&locker, name, &[3, 1, 8], 5).await;
    only_permit_3();
    seen_and_served(&locker, name, 5).await;
    fourth.release().await.unwrap();
}

/// Released to a waiter, a permit keeps the semaphore's number with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_number_of_permits_survives_a_hand_over() {
    let (server, locker) = setup_short_retention();
    let name = "handed";
    let mut holders = Vec::new();
    for _ in 0..3 {
        holders.push(renewed(&locker, name, 3).await);
    }
    let waiter = spawn_on(&locker, |locker| async move {
        let request = locker.semaphore(name, 3).expire(LEASE).renew(true);
        got_within(request, Duration::from_millis(1_000)).await
    });
    assert!(queued(&server, &keys::sem(name).queue, 1));
    let first = holders.remove(0);
    first.release().await.unwrap();
    let waiter = joined(
        waiter,
        Duration::from_secs(1),
        "the waiter was handed the permit",
    )
    .await;
    // Only the waiter holds now.
    for guard in holders {
        guard.release().await.unwrap();
    }
    still_held_past_retention(&waiter).await;
    refused(&locker, name, &[5, 2], 3).await;
    waiter.release().await.unwrap();
}

/// The fencing counter is shared by a semaphore's permits: one holder's
/// release never shortens it under another that still holds, so the
/// counter outlives every live permit (plus the retention).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_never_shortens_the_counter_under_other_holders() {
    let (server, locker) = setup_short_retention();
    let long = leased(locker.semaphore("shared", 2), Duration::from_secs(20)).await;
    let short = leased(locker.semaphore("shared", 2), Duration::from_secs(1)).await;
    short.release().await.unwrap();
    let ttl = server.pttl(&keys::sem("shared").fence);
    assert!(
        ttl > 19_000,
        "the counter runs out under the other holder: PTTL {ttl}"
    );
    long.release().await.unwrap();
}
