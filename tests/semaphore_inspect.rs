//! For operators, semaphores: who holds each permit and who waits
//! (`Locker::inspect_semaphore`), which semaphores are in use
//! (`Locker::semaphores`), and freeing a stuck permit by its fencing token
//! (`Locker::force_unlock_permit`), against a real redis-server. The owner
//! token never shows in what they return.

use crate::support;

use std::time::{Duration, SystemTime};

use lockattr::LockError;
use support::cluster::Cluster;
use support::keys;
use support::kinds::{
    assert_token_hidden, del, joined, labelled_lockers, leased, lost_within, renewing, spawn_on,
    within,
};
use support::lockers::labelled;
use support::waiters::queued;

#[tokio::test]
async fn an_unused_semaphore_has_no_info() {
    let (_server, [ops]) = labelled_lockers(["ops"]);
    assert_eq!(ops.inspect_semaphore("gpu").await.unwrap(), None);
    assert_eq!(ops.inspect_semaphore_blocking("gpu").unwrap(), None);
    assert!(ops.semaphores("*", 10).await.unwrap().is_empty());
    assert!(matches!(
        ops.inspect_semaphore("").await,
        Err(LockError::InvalidInput { .. })
    ));
    assert!(matches!(
        ops.force_unlock_permit("gpu", 0).await,
        Err(LockError::InvalidInput { .. })
    ));
    assert!(!ops.force_unlock_permit("gpu", 7).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_permit_names_its_holder_and_token_and_the_waiters_show() {
    let (server, [workers, ops]) = labelled_lockers(["render-worker", "ops"]);
    let before = SystemTime::now() - Duration::from_secs(2);
    let a = leased(workers.semaphore("gpu", 3), Duration::from_secs(30)).await;
    let b = workers.semaphore("gpu", 3).acquire().await.unwrap();

    let info = ops.inspect_semaphore("gpu").await.unwrap().expect("in use");
    assert_eq!(info.name, "gpu");
    assert_eq!(info.permits, 3);
    assert_eq!(info.waiters, 0);
    assert!(info.waiting.is_empty());
    assert_eq!(info.holders.len(), 2, "{info:?}");
    let mut tokens: Vec<u64> = info.holders.iter().map(|p| p.fencing_token).collect();
    tokens.sort_unstable();
    let mut expected = vec![a.fencing_token(), b.fencing_token()];
    expected.sort_unstable();
    assert_eq!(tokens, expected);
    for permit in &info.holders {
        assert!(permit.permit < 3);
        assert!(permit.ttl > Duration::from_secs(5), "{permit:?}");
        let who = permit.holder.clone().expect("recorded");
        assert_eq!(who.label, "render-worker");
        assert_eq!(who.pid, std::process::id());
        assert!(who.since >= before, "{who:?}");
    }
    // No owner token in what is returned.
    for key in server.keys(&keys::permit_keys("gpu")) {
        assert_token_hidden(&server, &key, &info);
    }

    // Full: a third and a fourth caller; the fourth waits.
    let c = workers.semaphore("gpu", 3).acquire().await.unwrap();
    let waiter = spawn_on(&labelled(&server, "late-worker"), |waiters| async move {
        within(waiters.semaphore("gpu", 3), Duration::from_secs(20)).await
    });
    assert!(queued(&server, &keys::sem("gpu").queue, 1));
    let info = ops.inspect_semaphore_blocking("gpu").unwrap().unwrap();
    assert_eq!(info.holders.len(), 3);
    assert_eq!(info.waiters, 1);
    assert_eq!(info.waiting.len(), 1);
    assert_eq!(info.waiting[0].label, "late-worker");

    // Listed, with a lock of another name apart, and matched by pattern.
    let lock = workers.lock("gpu-lock").acquire().await.unwrap();
    let listed = ops.semaphores("*", 100).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].name, "gpu");
    assert_eq!(listed[0].holders.len(), 3);
    assert_eq!(ops.semaphores_blocking("g?u", 100).unwrap().len(), 1);
    assert!(ops.semaphores("cpu*", 100).await.unwrap().is_empty());
    let locks = ops.locks("*", 100).await.unwrap();
    assert_eq!(locks.len(), 1, "permits are not listed as locks: {locks:?}");

    // A release hands the permit to the waiter, whose token then shows.
    a.release().await.unwrap();
    let d = waiter.await.unwrap().unwrap();
    let info = ops.inspect_semaphore("gpu").await.unwrap().unwrap();
    assert_eq!(info.waiters, 0);
    assert!(
        info.holders
            .iter()
            .any(|p| p.fencing_token == d.fencing_token()
                && p.holder.as_ref().unwrap().label == "late-worker"),
        "{info:?}"
    );
    for guard in [b, c, d] {
        guard.release().await.unwrap();
    }
    lock.release().await.unwrap();
    assert_eq!(ops.inspect_semaphore("gpu").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_permit_goes_to_the_oldest_waiter_and_its_holder_turns_lost() {
    let (server, [workers, ops]) = labelled_lockers(["stuck-worker", "ops"]);
    let stuck = renewing(workers.semaphore("slots", 1), Duration::from_secs(1)).await;
    let waiter = spawn_on(&labelled(&server, "next-worker"), |waiters| async move {
        within(waiters.semaphore("slots", 1), Duration::from_secs(20)).await
    });
    assert!(queued(&server, &keys::sem("slots").queue, 1));
    let info = ops.inspect_semaphore("slots").await.unwrap().unwrap();
    let token = info.holders[0].fencing_token;
    assert_eq!(token, stuck.fencing_token());

    // A token no permit holds frees nothing.
    assert!(!ops.force_unlock_permit("slots", token + 100).await.unwrap());
    assert!(!stuck.is_lost());

    assert!(ops.force_unlock_permit("slots", token).await.unwrap());
    let five = Duration::from_secs(5);
    let next = joined(waiter, five, "the waiter is handed the permit")
        .await
        .unwrap();
    assert!(next.fencing_token() > token);
    let lost = lost_within(&stuck, five, "the renewal finds the permit gone").await;
    assert!(matches!(lost, LockError::Lost { .. }), "{lost:?}");
    // Done once: the same token again frees nothing (the permit changed
    // hands), the new holder keeps it.
    assert!(
        !ops.force_unlock_permit_blocking("slots", token).unwrap(),
        "changed hands"
    );
    let info = ops.inspect_semaphore("slots").await.unwrap().unwrap();
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].fencing_token, next.fencing_token());
    assert_eq!(
        info.holders[0].holder.as_ref().unwrap().label,
        "next-worker"
    );
    next.release().await.unwrap();
    drop(stuck);
}

#[tokio::test]
async fn a_forced_permit_with_nobody_waiting_is_freed() {
    let (server, [workers, ops]) = labelled_lockers(["w", "ops"]);
    let guard = workers.semaphore("pool", 2).acquire().await.unwrap();
    let token = guard.fencing_token();
    assert!(ops.force_unlock_permit("pool", token).await.unwrap());
    assert_eq!(ops.inspect_semaphore("pool").await.unwrap(), None);
    assert!(server.keys(&keys::permit_keys("pool")).is_empty());
    assert!(matches!(
        guard.release().await,
        Err(LockError::NotOwned { .. })
    ));
}

/// The record of the number of permits expires `fence_retention` after
/// the last acquisition; a permit held longer is still found, and the
/// number is the one its value records (or, for a value of an older
/// version that records none, the highest permit held plus one).
#[tokio::test]
async fn a_permit_outliving_its_record_is_still_found() {
    let (server, [workers, ops]) = labelled_lockers(["w", "ops"]);
    let _first = workers.semaphore("old", 4).acquire().await.unwrap();
    let second = workers.semaphore("old", 4).acquire().await.unwrap();
    del(&server, &keys::permits_record("old"));
    let info = ops.inspect_semaphore("old").await.unwrap().unwrap();
    assert_eq!(info.holders.len(), 2, "{info:?}");
    assert_eq!(info.permits, 4);
    // Values as an older version wrote them: no number recorded.
    for key in server.keys(&keys::permit_keys("old")) {
        let value = server.get(&key).unwrap();
        let (older, _) = value.rsplit_once('\n').unwrap();
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(older)
            .arg("KEEPTTL")
            .query(&mut server.client())
            .unwrap();
    }
    let info = ops.inspect_semaphore("old").await.unwrap().unwrap();
    assert_eq!(info.holders.len(), 2, "{info:?}");
    assert_eq!(info.permits, 2);
    assert!(
        ops.force_unlock_permit("old", second.fencing_token())
            .await
            .unwrap()
    );
    assert_eq!(ops.semaphores("o*", 10).await.unwrap()[0].holders.len(), 1);
}

/// On a 3-master Cluster: semaphores on every master are listed (the scan
/// reaches each master), inspected and force-released on the master of
/// their hash tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_semaphores_are_found_on_every_master() {
    let cluster = Cluster::start();
    let locker = cluster.locker();
    let names = cluster.name_per_master("pool");
    let mut guards = Vec::new();
    for name in &names {
        guards.push(locker.semaphore(name, 2).acquire().await.unwrap());
    }
    let listed = locker.semaphores("pool*", 100).await.unwrap();
    let listed_names: Vec<&str> = listed.iter().map(|s| s.name.as_str()).collect();
    let mut expected: Vec<&str> = names.iter().map(String::as_str).collect();
    expected.sort_unstable();
    assert_eq!(listed_names, expected);
    for info in &listed {
        assert_eq!((info.permits, info.holders.len()), (2, 1), "{info:?}");
    }
    let (name, guard) = (&names[1], &guards[1]);
    let info = locker.inspect_semaphore(name).await.unwrap().unwrap();
    assert_eq!(info.holders[0].fencing_token, guard.fencing_token());
    assert!(
        locker
            .force_unlock_permit(name, guard.fencing_token())
            .await
            .unwrap()
    );
    assert_eq!(locker.inspect_semaphore(name).await.unwrap(), None);
}
