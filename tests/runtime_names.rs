//! Lock names and input checks: any non-empty UTF-8 text is its own lock
//! (braces, spaces, newlines, non-ASCII, 10 KB), the empty name and a zero or
//! too long lease are refused with clear messages, and `LockError` is a
//! well-behaved error type.
use crate::support;

use std::collections::HashSet;
use std::time::Duration;

use lockattr::{LockError, Locker, MAX_EXPIRE};
use support::lock_key;
use support::lockers::setup;
use support::outages::{attempt, attempt_blocking, take_leased, try_leased, try_leased_blocking};
use support::takes::try_take;

/// Static assertion: the error can cross threads and be boxed as `dyn Error`.
const _: fn() = || {
    fn error<T: std::error::Error + Send + Sync + 'static>() {}
    error::<LockError>();
};

fn names() -> Vec<String> {
    let mut names: Vec<String> = [
        "plain",
        "with space",
        " ",
        "{",
        "}",
        "{}",
        "a}b",
        "}x",
        "{x}",
        "x",
        "a{b",
        "line\nbreak",
        "tab\there",
        "back\\slash",
        "\\x7d",
        "\\}",
        "名前",
        "🔒🦀",
        "naïve",
        "order:7",
        "*",
        "?",
        "\u{0}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.push("k".repeat(10 * 1024));
    names.push(format!("{}}}", "k".repeat(10 * 1024)));
    names
}

#[tokio::test]
async fn every_name_is_its_own_lock() {
    let (server, locker) = setup();
    let names = names();
    assert_eq!(
        names.iter().collect::<HashSet<_>>().len(),
        names.len(),
        "test names are distinct"
    );

    // Hold all of them at once: none blocks another.
    let mut guards = Vec::new();
    for name in &names {
        let guard = try_take(&locker, name, Duration::from_secs(30), Duration::ZERO)
            .await
            .unwrap_or_else(|e| panic!("{name:?} blocked by another name: {e}"));
        assert_eq!(guard.name(), name);
        guards.push(guard);
    }
    // One Redis lock key per name.
    assert_eq!(server.held_locks().len(), names.len());

    // Each conflicts with itself, async and blocking.
    for name in &names {
        let err = attempt(&locker, name).await.unwrap_err();
        match &err {
            LockError::Timeout { name: n, .. } => assert_eq!(n, name),
            other => panic!("{name:?}: expected Timeout, got {other:?}"),
        }
        // Messages stay readable for long names.
        assert!(err.to_string().len() < 1_000, "{}", err.to_string().len());
    }
    let blocking_names = names.clone();
    let l = locker.clone();
    tokio::task::spawn_blocking(move || {
        for name in &blocking_names {
            let err = attempt_blocking(&l, name).unwrap_err();
            assert!(err.is_timeout(), "{name:?}: {err:?}");
        }
    })
    .await
    .unwrap();

    // Releasing one frees only that one.
    let first = guards.remove(0);
    first.release().await.unwrap();
    assert_eq!(server.held_locks().len(), names.len() - 1);
    for guard in guards {
        guard.release().await.unwrap();
    }
    assert!(server.held_locks().is_empty());
}

#[test]
fn braces_in_names_stay_inside_the_hash_tag() {
    let (server, locker) = setup();
    for name in ["a}b", "}x", "{", "}"] {
        let guard = locker.lock(name).acquire_blocking().unwrap();
        let keys = server.keys("*");
        let lock = keys
            .iter()
            .find(|k| !k.ends_with(":fence"))
            .expect("a lock key")
            .clone();
        // The lock key and its fence share the hash tag: the text between the
        // first `{` and the next `}`.
        let tag = |key: &str| {
            let open = key.find('{').unwrap();
            let close = key[open + 1..].find('}').unwrap() + open + 1;
            key[open + 1..close].to_owned()
        };
        let fence = format!("{lock}:fence");
        assert!(keys.contains(&fence), "{keys:?}");
        assert_eq!(tag(&lock), tag(&fence));
        assert!(lock.ends_with('}'), "{lock}");
        assert_eq!(lock.matches('}').count(), 1, "name's `}}` escaped: {lock}");
        guard.release_blocking().unwrap();
        let _: () = redis::cmd("FLUSHALL").query(&mut server.client()).unwrap();
    }
}

fn assert_invalid(err: &LockError, what_contains: &str, reason_contains: &str) {
    match err {
        LockError::InvalidInput { what, reason } => {
            assert!(what.contains(what_contains), "what = {what:?}");
            assert!(
                reason.to_lowercase().contains(reason_contains),
                "reason = {reason:?}"
            );
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

#[tokio::test]
async fn empty_name_is_refused() {
    // Refused before any connection: works against no server at all.
    let locker = Locker::new(format!("redis://127.0.0.1:{}/", support::free_port())).unwrap();
    let err = locker.lock("").acquire().await.unwrap_err();
    assert_invalid(&err, "name", "empty");
    assert!(err.to_string().contains("empty"), "{err}");
    let err = locker.lock(String::new()).acquire_blocking().unwrap_err();
    assert_invalid(&err, "name", "empty");
}

#[tokio::test]
async fn zero_or_too_long_expire_is_refused() {
    let (server, locker) = setup();
    let err = try_leased(&locker, "x", Duration::ZERO).await.unwrap_err();
    assert_invalid(&err, "expire", "zero");
    let msg = err.to_string();
    assert!(msg.contains("expire") && msg.contains("zero"), "{msg}");
    let err = try_leased_blocking(&locker, "x", Duration::ZERO).unwrap_err();
    assert_invalid(&err, "expire", "zero");

    let err = try_leased(&locker, "x", MAX_EXPIRE + Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_invalid(&err, "expire", "longer");
    // Nothing was written for refused requests.
    assert!(server.keys("*").is_empty(), "{:?}", server.keys("*"));

    // A one-millisecond lease and the maximum lease are accepted.
    let short = take_leased(&locker, "x", Duration::from_millis(1)).await;
    drop(short);
    let long = take_leased(&locker, "long", MAX_EXPIRE).await;
    assert!(server.pttl(&lock_key("long")) > 29 * 24 * 3600 * 1000);
    long.release().await.unwrap();
}

#[test]
fn errors_are_boxable_and_describe_themselves() {
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(LockError::Timeout {
        name: "order:7".into(),
        waited: Duration::from_secs(5),
    });
    assert!(boxed.to_string().contains("order:7"));
    let err = LockError::NotOwned { name: "n".into() };
    assert!(err.to_string().contains("`n`"), "{err}");
    // Connection errors keep their cause as `source()`.
    let locker = Locker::new(format!("redis://127.0.0.1:{}/", support::free_port())).unwrap();
    let err = attempt_blocking(&locker, "x").unwrap_err();
    assert!(std::error::Error::source(&err).is_some(), "{err:?}");
}
