//! `Locker`: lazy creation, auto traits, secrets kept out of every message,
//! and the builder's settings (defaults, prefix, the key layout it implies).
use crate::support;

use std::time::{Duration, Instant};

use lockattr::{
    DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_EXPIRE, DEFAULT_PREFIX, LockError, LockGuard, Locker,
};
use support::lockers::{locker, setup};
use support::wakeups::{hold, hold_blocking, try_within, try_within_blocking};
use support::{RedisServer, free_port, keys, lock_key};

/// Static assertions: a Locker is shared freely between threads and tasks,
/// and a guard can be held across `.await` in a spawned task.
const _: fn() = || {
    fn shared<T: Clone + Send + Sync + 'static>() {}
    fn sendable<T: Send + Sync + 'static>() {}
    shared::<Locker>();
    sendable::<LockGuard>();
};

const PASSWORD: &str = "hunter2";

/// Checks the error of a caller that waited 1 s for a lock on a server
/// nobody listens on (`start`: when it began): a Connection error, within
/// 3 s.
fn assert_connection_error_within_3s(err: &LockError, start: Instant) {
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert!(
        matches!(err, LockError::Connection { .. }),
        "expected Connection, got {err:?}"
    );
}

#[test]
fn new_does_not_connect_until_first_use() {
    let server = RedisServer::start();
    let before = server.client_count();
    let locker = locker(&server);
    let clone = locker.clone();
    // Creating and cloning opened nothing.
    assert_eq!(server.client_count(), before);
    drop(clone);
    let guard = locker.lock("lazy").acquire_blocking().unwrap();
    assert_eq!(server.client_count(), before + 1);
    guard.release_blocking().unwrap();
}

#[test]
fn unreachable_server_fails_with_connection_error_promptly_blocking() {
    // Nobody listens on this port: creating the Locker still works (it is lazy).
    let locker = Locker::new(format!("redis://127.0.0.1:{}/", free_port())).unwrap();
    // A caller that may wait keeps trying until its acquire time (1 s)
    // ends, then gets the last connection error.
    let start = Instant::now();
    let err = try_within_blocking(&locker, "x", Duration::from_secs(1)).unwrap_err();
    assert_connection_error_within_3s(&err, start);
    assert!(err.is_connection());
    assert!(locker.ping_blocking().unwrap_err().is_connection());
}

#[tokio::test]
async fn unreachable_server_fails_with_connection_error_promptly_async() {
    let locker = Locker::new(format!("redis://127.0.0.1:{}/", free_port())).unwrap();
    let start = Instant::now();
    let err = try_within(&locker, "x", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_connection_error_within_3s(&err, start);
    // The message names the server (host:port) and says what to check.
    let msg = err.to_string();
    assert!(msg.contains("127.0.0.1:"), "{msg}");
    assert!(locker.ping().await.unwrap_err().is_connection());
}

fn assert_no_secret(what: &str, text: &str) {
    assert!(
        !text.contains(PASSWORD),
        "{what} shows the password: {text}"
    );
}

#[tokio::test]
async fn password_works_and_is_never_shown() {
    let mut server = RedisServer::start_with(&["--requirepass", PASSWORD]);
    for url in [
        server.url_with_password(PASSWORD),
        format!("redis://default:{PASSWORD}@127.0.0.1:{}/0", server.port),
    ] {
        let locker = Locker::new(&url).unwrap();
        assert_no_secret("Locker Debug", &format!("{locker:?}"));
        assert_no_secret(
            "LockerBuilder Debug",
            &format!("{:?}", Locker::builder(url.clone())),
        );
        assert_no_secret("LockBuilder Debug", &format!("{:?}", locker.lock("p")));

        // Operations work with the password.
        locker.ping().await.unwrap();
        let guard = hold(&locker, "p", Duration::from_millis(300)).await;
        assert_no_secret("LockGuard Debug", &format!("{guard:?}"));
        guard.extend(Duration::from_millis(100)).await.unwrap();

        // Timeout while it is held.
        let busy = try_within(&locker, "p", Duration::ZERO).await.unwrap_err();
        assert!(busy.is_timeout(), "{busy:?}");
        assert_no_secret("Timeout message", &busy.to_string());
        assert_no_secret("Timeout Debug", &format!("{busy:?}"));

        // NotOwned once the lease ran out.
        tokio::time::sleep(Duration::from_millis(700)).await;
        let lost = guard.release().await.unwrap_err();
        assert!(lost.is_not_owned(), "{lost:?}");
        assert_no_secret("NotOwned message", &lost.to_string());
        assert_no_secret("NotOwned Debug", &format!("{lost:?}"));
    }

    // Connection errors, with the password in the URL.
    let locker = Locker::new(server.url_with_password(PASSWORD)).unwrap();
    locker.ping().await.unwrap();
    server.kill();
    // One attempt each: a caller that may wait would retry until its
    // acquire time ends.
    let down = try_within(&locker, "p", Duration::ZERO).await.unwrap_err();
    assert!(down.is_connection(), "{down:?}");
    assert_no_secret("Connection message", &down.to_string());
    assert_no_secret("Connection Debug", &format!("{down:?}"));
    let down = try_within_blocking(&locker, "p", Duration::ZERO).unwrap_err();
    assert_no_secret("Connection message (blocking)", &down.to_string());
    assert_no_secret("Connection Debug (blocking)", &format!("{down:?}"));
}

#[test]
fn wrong_password_is_a_clear_error_without_the_password() {
    let server = RedisServer::start_with(&["--requirepass", PASSWORD]);
    let wrong = "hunter2-but-wrong";
    let locker = Locker::new(server.url_with_password(wrong)).unwrap();
    let err = locker.lock("x").acquire_blocking().unwrap_err();
    let msg = err.to_string();
    let debug = format!("{err:?}");
    assert_no_secret("wrong-password message", &msg);
    assert_no_secret("wrong-password Debug", &debug);
    assert!(
        msg.to_lowercase().contains("auth") || msg.to_lowercase().contains("password"),
        "the message should say authentication failed: {msg}"
    );
    // The server was reached and refused: that is `LockError::Redis` ("Redis
    // answered with an error (wrong password, ...)"), not `Connection`, whose
    // message tells the user to check that the server is up.
    assert!(
        matches!(err, LockError::Redis { .. }),
        "a wrong password should be LockError::Redis, got: {err:?} / {msg}"
    );

    // No password at all: also a Redis error, not a connection problem.
    let locker = Locker::new(server.url()).unwrap();
    let err = locker.lock("x").acquire_blocking().unwrap_err();
    assert!(matches!(err, LockError::Redis { .. }), "{err:?}");
    assert!(err.to_string().contains("NOAUTH"), "{err}");
}

/// Checks that `guard`, of the lock `x`, has the lease `lease`, and that
/// its key has between `lease` and 2 s less left.
fn assert_lease_of_x(server: &RedisServer, guard: &LockGuard, lease: Duration) {
    assert_eq!(guard.expire(), lease);
    let pttl = server.pttl(&lock_key("x"));
    let ms = i64::try_from(lease.as_millis()).unwrap();
    assert!((ms - 2_000..=ms).contains(&pttl), "PTTL {pttl}");
}

#[test]
fn default_expire_is_ten_seconds() {
    assert_eq!(DEFAULT_EXPIRE, Duration::from_secs(10));
    let (server, locker) = setup();
    let guard = locker.lock("x").acquire_blocking().unwrap();
    assert_lease_of_x(&server, &guard, Duration::from_secs(10));
    guard.release_blocking().unwrap();
}

#[test]
fn expire_sets_the_lease() {
    let (server, locker) = setup();
    let guard = hold_blocking(&locker, "x", Duration::from_secs(90));
    assert_lease_of_x(&server, &guard, Duration::from_secs(90));
    guard.release_blocking().unwrap();
}

#[test]
fn default_acquire_timeout_is_ten_seconds() {
    assert_eq!(DEFAULT_ACQUIRE_TIMEOUT, Duration::from_secs(10));
    let (_server, locker) = setup();
    let holder = hold_blocking(&locker, "busy", Duration::from_secs(60));
    let start = Instant::now();
    let err = locker.lock("busy").acquire_blocking().unwrap_err();
    let elapsed = start.elapsed();
    match &err {
        LockError::Timeout { name, waited } => {
            assert_eq!(name, "busy");
            assert_eq!(*waited, Duration::from_secs(10));
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert!(elapsed >= Duration::from_secs(10), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(13), "{elapsed:?}");
    holder.release_blocking().unwrap();
}

#[test]
fn default_prefix_and_key_layout() {
    assert_eq!(DEFAULT_PREFIX, "lockattr:");
    let (server, locker) = setup();
    assert_eq!(locker.prefix(), "lockattr:");
    let guard = locker.lock("x").acquire_blocking().unwrap();
    // The value: the owner token, then the holder record.
    let token = server
        .owner(&lock_key("x"))
        .expect("the lock key holds the token");
    assert_eq!(token.len(), 32, "{token}");
    assert!(
        token.chars().all(|c| c.is_ascii_hexdigit()),
        "token {token}"
    );
    let fence: u64 = server
        .get(&keys::lock("x").fence)
        .expect("fence counter")
        .parse()
        .unwrap();
    assert_eq!(fence, guard.fencing_token());
    // The fencing counter expires the fence retention (60 s) after the lease
    // (10 s); a new one starts from the server's clock, so tokens keep
    // increasing across its expiry.
    let ttl = server.pttl(&keys::lock("x").fence);
    assert!((60_000..=70_000).contains(&ttl), "fence PTTL {ttl}");
    assert_eq!(
        server.keys("*"),
        vec!["lockattr:{x}".to_owned(), "lockattr:{x}:fence".to_owned()]
    );
    guard.release_blocking().unwrap();
    assert_eq!(server.keys("*"), vec!["lockattr:{x}:fence".to_owned()]);
    // Released: the counter goes within the retention.
    let ttl = server.pttl(&keys::lock("x").fence);
    assert!((1..=60_000).contains(&ttl), "fence PTTL {ttl}");
}

#[tokio::test]
async fn custom_prefix_is_used_for_every_key() {
    let server = RedisServer::start();
    let locker = Locker::builder(server.url())
        .prefix("myapp:locks:")
        .build()
        .unwrap();
    assert_eq!(locker.prefix(), "myapp:locks:");
    let guard = locker.lock("order:7").acquire().await.unwrap();
    assert!(server.exists("myapp:locks:{order:7}"));
    assert_eq!(
        server.get("myapp:locks:{order:7}:fence"),
        Some(guard.fencing_token().to_string())
    );
    assert_eq!(
        server.keys("*"),
        vec![
            "myapp:locks:{order:7}".to_owned(),
            "myapp:locks:{order:7}:fence".to_owned()
        ]
    );
    // Another prefix is another lock namespace: the same name is free there.
    let other = Locker::new(server.url()).unwrap();
    let free = try_within(&other, "order:7", Duration::ZERO).await.unwrap();
    free.release().await.unwrap();
    guard.release().await.unwrap();
    assert!(!server.exists("myapp:locks:{order:7}"));
}

#[test]
fn prefix_with_braces_is_refused_unless_one_hash_tag() {
    for prefix in ["a{b", "a}b", "{", "}", "app:{}:", "app:{a}{b}:"] {
        let err = Locker::builder("redis://127.0.0.1:1/")
            .prefix(prefix)
            .build()
            .unwrap_err();
        match &err {
            LockError::InvalidInput { what, .. } => assert!(what.contains("prefix"), "{err}"),
            other => panic!("prefix {prefix:?}: expected InvalidInput, got {other:?}"),
        }
        assert!(err.to_string().contains("prefix"), "{err}");
    }
    // No braces (the empty prefix included), or one non-empty hash tag:
    // accepted.
    for prefix in ["", "app:{tag}:"] {
        assert!(
            Locker::builder("redis://127.0.0.1:1/")
                .prefix(prefix)
                .build()
                .is_ok(),
            "{prefix:?}"
        );
    }
}

#[test]
fn bad_urls_are_refused_without_echoing_the_password() {
    for url in ["", "http://example.com/", "redis://:hunter2@host:notaport/"] {
        let err = Locker::new(url).unwrap_err();
        assert!(
            matches!(err, LockError::InvalidInput { .. }),
            "{url:?}: {err:?}"
        );
        assert_no_secret("bad URL message", &err.to_string());
        assert_no_secret("bad URL Debug", &format!("{err:?}"));
    }
}

#[test]
fn database_number_and_unix_socket_urls_are_honoured() {
    let socket = std::env::temp_dir().join(format!(
        "lockattr-runtime-{}-{}.sock",
        std::process::id(),
        free_port()
    ));
    let server = RedisServer::start_with(&[
        "--unixsocket",
        socket.to_str().unwrap(),
        "--unixsocketperm",
        "700",
    ]);

    // `/3` selects database 3: the keys are there, not in database 0.
    let locker = Locker::new(format!("redis://127.0.0.1:{}/3", server.port)).unwrap();
    assert!(format!("{locker:?}").contains("/3"), "{locker:?}");
    let guard = locker.lock("db").acquire_blocking().unwrap();
    assert!(!server.exists(&lock_key("db")));
    let mut db3 = redis::Client::open(format!("redis://127.0.0.1:{}/3", server.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let token: Option<String> = redis::cmd("GET")
        .arg(lock_key("db"))
        .query(&mut db3)
        .unwrap();
    // The owner token is the value's first line (the holder record follows).
    assert_eq!(
        token.map(|t| t.split('\n').next().unwrap_or_default().len()),
        Some(32)
    );
    guard.release_blocking().unwrap();

    // A Unix socket reaches the same server.
    let unix = Locker::new(format!("unix://{}", socket.display())).unwrap();
    let guard = unix.lock("sock").acquire_blocking().unwrap();
    assert!(server.exists(&lock_key("sock")));
    guard.release_blocking().unwrap();
    drop(server);
    let _ = std::fs::remove_file(&socket);
}
