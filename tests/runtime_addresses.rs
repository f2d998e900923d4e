//! Servers given the way an application's configuration already holds
//! them: a `redis::ConnectionInfo` (from a URL, from a `redis::Client`, or
//! built field by field) works wherever a URL does, for one server, a
//! Redlock, a Cluster and the process default, and its password stays out of
//! every message. Settings that belong to another kind of Locker are refused.

use crate::support;

use std::time::Duration;

use lockattr::redis::{self, ConnectionInfo, IntoConnectionInfo};
use lockattr::{LockError, Locker};
use support::RedisServer;
use support::outages::{attempt, redlock_of, three_servers};

fn info(url: &str) -> ConnectionInfo {
    url.into_connection_info().expect("valid URL")
}

#[tokio::test]
async fn a_connection_info_names_the_same_lock_as_its_url() {
    let server = RedisServer::start_with(&["--requirepass", "hunter2"]);
    let url = format!("redis://:hunter2@127.0.0.1:{}/3", server.port);
    let by_url = Locker::new(url.as_str()).unwrap();
    let by_info = Locker::new(info(&url)).unwrap();
    let client = redis::Client::open(url.as_str()).unwrap();
    let by_client = Locker::new(client.get_connection_info()).unwrap();
    assert!(!format!("{by_info:?}").contains("hunter2"));

    let guard = by_info.lock("shared").acquire().await.unwrap();
    // The two others see it held (same server, same database, same key).
    for other in [&by_url, &by_client] {
        let err = attempt(other, "shared").await.unwrap_err();
        assert!(err.is_timeout(), "{err}");
    }
    guard.release().await.unwrap();
    let mut conn = redis::Client::open(format!("{}3", server.url_with_password("hunter2")))
        .unwrap()
        .get_connection()
        .unwrap();
    let db3: Vec<String> = redis::cmd("KEYS")
        .arg("lockattr:*")
        .query(&mut conn)
        .unwrap();
    assert!(
        db3.iter().any(|k| k.starts_with("lockattr:{shared}")),
        "the lock's keys live in database 3: {db3:?}"
    );
}

#[tokio::test]
async fn a_wrong_password_in_a_connection_info_is_not_shown() {
    let server = RedisServer::start_with(&["--requirepass", "right-pw"]);
    let locker = Locker::new(info(&format!(
        "redis://:wrong-pw-4711@127.0.0.1:{}/",
        server.port
    )))
    .unwrap();
    let err = attempt(&locker, "x").await.unwrap_err();
    for text in [err.to_string(), format!("{err:?}")] {
        assert!(!text.contains("wrong-pw-4711"), "{text}");
    }
}

#[tokio::test]
async fn redlock_nodes_as_connection_infos() {
    let servers = three_servers();
    let infos: Vec<ConnectionInfo> = servers.iter().map(|s| info(&s.url())).collect();
    let locker = redlock_of(&infos);
    let guard = locker.lock("r").acquire().await.unwrap();
    for server in &servers {
        assert!(server.exists(&support::lock_key("r")));
    }
    guard.release().await.unwrap();
}

#[test]
fn the_process_default_from_a_connection_info() {
    // In a child process: the default Locker is set once per process.
    if std::env::var("LOCKATTR_CHILD").is_err() {
        let server = RedisServer::start();
        let out = support::wait_child(
            support::child_test(
                "the_process_default_from_a_connection_info",
                &[("LOCKATTR_CHILD", &server.url())],
            )
            .spawn()
            .unwrap(),
            Duration::from_secs(20),
        );
        assert!(out.status.success(), "{out:?}");
        return;
    }
    let url = std::env::var("LOCKATTR_CHILD").unwrap();
    lockattr::init(info(&url)).unwrap();
    let guard = lockattr::default_locker()
        .unwrap()
        .lock("d")
        .acquire_blocking()
        .unwrap();
    guard.release_blocking().unwrap();
}

#[test]
fn settings_of_another_kind_of_locker_are_refused() {
    let err = Locker::builder("redis://127.0.0.1/")
        .master_auth("default", "pw-1234")
        .build()
        .unwrap_err();
    assert!(matches!(err, LockError::InvalidInput { .. }), "{err}");
    assert!(err.to_string().contains("Sentinel"), "{err}");
    assert!(!err.to_string().contains("pw-1234"), "{err}");
    let err = Locker::cluster_builder(["redis://127.0.0.1/"])
        .master_db(1)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("Sentinel"), "{err}");
    let err = Locker::sentinel_builder("m", ["redis://127.0.0.1:26379/"])
        .node_timeout(Duration::from_millis(20))
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("Redlock"), "{err}");
}

#[test]
fn sentinel_input_is_checked() {
    for (name, urls, says) in [
        ("", vec!["redis://127.0.0.1:26379/"], "master name"),
        ("m", vec![], "at least one sentinel"),
        ("m", vec!["redis://127.0.0.1:26379/2"], "master_db"),
        ("m", vec!["http://127.0.0.1:26379/"], "Redis URL"),
    ] {
        let err = Locker::sentinel(name, urls).unwrap_err();
        assert!(matches!(err, LockError::InvalidInput { .. }), "{err}");
        assert!(err.to_string().contains(says), "{says}: {err}");
    }
    let err = Locker::sentinel_builder("m", ["redis://127.0.0.1:26379/"])
        .master_db(-1)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("0 or more"), "{err}");
    // Debug shows neither the sentinels' nor the master's password.
    let builder = Locker::sentinel_builder("m", ["redis://:sentinel-pw@127.0.0.1:26379/"])
        .master_auth("app", "master-pw");
    let locker = builder.clone().build().unwrap();
    for text in [format!("{builder:?}"), format!("{locker:?}")] {
        assert!(
            !text.contains("sentinel-pw") && !text.contains("master-pw"),
            "{text}"
        );
    }
}
