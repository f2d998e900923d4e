//! Acquisition: one round trip, a zero wait is exactly one attempt, fencing
//! tokens strictly increase per name (across Lockers and expiries), and owner
//! tokens are fresh random 128-bit values.
use crate::support;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use lockattr::LockError;
use redis::Commands;
use support::lockers::{self, setup};
use support::outages::{
    attempt, attempt_blocking, take_and_release_now, take_leased, take_leased_blocking, try_wait,
    try_wait_blocking,
};
use support::takes::take_now;
use support::{RedisServer, keys, lock_key};

/// What changed in `INFO commandstats` between two snapshots (INFO itself left out).
fn calls_between(
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
) -> Vec<(String, u64)> {
    let mut diff: Vec<(String, u64)> = after
        .iter()
        .filter(|(name, _)| name.as_str() != "info")
        .filter_map(|(name, n)| {
            let d = n - before.get(name).copied().unwrap_or(0);
            (d > 0).then(|| (name.clone(), d))
        })
        .collect();
    diff.sort();
    diff
}

/// Asserts that the commands run between two snapshots were `expected`
/// (name and count, sorted by name).
fn assert_calls(
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
    expected: &[(&str, u64)],
) {
    let expected: Vec<(String, u64)> = expected
        .iter()
        .map(|(name, n)| ((*name).to_owned(), *n))
        .collect();
    assert_eq!(calls_between(before, after), expected);
}

#[test]
fn acquiring_a_free_lock_is_one_round_trip() {
    let (server, locker) = setup();
    // Warm up: connection handshake, script cache, and the name's fencing
    // counter (its very first token is seeded from the server's clock).
    locker
        .lock("x")
        .acquire_blocking()
        .unwrap()
        .release_blocking()
        .unwrap();

    let before = server.command_calls();
    let guard = locker.lock("x").acquire_blocking().unwrap();
    let after = server.command_calls();
    // One FCALL from the client (the server takes Redis Functions); the rest are the script's own calls:
    // GET reads the fencing counter, SET NX takes the free lock (with the
    // holder record, stamped by this process's clock, and its fencing
    // token) and SET writes the counter with the lease plus the retention,
    // so it never expires under its holder. A first attempt was never
    // queued (no HDEL).
    assert_calls(&before, &after, &[("fcall", 1), ("get", 1), ("set", 2)]);
    let before = server.command_calls();
    guard.release_blocking().unwrap();
    let after = server.command_calls();
    // The release: the owner check (GET), nobody queued (PTTL of the
    // queue: none), DEL, and the counter's retention (PEXPIRE). No TIME
    // while nobody waits.
    let release = [
        ("del", 1),
        ("fcall", 1),
        ("get", 1),
        ("pexpire", 1),
        ("pttl", 1),
    ];
    assert_calls(&before, &after, &release);
}

#[test]
fn acquiring_a_free_lock_after_waiting_leaves_the_queue() {
    let (server, locker) = setup();
    let other = lockers::locker(&server);
    let holder = other
        .lock("q")
        .expire(Duration::from_millis(300))
        .renew(false)
        .acquire_blocking()
        .unwrap();
    // Queued behind a holder that never releases: the lease runs out and
    // the waiter takes the free lock on its own timer, leaving the queue.
    let guard = try_wait_blocking(&locker, "q", Duration::from_secs(5)).unwrap();
    assert!(!server.exists(&keys::lock("q").queue));
    assert!(!server.exists(&keys::lock("q").waiters));
    assert!(server.owner(&lock_key("q")).is_some());
    drop(holder);
    guard.release_blocking().unwrap();
}

#[test]
fn zero_acquire_timeout_makes_exactly_one_attempt() {
    let (server, locker) = setup();
    let holder = take_leased_blocking(&locker, "x", Duration::from_secs(30));

    let before = server.command_calls();
    let start = Instant::now();
    let err = attempt_blocking(&locker, "x").unwrap_err();
    let elapsed = start.elapsed();
    let after = server.command_calls();
    match &err {
        LockError::Timeout { name, waited } => {
            assert_eq!(name, "x");
            assert_eq!(*waited, Duration::ZERO);
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    // Returned at once (generous bound: no waiting loop).
    assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
    // Exactly one attempt: one FCALL (the script's SET NX, GET and PTTL inside it).
    let diff = calls_between(&before, &after);
    assert!(
        diff.contains(&("fcall".to_owned(), 1)),
        "expected one FCALL, got {diff:?}"
    );
    assert!(!diff.iter().any(|(n, _)| n == "eval"), "{diff:?}");
    // The holder is untouched.
    let pttl = server.pttl(&lock_key("x"));
    assert!(pttl > 25_000, "PTTL {pttl}");
    holder.release_blocking().unwrap();

    // A zero wait on a free lock takes it.
    let guard = attempt_blocking(&locker, "x").unwrap();
    guard.release_blocking().unwrap();
}

#[tokio::test]
async fn zero_acquire_timeout_async() {
    let (_server, locker) = setup();
    let holder = locker.lock("x").acquire().await.unwrap();
    let start = Instant::now();
    let err = attempt(&locker, "x").await.unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert!(start.elapsed() < Duration::from_secs(2));
    holder.release().await.unwrap();
}

#[tokio::test]
async fn fencing_tokens_strictly_increase_per_name_across_lockers() {
    let (server, a) = setup();
    let b = lockers::locker(&server);
    let mut last = 0;
    for i in 0..10 {
        let locker = if i % 2 == 0 { &a } else { &b };
        let guard = if i % 3 == 0 {
            let locker = locker.clone();
            tokio::task::spawn_blocking(move || locker.lock("fenced").acquire_blocking())
                .await
                .unwrap()
                .unwrap()
        } else {
            locker.lock("fenced").acquire().await.unwrap()
        };
        assert!(
            guard.fencing_token() > last,
            "token {} after {last}",
            guard.fencing_token()
        );
        last = guard.fencing_token();
        guard.release().await.unwrap();
    }
    // Another name has its own counter: taking it does not move this one.
    let other = a.lock("other").acquire().await.unwrap();
    other.release().await.unwrap();
    let again = b.lock("fenced").acquire().await.unwrap();
    assert_eq!(again.fencing_token(), last + 1);
    again.release().await.unwrap();
}

/// A name's first token is the Redis server's time in microseconds, so
/// tokens keep increasing even after Redis lost the counter (a restart
/// without persistence, an eviction).
#[tokio::test]
async fn fencing_tokens_increase_after_redis_lost_the_counter() {
    let (server, locker) = setup();
    let first = locker.lock("fenced").acquire().await.unwrap();
    let before = first.fencing_token();
    first.release().await.unwrap();
    let unix_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros();
    // Seeded from the clock of the server (this machine), not 1.
    let diff = u128::from(before).abs_diff(unix_us);
    assert!(diff < 60_000_000, "token {before}, clock {unix_us}");
    // The counter is lost, as after a restart without persistence.
    server
        .client()
        .del::<_, ()>(keys::lock("fenced").fence)
        .unwrap();
    std::thread::sleep(Duration::from_millis(2));
    let after = locker.lock("fenced").acquire().await.unwrap();
    assert!(
        after.fencing_token() > before,
        "{} after {before}",
        after.fencing_token()
    );
    after.release().await.unwrap();
}

#[tokio::test]
async fn fencing_token_increases_after_the_key_expired() {
    let (server, locker) = setup();
    let first = take_leased(&locker, "lapse", Duration::from_millis(100)).await;
    let first_token = server.get(&lock_key("lapse")).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !server.exists(&lock_key("lapse")),
        "the lease should be over"
    );

    let second = take_now(&locker, "lapse", Duration::from_secs(30)).await;
    assert!(second.fencing_token() > first.fencing_token());
    let second_token = server.get(&lock_key("lapse")).unwrap();
    assert_ne!(first_token, second_token);

    // The first guard's drop (its lease is over) leaves the new owner alone.
    drop(first);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        server.get(&lock_key("lapse")).as_deref(),
        Some(second_token.as_str())
    );
    second.release().await.unwrap();
}

#[test]
fn owner_tokens_are_32_hex_digits_and_fresh_per_acquisition() {
    let (server, a) = setup();
    let b = a.clone();
    let mut seen = HashSet::new();
    for i in 0..20 {
        let locker = if i % 2 == 0 { &a } else { &b };
        let guard = locker.lock("tok").acquire_blocking().unwrap();
        // The owner token: the first line of the value (the holder record
        // follows).
        let token = server.owner(&lock_key("tok")).expect("token stored");
        assert_eq!(token.len(), 32, "{token}");
        assert!(
            token
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)),
            "{token}"
        );
        assert!(seen.insert(token.clone()), "token {token} reused");
        // The guard never shows its token.
        assert!(!format!("{guard:?}").contains(&token));
        guard.release_blocking().unwrap();
    }
}

#[tokio::test]
async fn a_held_lock_is_exclusive() {
    let (server, a) = setup();
    let b = lockers::locker(&server);
    let guard = a.lock("mine").acquire().await.unwrap();
    for locker in [&a, &b] {
        let err = try_wait(locker, "mine", Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(err.is_timeout(), "{err:?}");
    }
    guard.release().await.unwrap();
    take_and_release_now(&b, "mine").await;
}

/// An acquisition that fails must not leave the lock held. Here the fence
/// counter holds a non-integer (written by someone else under our prefix), so
/// the acquire script fails at its INCR, after its SET NX already ran.
#[test]
fn an_acquisition_failing_with_a_redis_error_leaves_no_lock() {
    let server = RedisServer::start();
    // Planted by the test, without a TTL (see support::audit).
    server.allow_untimed(&keys::lock("x").fence);
    let _: () = redis::cmd("SET")
        .arg(keys::lock("x").fence)
        .arg("not a number")
        .query(&mut server.client())
        .unwrap();
    let locker = lockers::locker(&server);
    let err = locker
        .lock("x")
        .expire(Duration::from_secs(30))
        .acquire_blocking()
        .unwrap_err();
    assert!(matches!(err, LockError::Redis { .. }), "{err:?}");
    let left = support::eventually(Duration::from_secs(2), || !server.exists(&lock_key("x")));
    assert!(
        left.is_some(),
        "a failed acquisition left the lock held: key {:?} with PTTL {} ms",
        server.get(&lock_key("x")),
        server.pttl(&lock_key("x"))
    );
}
