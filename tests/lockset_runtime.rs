//! `Locker::lock_all` on one server: all or nothing, duplicates taken once,
//! an empty set refused, exclusion with single-name holders, `{a, b}`
//! against `{b, a}` without deadlock, per-name fencing tokens, prompt
//! wake-up of a set waiter, the lost signal, the blocking path, and the
//! entries of a set waiter that died.

use crate::support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use lockattr::{LockError, LockGuard, Locker};
use support::deployments::{
    Inside, crossed_sets, cycle, cycle_set, del, hold_set_for, join_within, joined, readme_user,
    release_now, renewed_set, set_error, spawn_take_set, spawn_try_lock, spawn_try_set, try_lock,
    try_set, user_url,
};
use support::lockers::locker;
use support::waiters::spawn_waiter;
use support::{RedisServer, child_test, eventually, keys, lock_key};
use tokio::task::JoinHandle;

const LONG: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_set_is_taken_whole_and_released_whole() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let guard = hold_set_for(&locker, &["acct:1", "acct:2"], LONG).await;
    assert!(server.exists(&lock_key("acct:1")));
    assert!(server.exists(&lock_key("acct:2")));
    assert!(server.pttl(&lock_key("acct:1")) > 20_000);
    let mut names: Vec<&str> = guard.names().collect();
    names.sort_unstable();
    assert_eq!(names, ["acct:1", "acct:2"]);
    guard.release().await.unwrap();
    assert!(!server.exists(&lock_key("acct:1")));
    assert!(!server.exists(&lock_key("acct:2")));
    // Nothing without a time to live stays behind.
    for key in server.keys("lockattr:*") {
        assert!(server.pttl(&key) > 0, "{key} has no expiry");
    }
}

/// A set of 20 names costs one call to release, as it costs one to take,
/// whether it is released, dropped or released by the blocking path; each
/// name is still released as a lock is: handed to its waiter (with a
/// larger fencing token) or deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_released_in_one_call() {
    let server = RedisServer::start();
    let (locker, other) = (locker(&server), locker(&server));
    let names: Vec<String> = (0..20).map(|i| format!("one:{i}")).collect();
    let gone = || names.iter().all(|name| !server.exists(&lock_key(name)));

    let guard = hold_set_for(&locker, &names, LONG).await;
    let token_3 = guard.fencing_token_of("one:3").unwrap();
    let waiter = spawn_waiter(&other, "one:3", LONG, LONG);
    eventually(Duration::from_secs(5), || {
        server.exists(&keys::lock("one:3").queue)
    })
    .expect("the waiter queued");
    // Subscribed, and done with the one attempt it makes then, so that
    // the count below is the release's alone.
    eventually(Duration::from_secs(5), || {
        let (_, listeners): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(keys::lock("one:3").channel)
            .query(&mut server.client())
            .unwrap();
        listeners == 1
    })
    .expect("the waiter subscribed");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = server.scripts_run();
    guard.release().await.unwrap();
    assert_eq!(server.scripts_run() - before, 1, "one call for 20 names");
    let (handed, _) = tokio::time::timeout(LONG, waiter).await.unwrap().unwrap();
    let handed = handed.unwrap();
    assert!(handed.fencing_token() > token_3);
    assert_eq!(
        names
            .iter()
            .filter(|name| server.exists(&lock_key(name)))
            .count(),
        1,
        "one:3 was handed over, the others deleted"
    );
    handed.release().await.unwrap();

    let guard = hold_set_for(&locker, &names, LONG).await;
    let before = server.scripts_run();
    drop(guard);
    assert!(
        eventually(Duration::from_secs(5), gone).is_some(),
        "the dropped set was not released"
    );
    assert_eq!(server.scripts_run() - before, 1, "one call for the drop");

    let before = server.scripts_run();
    let (blocking, names_again) = (locker.clone(), names.clone());
    tokio::task::spawn_blocking(move || {
        let guard = blocking
            .lock_all(&names_again)
            .expire(LONG)
            .acquire_blocking()
            .unwrap();
        guard.release_blocking().unwrap();
    })
    .await
    .unwrap();
    assert!(gone());
    assert_eq!(
        server.scripts_run() - before,
        2,
        "one call to take, one to release"
    );
}

/// A name the set no longer owns (deleted behind its back) is named in the
/// release's error, and every other name is still released by the same
/// call.
#[tokio::test]
async fn a_set_release_names_what_it_no_longer_owned_and_frees_the_rest() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let names: Vec<String> = (0..5).map(|i| format!("lost:{i}")).collect();
    let guard = hold_set_for(&locker, &names, LONG).await;
    del(&server, &lock_key("lost:2"));
    let err = guard.release().await.unwrap_err();
    assert!(
        matches!(&err, LockError::NotOwned { name } if name == "lost:2"),
        "{err:?}"
    );
    for name in &names {
        assert!(!server.exists(&lock_key(name)), "{name} is still held");
    }
}

#[tokio::test]
async fn holding_one_name_elsewhere_leaves_the_others_free() {
    let server = RedisServer::start();
    let (mine, other) = (locker(&server), locker(&server));
    let b = other.lock("b").expire(LONG).acquire().await.unwrap();
    let err = set_error(&mine, &["a", "b"], Duration::ZERO).await;
    assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
    assert!(
        !server.exists(&lock_key("a")),
        "a was taken by a failed set"
    );
    // And with a wait: still nothing held while waiting.
    let waiting = spawn_try_set(&mine, &["a", "b"], Duration::from_millis(600));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !server.exists(&lock_key("a")),
        "a was held while waiting for b"
    );
    let a = try_lock(&other, "a", Duration::ZERO)
        .await
        .expect("a is free while the set waits");
    a.release().await.unwrap();
    assert!(matches!(
        waiting.await.unwrap().0,
        Err(LockError::Timeout { .. })
    ));
    b.release().await.unwrap();
    // The waiter left its entries: nothing is left of a or b.
    assert!(
        eventually(Duration::from_secs(2), || server
            .keys("lockattr:{a}*")
            .iter()
            .all(|k| k.ends_with(":fence")))
        .is_some(),
        "{:?}",
        server.keys("lockattr:*")
    );
}

#[tokio::test]
async fn duplicates_are_taken_once_and_an_empty_set_is_refused() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let guard = locker
        .lock_all(["x", "y", "x", "x"])
        .acquire()
        .await
        .unwrap();
    assert_eq!(guard.names().count(), 2);
    let x = guard.fencing_token_of("x").unwrap();
    guard.release().await.unwrap();
    // One acquisition of x: the next one's token is exactly one more.
    let next = locker.lock("x").acquire().await.unwrap();
    assert_eq!(next.fencing_token(), x + 1);
    next.release().await.unwrap();

    let none: [&str; 0] = [];
    let err = locker.lock_all(none).acquire().await.unwrap_err();
    assert!(matches!(err, LockError::InvalidInput { .. }), "{err:?}");
    assert!(err.to_string().contains("no lock"), "{err}");
    let err = locker.lock_all(["ok", ""]).acquire().await.unwrap_err();
    assert!(matches!(err, LockError::InvalidInput { .. }), "{err:?}");
}

/// A foreign value at the fence counter of a set's second name refuses
/// the set before anything is written, with the error the lock gives for
/// it (a `LockError::Redis` naming the key): the first name's counter is
/// not created.
#[tokio::test]
async fn a_foreign_fence_counter_refuses_the_set_before_anything_is_written() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let fence_b = keys::lock("f:b").fence;
    server.allow_untimed(&fence_b);
    let _: () = redis::cmd("SET")
        .arg(&fence_b)
        .arg("x")
        .query(&mut server.client())
        .unwrap();
    let single = try_lock(&locker, "f:b", Duration::from_secs(2))
        .await
        .unwrap_err();
    let set = set_error(&locker, &["f:a", "f:b"], Duration::from_secs(2)).await;
    let named = format!("the fence counter {fence_b} holds a foreign value");
    for err in [&single, &set] {
        assert!(matches!(err, LockError::Redis { .. }), "{err:?}");
        assert!(err.to_string().contains(&named), "{err}");
    }
    assert_eq!(server.keys("lockattr:*"), [fence_b.as_str()]);
    assert_eq!(server.get(&fence_b).as_deref(), Some("x"));
}

#[tokio::test]
async fn fencing_tokens_are_per_name_and_increase() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let first = locker.lock_all(["f:1", "f:2"]).acquire().await.unwrap();
    let (a1, b1) = (
        first.fencing_token_of("f:1").unwrap(),
        first.fencing_token_of("f:2").unwrap(),
    );
    assert_eq!(first.fencing_token_of("f:3"), None);
    first.release().await.unwrap();
    // f:1 alone, three times: only its counter moves.
    for _ in 0..3 {
        cycle(&locker, "f:1").await;
    }
    let second = locker.lock_all(["f:2", "f:1"]).acquire().await.unwrap();
    assert_eq!(second.fencing_token_of("f:1"), Some(a1 + 4));
    assert_eq!(second.fencing_token_of("f:2"), Some(b1 + 1));
    second.release().await.unwrap();
}

#[test]
fn single_holders_and_set_holders_exclude_each_other() {
    let server = RedisServer::start();
    let rt = support::multi_thread();
    let inside = Inside::new(2);
    rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..6 {
            let locker = locker(&server);
            let inside = inside.clone();
            tasks.push(tokio::spawn(async move {
                for round in 0..15 {
                    // Tasks 0, 1: the set; 2, 3: `p` alone; 4, 5: `q` alone.
                    let which: Vec<usize> = match t {
                        0 | 1 => vec![0, 1],
                        2 | 3 => vec![0],
                        _ => vec![1],
                    };
                    let names: Vec<&str> = which.iter().map(|&i| ["p", "q"][i]).collect();
                    let set = if names.len() == 2 || round % 2 == 0 {
                        Some(try_set(&locker, &names, LONG).await.unwrap())
                    } else {
                        None
                    };
                    let single = if set.is_none() {
                        Some(try_lock(&locker, names[0], LONG).await.unwrap())
                    } else {
                        None
                    };
                    inside
                        .stay(&which, tokio::time::sleep(Duration::from_millis(2)))
                        .await;
                    if let Some(set) = set {
                        set.release().await.unwrap();
                    }
                    if let Some(single) = single {
                        single.release().await.unwrap();
                    }
                }
            }));
        }
        let what = "deadlock or starvation: a task did not finish";
        join_within(tasks, Duration::from_secs(60), what).await;
    });
    assert_eq!(inside.overlaps(), 0, "two holders of a name at once");
}

#[test]
fn opposite_orders_in_tasks_do_not_deadlock() {
    let server = RedisServer::start();
    let rt = support::multi_thread();
    let overlaps = rt.block_on(async {
        let lockers = [locker(&server), locker(&server)];
        let orders: Vec<Vec<String>> = (0..8)
            .map(|t| if t % 2 == 0 { ["a", "b"] } else { ["b", "a"] })
            .map(|names| names.map(String::from).to_vec())
            .collect();
        crossed_sets(&lockers, orders, 20, LONG, Duration::from_secs(60)).await
    });
    assert_eq!(overlaps, 0);
}

#[tokio::test]
async fn the_release_of_one_name_wakes_a_set_waiter_promptly() {
    let server = RedisServer::start();
    let (holder, waiter) = (locker(&server), locker(&server));
    let b = holder.lock("w:b").expire(LONG).acquire().await.unwrap();
    let task = spawn_take_set(&waiter, &["w:a", "w:b"], LONG, LONG);
    // Between the waiter's first tries and its once-a-second recheck (and
    // before it would join the name's queue, after a second): without a
    // notice, its next check is about 500 ms after the release.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!task.is_finished());
    let released = release_now(b).await;
    let (guard, woke) = joined(task, Duration::from_secs(5), "the set waiter was not woken").await;
    let guard = guard.unwrap();
    let after = woke.duration_since(released);
    // A notice brings it within a round trip or two; the bound is generous
    // for a loaded machine (the lease is 30 s), and below what the
    // recheck alone would take.
    assert!(
        after < Duration::from_millis(300),
        "woken {after:?} after the release"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn the_set_is_lost_when_one_member_is_deleted() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let guard = renewed_set(&locker, &["l:a", "l:b"], Duration::from_millis(900)).await;
    assert!(!guard.is_lost());
    del(&server, &lock_key("l:b"));
    let lost = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("the loss of one member was not seen");
    match lost {
        LockError::Lost { name, .. } => assert_eq!(name, "l:b"),
        other => panic!("{other:?}"),
    }
    assert!(guard.is_lost());
    // Releasing says which name was no longer owned; the other is freed.
    let err = guard.release().await.unwrap_err();
    assert!(
        matches!(err, LockError::NotOwned { ref name } if name == "l:b"),
        "{err:?}"
    );
    assert!(!server.exists(&lock_key("l:a")));
}

#[test]
fn the_blocking_path_takes_and_releases_on_drop() {
    let server = RedisServer::start();
    let locker = locker(&server);
    {
        let guard = locker.lock_all(["s:a", "s:b"]).acquire_blocking().unwrap();
        assert!(server.exists(&lock_key("s:a")) && server.exists(&lock_key("s:b")));
        let err = locker
            .lock_all(["s:b", "s:c"])
            .acquire_timeout(Duration::ZERO)
            .acquire_blocking()
            .unwrap_err();
        assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
        assert!(!server.exists(&lock_key("s:c")));
        assert!(guard.lost_blocking(Duration::from_millis(50)).is_none());
    }
    // Drop released both before it returned.
    assert!(!server.exists(&lock_key("s:a")));
    assert!(!server.exists(&lock_key("s:b")));
}

#[tokio::test]
async fn a_dropped_acquisition_leaves_nothing_held() {
    let server = RedisServer::start();
    let locker = locker(&server);
    let b = locker.lock("d:b").expire(LONG).acquire().await.unwrap();
    let waiting = try_set(&locker, &["d:a", "d:b"], LONG);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), waiting)
            .await
            .is_err()
    );
    b.release().await.unwrap();
    // The set waiter is gone: both names are free, its waiter entries
    // leave, and what is left (counters, the queue's marker for other
    // sets) expires.
    assert!(
        eventually(Duration::from_secs(2), || server
            .keys("lockattr:{d:*")
            .iter()
            .all(|k| k.ends_with(":fence") || k.ends_with(":queue")))
        .is_some(),
        "{:?}",
        server.keys("lockattr:*")
    );
    for key in server.keys("lockattr:*") {
        assert!(server.pttl(&key) > 0, "{key} has no expiry");
    }
}

/// Tells `child_set_waiter` it runs as a child: the server's URL.
const CHILD_URL: &str = "LOCKATTR_SET_WAITER_URL";

/// Waits for the set `{k:a, k:b}` (acquire time 2 s) until the parent
/// test kills it (SIGKILL) while it waits; does nothing unless started by
/// `a_killed_set_waiter`.
#[test]
fn child_set_waiter() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    support::multi_thread().block_on(async {
        let locker = Locker::new(&url).unwrap();
        let waited = try_set(&locker, &["k:a", "k:b"], Duration::from_secs(2)).await;
        panic!("the set waiter was not killed: {:?}", waited.map(|_| ()));
    });
}

/// The entries of the waiters hash of `name` (default prefix).
fn waiter_entries(server: &RedisServer, name: &str) -> HashMap<String, String> {
    redis::cmd("HGETALL")
        .arg(keys::lock(name).waiters)
        .query(&mut server.client())
        .unwrap()
}

/// A set waiter of `{k:a, k:b}` in another process, killed (SIGKILL)
/// while it waits, so that it never takes its entries back; then a
/// single-name waiter of `k:b`, queued behind the set's marker for 30 s,
/// which keeps `k:b`'s waiters hash alive past the set waiter's deadline.
/// Returns, once that deadline has passed by the server's clock, `k:b`'s
/// holder and the queued waiter.
async fn a_killed_set_waiter(
    server: &RedisServer,
) -> (
    LockGuard,
    JoinHandle<(Result<LockGuard, LockError>, Instant)>,
) {
    let (holder, queued) = (locker(server), locker(server));
    let b = holder.lock("k:b").expire(LONG).acquire().await.unwrap();
    let url = server.url();
    let mut child = child_test("child_set_waiter", &[(CHILD_URL, url.as_str())])
        .spawn()
        .expect("spawn child test process");
    let entered = eventually(Duration::from_secs(10), || {
        waiter_entries(server, "k:b").len() == 1
    });
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    assert!(
        entered.is_some(),
        "the set waiter never waited; stderr:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (_, entry) = waiter_entries(server, "k:b").into_iter().next().unwrap();
    // `<deadline ms>:<lease ms>:<queued ms>:<holder>`, outside the queue.
    let fields: Vec<&str> = entry.splitn(4, ':').collect();
    assert_eq!(fields[2], "0", "{entry:?}");
    let deadline: u64 = fields[0].parse().unwrap();
    let waiter = spawn_try_lock(&queued, "k:b", LONG);
    assert!(
        eventually(Duration::from_secs(5), || waiter_entries(server, "k:b")
            .len()
            == 2)
        .is_some()
    );
    loop {
        let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut server.client()).unwrap();
        if s * 1000 + us / 1000 > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (b, waiter)
}

/// A set waiter that died (SIGKILL) leaves its entries behind; once its
/// deadline has passed, the release of a name (here handed to a waiter
/// queued after the set's marker) drops its entry there, as it drops a
/// queued waiter's dead entry, and `inspect` shows no waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_set_waiters_entry_is_dropped_by_the_next_release() {
    let server = RedisServer::start();
    let (b, waiter) = a_killed_set_waiter(&server).await;
    b.release().await.unwrap();
    let what = "the queued waiter was not handed k:b";
    let handed = joined(waiter, Duration::from_secs(5), what)
        .await
        .0
        .unwrap();
    assert_eq!(waiter_entries(&server, "k:b"), HashMap::new());
    let info = locker(&server).inspect("k:b").await.unwrap().expect("held");
    assert_eq!(info.waiters, 0, "{info:?}");
    handed.release().await.unwrap();
}

/// `inspect` counts the waiters still waiting: not the entry of a set
/// waiter that died and whose deadline has passed, before any release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_does_not_count_a_dead_set_waiter() {
    let server = RedisServer::start();
    let (b, waiter) = a_killed_set_waiter(&server).await;
    let info = locker(&server).inspect("k:b").await.unwrap().expect("held");
    assert_eq!(info.waiters, 1, "{info:?}");
    b.release().await.unwrap();
    waiter.await.unwrap().0.unwrap().release().await.unwrap();
}

/// Three tasks hand `q:a` from one to the next without a pause (each
/// queues again right after its release), so `q:a` is never free; a set
/// `{q:a, q:b}` still gets in, once it has joined `q:a`'s queue, well
/// within its acquire time. Without that, it would wait out its whole
/// acquire time.
#[test]
fn a_set_is_not_starved_by_single_name_hand_overs() {
    let server = RedisServer::start();
    let rt = support::multi_thread();
    rt.block_on(async {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut streams = Vec::new();
        for _ in 0..3 {
            let locker = locker(&server);
            let stop = stop.clone();
            streams.push(tokio::spawn(async move {
                let mut rounds = 0_u32;
                while !stop.load(Ordering::SeqCst) {
                    let guard = try_lock(&locker, "q:a", LONG).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    guard.release().await.unwrap();
                    rounds += 1;
                }
                rounds
            }));
        }
        // The stream is running: `q:a` has waiters queued.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let start = Instant::now();
        let set = try_set(&locker(&server), &["q:a", "q:b"], Duration::from_secs(8)).await;
        let waited = start.elapsed();
        stop.store(true, Ordering::SeqCst);
        let set = set.expect("the set was starved by the single-name hand-overs");
        assert!(waited < Duration::from_secs(5), "took {waited:?}");
        set.release().await.unwrap();
        for stream in streams {
            assert!(stream.await.unwrap() > 0);
        }
    });
    // Every key left has a time to live (a queue the marker was put back
    // into included), and nothing of the set stays queued.
    for key in server.keys("lockattr:*") {
        assert!(server.pttl(&key) > 0, "{key} has no expiry");
    }
    assert!(
        eventually(Duration::from_secs(2), || !server
            .exists(&keys::lock("q:a").queue))
        .is_some()
    );
}

/// The ACL rules of the README (no other command) are enough for sets:
/// taking, waiting (past the point where the set joins a queue), being
/// woken, timing out, giving back, releasing.
#[test]
fn a_user_with_only_the_readme_rules_can_lock_sets() {
    let server = RedisServer::start();
    readme_user(&server, "locker", "secret");
    let url = user_url(&server, "locker", "secret");
    let (holder, setter) = (Locker::new(&url).unwrap(), Locker::new(&url).unwrap());
    let rt = support::multi_thread();
    rt.block_on(async {
        cycle_set(&setter, &["acl:a", "acl:b", "acl:a"]).await;
        let b = holder.lock("acl:b").expire(LONG).acquire().await.unwrap();
        let err = set_error(&setter, &["acl:a", "acl:b"], Duration::from_millis(300)).await;
        assert!(matches!(err, LockError::Timeout { .. }), "{err:?}");
        let waiting = spawn_try_set(&setter, &["acl:a", "acl:b"], LONG);
        // Past a second: the set has joined acl:b's queue.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        b.release().await.unwrap();
        let set = joined(waiting, Duration::from_secs(5), "not woken")
            .await
            .0
            .unwrap();
        assert!(set.fencing_token_of("acl:b").is_some());
        set.release().await.unwrap();
    });
    assert!(server.held_locks().is_empty(), "{:?}", server.held_locks());
}
