//! One Locker across runtimes: runtimes created and dropped one after another,
//! two runtimes at once, current-thread and multi-thread, plain threads with
//! no runtime, and `acquire_blocking` called from inside an async task.
use crate::support;

use std::sync::{LazyLock, OnceLock};
use std::time::Duration;

use lockattr::Locker;
use support::lockers::setup;
use support::wakeups::{hold, try_within, try_within_blocking};
use support::{RedisServer, current_thread, lock_key, multi_thread};

/// The URL of the server owned by `static_locker_survives_runtime_after_runtime`.
static URL: OnceLock<String> = OnceLock::new();
/// A Locker in a static, as an application would keep it.
static LOCKER: LazyLock<Locker> =
    LazyLock::new(|| Locker::new(URL.get().expect("URL set first")).unwrap());

/// A few operations of every kind on `locker`, under `name`.
async fn exercise(locker: &Locker, name: &str) {
    locker.ping().await.unwrap();
    let guard = hold(locker, name, Duration::from_secs(5)).await;
    guard.extend(Duration::from_secs(1)).await.unwrap();
    guard.reacquire().await.unwrap();
    guard.release().await.unwrap();
    // A dropped guard is released too.
    let guard = locker.lock(name).acquire().await.unwrap();
    drop(guard);
    let again = try_within(locker, name, Duration::from_secs(2))
        .await
        .unwrap();
    again.release().await.unwrap();
}

#[test]
fn static_locker_survives_runtime_after_runtime() {
    let server = RedisServer::start();
    URL.set(server.url()).unwrap();

    // Runtime A: use it, keep a guard, drop the runtime.
    let a = current_thread();
    a.block_on(exercise(&LOCKER, "seq"));
    let kept = a.block_on(hold(&LOCKER, "kept", Duration::from_secs(30)));
    drop(a);

    // Runtime B (another flavor): everything still works, and the guard from A
    // is released from B.
    let b = multi_thread();
    b.block_on(async {
        exercise(&LOCKER, "seq").await;
        kept.release().await.unwrap();
    });
    assert!(!server.exists(&lock_key("kept")));
    drop(b);

    // Runtime C, like a second #[tokio::test] in the same process.
    let c = current_thread();
    c.block_on(exercise(&LOCKER, "seq"));
    drop(c);

    // And without any runtime.
    let guard = LOCKER.lock("seq").acquire_blocking().unwrap();
    guard.release_blocking().unwrap();
    assert_eq!(server.held_locks(), Vec::<String>::new());
}

#[test]
fn two_runtimes_at_once_on_two_threads() {
    let (server, locker) = setup();
    let threads: Vec<_> = [true, false]
        .into_iter()
        .map(|current| {
            let locker = locker.clone();
            std::thread::spawn(move || {
                let rt = if current {
                    current_thread()
                } else {
                    multi_thread()
                };
                rt.block_on(async {
                    for i in 0..30 {
                        // A shared name (contended) and an own name.
                        let shared = try_within(&locker, "shared", Duration::from_secs(10))
                            .await
                            .unwrap();
                        shared.release().await.unwrap();
                        exercise(&locker, &format!("own-{current}-{}", i % 3)).await;
                    }
                });
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(server.held_locks(), Vec::<String>::new());
}

#[test]
fn plain_threads_without_runtime() {
    let (server, locker) = setup();
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let locker = locker.clone();
            std::thread::spawn(move || {
                for _ in 0..25 {
                    let guard =
                        try_within_blocking(&locker, "plain", Duration::from_secs(10)).unwrap();
                    guard.extend_blocking(Duration::from_secs(1)).unwrap();
                    guard.reacquire_blocking().unwrap();
                    if i % 2 == 0 {
                        guard.release_blocking().unwrap();
                    } else {
                        drop(guard);
                    }
                }
                locker.ping_blocking().unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(server.held_locks(), Vec::<String>::new());
}

#[tokio::test]
async fn acquire_blocking_inside_an_async_task_current_thread() {
    let (server, locker) = setup();
    // Blocks this runtime's only thread, but must not deadlock.
    let guard = locker.lock("sync-in-async").acquire_blocking().unwrap();
    assert!(server.exists(&lock_key("sync-in-async")));
    guard.extend_blocking(Duration::from_secs(1)).unwrap();
    // Held by ourselves: a blocking attempt in the same task times out, no deadlock.
    let err =
        try_within_blocking(&locker, "sync-in-async", Duration::from_millis(200)).unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    guard.release_blocking().unwrap();
    // Mixed with async calls on the same runtime.
    let guard = locker.lock("sync-in-async").acquire().await.unwrap();
    guard.release_blocking().unwrap();
    let guard = locker.lock("sync-in-async").acquire_blocking().unwrap();
    guard.release().await.unwrap();
    // A blocking guard dropped on the runtime thread.
    drop(locker.lock("sync-in-async").acquire_blocking().unwrap());
    assert!(!server.exists(&lock_key("sync-in-async")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_blocking_inside_spawned_tasks_multi_thread() {
    let (server, locker) = setup();
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let locker = locker.clone();
            tokio::spawn(async move {
                for _ in 0..10 {
                    let guard =
                        try_within_blocking(&locker, "blocking-in-task", Duration::from_secs(10))
                            .unwrap();
                    // No await while holding it: a blocked worker may be waiting for it.
                    guard.release_blocking().unwrap();
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(20), t)
            .await
            .expect("no deadlock")
            .unwrap();
    }
    assert!(!server.exists(&lock_key("blocking-in-task")));
}

/// A minimal executor that is not tokio: polls on the calling thread, parks between wakes.
fn block_on<F: Future>(fut: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

#[test]
fn async_api_works_on_a_non_tokio_executor() {
    let (server, locker) = setup();
    std::thread::spawn(move || {
        block_on(async {
            locker.ping().await.unwrap();
            let guard = hold(&locker, "exec", Duration::from_secs(30)).await;
            guard.extend(Duration::from_secs(1)).await.unwrap();
            guard.reacquire().await.unwrap();
            // Waiting on a held lock needs timers: they run on the library's thread.
            let err = try_within(&locker, "exec", Duration::from_millis(200))
                .await
                .unwrap_err();
            assert!(err.is_timeout(), "{err:?}");
            guard.release().await.unwrap();
            // A guard dropped outside tokio is released too.
            drop(locker.lock("exec").acquire().await.unwrap());
        });
        let freed =
            support::eventually(Duration::from_secs(2), || !server.exists(&lock_key("exec")));
        assert!(freed.is_some(), "the dropped guard was not released");
    })
    .join()
    .unwrap();
}
