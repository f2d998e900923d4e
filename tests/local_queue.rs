//! One Redis entry per process: the tasks of one Locker that want the same
//! lock wait in the process, and a release hands the lock to the next of
//! them in its one script call, while a waiter of another process (another
//! Locker) keeps its turn. Against real redis-servers and a real Cluster.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockattr::{LockError, Locker};
use support::cluster::Cluster;
use support::lockers::{self, setup};
use support::takes::try_take;
use support::waiters::{queue_len, spawn_waiter};
use support::wakeups::{
    async_connection, behind_a_proxy, connection, hold, hold_renewed, served_within, try_within,
};
use support::{RedisServer, eventually, keys, lock_key};

const LONG: Duration = Duration::from_secs(30);

/// Redis's count of `command` calls (`INFO commandstats`).
/// Script calls so far: EVALSHA, or FCALL on a server that takes Redis
/// Functions.
fn script_calls(con: &mut redis::Connection) -> u64 {
    calls(con, "evalsha") + calls(con, "fcall")
}

fn calls(con: &mut redis::Connection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// `tasks` tasks of `locker` each run `rounds` critical sections on the
/// lock `name` (read a counter, pause, write it back), while a watcher
/// samples the Redis queue of the lock through `watch`. Returns the
/// fencing tokens in the order the critical sections ran, the counter's
/// final value, and the longest Redis queue seen.
async fn critical_sections(
    locker: &Locker,
    url: &str,
    (name, tasks, rounds): (&'static str, usize, usize),
    mut watch: redis::Connection,
) -> (Vec<u64>, u64, u64) {
    let order = Arc::new(Mutex::new(Vec::new()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut longest = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                longest = longest.max(queue_len(&mut watch, &keys::lock(name).queue) as u64);
                std::thread::sleep(Duration::from_millis(1));
            }
            longest
        })
    };
    let counter = format!("{{{name}}}:counter");
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (locker, order, counter) = (locker.clone(), order.clone(), counter.clone());
        let mut data = async_connection(url).await;
        handles.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = try_take(&locker, name, LONG, LONG).await.expect("acquire");
                order.lock().unwrap().push(guard.fencing_token());
                let value: Option<u64> = redis::cmd("GET")
                    .arg(&counter)
                    .query_async(&mut data)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                redis::cmd("SET")
                    .arg(&counter)
                    .arg(value.unwrap_or(0) + 1)
                    .arg("PX")
                    .arg(60_000)
                    .query_async::<()>(&mut data)
                    .await
                    .unwrap();
                guard.release().await.expect("release");
            }
        }));
    }
    for handle in handles {
        handle.await.expect("a task panicked");
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let longest = watcher.join().unwrap();
    let mut con = connection(url);
    let total: Option<u64> = redis::cmd("GET").arg(&counter).query(&mut con).unwrap();
    let order = order.lock().unwrap().clone();
    (order, total.unwrap_or(0), longest)
}

/// Every fencing token larger than the one before it.
fn increasing(order: &[u64]) -> bool {
    order.windows(2).all(|w| w[0] < w[1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_of_one_locker_keep_no_entry_in_redis_and_one_call_per_hand_over() {
    const TASKS: usize = 16;
    const ROUNDS: usize = 20;
    let (server, locker) = setup();
    let mut stats = server.client();
    let before = script_calls(&mut stats);
    let (order, total, longest) = critical_sections(
        &locker,
        &server.url(),
        ("one-process", TASKS, ROUNDS),
        server.client(),
    )
    .await;
    let sections = (TASKS * ROUNDS) as u64;
    assert_eq!(total, sections, "updates were lost");
    assert!(increasing(&order), "fencing tokens out of order: {order:?}");
    // The other tasks waited in this process, not in Redis's queue.
    assert_eq!(longest, 0, "tasks of one Locker queued in Redis");
    // One release call per critical section hands the lock on; the
    // acquisitions that waited made no call at all.
    let scripts = script_calls(&mut stats) - before;
    assert!(
        scripts <= sections + TASKS as u64,
        "{scripts} script calls for {sections} critical sections"
    );
    assert!(server.held_locks().is_empty(), "{:?}", server.held_locks());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tasks_of_one_locker_on_a_cluster_keep_no_entry_in_redis() {
    let cluster = Cluster::start();
    let locker = cluster.locker();
    let name = "on-cluster";
    let master = cluster.master_of(&lock_key(name));
    let url = cluster.urls()[master].clone();
    let watch = connection(&url);
    let (order, total, longest) = critical_sections(&locker, &url, (name, 8, 10), watch).await;
    assert_eq!(total, 80, "updates were lost");
    assert!(increasing(&order), "fencing tokens out of order: {order:?}");
    assert_eq!(longest, 0, "tasks of one Locker queued in Redis");
}

/// A waiter of another process queued in Redis while a task of the
/// holder's process waited in its process: the release serves the other
/// process first, and queues the local task behind it, so the processes
/// take turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_of_another_locker_keeps_its_turn() {
    let server = RedisServer::start();
    let (a, b) = (lockers::locker(&server), lockers::locker(&server));
    let mut con = server.client();
    let name = "turns";
    let first = hold(&a, name, LONG).await;
    let local = spawn_waiter(&a, name, LONG, LONG);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        queue_len(&mut con, &keys::lock(name).queue),
        0,
        "the task of the holder's Locker"
    );
    let other = spawn_waiter(&b, name, LONG, LONG);
    assert!(
        eventually(Duration::from_secs(5), || queue_len(
            &mut server.client(),
            &keys::lock(name).queue
        ) == 1)
        .is_some(),
        "the other Locker's waiter never queued in Redis"
    );
    first.release().await.unwrap();
    let five = Duration::from_secs(5);
    let other_guard = served_within(
        other,
        five,
        "the other Locker's waiter was not served first",
    )
    .await;
    let other_token = other_guard.fencing_token();
    assert!(
        !local.is_finished(),
        "the local task went before the other Locker's"
    );
    // The local task now waits in Redis, behind nobody.
    assert_eq!(queue_len(&mut con, &keys::lock(name).queue), 1);
    other_guard.release().await.unwrap();
    let local_guard = served_within(local, five, "the local task was never served").await;
    assert!(local_guard.fencing_token() > other_token);
    local_guard.release().await.unwrap();
    assert!(server.held_locks().is_empty(), "{:?}", server.held_locks());
}

/// Tasks that wait in the process and give up (their acquire time ran out,
/// or their future was dropped) leave nothing in Redis, and the release
/// frees the lock for anyone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_that_give_up_leave_nothing_behind() {
    let (server, locker) = setup();
    let name = "given-up";
    let held = hold(&locker, name, LONG).await;
    let dropped = spawn_waiter(&locker, name, LONG, LONG);
    let started = Instant::now();
    let timed_out = try_within(&locker, name, Duration::from_millis(300)).await;
    assert!(
        matches!(timed_out, Err(LockError::Timeout { .. })),
        "{timed_out:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    dropped.abort();
    let _ = dropped.await;
    held.release().await.unwrap();
    assert!(server.held_locks().is_empty(), "{:?}", server.held_locks());
    let other = lockers::locker(&server);
    let again = try_within(&other, name, Duration::ZERO)
        .await
        .expect("the lock was not free after its release");
    again.release().await.unwrap();
}

/// A holder that never releases (its guard forgotten) keeps the tasks of
/// its process waiting no longer than its lease, as it would a waiter of
/// another process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_never_releases_holds_local_waiters_only_for_its_lease() {
    let (_server, locker) = setup();
    let name = "forgotten";
    let lease = Duration::from_millis(600);
    let held = hold(&locker, name, lease).await;
    let started = Instant::now();
    std::mem::forget(held);
    let next = try_within(&locker, name, Duration::from_secs(10))
        .await
        .expect("the waiter never got the lock");
    let waited = started.elapsed();
    assert!(
        waited >= lease - Duration::from_millis(50),
        "taken after {waited:?}, inside the lease"
    );
    assert!(
        waited < Duration::from_secs(5),
        "taken after {waited:?}, long after the lease"
    );
    next.release().await.unwrap();
}

/// The release names a task that leaves while the release is on its way
/// (through a slow link): the lock it was handed is given back at once,
/// not left to its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_that_left_during_the_release_gives_the_lock_back() {
    let (server, proxy, locker) = behind_a_proxy();
    let name = "left";
    let held = hold(&locker, name, LONG).await;
    let successor = spawn_waiter(&locker, name, LONG, LONG);
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.set_delay(Duration::from_millis(400));
    let releasing = tokio::spawn(held.release());
    tokio::time::sleep(Duration::from_millis(150)).await;
    successor.abort();
    assert!(successor.await.is_err(), "the successor finished");
    releasing.await.unwrap().unwrap();
    proxy.set_delay(Duration::ZERO);
    let key = lock_key(name);
    assert!(
        eventually(Duration::from_secs(5), || !server.exists(&key)).is_some(),
        "the lock handed to a task that left is still held: {:?}",
        server.get(&key)
    );
}

/// A holder whose lease is renewed (the watchdog) keeps the tasks of its
/// process waiting in the process for as long as it holds: they do not
/// take its first lease's end for a holder that never releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_holder_keeps_local_waiters_in_the_process() {
    let (server, locker) = setup();
    let name = "renewed";
    let held = hold_renewed(&locker, name, Duration::from_millis(300)).await;
    let waiter = spawn_waiter(&locker, name, LONG, LONG);
    let mut con = server.client();
    let until = Instant::now() + Duration::from_millis(1_500);
    while Instant::now() < until {
        assert_eq!(
            queue_len(&mut con, &keys::lock(name).queue),
            0,
            "the waiter went to Redis"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!waiter.is_finished(), "the waiter took a renewed lock");
    let fence = held.fencing_token();
    held.release().await.unwrap();
    let next = served_within(
        waiter,
        Duration::from_secs(5),
        "the waiter was not handed the lock",
    )
    .await;
    assert!(next.fencing_token() > fence);
    next.release().await.unwrap();
}

/// A release whose future is dropped while it is on its way (through a
/// slow link) still hands the lock on to the task waiting in the process:
/// that task is told to ask Redis, and finds the lock its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_dropped_on_its_way_still_hands_the_lock_on() {
    let (server, proxy, locker) = behind_a_proxy();
    let name = "dropped-release";
    let held = hold(&locker, name, LONG).await;
    let fence = held.fencing_token();
    let successor = spawn_waiter(&locker, name, LONG, LONG);
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.set_delay(Duration::from_millis(300));
    let released = tokio::time::timeout(Duration::from_millis(100), held.release()).await;
    assert!(released.is_err(), "the release was not on its way");
    proxy.set_delay(Duration::ZERO);
    let never = "the task waiting in the process never got the lock";
    let next = served_within(successor, Duration::from_secs(5), never).await;
    assert!(next.fencing_token() > fence);
    next.release().await.unwrap();
    let key = lock_key(name);
    assert!(
        eventually(Duration::from_secs(5), || !server.exists(&key)).is_some(),
        "{:?}",
        server.get(&key)
    );
}

/// A task whose acquire time ends while the release that names it is on
/// its way (the server stalls) either takes that hand-over or leaves it to
/// the releaser to give back, never both: a guard it returns holds a lock
/// that is its own, which nobody else can take.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_whose_time_ends_during_the_release_is_the_only_holder() {
    let (server, locker) = setup();
    let other = lockers::locker(&server);
    let name = "named-late";
    for round in 0..3 {
        let held = hold(&locker, name, LONG).await;
        let successor = spawn_waiter(&locker, name, LONG, Duration::from_millis(250));
        tokio::time::sleep(Duration::from_millis(50)).await;
        // The release names the successor, and reaches Redis only after
        // the successor's acquire time has ended.
        server.freeze();
        let releasing = tokio::spawn(held.release());
        tokio::time::sleep(Duration::from_millis(400)).await;
        server.thaw();
        releasing.await.unwrap().expect("release");
        match successor.await.unwrap().0 {
            Ok(guard) => {
                // Whatever the releaser does in the background has run.
                tokio::time::sleep(Duration::from_millis(300)).await;
                let taken = try_within(&other, name, Duration::ZERO).await;
                assert!(
                    matches!(taken, Err(LockError::Timeout { .. })),
                    "round {round}: another Locker took the lock under a live guard \
                     (lost: {}): {taken:?}",
                    guard.is_lost()
                );
                let fence = format!("\n{}", guard.fencing_token());
                let value = server.get(&lock_key(name));
                assert!(
                    value.as_deref().is_some_and(|v| v.ends_with(&fence)),
                    "round {round}: the lock is not the guard's: {value:?}"
                );
                guard.release().await.unwrap();
            }
            Err(LockError::Timeout { .. }) => {
                let key = lock_key(name);
                assert!(
                    eventually(Duration::from_secs(5), || !server.exists(&key)).is_some(),
                    "round {round}: the lock handed to a task that timed out is still held"
                );
            }
            Err(e) => panic!("round {round}: {e}"),
        }
    }
}

/// A holder that outlives its lease (its guard forgotten) keeps the tasks
/// of its process waiting no longer than that lease; once a waiter has
/// gone to Redis and released, every later task of the process takes the
/// free lock at once, with one entry in Redis again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_strands_no_later_task() {
    let (server, locker) = setup();
    let name = "stale-turn";
    let stale = hold(&locker, name, Duration::from_millis(400)).await;
    std::mem::forget(stale);
    let first = try_within(&locker, name, Duration::from_secs(5))
        .await
        .expect("the first waiter never got the lock");
    first.release().await.unwrap();
    for task in 0..3 {
        let started = Instant::now();
        let guard = try_within(&locker, name, Duration::from_secs(2))
            .await
            .unwrap_or_else(|e| panic!("task {task}: {e} on a free lock"));
        let waited = started.elapsed();
        // Half its acquire time: stranded, it waited all of it.
        assert!(
            waited < Duration::from_secs(1),
            "task {task} waited {waited:?} for a free lock"
        );
        guard.release().await.unwrap();
    }
    // Many tasks at once: the process has one entry in Redis, not two.
    let mut con = server.client();
    let before = script_calls(&mut con);
    let (order, total, longest) =
        critical_sections(&locker, &server.url(), (name, 4, 10), server.client()).await;
    assert_eq!(total, 40);
    assert!(increasing(&order), "{order:?}");
    assert_eq!(longest, 0, "the tasks of the process queued in Redis");
    let per_section = (script_calls(&mut con) - before) as f64 / 40.0;
    assert!(
        per_section < 1.5,
        "{per_section} script calls per critical section"
    );
}

/// A release names a task whose runtime is no longer driven: the lock it
/// was handed keeps the other tasks of the process waiting for that
/// task's lease, not for their whole acquire time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_whose_runtime_stopped_strands_nobody_past_its_lease() {
    let (_server, locker) = setup();
    let name = "undriven";
    let held = hold(&locker, name, LONG).await;
    let lease = Duration::from_millis(500);
    let (parked_tx, parked_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let undriven = {
        let locker = locker.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                tokio::spawn(async move { try_take(&locker, name, lease, LONG).await });
                tokio::time::sleep(Duration::from_millis(100)).await;
            });
            // The runtime lives on, and nothing drives it.
            parked_tx.send(()).unwrap();
            let _ = stop_rx.recv();
            drop(rt);
        })
    };
    parked_rx.recv().unwrap();
    held.release().await.unwrap();
    let started = Instant::now();
    let next = try_within(&locker, name, Duration::from_millis(1_500))
        .await
        .expect("stranded behind a task that is no longer driven");
    // Stranded, it waits all of its 1.5 s.
    assert!(
        started.elapsed() < lease + Duration::from_millis(700),
        "waited {:?}",
        started.elapsed()
    );
    next.release().await.unwrap();
    stop_tx.send(()).unwrap();
    undriven.join().unwrap();
}
