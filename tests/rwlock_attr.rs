//! `#[redis_lock(mode = "read")]` and `mode = "write"` on sync and async
//! functions and methods: readers overlap, a writer is alone; the guard's
//! fencing token; the hold is given back on every way out (a value, `?`, a
//! panic, a dropped future); never re-entered; `hold_at_least` and `renew`
//! as for a lock.

use crate::support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use lockattr::{LockGuard, Locker, redis_lock};
use support::attrs::{AppError, all_tasks, plain_lock};
use support::lockers::setup;
use support::{BodyError as Error, RedisServer, eventually, keys, lock_key};

/// The keys held on read-write lock `name`: the writer's and each reader's.
fn holds(server: &RedisServer, name: &str) -> Vec<String> {
    let mut keys = server.keys(&keys::rw(name).lock);
    keys.extend(server.keys(&keys::reader_keys(name)));
    keys
}

/// Who is inside one name's bodies, and whether a writer ever shared it.
#[derive(Default)]
struct Inside {
    readers: AtomicUsize,
    writers: AtomicUsize,
    most_readers: AtomicUsize,
    shared_by_a_writer: AtomicBool,
}

impl Inside {
    fn enter_reader(&self) {
        let now = self.readers.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_readers.fetch_max(now, Ordering::SeqCst);
        if self.writers.load(Ordering::SeqCst) != 0 {
            self.shared_by_a_writer.store(true, Ordering::SeqCst);
        }
    }

    fn leave_reader(&self) {
        self.readers.fetch_sub(1, Ordering::SeqCst);
    }

    fn enter_writer(&self) {
        let writers = self.writers.fetch_add(1, Ordering::SeqCst) + 1;
        if writers != 1 || self.readers.load(Ordering::SeqCst) != 0 {
            self.shared_by_a_writer.store(true, Ordering::SeqCst);
        }
    }

    fn leave_writer(&self) {
        self.writers.fetch_sub(1, Ordering::SeqCst);
    }

    /// A reader comes in, stays `pause` (a blocking sleep), leaves.
    fn read_for(&self, pause: Duration) {
        self.enter_reader();
        std::thread::sleep(pause);
        self.leave_reader();
    }

    /// A writer comes in, stays `pause` (a blocking sleep), leaves.
    fn write_for(&self, pause: Duration) {
        self.enter_writer();
        std::thread::sleep(pause);
        self.leave_writer();
    }
}

// ---- Readers overlap ----

/// Waits, inside the read hold, for `others` more readers to be inside too;
/// whether they came (within 10 s).
#[redis_lock(name = "overlap", mode = "read", expire = 30, acquire_time = 30, locker = locker)]
async fn read_together(locker: &Locker, together: &tokio::sync::Barrier) -> Result<bool, Error> {
    Ok(
        tokio::time::timeout(Duration::from_secs(10), together.wait())
            .await
            .is_ok(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_async_reads_overlap() {
    let (server, locker) = setup();
    let together = tokio::sync::Barrier::new(2);
    let (a, b) = tokio::join!(
        read_together(&locker, &together),
        read_together(&locker, &together)
    );
    assert!(
        a.unwrap() && b.unwrap(),
        "the second reader waited for the first"
    );
    assert!(holds(&server, "overlap").is_empty());
}

/// The same, synchronous: counts itself in and waits for `n` inside.
#[redis_lock(name = "overlap:sync", mode = "read", expire = 30, acquire_time = 30, locker = locker)]
fn read_together_sync(locker: &Locker, inside: &AtomicUsize, n: usize) -> Result<bool, Error> {
    inside.fetch_add(1, Ordering::SeqCst);
    let met = eventually(Duration::from_secs(10), || {
        inside.load(Ordering::SeqCst) >= n
    });
    Ok(met.is_some())
}

#[test]
fn two_sync_reads_overlap() {
    let server = RedisServer::start();
    let inside = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let locker = Locker::new(server.url()).unwrap();
            let inside = inside.clone();
            std::thread::spawn(move || read_together_sync(&locker, &inside, 2).unwrap())
        })
        .collect();
    for t in threads {
        assert!(t.join().unwrap(), "the second reader waited for the first");
    }
    assert!(holds(&server, "overlap:sync").is_empty());
}

// ---- A writer is alone ----

#[redis_lock(name = "doc", mode = "read", expire = 30, acquire_time = 30, locker = locker)]
async fn read_doc(locker: &Locker, inside: &Inside, pause: Duration) -> Result<(), Error> {
    inside.enter_reader();
    tokio::time::sleep(pause).await;
    inside.leave_reader();
    Ok(())
}

#[redis_lock(name = "doc", mode = "write", expire = 30, acquire_time = 30, locker = locker)]
async fn write_doc(locker: &Locker, inside: &Inside, pause: Duration) -> Result<Instant, Error> {
    inside.enter_writer();
    tokio::time::sleep(pause).await;
    inside.leave_writer();
    Ok(Instant::now())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_write_excludes_a_read_and_another_write() {
    let (server, locker) = setup();
    let inside = Arc::new(Inside::default());

    let first = {
        let (locker, inside) = (locker.clone(), inside.clone());
        tokio::spawn(async move {
            write_doc(&locker, &inside, Duration::from_millis(300))
                .await
                .unwrap()
        })
    };
    let entered = eventually(Duration::from_secs(10), || {
        inside.writers.load(Ordering::SeqCst) == 1
    });
    assert!(entered.is_some(), "the first writer never got in");
    let reader = {
        let (locker, inside) = (locker.clone(), inside.clone());
        tokio::spawn(async move {
            read_doc(&locker, &inside, Duration::ZERO).await.unwrap();
            Instant::now()
        })
    };
    let second = {
        let (locker, inside) = (locker.clone(), inside.clone());
        tokio::spawn(async move { write_doc(&locker, &inside, Duration::ZERO).await.unwrap() })
    };
    let first_done = first.await.unwrap();
    let (read_done, second_done) = (reader.await.unwrap(), second.await.unwrap());
    assert!(
        read_done >= first_done && second_done >= first_done,
        "a caller finished before the writer it should have waited for"
    );
    assert!(
        !inside.shared_by_a_writer.load(Ordering::SeqCst),
        "a writer shared the lock"
    );
    assert!(holds(&server, "doc").is_empty());
}

/// Readers and writers in a loop: readers meet, writers never share.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn async_readers_and_writers_in_a_loop() {
    let server = RedisServer::start();
    let inside = Arc::new(Inside::default());
    all_tasks(6, |t| {
        let locker = Locker::new(server.url()).unwrap();
        let inside = inside.clone();
        async move {
            for _ in 0..8 {
                if t % 3 == 0 {
                    write_doc(&locker, &inside, Duration::from_millis(2))
                        .await
                        .unwrap();
                } else {
                    read_doc(&locker, &inside, Duration::from_millis(5))
                        .await
                        .unwrap();
                }
            }
        }
    })
    .await;
    assert!(
        !inside.shared_by_a_writer.load(Ordering::SeqCst),
        "a writer shared the lock"
    );
    assert!(holds(&server, "doc").is_empty());
}

#[redis_lock(name = "doc:sync", mode = "read", expire = 30, acquire_time = 30, locker = locker)]
fn read_doc_sync(locker: &Locker, inside: &Inside, pause: Duration) -> Result<(), Error> {
    inside.read_for(pause);
    Ok(())
}

#[redis_lock(name = "doc:sync", mode = "write", expire = 30, acquire_time = 30, locker = locker)]
fn write_doc_sync(locker: &Locker, inside: &Inside, pause: Duration) -> Result<(), Error> {
    inside.write_for(pause);
    Ok(())
}

#[test]
fn sync_writes_exclude_reads_and_writes() {
    let server = RedisServer::start();
    let inside = Arc::new(Inside::default());
    let start = Arc::new(Barrier::new(6));
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let locker = Locker::new(server.url()).unwrap();
            let (inside, start) = (inside.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for _ in 0..6 {
                    if t % 3 == 0 {
                        write_doc_sync(&locker, &inside, Duration::from_millis(3)).unwrap();
                    } else {
                        read_doc_sync(&locker, &inside, Duration::from_millis(3)).unwrap();
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(
        !inside.shared_by_a_writer.load(Ordering::SeqCst),
        "a writer shared the lock"
    );
    assert_eq!(inside.writers.load(Ordering::SeqCst), 0);
    assert!(holds(&server, "doc:sync").is_empty());
}

// ---- The guard ----

#[redis_lock(name = "fenced:{id}", mode = "write", locker = locker, guard = g)]
async fn write_token(locker: &Locker, id: u64) -> Result<u64, Error> {
    let g: &LockGuard = g;
    Ok(g.fencing_token())
}

#[redis_lock(name = "fenced:{id}", mode = "read", locker = locker, guard = g)]
async fn read_token(locker: &Locker, id: u64) -> Result<u64, Error> {
    let g: &LockGuard = g;
    assert_eq!(g.name(), format!("fenced:{id}"));
    Ok(g.fencing_token())
}

#[redis_lock(name = format!("fenced:{id}"), mode = "write", locker = locker, guard = g)]
fn write_token_sync(locker: &Locker, id: u64) -> Result<u64, Error> {
    Ok(g.fencing_token())
}

#[tokio::test]
async fn the_guard_gives_the_fencing_token() {
    let (server, locker) = setup();
    let first = write_token(&locker, 1).await.unwrap();
    let second = write_token(&locker, 1).await.unwrap();
    assert!(
        second > first,
        "writers' tokens do not grow: {first}, {second}"
    );
    // A reader is given the last write's token.
    assert_eq!(read_token(&locker, 1).await.unwrap(), second);
    let locker_sync = locker.clone();
    let third = tokio::task::spawn_blocking(move || write_token_sync(&locker_sync, 1))
        .await
        .unwrap()
        .unwrap();
    assert!(
        third > second,
        "writers' tokens do not grow: {second}, {third}"
    );
    assert_eq!(read_token(&locker, 1).await.unwrap(), third);
    assert!(holds(&server, "fenced:1").is_empty());
}

// ---- Every way out gives the hold back ----

/// Leaves by a value, or by `?` with the parse error.
#[redis_lock(name = "exit", mode = "write", expire = 30, acquire_time = 0, locker = locker)]
async fn write_then(locker: &Locker, text: &str) -> Result<u64, AppError> {
    tokio::task::yield_now().await;
    Ok(text.parse::<u64>()?)
}

#[redis_lock(name = "exit", mode = "read", expire = 30, acquire_time = 0, locker = locker)]
fn read_then(locker: &Locker, text: &str) -> Result<u64, AppError> {
    Ok(text.parse::<u64>()?)
}

#[tokio::test]
async fn a_value_and_question_mark_give_the_hold_back() {
    let (server, locker) = setup();
    // `acquire_time = 0`: each call only gets in if the previous one's hold
    // was given back; a write would not get in past a reader's hold.
    for round in 0..2 {
        assert_eq!(write_then(&locker, "7").await.unwrap(), 7);
        assert!(holds(&server, "exit").is_empty(), "round {round}: value");
        assert!(matches!(
            write_then(&locker, "seven").await,
            Err(AppError::Parse(_))
        ));
        assert!(holds(&server, "exit").is_empty(), "round {round}: `?`");
        let locker_sync = locker.clone();
        let (value, question_mark) = tokio::task::spawn_blocking(move || {
            (
                read_then(&locker_sync, "8"),
                read_then(&locker_sync, "eight"),
            )
        })
        .await
        .unwrap();
        assert_eq!(value.unwrap(), 8);
        assert!(matches!(question_mark, Err(AppError::Parse(_))));
        assert!(holds(&server, "exit").is_empty(), "round {round}: sync");
    }
}

#[redis_lock(name = "panics", mode = "write", expire = 30, acquire_time = 0, locker = locker)]
async fn write_and_panic(locker: &Locker) -> Result<(), Error> {
    tokio::task::yield_now().await;
    panic!("the body panicked");
}

#[redis_lock(name = "panics", mode = "read", expire = 30, acquire_time = 0, locker = locker)]
fn read_and_panic(locker: &Locker) -> Result<(), Error> {
    panic!("the body panicked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_gives_the_hold_back() {
    let (server, locker) = setup();
    let task = {
        let locker = locker.clone();
        tokio::spawn(async move { write_and_panic(&locker).await })
    };
    assert!(task.await.unwrap_err().is_panic());
    // The async path's Drop schedules the release.
    let freed = eventually(Duration::from_secs(5), || {
        holds(&server, "panics").is_empty()
    });
    assert!(freed.is_some(), "the writer's hold outlived its panic");

    let locker_sync = locker.clone();
    let panicked = tokio::task::spawn_blocking(move || {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            read_and_panic(&locker_sync)
        }))
        .is_err()
    })
    .await
    .unwrap();
    assert!(panicked);
    // A sync hold is given back before the panic leaves the function.
    assert!(
        holds(&server, "panics").is_empty(),
        "the reader's hold outlived its panic"
    );
    // And the name is free at once: with `acquire_time = 0`, the writer
    // only reaches its panic if it got in.
    let again = tokio::spawn(async move { write_and_panic(&locker).await }).await;
    assert!(
        again.as_ref().is_err_and(|e| e.is_panic()),
        "the writer did not get in: {again:?}"
    );
}

#[redis_lock(name = "dropped", mode = "read", expire = 30, acquire_time = 30, locker = locker)]
async fn read_forever(locker: &Locker, entered: &AtomicBool) -> Result<(), Error> {
    entered.store(true, Ordering::SeqCst);
    std::future::pending::<()>().await;
    Ok(())
}

#[redis_lock(name = "dropped", mode = "write", expire = 30, acquire_time = 10, locker = locker)]
async fn write_once(locker: &Locker) -> Result<(), Error> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_future_gives_the_hold_back() {
    let (server, locker) = setup();
    let entered = AtomicBool::new(false);
    {
        let reading = read_forever(&locker, &entered);
        tokio::pin!(reading);
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                tokio::select! {
                    _ = &mut reading => unreachable!("the body never ends"),
                    _ = tokio::time::sleep(Duration::from_millis(10)) => {
                        if entered.load(Ordering::SeqCst) {
                            break;
                        }
                    }
                }
            }
        })
        .await;
        assert!(waited.is_ok(), "the reader never got in");
        assert_eq!(holds(&server, "dropped").len(), 1);
    } // the reader's future is dropped mid-body
    let freed = eventually(Duration::from_secs(5), || {
        holds(&server, "dropped").is_empty()
    });
    assert!(freed.is_some(), "the reader's hold outlived its future");
    // A writer gets in well before the reader's 30 s lease would end.
    let started = Instant::now();
    write_once(&locker).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
}

// ---- Never re-entered ----

/// A writer's nested read of its own name: a hold of its own, so it waits
/// on the writer (here not at all: `acquire_time = 0`).
#[redis_lock(name = "nested", mode = "write", expire = 30, locker = locker)]
async fn write_then_read(locker: &Locker) -> Result<Result<(), Error>, Error> {
    Ok(nested_read(locker).await)
}

#[redis_lock(name = "nested", mode = "read", expire = 30, acquire_time = 0, locker = locker)]
async fn nested_read(locker: &Locker) -> Result<(), Error> {
    Ok(())
}

#[tokio::test]
async fn a_writers_nested_read_of_its_own_name_waits() {
    let (server, locker) = setup();
    let nested = write_then_read(&locker).await.unwrap();
    assert!(
        matches!(&nested, Err(Error::Lock(e)) if e.is_timeout()),
        "the nested read got in beside its writer: {nested:?}"
    );
    assert!(holds(&server, "nested").is_empty());
}

/// A lock of the same name inside a read hold is a lock of its own (a
/// read-write lock shares no key with it), not a reentry into the read hold.
#[redis_lock(name = "mixed", mode = "read", locker = locker)]
async fn read_then_lock(locker: &Locker, server: &RedisServer) -> Result<bool, Error> {
    plain_lock(locker, server).await
}

#[tokio::test]
async fn a_lock_inside_a_read_hold_of_the_same_name_is_taken() {
    let (server, locker) = setup();
    let took_lock = read_then_lock(&locker, &server).await.unwrap();
    assert!(took_lock, "the lock re-entered the read hold");
    assert!(!server.exists(&lock_key("mixed")));
    assert!(holds(&server, "mixed").is_empty());
}

// ---- The other options work as for a lock ----

/// Kept at least 500 ms after it was taken, though the body is quick.
#[redis_lock(name = "held", mode = "write", expire = 5, hold_at_least = "500ms", locker = locker)]
fn write_and_hold(locker: &Locker) -> Result<(), Error> {
    Ok(())
}

#[redis_lock(name = "held", mode = "write", acquire_time = 0, locker = locker)]
async fn write_at_once(locker: &Locker) -> Result<(), Error> {
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_at_least_keeps_a_writer_after_its_body() {
    let (server, locker) = setup();
    let locker_sync = locker.clone();
    tokio::task::spawn_blocking(move || write_and_hold(&locker_sync))
        .await
        .unwrap()
        .unwrap();
    let pttl = server.pttl(&keys::rw("held").lock);
    assert!(
        pttl > 0 && pttl <= 500,
        "the writer's key is not kept for the rest of the hold: PTTL {pttl}"
    );
    let refused = write_at_once(&locker).await;
    assert!(
        matches!(&refused, Err(Error::Lock(e)) if e.is_timeout()),
        "a writer got in during the hold: {refused:?}"
    );
    let freed = eventually(Duration::from_secs(5), || holds(&server, "held").is_empty());
    assert!(freed.is_some(), "the hold did not end");
    write_at_once(&locker).await.unwrap();
}

/// A reader whose 300 ms lease is renewed through an 900 ms body.
#[redis_lock(name = "renewed", mode = "read", expire = "300ms", renew, locker = locker, guard = g)]
async fn read_long(locker: &Locker) -> Result<bool, Error> {
    tokio::time::sleep(Duration::from_millis(900)).await;
    Ok(!g.is_lost())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renew_keeps_a_reader_past_its_lease() {
    let (server, locker) = setup();
    assert!(read_long(&locker).await.unwrap(), "the reader was lost");
    assert!(holds(&server, "renewed").is_empty());
}

#[derive(lockattr::LockKey)]
#[lock_key(prefix = "shelf")]
struct Shelf {
    #[lock_key]
    id: u64,
    locker: Locker,
}

impl Shelf {
    /// Named after `self`: "shelf:<id>".
    #[redis_lock(mode = "read", acquire_time = 5, locker = &self.locker, guard = g)]
    async fn count(&self, server: &RedisServer) -> Result<usize, Error> {
        assert_eq!(g.name(), format!("shelf:{}", self.id));
        Ok(holds(server, &format!("shelf:{}", self.id)).len())
    }
}

#[tokio::test]
async fn a_method_reads_under_its_own_key() {
    let server = RedisServer::start();
    let shelf = Shelf {
        id: 4,
        locker: Locker::new(server.url()).unwrap(),
    };
    assert_eq!(shelf.count(&server).await.unwrap(), 1);
    assert!(holds(&server, "shelf:4").is_empty());
}
