//! The `lockattr` binary on read-write locks: `ls` and `show` report the
//! writer and the readers, `unlock` frees the writer by its fencing token
//! and a waiting writer then gets the lock; a wrong token frees nothing.

mod support;

use std::sync::mpsc;
use std::time::Duration;

use lockattr_runtime::{LockGuard, Locker};
use serde_json::Value;

use support::{RedisServer, eventually};

const LEASE: Duration = Duration::from_secs(30);

/// `lockattr --url <server> args...`: exit code, stdout.
fn lockattr(server: &RedisServer, args: &[&str]) -> (i32, String) {
    let (code, stdout, _) = support::lockattr_at(&server.url(), args);
    (code, stdout)
}

fn json(server: &RedisServer, args: &[&str]) -> Value {
    let (_, stdout) = lockattr(server, args);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn locker(server: &RedisServer, label: &str) -> Locker {
    Locker::builder(server.url()).label(label).build().unwrap()
}

fn write(locker: &Locker, name: &str) -> LockGuard {
    locker
        .write_lock(name)
        .expire(LEASE)
        .acquire_blocking()
        .unwrap()
}

#[test]
fn ls_and_show_report_readers() {
    let server = RedisServer::start();
    let app = locker(&server, "reporter");
    let readers: Vec<LockGuard> = (0..2)
        .map(|_| {
            app.read_lock("prices")
                .expire(LEASE)
                .acquire_blocking()
                .unwrap()
        })
        .collect();
    let (code, table) = lockattr(&server, &["ls"]);
    assert_eq!(code, 0);
    let row = table.lines().nth(1).expect("a row");
    assert!(row.starts_with("prices  read-write  2 readers"), "{table}");
    let (code, text) = lockattr(&server, &["show", "prices"]);
    assert_eq!(code, 0);
    assert!(text.contains("kind:     read-write lock\n"), "{text}");
    assert!(text.contains("held:     by 2 readers\n"), "{text}");
    assert_eq!(text.matches("\nreader  reporter@").count(), 2, "{text}");
    let shown = json(&server, &["show", "prices", "--json"]);
    assert_eq!(shown["kind"], "read-write");
    assert_eq!(shown["writer"], Value::Null);
    assert_eq!(shown["readers"].as_array().unwrap().len(), 2);
    // Readers are not force-unlocked.
    let (code, text) = lockattr(&server, &["unlock", "prices", "--force"]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("has no writer: nothing unlocked"), "{text}");
    for reader in readers {
        reader.release_blocking().unwrap();
    }
}

#[test]
fn unlock_frees_the_writer_by_its_token_and_the_waiting_writer_gets_it() {
    let server = RedisServer::start();
    let stuck = write(&locker(&server, "stuck-writer"), "ledger");
    let token = stuck.fencing_token();
    let (send, next) = mpsc::channel();
    let waiting = locker(&server, "next-writer");
    std::thread::spawn(move || {
        let guard = waiting
            .write_lock("ledger")
            .expire(LEASE)
            .acquire_timeout(Duration::from_secs(20))
            .acquire_blocking();
        let _ = send.send(guard);
    });
    assert!(
        eventually(Duration::from_secs(10), || {
            json(&server, &["show", "ledger", "--json"])["waiters"] == 1
        })
        .is_some()
    );

    let items = json(&server, &["ls", "--json"]);
    assert_eq!(items[0]["kind"], "read-write");
    assert_eq!(items[0]["writer"]["fencing_token"], token);
    assert_eq!(items[0]["writer"]["holder"]["label"], "stuck-writer");
    let (_, table) = lockattr(&server, &["ls"]);
    let cells: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        cells[cells.len() - 2..],
        ["1", &token.to_string()],
        "{table}"
    );

    // A wrong token frees nothing.
    let wrong = (token + 1).to_string();
    let (code, text) = lockattr(
        &server,
        &["unlock", "ledger", "--force", "--fencing-token", &wrong],
    );
    assert_eq!(code, 1, "{text}");
    assert_eq!(
        json(&server, &["show", "ledger", "--json"])["writer"]["fencing_token"],
        token
    );

    let (code, text) = lockattr(
        &server,
        &[
            "unlock",
            "ledger",
            "--force",
            "--fencing-token",
            &token.to_string(),
        ],
    );
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains(&format!(
            "Force-unlocked the writer of `ledger` (fencing token {token} was held)."
        )),
        "{text}"
    );
    let next = next
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiting writer got the lock")
        .unwrap();
    assert!(next.fencing_token() > token);
    let shown = json(&server, &["show", "ledger", "--json"]);
    assert_eq!(shown["writer"]["fencing_token"], next.fencing_token());
    assert_eq!(shown["writer"]["holder"]["label"], "next-writer");
    assert!(stuck.release_blocking().is_err());
    next.release_blocking().unwrap();
}
