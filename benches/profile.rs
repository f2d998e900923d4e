//! A profiling driver, not a benchmark: runs N uncontended acquire + release
//! pairs of one library in one runtime shape and prints µs per pair, so that
//! `perf stat`, `perf record` and Redis's `INFO commandstats` can be read
//! around a process that does nothing else. See "Where the time goes" in
//! `benches/README.md` for the commands and the figures.
//!
//! ```sh
//! cargo bench --bench profile --no-run   # prints the binary's path
//! target/release/deps/profile-* redis://127.0.0.1:7455/ lockattr current-thread-task 20000
//! ```
//!
//! Arguments: a redis URL, or several separated by commas for a Redlock
//! (`Locker::redlock_builder(urls)` with `delay_restarted_nodes(false)`, as
//! the bench's row 8; rslock's `LockManager::new(urls)`; `ping`
//! pings the first); a library: `lockattr` (`Locker::new(url)`,
//! `lock(name).expire(10s).acquire()`, then `guard.release()`), `rslock`
//! (`LockManager::new(vec![url])`, `lock(name, 10s)`, then `unlock`) or
//! `ping` (two raw redis-rs `PING`s on a `MultiplexedConnection` per pair:
//! the floor of two round trips); a runtime shape: `current-thread-block-on`
//! (the loop is `block_on`'s root future), `current-thread-task` (a task of a
//! current-thread runtime, as the bench runs; a `LocalSet`'s `spawn_local`)
//! or `multi-thread-2` (a task of a multi-thread runtime with 2 workers), or
//! `tasks-64`: row 5's shape, 64 tasks of a current-thread runtime looping
//! critical sections (acquire, `GET` of a counter, `SET` of it + 1,
//! release) on one lock until N have run in all (no warm-up; rslock's
//! give-ups are retried and not counted); and N, the number of timed pairs
//! (critical sections). Before them, untimed: the first connection
//! and 100 warm-up pairs. `cargo bench` with no arguments (its `--bench`
//! only) prints the usage and exits successfully.

use std::error::Error;
use std::future::Future;
use std::time::{Duration, Instant};

type Res<T> = Result<T, Box<dyn Error>>;

const EXPIRE: Duration = Duration::from_secs(10);
const WARMUP: usize = 100;
const USAGE: &str = "usage: profile URL lockattr|rslock|ping current-thread-block-on|current-thread-task|multi-thread-2|tasks-64 N";

#[derive(Clone, Copy)]
enum Lib {
    Lockattr,
    Rslock,
    Ping,
}

/// Runs `n` pairs (after the warm-up) and returns the seconds they took.
async fn pairs(url: String, lib: Lib, n: usize) -> Res<f64> {
    let name = "profile:uncontended";
    match lib {
        Lib::Lockattr => {
            let urls: Vec<&str> = url.split(',').collect();
            let locker = match &urls[..] {
                [one] => lockattr::Locker::new(*one)?,
                // As the bench's row 8: its nodes were started just now.
                many => lockattr::Locker::redlock_builder(many.iter().copied())
                    .delay_restarted_nodes(false)
                    .build()?,
            };
            let pair = || async {
                let guard = locker.lock(name).expire(EXPIRE).acquire().await?;
                guard.release().await?;
                Ok::<_, Box<dyn Error>>(())
            };
            timed_loop(n, pair).await
        }
        Lib::Rslock => {
            let manager = rslock::LockManager::new(url.split(',').map(String::from).collect());
            let pair = || async {
                let lock = manager.lock(name, EXPIRE).await?;
                manager.unlock(&lock).await;
                Ok::<_, Box<dyn Error>>(())
            };
            timed_loop(n, pair).await
        }
        Lib::Ping => {
            let first = url.split(',').next().unwrap_or_default();
            let client = redis::Client::open(first)?;
            let con = client.get_multiplexed_async_connection().await?;
            let pair = || {
                let mut con = con.clone();
                async move {
                    redis::cmd("PING").query_async::<()>(&mut con).await?;
                    redis::cmd("PING").query_async::<()>(&mut con).await?;
                    Ok::<_, Box<dyn Error>>(())
                }
            };
            timed_loop(n, pair).await
        }
    }
}

/// Row 5's shape: `TASKS` tasks of this thread loop critical sections
/// (acquire, `GET` of a counter, `SET` of it + 1, release) on one lock
/// until `n` have run in all; returns the seconds they took.
async fn contended(url: String, lib: Lib, n: usize) -> Res<f64> {
    use std::cell::Cell;
    use std::rc::Rc;
    const TASKS: usize = 64;
    if matches!(lib, Lib::Ping) {
        return Err("tasks-64 runs lockattr or rslock, not ping".into());
    }
    let name = "profile:contended";
    let counter = "profile:contended:counter";
    let client = redis::Client::open(url.as_str())?;
    let data = client.get_multiplexed_async_connection().await?;
    let left = Rc::new(Cell::new(n));
    let locker = lockattr::Locker::new(url.as_str())?;
    let manager = rslock::LockManager::new(vec![url.clone()]);
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (left, mut data, locker, manager) =
            (left.clone(), data.clone(), locker.clone(), manager.clone());
        tasks.push(tokio::task::spawn_local(async move {
            while left.get() > 0 {
                let held = match lib {
                    Lib::Lockattr => Ok(locker.lock(name).expire(EXPIRE).acquire().await?),
                    Lib::Rslock | Lib::Ping => match manager.lock(name, EXPIRE).await {
                        Ok(lock) => Err(lock),
                        Err(_) => continue,
                    },
                };
                let value: Option<u64> = redis::cmd("GET")
                    .arg(counter)
                    .query_async(&mut data)
                    .await?;
                redis::cmd("SET")
                    .arg(counter)
                    .arg(value.unwrap_or(0) + 1)
                    .query_async::<()>(&mut data)
                    .await?;
                match held {
                    Ok(guard) => guard.release().await?,
                    Err(lock) => manager.unlock(&lock).await,
                }
                left.set(left.get().saturating_sub(1));
            }
            Ok::<_, Box<dyn Error>>(())
        }));
    }
    for task in tasks {
        task.await?.map_err(|e| e.to_string())?;
    }
    Ok(t0.elapsed().as_secs_f64())
}

/// `WARMUP` untimed calls of `pair`, then `n` timed ones.
async fn timed_loop<F, Fut>(n: usize, pair: F) -> Res<f64>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Res<()>>,
{
    for _ in 0..WARMUP {
        pair().await?;
    }
    let t0 = Instant::now();
    for _ in 0..n {
        pair().await?;
    }
    Ok(t0.elapsed().as_secs_f64())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let [url, lib, shape, n] = &args[..] else {
        // `cargo bench` runs every bench target with `--bench` only.
        println!("{USAGE}");
        return Ok(());
    };
    let lib = match lib.as_str() {
        "lockattr" => Lib::Lockattr,
        "rslock" => Lib::Rslock,
        "ping" => Lib::Ping,
        other => return Err(format!("unknown library `{other}`\n{USAGE}").into()),
    };
    let n: usize = n.parse()?;
    let work = pairs(url.clone(), lib, n);
    let secs = match shape.as_str() {
        "tasks-64" => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, contended(url.clone(), lib, n))?
        }
        "current-thread-block-on" => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(work)?,
        "current-thread-task" => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let local = tokio::task::LocalSet::new();
            local.block_on(&rt, async move { tokio::task::spawn_local(work).await })??
        }
        "multi-thread-2" => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            rt.block_on(async move {
                tokio::spawn(async move { work.await.map_err(|e| e.to_string()) }).await
            })??
        }
        other => return Err(format!("unknown runtime shape `{other}`\n{USAGE}").into()),
    };
    println!(
        "{} {shape} n={n}: {:.2} µs per pair ({secs:.3} s)",
        args[1],
        secs * 1e6 / n.max(1) as f64
    );
    Ok(())
}
