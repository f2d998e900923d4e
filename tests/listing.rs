//! `Locker::locks` and `Locker::semaphores` over a keyspace that holds
//! more than lockattr wrote: a key under the prefix that is not one of
//! lockattr's (a name that is not UTF-8, a hash at a lock key, a list at a
//! permit key) is skipped and counted, and the rest is listed. Globs match
//! the lock's name, never its key's spelling.

use crate::support;

use std::time::Duration;

use support::RedisServer;
use support::kinds::{labelled_lockers, leased};

/// Runs `args` (a command) on the server, with a TTL set afterwards on `key`.
fn foreign(server: &RedisServer, key: &[u8], command: &[&[u8]]) {
    let mut con = server.client();
    let mut cmd = redis::cmd(std::str::from_utf8(command[0]).unwrap());
    cmd.arg(key);
    for arg in &command[1..] {
        cmd.arg(*arg);
    }
    let _: redis::Value = cmd.query(&mut con).unwrap();
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(key)
        .arg(600_000)
        .query(&mut con)
        .unwrap();
}

#[tokio::test]
async fn a_foreign_key_is_skipped_counted_and_the_rest_listed() {
    let (server, [holder, ops]) = labelled_lockers(["worker", "ops"]);
    let lock = holder.lock("real").acquire().await.unwrap();
    let permit = holder.semaphore("gpu", 2).acquire().await.unwrap();
    // A name that is not UTF-8, a hash at a lock key, a list at a permit key.
    foreign(&server, b"lockattr:{\xff\xfe}", &[b"SET", b"x"]);
    foreign(&server, b"lockattr:{hashy}", &[b"HSET", b"f", b"v"]);
    foreign(&server, b"lockattr:{listy}:sem:permit:0", &[b"RPUSH", b"v"]);

    let locks = ops.locks("*", 100).await.unwrap();
    let names: Vec<&str> = locks.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["real"]);
    assert_eq!(locks.skipped(), 2, "the non-UTF-8 name and the hash");
    let blocking = ops.locks_blocking("*", 100).unwrap();
    assert_eq!((blocking.len(), blocking.skipped()), (1, 2));

    let semaphores = ops.semaphores("*", 100).await.unwrap();
    let names: Vec<&str> = semaphores.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["gpu"]);
    assert_eq!(semaphores.skipped(), 1, "the list at a permit key");

    // A pattern that leaves the foreign keys out counts none of them.
    let only = ops.locks("re*", 100).await.unwrap();
    assert_eq!((only.len(), only.skipped()), (1, 0));
    lock.release().await.unwrap();
    permit.release().await.unwrap();
}

#[tokio::test]
async fn globs_match_the_name_not_the_keys_spelling() {
    let (_server, [holder, ops]) = labelled_lockers(["worker", "ops"]);
    let brace = leased(holder.lock("a}"), Duration::from_secs(30)).await;
    let slash = holder.lock("b\\c").acquire().await.unwrap();
    let sem = holder.semaphore("s}", 1).acquire().await.unwrap();
    let names = |pattern: &'static str| {
        let ops = ops.clone();
        async move {
            let found = ops.locks(pattern, 100).await.unwrap();
            found.iter().map(|i| i.name.clone()).collect::<Vec<_>>()
        }
    };
    assert_eq!(names("a?").await, ["a}"]);
    assert_eq!(names("a}").await, ["a}"]);
    assert_eq!(names("a[}]").await, ["a}"]);
    assert_eq!(names("a[^x]").await, ["a}"]);
    assert_eq!(names("*}").await, ["a}"]);
    assert!(names("a????").await.is_empty());
    assert!(names("*x7d").await.is_empty());
    assert_eq!(names("b?c").await, ["b\\c"]);
    assert_eq!(names("b\\\\c").await, ["b\\c"]);
    assert_eq!(names("b[\\\\]c").await, ["b\\c"]);
    assert_eq!(names("b*").await, ["b\\c"]);
    assert!(names("b????c").await.is_empty());
    let semaphores = ops.semaphores("s?", 10).await.unwrap();
    assert_eq!(semaphores.len(), 1);
    assert_eq!(semaphores[0].name, "s}");
    assert!(ops.semaphores("s*x7d", 10).await.unwrap().is_empty());
    brace.release().await.unwrap();
    slash.release().await.unwrap();
    sem.release().await.unwrap();
}
