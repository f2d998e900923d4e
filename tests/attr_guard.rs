//! `guard = g` binds the held `&LockGuard` in the body: its `name()` is the
//! lock name, its `expire()` the configured lease, its `fencing_token()`
//! strictly increases from call to call (sync, async, and across Lockers),
//! and it can extend the lease from inside the body.

use crate::support;

use std::time::Duration;

use lockattr::{LockError, Locker, redis_lock};
use support::lockers::setup;
use support::{RedisServer, lock_key};

#[redis_lock(name = "fenced:{id}", expire = "3s", locker = locker, guard = g)]
fn sync_fenced(locker: &Locker, id: u32) -> Result<(String, Duration, u64), LockError> {
    Ok((g.name().to_owned(), g.expire(), g.fencing_token()))
}

#[redis_lock(name = "fenced:{id}", expire = "3s", locker = locker, guard = lease)]
async fn async_fenced(locker: &Locker, id: u32) -> Result<(String, Duration, u64), LockError> {
    tokio::task::yield_now().await;
    Ok((
        lease.name().to_owned(),
        lease.expire(),
        lease.fencing_token(),
    ))
}

#[derive(lockattr::LockKey)]
#[lock_key(prefix = "doc")]
struct Doc {
    #[lock_key]
    id: u32,
    locker: Locker,
}

impl Doc {
    #[redis_lock(locker = &self.locker, guard = g)]
    fn edit(&mut self) -> Result<(String, u64), LockError> {
        Ok((g.name().to_owned(), g.fencing_token()))
    }
}

/// Asserts that what a call of `fenced:1` saw of its guard is that name, a
/// lease of 3 s and a fencing token after `last`; that token.
fn assert_fenced_1((name, expire, token): (String, Duration, u64), last: u64, what: &str) -> u64 {
    assert_eq!(name, "fenced:1");
    assert_eq!(expire, Duration::from_secs(3));
    assert!(token > last, "{what} token {token} after {last}");
    token
}

#[tokio::test]
async fn guard_names_the_lock_and_fencing_tokens_increase() {
    let (server, locker) = setup();
    let other = support::lockers::locker(&server);
    let mut last = 0;
    for round in 0..3 {
        let seen = sync_fenced(&locker, 1).unwrap();
        last = assert_fenced_1(seen, last, &format!("round {round}: sync"));

        let seen = async_fenced(&locker, 1).await.unwrap();
        last = assert_fenced_1(seen, last, &format!("round {round}: async"));

        // Another Locker (another process, in effect) continues the sequence.
        let (_, _, token) = async_fenced(&other, 1).await.unwrap();
        assert!(
            token > last,
            "round {round}: token {token} from another Locker after {last}"
        );
        last = token;

        // And so does a plain `locker.lock(..)` of the same name.
        let guard = locker.lock("fenced:1").acquire().await.unwrap();
        assert!(guard.fencing_token() > last);
        last = guard.fencing_token();
        guard.release().await.unwrap();
    }
    // Another name has its own sequence and does not disturb this one.
    let (name, _, _) = sync_fenced(&locker, 2).unwrap();
    assert_eq!(name, "fenced:2");
    let (_, _, token) = sync_fenced(&locker, 1).unwrap();
    assert!(token > last);

    let mut doc = Doc { id: 9, locker };
    let (name, first) = doc.edit().unwrap();
    assert_eq!(name, "doc:9");
    let (_, second) = doc.edit().unwrap();
    assert!(second > first);
}

#[redis_lock(name = "extended", expire = "2s", locker = locker, guard = g)]
fn extends_its_lease(locker: &Locker, server: &RedisServer) -> Result<(i64, i64), LockError> {
    let before = server.pttl(&lock_key("extended"));
    g.extend_blocking(Duration::from_secs(20))?;
    let after = server.pttl(&lock_key("extended"));
    Ok((before, after))
}

#[redis_lock(name = "extended-async", expire = "2s", locker = locker, guard = g)]
async fn extends_its_lease_async(
    locker: &Locker,
    server: &RedisServer,
) -> Result<(i64, i64), LockError> {
    let before = server.pttl(&lock_key("extended-async"));
    g.extend(Duration::from_secs(20)).await?;
    let after = server.pttl(&lock_key("extended-async"));
    Ok((before, after))
}

/// Asserts that the PTTLs of lock `name` seen in the body, `before` and
/// `after` extending its 2 s lease by 20 s, are so, and that the call
/// released it.
fn assert_extended(server: &RedisServer, (before, after): (i64, i64), name: &str) {
    assert!(
        before > 0 && before <= 2_000,
        "PTTL before extending: {before}"
    );
    assert!(
        after > 20_000 && after <= 22_000,
        "PTTL after extending by 20 s: {after}"
    );
    assert!(!server.exists(&lock_key(name)), "still held after the call");
}

#[tokio::test]
async fn the_guard_can_extend_the_lease_from_the_body() {
    let (server, locker) = setup();
    let pttls = extends_its_lease(&locker, &server).unwrap();
    assert_extended(&server, pttls, "extended");

    let pttls = extends_its_lease_async(&locker, &server).await.unwrap();
    assert_extended(&server, pttls, "extended-async");
}
