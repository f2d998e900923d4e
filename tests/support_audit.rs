//! The keyspace audit of the test support (`lockattr_test_support::audit`):
//! a key left without a TTL fails the test that stops its server, unless it
//! is a documented exception or a key the test allowed.

use crate::support;
#[path = "support/tls.rs"]
mod tls;

use std::panic::{AssertUnwindSafe, catch_unwind};

use support::audit::{self, UntimedKey};
use support::cluster::Cluster;
use support::{RedisServer, lock_key};
use tls::TlsServer;

fn set(server: &RedisServer, db: u32, key: &str, value: &str) {
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{}/{db}", server.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query(&mut con)
        .unwrap();
}

fn keys(found: &[UntimedKey]) -> Vec<(u32, &str, &str)> {
    let mut keys: Vec<_> = found
        .iter()
        .map(|k| (k.db, k.kind.as_str(), k.key.as_str()))
        .collect();
    keys.sort();
    keys
}

/// The panic message of `f`, which must panic.
fn panic_message(f: impl FnOnce()) -> String {
    let payload = catch_unwind(AssertUnwindSafe(f)).expect_err("no panic");
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[test]
fn untimed_keys_of_every_database_are_reported_with_their_type() {
    let server = RedisServer::start();
    assert_eq!(server.audit().unwrap(), vec![], "an empty server");
    set(&server, 0, "lockattr:{planted}", "v");
    set(&server, 5, "counter", "7");
    let mut con = server.client();
    let _: i64 = redis::cmd("SADD")
        .arg("lockattr:{r}:rw:readers")
        .arg("token-1")
        .query(&mut con)
        .unwrap();
    let () = redis::cmd("SET")
        .arg(lock_key("timed"))
        .arg("v")
        .arg("PX")
        .arg(60_000)
        .query(&mut con)
        .unwrap();
    let found = server.audit().unwrap();
    assert_eq!(
        keys(&found),
        vec![
            (0, "set", "lockattr:{r}:rw:readers"),
            (0, "string", "lockattr:{planted}"),
            (5, "string", "counter"),
        ]
    );
    let readers = found.iter().find(|k| k.kind == "set").unwrap();
    assert_eq!((readers.size, readers.sample.as_str()), (1, "token-1"));
    // Cleaned up: the server's drop must not fail this test.
    let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
}

#[test]
fn the_node_marker_is_a_documented_exception_and_look_alikes_are_not() {
    let server = RedisServer::start();
    // As node_facts.rs writes it, under two prefixes and in two databases.
    set(
        &server,
        0,
        "lockattr:node",
        "1718000000123456:0123456789abcdef0123456789abcdef",
    );
    set(&server, 3, "shop:{catalog}:node", "1718000000123456:");
    assert_eq!(server.audit().unwrap(), vec![]);
    // Another value at a marker's name, or a marker's value elsewhere.
    set(&server, 0, "app:node", "not a marker");
    set(&server, 0, "lockattr:{x}", "1718000000123456:ab");
    assert_eq!(
        keys(&server.audit().unwrap()),
        vec![(0, "string", "app:node"), (0, "string", "lockattr:{x}")]
    );
    server.allow_untimed("app:node");
    server.allow_untimed("lockattr:{?}");
    assert_eq!(server.audit().unwrap(), vec![]);
}

#[test]
fn dropping_a_server_with_an_untimed_key_fails_and_names_it() {
    let message = panic_message(|| {
        let server = RedisServer::start();
        set(&server, 2, "lockattr:{left}:queue-ish", "v");
        drop(server);
    });
    assert!(message.contains("keyspace audit"), "{message}");
    assert!(message.contains("without a TTL"), "{message}");
    assert!(
        message.contains("db 2  string size 1    lockattr:{left}:queue-ish"),
        "{message}"
    );
    assert!(message.contains("allow_untimed"), "{message}");
}

#[test]
fn a_long_report_is_cut_after_twenty_keys() {
    let server = RedisServer::start();
    let mut con = server.client();
    for i in 0..25 {
        let () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(i)
            .query(&mut con)
            .unwrap();
    }
    let found = server.audit().unwrap();
    assert_eq!(found.len(), 25);
    let message = audit::report("redis-server on port 1", &found);
    assert!(message.contains("holds 25 key(s)"), "{message}");
    assert!(message.contains("... and 5 more"), "{message}");
    assert_eq!(message.matches("  db 0 ").count(), 20, "{message}");
    server.allow_untimed("k*");
}

#[test]
fn a_password_protected_server_is_audited() {
    let server = RedisServer::start_with(&["--requirepass", "audit-pw"]);
    let mut con = redis::Client::open(server.url_with_password("audit-pw"))
        .unwrap()
        .get_connection()
        .unwrap();
    let () = redis::cmd("SET")
        .arg("planted")
        .arg("v")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        keys(&server.audit().unwrap()),
        vec![(0, "string", "planted")]
    );
    server.allow_untimed("planted");
}

#[test]
fn a_frozen_server_is_thawed_and_audited_at_drop() {
    let message = panic_message(|| {
        let server = RedisServer::start();
        set(&server, 0, "frozen-key", "v");
        server.freeze();
        drop(server);
    });
    assert!(message.contains("frozen-key"), "{message}");
}

#[test]
fn a_server_the_test_killed_or_restarted_empty_passes() {
    let mut killed = RedisServer::start();
    set(&killed, 0, "gone-with-the-server", "v");
    killed.kill();
    drop(killed);

    let mut restarted = RedisServer::start();
    set(&restarted, 0, "lost-at-restart", "v");
    restarted.restart();
    assert_eq!(restarted.audit().unwrap(), vec![]);
}

#[test]
fn a_failing_test_is_not_failed_twice() {
    // The test's own panic wins: the drop during unwinding does not panic
    // again (which would abort the test binary).
    let message = panic_message(|| {
        let server = RedisServer::start();
        set(&server, 0, "untimed", "v");
        panic!("the test's own failure");
    });
    assert_eq!(message, "the test's own failure");
}

#[test]
fn every_cluster_node_is_audited_and_reported_together() {
    let mut ports = Vec::new();
    let message = panic_message(|| {
        let cluster = Cluster::start();
        // Untimed keys on masters 1 and 2, none on master 0.
        for name in &cluster.name_per_master("audit")[1..] {
            let key = support::lock_key(name);
            let node = &cluster.nodes[cluster.master_of(&key)];
            ports.push(node.port);
            let () = redis::cmd("SET")
                .arg(&key)
                .arg("v")
                .query(&mut node.client())
                .unwrap();
        }
        drop(cluster);
    });
    assert_eq!(message.matches("keyspace audit: ").count(), 2, "{message}");
    for port in ports {
        assert!(
            message.contains(&format!("port {port} holds 1 key")),
            "{message}"
        );
    }
}

#[test]
fn a_tls_server_is_audited_through_redis_cli() {
    let server = TlsServer::start();
    assert_eq!(server.audit().unwrap(), vec![]);
    server.cli(&["SET", "tls-planted", "v"]);
    server.cli(&["SET", "tls-timed", "v", "PX", "60000"]);
    let found = server.audit().unwrap();
    assert_eq!(
        found
            .iter()
            .map(|k| (k.db, k.kind.as_str(), k.key.as_str(), k.sample.as_str()))
            .collect::<Vec<_>>(),
        vec![(0, "string", "tls-planted", "v")]
    );
    let message = panic_message(move || drop(server));
    assert!(message.contains("TLS redis-server on port"), "{message}");
    assert!(message.contains("tls-planted"), "{message}");
}

#[test]
fn glob_patterns() {
    use audit::{glob, literal};
    assert!(glob("lockattr:{*}", "lockattr:{a:b}"));
    assert!(glob("k?", "k1"));
    assert!(!glob("k?", "k10"));
    assert!(glob("*", ""));
    assert!(!glob("a*b", "a-c"));
    assert!(glob(&literal("a*b?"), "a*b?"));
    assert!(!glob(&literal("a*b"), "axb"));
}

/// A holder's value (an owner token of 32 hex digits, then the holder
/// record) must carry its fencing token on its sixth line, whatever its
/// time to live: one that does not is reported as a `holder`.
#[test]
fn a_holders_value_without_its_fencing_token_is_reported() {
    let server = RedisServer::start();
    let token = "0123456789abcdef0123456789abcdef";
    let mut con = server.client();
    for (key, value) in [
        (
            "lockattr:{old}",
            format!("{token}\nhost\n7\napp\n1700000000000"),
        ),
        (
            "lockattr:{new}",
            format!("{token}\nhost\n7\napp\n1700000000000\n42"),
        ),
        (
            "lockattr:{p}:sem:permit:0",
            format!("{token}\nhost\n7\napp\n1\n42\n3"),
        ),
        ("lockattr:{other}", "not-a-token\nhost".to_owned()),
    ] {
        let () = redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PX")
            .arg(60_000)
            .query(&mut con)
            .unwrap();
    }
    let found = server.audit().unwrap();
    assert_eq!(keys(&found), vec![(0, "holder", "lockattr:{old}")]);
    let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
}
