//! Sets across OS processes: the test re-executes its own binary as 4
//! child processes (`--exact child_worker`), each running 2 tasks, half
//! locking `{a, b}` and half `{b, a}` through `Locker::lock_all`. Inside,
//! each task records itself on a second Redis (the store) per name
//! (`INCR inside:<name>`, which must answer 1) and bumps a per-name counter
//! without atomicity (GET, a pause, SET). No deadlock (every child ends
//! within its time), no overlap on any name, no lost update.

use crate::support;

use std::time::Duration;

use lockattr::Locker;
use support::children::{CHILD_INDEX, run_children, start_together};
use support::deployments::{lock_server_and_store, take_set};

const CHILDREN: usize = 4;
const TASKS: usize = 2;
const ROUNDS: usize = 15;
/// Tells `child_worker` it runs as a child: the lock server's URL.
const CHILD_URL: &str = "LOCKATTR_SET_CHILD_URL";
/// The store server's URL.
const CHILD_STORE: &str = "LOCKATTR_SET_CHILD_STORE";
/// Printed when a child's tasks are done.
const DONE: &str = "LOCKATTR_SET_CHILD_DONE";

/// Runs `command` (`INCR`, `DECR`) on `key` in the store: the counter's
/// new value.
async fn count(store: &mut redis::aio::MultiplexedConnection, command: &str, key: &str) -> i64 {
    redis::cmd(command)
        .arg(key)
        .query_async(store)
        .await
        .unwrap()
}

async fn critical_section(store: &mut redis::aio::MultiplexedConnection) {
    for name in ["a", "b"] {
        let inside = count(store, "INCR", &format!("inside:{name}")).await;
        if inside != 1 {
            count(store, "INCR", "overlaps").await;
        }
    }
    for name in ["a", "b"] {
        let value: Option<u64> = redis::cmd("GET")
            .arg(format!("count:{name}"))
            .query_async(store)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
        let _: () = redis::cmd("SET")
            .arg(format!("count:{name}"))
            .arg(value.unwrap_or(0) + 1)
            .query_async(store)
            .await
            .unwrap();
    }
    for name in ["a", "b"] {
        count(store, "DECR", &format!("inside:{name}")).await;
    }
}

/// The worker; does nothing unless started by the parent test.
#[test]
fn child_worker() {
    let (Ok(url), Ok(store_url), Ok(index)) = (
        std::env::var(CHILD_URL),
        std::env::var(CHILD_STORE),
        std::env::var(CHILD_INDEX),
    ) else {
        return;
    };
    let index: usize = index.parse().unwrap();
    // Start together, so that the processes really contend.
    start_together(&store_url, CHILDREN);
    let rt = support::multi_thread();
    rt.block_on(async {
        let locker = Locker::new(&url).unwrap();
        let store = redis::Client::open(store_url.as_str()).unwrap();
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let locker = locker.clone();
            let store = store.clone();
            let names = if (index * TASKS + t).is_multiple_of(2) {
                ["a", "b"]
            } else {
                ["b", "a"]
            };
            tasks.push(tokio::spawn(async move {
                let mut store = store.get_multiplexed_async_connection().await.unwrap();
                for _ in 0..ROUNDS {
                    let (expire, wait) = (Duration::from_secs(30), Duration::from_secs(60));
                    let guard = take_set(&locker, &names, expire, wait).await;
                    critical_section(&mut store).await;
                    guard.release().await.unwrap();
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
    });
    println!("{DONE} {}", std::process::id());
}

#[test]
fn opposite_orders_in_processes_neither_deadlock_nor_overlap() {
    // The test's own counters only, without a TTL (see support::audit).
    let (server, store) = lock_server_and_store();
    let (url, store_url) = (server.url(), store.url());
    run_children(
        "child_worker",
        CHILDREN,
        &[(CHILD_URL, url.as_str()), (CHILD_STORE, store_url.as_str())],
        DONE,
        Duration::from_secs(90),
    );
    assert_eq!(store.get("overlaps"), None, "two holders of a name at once");
    let total = (CHILDREN * TASKS * ROUNDS).to_string();
    assert_eq!(
        store.get("count:a"),
        Some(total.clone()),
        "updates of a were lost"
    );
    assert_eq!(store.get("count:b"), Some(total), "updates of b were lost");
    assert!(server.held_locks().is_empty(), "{:?}", server.held_locks());
}
