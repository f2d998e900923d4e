//! Redis ACL users: a Locker that logs in as `user:password` in its URL,
//! and one whose user may run only the commands the library needs (the
//! rule set the README gives), on keys and channels under its prefix. Every
//! operation works: acquire, hand-over to a waiter of another Locker
//! through pub/sub, renewal, extend, release; and on a Redlock, where the
//! user may not run `INFO`, restarted nodes still stay out of a majority.

use crate::support;

use std::time::{Duration, Instant};

use lockattr::{LockError, Locker};
use support::deployments::{
    RW_RULES, acl_setuser, held_at_least, hold_for, joined, lock_error,
    readme_user as restricted_user, spawn_try_set, try_lock, try_renewed, try_renewed_read,
    try_write_lock, user_url,
};
use support::takes::try_take;
use support::{RedisServer, lock_key};

/// Commands the user was refused (ACL log), for messages.
fn refused(server: &RedisServer) -> String {
    let log: redis::Value = redis::cmd("ACL")
        .arg("LOG")
        .query(&mut server.client())
        .expect("ACL LOG");
    format!("{log:?}")
}

/// Everything a Locker does, through `url` (and a second Locker on the
/// same server for the hand-over): acquire, a waiter handed the lock on
/// release, renewal past the lease, extend, release, and a release within
/// `hold_at_least` (which publishes when the lock now ends).
async fn every_operation(server: &RedisServer, url: &str) {
    let locker = Locker::new(url).unwrap();
    let other = Locker::new(url).unwrap();
    locker.ping().await.unwrap();

    let guard = try_renewed(&locker, "acl:order", Duration::from_millis(600))
        .await
        .unwrap_or_else(|e| panic!("acquire: {e}; refused: {}", refused(server)));
    let waiter = tokio::spawn(async move {
        let start = Instant::now();
        let guard = try_lock(&other, "acl:order", Duration::from_secs(20)).await;
        (guard, start.elapsed())
    });
    // Past the lease: renewal keeps it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !guard.is_lost(),
        "renewal failed; refused: {}",
        refused(server)
    );
    guard.extend(Duration::from_secs(5)).await.unwrap();
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (handed, waited) = waiter.await.unwrap();
    let handed = handed.unwrap_or_else(|e| panic!("waiter: {e}; refused: {}", refused(server)));
    // Handed over at the release, not at the 20 s deadline or a lease end.
    assert!(
        released_at.elapsed() < Duration::from_secs(2),
        "the waiter returned {:?} after the release (waited {waited:?})",
        released_at.elapsed()
    );
    assert!(handed.fencing_token() > 0);
    handed.release().await.unwrap();

    let held = held_at_least(&locker, "acl:report", Duration::from_secs(2)).await;
    held.release()
        .await
        .unwrap_or_else(|e| panic!("release within the hold: {e}; refused: {}", refused(server)));
    let left = server.pttl(&lock_key("acl:report"));
    assert!(
        left > 0 && left <= 2_000,
        "PTTL {left} ms after a release within the hold"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_and_password_in_the_url_log_in() {
    let server = RedisServer::start();
    acl_setuser(&server, "app", &["on", ">s3cret", "~*", "&*", "+@all"]);
    every_operation(&server, &user_url(&server, "app", "s3cret")).await;

    // A wrong password: Redis refused (`LockError::Redis`, not
    // `Connection`), and the error does not show it.
    let wrong = Locker::new(user_url(&server, "app", "wrong-pw")).unwrap();
    let err = lock_error(&wrong, "acl:x", Duration::ZERO).await;
    assert!(matches!(err, LockError::Redis { .. }), "{err:?}");
    assert!(err.to_string().to_lowercase().contains("auth"), "{err}");
    assert!(!format!("{err} {err:?}").contains("wrong-pw"), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_with_only_the_readme_rules_can_do_everything() {
    let server = RedisServer::start();
    restricted_user(&server, "locker", "pw");
    every_operation(&server, &user_url(&server, "locker", "pw")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_rules_keep_the_user_to_its_prefix() {
    let server = RedisServer::start();
    restricted_user(&server, "locker", "pw");
    // Another prefix is outside `~lockattr:*`: refused, never a wrong lock.
    let outside = Locker::builder(user_url(&server, "locker", "pw"))
        .prefix("other:")
        .build()
        .unwrap();
    let err = lock_error(&outside, "x", Duration::ZERO).await;
    assert!(
        err.to_string().to_lowercase().contains("permission")
            || err.to_string().to_lowercase().contains("noperm"),
        "{err}"
    );
    assert!(server.keys("other:*").is_empty());
}

/// A Redlock whose user has the README's rules (no `INFO`): the marker key
/// tells when each node last lost its data, so nodes restarted empty do
/// not vote before `max_lease`, and the lock works on the nodes that have
/// been up long enough.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_user_without_info_still_locks_and_keeps_restarted_nodes_out() {
    let mut nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    for node in &nodes {
        restricted_user(node, "locker", "pw");
    }
    let urls: Vec<String> = nodes.iter().map(|n| user_url(n, "locker", "pw")).collect();
    let max_lease = Duration::from_secs(2);
    let locker = Locker::redlock_builder(&urls)
        .max_lease(max_lease)
        .build()
        .unwrap();
    // The first Locker to meet the nodes writes their markers; they vote
    // once the markers are `max_lease` old.
    let _ = locker.ping().await;
    let (expire, wait) = (Duration::from_secs(1), Duration::from_secs(6));
    let guard = try_take(&locker, "acl:redlock", expire, wait)
        .await
        .unwrap_or_else(|e| panic!("{e}; refused: {}", refused(&nodes[0])));
    guard.release().await.unwrap();

    // Two of three restarted empty (their ACL users with them: set again).
    for node in &mut nodes[..2] {
        node.restart();
        restricted_user(node, "locker", "pw");
    }
    let err = try_take(&locker, "acl:redlock", expire, Duration::ZERO)
        .await
        .unwrap_err();
    assert!(err.is_no_quorum(), "restarted nodes voted at once: {err:?}");
}

/// Lockers of two users of `server`: `app` with the README's rules, and
/// `ops` with `+hlen +scan` on top.
fn app_and_operator(server: &RedisServer) -> (Locker, Locker) {
    restricted_user(server, "app", "app-pw");
    restricted_user(server, "ops", "ops-pw");
    acl_setuser(server, "ops", &["+hlen", "+scan"]);
    let app = Locker::new(user_url(server, "app", "app-pw")).unwrap();
    let ops = Locker::new(user_url(server, "ops", "ops-pw")).unwrap();
    (app, ops)
}

/// An operator's user: the README's rules plus `+hlen +scan` run
/// `inspect`, `locks` and `force_unlock`; without them, a clear refusal.
#[tokio::test]
async fn the_operator_calls_with_the_readmes_additions() {
    let server = RedisServer::start();
    let (app, ops) = app_and_operator(&server);
    let guard = app.lock("acl:job").acquire().await.unwrap();
    let info = ops
        .inspect("acl:job")
        .await
        .unwrap_or_else(|e| panic!("inspect: {e}; refused: {}", refused(&server)))
        .expect("held");
    assert_eq!(info.fencing_token, guard.fencing_token());
    let listed = ops.locks("acl:*", 10).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(ops.force_unlock("acl:job").await.unwrap());
    assert!(guard.release().await.is_err(), "it was forced");
    // The application's user alone may not scan.
    let err = app.locks("acl:*", 10).await.unwrap_err();
    assert!(matches!(err, LockError::Redis { .. }), "{err}");
}

/// The operator's semaphore calls need `+lrange` on top (the README says
/// so): with it they run; without it, a clear refusal.
#[tokio::test]
async fn the_operator_semaphore_calls_with_the_readmes_additions() {
    let server = RedisServer::start();
    let (app, ops) = app_and_operator(&server);
    let guard = app.semaphore("acl:gpu", 2).acquire().await.unwrap();
    let err = ops.inspect_semaphore("acl:gpu").await.unwrap_err();
    assert!(matches!(err, LockError::Redis { .. }), "{err}");
    acl_setuser(&server, "ops", &["+lrange"]);
    let info = ops
        .inspect_semaphore("acl:gpu")
        .await
        .unwrap_or_else(|e| panic!("inspect_semaphore: {e}; refused: {}", refused(&server)))
        .expect("in use");
    assert_eq!(info.holders[0].fencing_token, guard.fencing_token());
    assert_eq!(ops.semaphores("acl:*", 10).await.unwrap().len(), 1);
    assert!(
        ops.force_unlock_permit("acl:gpu", guard.fencing_token())
            .await
            .unwrap()
    );
    assert!(guard.release().await.is_err(), "it was forced");
}

/// Read-write locks need, on top of the rules above, what the README's ACL
/// section lists for them: their scripts read the queue's head and keep
/// the readers' index (and count an older build's readers set).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_with_the_readmes_additions() {
    let server = RedisServer::start();
    restricted_user(&server, "app", "app-pw");
    acl_setuser(&server, "app", RW_RULES);
    let url = user_url(&server, "app", "app-pw");
    let locker = Locker::new(&url).unwrap();
    let other = Locker::new(&url).unwrap();
    let reader = try_renewed_read(&locker, "acl:catalog", Duration::from_millis(600))
        .await
        .unwrap_or_else(|e| panic!("read: {e}; refused: {}", refused(&server)));
    let writer = tokio::spawn(async move {
        try_write_lock(&other, "acl:catalog", Duration::from_secs(20)).await
    });
    // Past the lease: renewal keeps the reader, and the writer waits.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !reader.is_lost(),
        "renewal failed; refused: {}",
        refused(&server)
    );
    reader.extend(Duration::from_secs(5)).await.unwrap();
    reader.release().await.unwrap();
    let writer = joined(
        writer,
        Duration::from_secs(5),
        "the writer was not handed the lock",
    )
    .await
    .unwrap_or_else(|e| panic!("write: {e}; refused: {}", refused(&server)));
    assert!(writer.fencing_token() > 0);
    writer.release().await.unwrap();
}

/// A user given the rules of an earlier version (no `+hgetall`, and
/// `+hlen` for `inspect`): a release that pops a set's marker, whose drop
/// of dead entries is refused, still frees the lock and wakes the set, and
/// `inspect` still counts the waiters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_hgetall_still_wakes_sets_and_inspects() {
    let server = RedisServer::start();
    restricted_user(&server, "app", "app-pw");
    acl_setuser(&server, "app", &["-hgetall", "+hlen"]);
    let url = user_url(&server, "app", "app-pw");
    let (holder, setter) = (Locker::new(&url).unwrap(), Locker::new(&url).unwrap());
    let b = hold_for(&holder, "acl:b", Duration::from_secs(30)).await;
    let start = Instant::now();
    let set = spawn_try_set(&setter, &["acl:a", "acl:b"], Duration::from_secs(20));
    loop {
        let info = holder
            .inspect("acl:b")
            .await
            .unwrap_or_else(|e| panic!("inspect: {e}; refused: {}", refused(&server)))
            .expect("held");
        if info.waiters == 1 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{info:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Within its first second the set is not queued, only its marker is:
    // the release pops the marker.
    b.release()
        .await
        .unwrap_or_else(|e| panic!("release: {e}; refused: {}", refused(&server)));
    let set = joined(set, Duration::from_secs(5), "the set was not woken")
        .await
        .0
        .unwrap_or_else(|e| panic!("set: {e}; refused: {}", refused(&server)));
    set.release().await.unwrap();
    assert!(refused(&server).contains("hgetall"), "{}", refused(&server));
}
