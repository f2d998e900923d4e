//! For operators: who holds a lock (`Locker::inspect`), which locks are held
//! (`Locker::locks`, by SCAN, bounded), and a forced unlock
//! (`Locker::force_unlock`), on one server and on a Redlock. The owner
//! token never shows in what they return.

use crate::support;

use std::time::{Duration, Instant, SystemTime};

use lockattr::{LockError, Locker};
use support::kinds::{
    assert_token_hidden, del, inspect_until_waiters, labelled_lockers, leased, renewing,
    three_servers, within,
};
use support::lockers::labelled;
use support::{RedisServer, lock_key};

#[tokio::test]
async fn a_free_lock_has_no_info() {
    let (_server, [locker]) = labelled_lockers(["ops"]);
    assert_eq!(locker.inspect("free").await.unwrap(), None);
    assert_eq!(locker.inspect_blocking("free").unwrap(), None);
    assert!(matches!(
        locker.inspect("").await,
        Err(LockError::InvalidInput { .. })
    ));
}

#[tokio::test]
async fn a_held_lock_names_its_holder_and_never_its_token() {
    let (server, [holder, ops]) = labelled_lockers(["billing-worker", "ops"]);
    let before = SystemTime::now() - Duration::from_secs(2);
    let guard = leased(holder.lock("order:7"), Duration::from_secs(30)).await;
    let info = ops.inspect("order:7").await.unwrap().expect("held");
    assert_eq!(info.name, "order:7");
    assert_eq!(info.fencing_token, guard.fencing_token());
    assert!(
        info.ttl > Duration::from_secs(25) && info.ttl <= Duration::from_secs(30),
        "{info:?}"
    );
    assert_eq!(info.waiters, 0);
    let who = info.holder.clone().expect("holder recorded");
    assert_eq!(who.label, "billing-worker");
    assert_eq!(who.pid, std::process::id());
    assert!(!who.host.is_empty());
    assert!(
        who.since >= before && who.since <= SystemTime::now() + Duration::from_secs(2),
        "{who:?}"
    );
    // The owner token is the first line of the lock's value: it appears
    // nowhere in what inspect returns.
    assert_token_hidden(&server, &lock_key("order:7"), &info);
    let again = ops.inspect_blocking("order:7").unwrap().unwrap();
    assert_eq!(
        (again.holder, again.fencing_token),
        (info.holder, info.fencing_token)
    );
    guard.release().await.unwrap();
    assert_eq!(ops.inspect("order:7").await.unwrap(), None);
}

#[tokio::test]
async fn waiters_are_counted_and_the_new_holder_shows_after_a_hand_over() {
    let (server, [first, second]) = labelled_lockers(["first", "second"]);
    let guard = first.lock("job").acquire().await.unwrap();
    let token = guard.fencing_token();
    let waiter =
        tokio::spawn(async move { within(second.lock("job"), Duration::from_secs(20)).await });
    let ops = labelled(&server, "ops");
    let info = inspect_until_waiters(&ops, "job", 1, Duration::from_secs(5)).await;
    assert_eq!(info.holder.unwrap().label, "first");
    guard.release().await.unwrap();
    let handed = waiter.await.unwrap().unwrap();
    let info = ops.inspect("job").await.unwrap().unwrap();
    assert_eq!(info.holder.unwrap().label, "second");
    assert_eq!(info.waiters, 0);
    assert_eq!(info.fencing_token, handed.fencing_token());
    assert!(handed.fencing_token() > token);
    handed.release().await.unwrap();
}

#[tokio::test]
async fn locks_scans_without_keys_and_stays_within_its_limit() {
    let (server, [locker]) = labelled_lockers(["bulk"]);
    // Ten thousand held locks, written as acquisitions write them, and a
    // few real ones.
    let mut con = server.client();
    let mut pipe = lockattr::redis::pipe();
    for i in 0..10_000 {
        pipe.cmd("SET")
            .arg(lock_key(&format!("job:{i}")))
            .arg(format!(
                "{:032x}\nhost-a\n7\nbulk\n1700000000000\n{}",
                i + 1,
                i + 1
            ))
            .arg("PX")
            .arg(120_000)
            .ignore();
    }
    let () = pipe.query(&mut con).unwrap();
    let a = locker.lock("report:a").acquire().await.unwrap();
    let b = locker.lock("report:b}x").acquire().await.unwrap();
    let reports = locker.locks("report:*", 100).await.unwrap();
    let names: Vec<&str> = reports.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["report:a", "report:b}x"]);
    assert_eq!(reports[0].fencing_token, a.fencing_token());
    assert_eq!(reports[0].holder.as_ref().unwrap().label, "bulk");

    let some = locker.locks("job:*", 50).await.unwrap();
    assert_eq!(some.len(), 50);
    assert!(some.iter().all(|i| i.name.starts_with("job:")));
    let one = locker.locks_blocking("job:4242", 10).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].holder.as_ref().unwrap().host, "host-a");
    let all = locker.locks("*", 20_000).await.unwrap();
    assert_eq!(all.len(), 10_002);
    assert!(
        !server.command_calls().contains_key("keys"),
        "KEYS was called: {:?}",
        server.command_calls()
    );
    assert!(server.command_calls()["scan"] > 0);
    a.release().await.unwrap();
    b.release().await.unwrap();
}

#[tokio::test]
async fn a_forced_unlock_hands_the_lock_on_and_the_renewing_holder_turns_lost() {
    let (server, [holder]) = labelled_lockers(["stuck-job"]);
    let guard = renewing(holder.lock("nightly"), Duration::from_millis(900)).await;
    let stuck_token = guard.fencing_token();
    let other = labelled(&server, "next");
    let waiter =
        tokio::spawn(async move { within(other.lock("nightly"), Duration::from_secs(20)).await });
    let ops = labelled(&server, "ops");
    inspect_until_waiters(&ops, "nightly", 1, Duration::from_secs(5)).await;
    let start = Instant::now();
    assert!(ops.force_unlock("nightly").await.unwrap());
    let next = waiter.await.unwrap().unwrap();
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "handed on at once"
    );
    assert!(next.fencing_token() > stuck_token);
    assert_eq!(
        ops.inspect("nightly")
            .await
            .unwrap()
            .unwrap()
            .holder
            .unwrap()
            .label,
        "next"
    );
    // The stuck holder's renewal finds the lock taken: it turns lost, and
    // its release changes nothing of the new holder's.
    let start = Instant::now();
    while !guard.is_lost() {
        assert!(
            start.elapsed() < Duration::from_secs(3),
            "the holder did not notice"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(guard.release().await.is_err());
    assert!(ops.inspect("nightly").await.unwrap().is_some());
    next.release().await.unwrap();
    assert!(!ops.force_unlock("nightly").await.unwrap(), "already free");
    assert!(!ops.force_unlock_blocking("nightly").unwrap());
}

#[tokio::test]
async fn a_redlock_reports_the_majoritys_holder_and_frees_every_node() {
    let nodes = three_servers();
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let redlock = |label: &str| {
        Locker::redlock_builder(&urls)
            .delay_restarted_nodes(false)
            .label(label)
            .build()
            .unwrap()
    };
    let holder = redlock("majority");
    let ops = redlock("ops");
    let guard = leased(holder.lock("r"), Duration::from_secs(20)).await;
    support::warm_up(&ops, "warm").await;
    // The acquisition returned with a majority; the last node's write may
    // still be on its way.
    assert!(
        support::eventually(Duration::from_secs(5), || nodes
            .iter()
            .all(|node| node.exists(&lock_key("r"))))
        .is_some(),
        "a node never got the lock"
    );
    // One node loses the lock: a majority still holds it.
    del(&nodes[0], &lock_key("r"));
    let info = ops
        .inspect("r")
        .await
        .unwrap()
        .expect("a majority holds it");
    assert_eq!(info.holder.unwrap().label, "majority");
    assert_eq!(info.fencing_token, guard.fencing_token());
    assert!(info.ttl <= Duration::from_secs(20) && info.ttl > Duration::from_secs(15));
    let held = ops.locks("*", 10).await.unwrap();
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0].name, "r");
    // A second node gone: no majority holds it.
    del(&nodes[1], &lock_key("r"));
    assert_eq!(ops.inspect("r").await.unwrap(), None);
    assert!(ops.force_unlock("r").await.unwrap(), "node 2 still held it");
    assert!(nodes.iter().all(|n| !n.exists(&lock_key("r"))));
    assert!(guard.release().await.is_err());
}

#[tokio::test]
async fn a_conditional_forced_unlock_frees_only_the_holder_it_names() {
    let (_server, [locker, ops]) = labelled_lockers(["job", "ops"]);
    let first = locker.lock("c").acquire().await.unwrap();
    let seen = ops.inspect("c").await.unwrap().unwrap();
    // The lock changes hands before the operator confirms.
    first.release().await.unwrap();
    let second = locker.lock("c").acquire().await.unwrap();
    assert!(
        !ops.force_unlock_if("c", seen.fencing_token).await.unwrap(),
        "the new holder's lock was freed"
    );
    assert_eq!(
        ops.inspect("c").await.unwrap().unwrap().fencing_token,
        second.fencing_token()
    );
    assert!(
        ops.force_unlock_if("c", second.fencing_token())
            .await
            .unwrap()
    );
    assert_eq!(ops.inspect("c").await.unwrap(), None);
    assert!(matches!(
        ops.force_unlock_if("c", 0).await,
        Err(LockError::InvalidInput { .. })
    ));
}
