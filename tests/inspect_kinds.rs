//! The operator calls on every kind of one name: `Locker::inspect` and
//! `locks` report a read-write lock (its writer with its fencing token, its
//! readers), `force_unlock_if` frees its writer by that token and hands the
//! lock on as a release does, and a wrong token frees nothing; a lock keeps
//! being reported as before, next to a read-write lock of the same name.

use crate::support;

use std::time::{Duration, SystemTime};

use lockattr::{LockInfo, LockKind, Locker};
use support::kinds::{
    LONG, joined, labelled_lockers, leased, leased_blocking, read_long, spawn_on, write_long,
};

/// Waits until `n` callers are queued for the read-write lock `name`.
async fn waiting(ops: &Locker, name: &str, n: usize) {
    for _ in 0..500 {
        if ops
            .inspect(name)
            .await
            .unwrap()
            .is_some_and(|i| i.waiters == n)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{n} waiters never queued for {name}");
}

/// `info` less the time left, which runs down between two looks.
fn still(info: &LockInfo) -> LockInfo {
    let mut info = info.clone();
    info.ttl = Duration::ZERO;
    info.readers.iter_mut().for_each(|r| r.ttl = Duration::ZERO);
    info
}

#[tokio::test]
async fn a_held_writer_is_seen_with_its_fencing_token() {
    let (_server, [app, ops]) = labelled_lockers(["catalog-writer", "ops"]);
    assert_eq!(ops.inspect("catalog").await.unwrap(), None);
    let before = SystemTime::now() - Duration::from_secs(2);
    let guard = write_long(&app, "catalog").await;

    let info = ops.inspect("catalog").await.unwrap().expect("held");
    assert_eq!(info.name, "catalog");
    assert_eq!(info.kind, LockKind::ReadWrite);
    assert!(info.exclusive);
    assert_eq!(info.fencing_token, guard.fencing_token());
    assert!(
        info.ttl > Duration::from_secs(25) && info.ttl <= LONG,
        "{info:?}"
    );
    assert!(info.readers.is_empty());
    let who = info.holder.clone().expect("writer recorded");
    assert_eq!(who.label, "catalog-writer");
    assert_eq!(who.pid, std::process::id());
    assert!(who.since >= before, "{who:?}");
    let again = ops.inspect_blocking("catalog").unwrap().unwrap();
    assert_eq!(still(&again), still(&info));

    let listed = ops.locks("cat*", 10).await.unwrap();
    assert_eq!(listed.iter().map(still).collect::<Vec<_>>(), [still(&info)]);
    assert!(ops.locks("other*", 10).await.unwrap().is_empty());
    guard.release().await.unwrap();
    assert_eq!(ops.inspect("catalog").await.unwrap(), None);
    assert!(ops.locks("*", 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn readers_are_seen() {
    let (_server, [app, ops]) = labelled_lockers(["reporter", "ops"]);
    // The last write's token is what readers are granted.
    let writer = write_long(&app, "prices").await;
    let written = writer.fencing_token();
    writer.release().await.unwrap();
    let first = read_long(&app, "prices").await;
    let second = read_long(&app, "prices").await;

    let info = ops.inspect("prices").await.unwrap().expect("read");
    assert_eq!(info.kind, LockKind::ReadWrite);
    assert!(!info.exclusive);
    assert_eq!(info.holder, None);
    assert_eq!(info.readers.len(), 2, "{info:?}");
    for reader in &info.readers {
        assert_eq!(reader.fencing_token, written);
        assert_eq!(reader.holder.as_ref().unwrap().label, "reporter");
        assert!(reader.ttl > Duration::from_secs(25) && reader.ttl <= LONG);
    }
    assert_eq!(info.fencing_token, written);
    // No writer holds: its token frees nothing.
    assert!(!ops.force_unlock_if("prices", written).await.unwrap());
    assert!(!ops.force_unlock("prices").await.unwrap());
    assert_eq!(ops.locks("prices", 10).await.unwrap().len(), 1);
    first.release().await.unwrap();
    let info = ops.inspect("prices").await.unwrap().expect("still read");
    assert_eq!(info.readers.len(), 1);
    second.release().await.unwrap();
    assert_eq!(ops.inspect("prices").await.unwrap(), None);
}

#[tokio::test]
async fn a_freed_writer_hands_the_lock_to_a_waiting_writer() {
    let (_server, [app, ops]) = labelled_lockers(["app", "ops"]);
    let stuck = write_long(&app, "ledger").await;
    let next = spawn_on(&app, |app| async move { write_long(&app, "ledger").await });
    waiting(&ops, "ledger", 1).await;
    let info = ops.inspect("ledger").await.unwrap().expect("held");
    assert_eq!(info.fencing_token, stuck.fencing_token());

    // A wrong token frees nothing.
    assert!(
        !ops.force_unlock_if("ledger", info.fencing_token + 1)
            .await
            .unwrap()
    );
    let again = ops.inspect("ledger").await.unwrap().expect("still held");
    assert_eq!(still(&again), still(&info));

    assert!(
        ops.force_unlock_if("ledger", info.fencing_token)
            .await
            .unwrap()
    );
    let next = joined(
        next,
        Duration::from_secs(5),
        "the waiting writer got the lock",
    )
    .await;
    assert!(next.fencing_token() > stuck.fencing_token());
    let now = ops.inspect("ledger").await.unwrap().expect("handed on");
    assert_eq!(now.fencing_token, next.fencing_token());
    assert_eq!(now.waiters, 0);
    // The freed writer finds out at its release.
    assert!(stuck.release().await.is_err());
    // Its token no longer frees anything: the next writer keeps the lock.
    assert!(
        !ops.force_unlock_if("ledger", info.fencing_token)
            .await
            .unwrap()
    );
    next.release().await.unwrap();
}

#[tokio::test]
async fn a_freed_writer_admits_the_waiting_readers() {
    let (_server, [app, ops]) = labelled_lockers(["app", "ops"]);
    let stuck = write_long(&app, "index").await;
    let readers: Vec<_> = (0..2)
        .map(|_| spawn_on(&app, |app| async move { read_long(&app, "index").await }))
        .collect();
    waiting(&ops, "index", 2).await;
    assert!(ops.force_unlock("index").await.unwrap());
    let mut guards = Vec::new();
    for reader in readers {
        guards.push(joined(reader, Duration::from_secs(5), "a waiting reader got in").await);
    }
    let info = ops.inspect("index").await.unwrap().expect("read");
    assert!(!info.exclusive);
    assert_eq!(info.readers.len(), 2);
    assert!(stuck.release().await.is_err());
    for guard in guards {
        guard.release().await.unwrap();
    }
}

#[tokio::test]
async fn a_lock_and_a_read_write_lock_of_one_name_are_both_listed() {
    let (_server, [app, ops]) = labelled_lockers(["app", "ops"]);
    let lock = leased(app.lock("job"), LONG).await;
    let writer = write_long(&app, "job").await;
    let listed = ops.locks("*", 10).await.unwrap();
    let kinds: Vec<(&str, LockKind)> = listed.iter().map(|i| (i.name.as_str(), i.kind)).collect();
    assert_eq!(
        kinds,
        [("job", LockKind::Lock), ("job", LockKind::ReadWrite)]
    );
    assert_eq!(listed[0].fencing_token, lock.fencing_token());
    assert_eq!(listed[1].fencing_token, writer.fencing_token());
    // The limit counts both kinds.
    assert_eq!(ops.locks("*", 1).await.unwrap().len(), 1);
    // `inspect` reports the lock while it is held, and a forced unlock
    // frees it first; then the writer.
    let info = ops.inspect("job").await.unwrap().unwrap();
    assert_eq!(info.kind, LockKind::Lock);
    assert!(info.exclusive && info.readers.is_empty());
    assert!(ops.force_unlock("job").await.unwrap());
    assert_eq!(
        ops.inspect("job").await.unwrap().unwrap().kind,
        LockKind::ReadWrite
    );
    assert!(
        ops.force_unlock_if("job", writer.fencing_token())
            .await
            .unwrap()
    );
    assert_eq!(ops.inspect("job").await.unwrap(), None);
    assert!(lock.release().await.is_err());
    assert!(writer.release().await.is_err());
}

#[test]
fn the_blocking_calls_see_a_writer_too() {
    let (_server, [ops]) = labelled_lockers(["ops"]);
    let guard = leased_blocking(ops.write_lock("sync"), LONG);
    let listed = ops.locks_blocking("sync", 10).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].fencing_token, guard.fencing_token());
    assert!(ops.force_unlock_blocking("sync").unwrap());
    assert_eq!(ops.inspect_blocking("sync").unwrap(), None);
}
