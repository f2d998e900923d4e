//! Operations awaited on a multi-thread runtime, or in a task, run right
//! there, on a connection of that runtime. These tests cover what that path must still promise:
//! a dropped future never leaves a lock or a queue entry behind, a guard
//! outlives its runtime safely, and a runtime's connection goes away with it.
use crate::support;

use std::time::Duration;

use lockattr::Locker;
use support::lockers::{self, setup};
use support::outages::{assert_freed_within, freed_within, spawn_leased, take_leased, try_wait};
use support::{RedisServer, current_thread, eventually, keys, lock_key, multi_thread};

/// A Locker that waits long for answers, so that dropping a future, not a
/// timeout, is what ends a request sent to a frozen server.
fn patient_locker(server: &RedisServer) -> Locker {
    Locker::builder(server.url())
        .response_timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// An acquisition sent to a frozen server, whose task is aborted before the
/// answer, runs when the server thaws; it is given back on its own
/// connection right after, so the lock is not held for its 30 s lease.
#[test]
fn aborted_task_with_an_attempt_in_flight_gives_the_lock_back() {
    let server = RedisServer::start();
    let locker = patient_locker(&server);
    let rt = multi_thread();
    rt.block_on(async {
        // Warm: connection of this runtime open, script cached.
        let warm = tokio::spawn({
            let locker = locker.clone();
            async move { locker.lock("warm").acquire().await.unwrap().release().await }
        });
        warm.await.unwrap().unwrap();

        server.freeze();
        let task = spawn_leased(&locker, "in-flight", Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(200)).await;
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        server.thaw();
    });
    assert!(
        freed_within(&server, "in-flight", Duration::from_secs(3)),
        "the aborted acquisition kept the lock (pttl {} ms)",
        server.pttl(&lock_key("in-flight"))
    );
}

/// A waiter whose task is aborted leaves the queue, and the holder's release
/// then frees the lock instead of handing it to the departed waiter.
#[test]
fn aborted_waiting_task_leaves_the_queue() {
    let (server, locker) = setup();
    let rt = multi_thread();
    rt.block_on(async {
        let holder = take_leased(&locker, "queue", Duration::from_secs(30)).await;
        // Of another Locker, so that it queues in Redis.
        let other = lockers::locker(&server);
        let waiter = tokio::spawn({
            async move { try_wait(&other, "queue", Duration::from_secs(30)).await }
        });
        let queue = keys::lock("queue").queue;
        let queued = eventually(Duration::from_secs(2), || server.exists(&queue));
        assert!(queued.is_some(), "the waiter never queued");
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        let left = eventually(Duration::from_secs(2), || !server.exists(&queue));
        assert!(left.is_some(), "the aborted waiter is still queued");
        holder.release().await.unwrap();
    });
    assert!(
        !server.exists(&lock_key("queue")),
        "the release handed the lock to a waiter that was gone"
    );
}

/// A release sent to a frozen server, whose task is aborted before the
/// answer, is sent again from the library's I/O thread: the lock is free
/// soon after the server thaws, not after its 30 s lease.
#[test]
fn aborted_release_in_a_task_still_releases() {
    let server = RedisServer::start();
    let locker = patient_locker(&server);
    let rt = multi_thread();
    rt.block_on(async {
        let guard = spawn_leased(&locker, "release", Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap();
        server.freeze();
        let task = tokio::spawn(guard.release());
        tokio::time::sleep(Duration::from_millis(200)).await;
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        server.thaw();
    });
    assert_freed_within(
        &server,
        "release",
        Duration::from_secs(5),
        "the lock stayed held after an aborted release",
    );
}

/// A guard held by a task when its runtime shuts down is dropped with the
/// task and released through the I/O thread.
#[test]
fn guard_held_when_its_runtime_shuts_down_is_released() {
    let (server, locker) = setup();
    let rt = multi_thread();
    rt.block_on(async {
        let (taken, wait) = tokio::sync::oneshot::channel();
        tokio::spawn({
            let locker = locker.clone();
            async move {
                let _guard = take_leased(&locker, "shutdown", Duration::from_secs(30)).await;
                taken.send(()).unwrap();
                std::future::pending::<()>().await;
            }
        });
        wait.await.unwrap();
    });
    assert!(server.exists(&lock_key("shutdown")));
    drop(rt);
    assert_freed_within(
        &server,
        "shutdown",
        Duration::from_secs(2),
        "the lock outlived its runtime",
    );
}

/// One Locker used by tasks of one runtime after another: each runtime gets
/// a working connection of its own (none is reused from a runtime that is
/// gone), and the connection of a runtime that shut down is closed. (That
/// the Locker also forgets the dead runtime's entry is not visible from
/// outside.)
#[test]
fn runtime_after_runtime_in_tasks_keeps_no_dead_connections() {
    let (server, locker) = setup();
    let base = server.client_count();
    for round in 0..5 {
        let rt = if round % 2 == 0 {
            current_thread()
        } else {
            multi_thread()
        };
        let name = format!("round-{round}");
        let locker = locker.clone();
        rt.block_on(async move {
            tokio::spawn(async move {
                let guard = locker.lock(&name).acquire().await.unwrap();
                guard.release().await.unwrap();
            })
            .await
        })
        .unwrap();
        drop(rt);
    }
    // Each runtime had its own connection; none of them is left.
    let closed = eventually(Duration::from_secs(2), || server.client_count() <= base);
    assert!(
        closed.is_some(),
        "{} clients after 5 runtimes (before: {base})",
        server.client_count()
    );
}
