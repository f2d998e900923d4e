//! What `ls`, `show` and `watch` print over what they find: a key that
//! lockattr did not write is skipped and reported, read-write locks are in
//! `watch` too, kinds have a column (text) and a field (JSON) of their
//! own, a token that is not known reads alike everywhere, and an empty
//! listing says so.

mod support;

use std::time::Duration;

use lockattr_runtime::{LockGuard, Locker};
use serde_json::Value;

use support::RedisServer;

const LEASE: Duration = Duration::from_secs(30);

/// `lockattr --url <server> args...`: exit code, stdout, stderr.
fn lockattr(server: &RedisServer, args: &[&str]) -> (i32, String, String) {
    support::lockattr_at(&server.url(), args)
}

fn json(server: &RedisServer, args: &[&str]) -> Value {
    let (_, stdout, _) = lockattr(server, args);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn locker(server: &RedisServer) -> Locker {
    Locker::builder(server.url()).label("app").build().unwrap()
}

fn take(locker: &Locker, name: &str) -> LockGuard {
    locker.lock(name).expire(LEASE).acquire_blocking().unwrap()
}

/// The cells of each row under the header of a table in `text`.
fn rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .skip_while(|l| !l.starts_with("NAME"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[test]
fn ls_skips_a_key_lockattr_did_not_write_and_says_so() {
    let server = RedisServer::start();
    let app = locker(&server);
    let _lock = take(&app, "real");
    let mut con = server_client(&server);
    let _: i64 = redis::cmd("HSET")
        .arg("lockattr:{hashy}")
        .arg("f")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let _: i64 = redis::cmd("EXPIRE")
        .arg("lockattr:{hashy}")
        .arg(600)
        .query(&mut con)
        .unwrap();
    let (code, stdout, stderr) = lockattr(&server, &["ls"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let names: Vec<String> = rows(&stdout).into_iter().map(|r| r[0].clone()).collect();
    assert_eq!(names, ["real"], "{stdout}");
    assert!(
        stderr.contains("skipped 1 key under the prefix that lockattr did not write"),
        "{stderr}"
    );
    let (code, stdout, stderr) = lockattr(&server, &["ls", "--json"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stderr.contains("skipped 1 key"), "{stderr}");
    let items: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(items.as_array().unwrap().len(), 1);
    let (code, stdout, _) = lockattr(&server, &["watch", "--count", "1"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("1 key skipped"), "{stdout}");
    let line = json(&server, &["watch", "--count", "1", "--json"]);
    assert_eq!(line["skipped"], 1, "{line}");
}

fn server_client(server: &RedisServer) -> redis::Connection {
    redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap()
}

#[test]
fn watch_lists_read_write_locks_and_counts_them() {
    let server = RedisServer::start();
    let app = locker(&server);
    let _lock = take(&app, "w:1");
    let _writer = app
        .write_lock("ledger")
        .expire(LEASE)
        .acquire_blocking()
        .unwrap();
    let _permit = app
        .semaphore("gpu", 3)
        .expire(LEASE)
        .acquire_blocking()
        .unwrap();
    let (code, stdout, _) = lockattr(&server, &["watch", "--count", "1"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("1 lock, 1 read-write lock and 1 semaphore held"),
        "{stdout}"
    );
    let rows = rows(&stdout);
    let kinds: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r[0].as_str(), r[1].as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("w:1", "lock"),
            ("ledger", "read-write"),
            ("gpu", "semaphore(1/3)")
        ],
        "{stdout}"
    );
    let line = json(&server, &["watch", "--count", "1", "--json"]);
    assert_eq!(line["locks"][0]["name"], "w:1");
    assert_eq!(line["read_write"][0]["name"], "ledger", "{line}");
    assert_eq!(line["read_write"][0]["kind"], "read-write");
    assert!(line["read_write"][0]["writer"]["fencing_token"].is_u64());
}

#[test]
fn kinds_have_a_column_and_a_field_and_an_unknown_token_reads_alike() {
    let server = RedisServer::start();
    let app = locker(&server);
    let _lock = take(&app, "order:7");
    // A reader before any write: no fencing token is known.
    let _reader = app
        .read_lock("prices")
        .expire(LEASE)
        .acquire_blocking()
        .unwrap();
    let (code, stdout, _) = lockattr(&server, &["ls"]);
    assert_eq!(code, 0);
    let header: Vec<&str> = stdout.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "KIND", "HOLDER", "SINCE", "TTL", "WAITERS", "FENCE"]
    );
    let rows = rows(&stdout);
    assert_eq!(rows[0][..2], ["order:7", "lock"], "{stdout}");
    assert_eq!(rows[1][..2], ["prices", "read-write"], "{stdout}");
    assert_eq!(rows[1].last().unwrap(), "-", "{stdout}");
    let (_, shown, _) = lockattr(&server, &["show", "prices"]);
    let reader = shown
        .lines()
        .find(|l| l.starts_with("reader "))
        .expect("a reader row");
    assert!(reader.ends_with(" -"), "{shown}");
    let items = json(&server, &["ls", "--json"]);
    assert_eq!(items[0]["kind"], "lock", "{items}");
    assert_eq!(items[1]["readers"][0]["fencing_token"], Value::Null);
    let shown = json(&server, &["show", "order:7", "--json"]);
    assert_eq!(shown["kind"], "lock");
}

#[test]
fn an_empty_ls_says_nothing_matched() {
    let server = RedisServer::start();
    let (code, stdout, _) = lockattr(&server, &["ls", "invoice:*"]);
    assert_eq!(code, 0);
    assert_eq!(
        stdout,
        "No lock, read-write lock or semaphore matches `invoice:*`.\n"
    );
    let (code, stdout, _) = lockattr(&server, &["ls", "invoice:*", "--json"]);
    assert_eq!((code, stdout.as_str()), (0, "[]\n"));
}
