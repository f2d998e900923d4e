//! Rows 4 and 5: critical sections on one contended lock, by 8 processes
//! and by 64 tasks of one process. Each critical section is acquire, `GET`
//! of a counter, `SET` of it + 1, release; a lost update shows a broken
//! mutual exclusion.

use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;

use super::{ContendStats, Report};
use crate::children::{Children, Params};
use crate::peers::{Lib, Libs};
use crate::util::{blpop, connect, rpush, signal_connection, unix_nanos, us};
use crate::{CONTEND_PROCESSES, EXPIRE, ONE_PROCESS_TASKS, Plan, Res};

fn contend_ready(block: usize) -> String {
    format!("bench:contend:ready:{block}")
}

fn contend_go(block: usize, idx: usize) -> String {
    format!("bench:contend:go:{block}:{idx}")
}

fn contend_counter(lib: Lib) -> String {
    format!("bench:contend:counter:{}", lib.name())
}

const CONTEND_RESULTS: &str = "bench:contend:results";

/// What one loop of critical sections did.
#[derive(Default)]
struct Tally {
    /// Critical sections finished before the end of the window.
    in_window: u64,
    /// All critical sections run.
    executed: u64,
    /// Acquire calls that gave up (rslock: retries ran out).
    gave_up: u64,
    /// The wait of each critical section in `in_window`, µs: from the first
    /// acquire call to the return of the call that got the lock (rslock's
    /// calls that gave up included).
    waits_us: Vec<f64>,
}

/// Loops acquire, GET, SET + 1, release until `end`; a give-up is retried.
async fn critical_sections(
    libs: &Libs,
    lib: Lib,
    lock_name: &str,
    counter: &str,
    data: &mut MultiplexedConnection,
    end: Instant,
) -> Res<Tally> {
    let mut tally = Tally::default();
    let mut waiting_since: Option<Instant> = None;
    while Instant::now() < end {
        let since = *waiting_since.get_or_insert_with(Instant::now);
        let Some(held) = libs.acquire(lib, lock_name, EXPIRE).await? else {
            tally.gave_up += 1;
            continue;
        };
        waiting_since = None;
        let waited = since.elapsed();
        let value: Option<u64> = redis::cmd("GET").arg(counter).query_async(data).await?;
        redis::cmd("SET")
            .arg(counter)
            .arg(value.unwrap_or(0) + 1)
            .query_async::<()>(data)
            .await?;
        libs.release(held).await?;
        tally.executed += 1;
        if Instant::now() <= end {
            tally.in_window += 1;
            tally.waits_us.push(us(waited));
        }
    }
    Ok(tally)
}

/// Row 4: `CONTEND_PROCESSES` processes run blocks of each library in the
/// order A B B A, all starting each block together.
pub async fn processes(url: &str, plan: &Plan, report: &mut Report) -> Res<()> {
    let mut con = signal_connection(url).await?;
    let block_ms = plan.contend_block.as_millis() as u64;
    let params = (0..CONTEND_PROCESSES).map(|idx| format!("idx={idx};block_ms={block_ms}"));
    let mut children = Children::spawn("contend", "contend", url, params)?;
    for block in 0..Lib::ABBA.len() {
        // Barrier: every process is ready for this block (and so done with the last one).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ready: Option<usize> = redis::cmd("GET")
                .arg(contend_ready(block))
                .query_async(&mut con)
                .await?;
            if ready == Some(CONTEND_PROCESSES) {
                break;
            }
            if Instant::now() > deadline {
                return Err(
                    format!("contend processes not ready for block {block} within 60 s").into(),
                );
            }
            // A process that died would never be ready: fail fast.
            children.check_running()?;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let start_at = unix_nanos() + 50_000_000;
        for idx in 0..CONTEND_PROCESSES {
            rpush(&mut con, &contend_go(block, idx), start_at).await?;
        }
    }
    children.wait(Duration::from_secs(120)).await?;

    let lines: Vec<String> = redis::cmd("LRANGE")
        .arg(CONTEND_RESULTS)
        .arg(0)
        .arg(-1)
        .query_async(&mut con)
        .await?;
    let mut stats: [ContendStats; 2] = Default::default();
    for s in &mut stats {
        s.counts = vec![0; CONTEND_PROCESSES];
    }
    for line in &lines {
        let f: Vec<&str> = line.split(',').collect();
        let [idx, lib, in_window, executed, gave_up, waits] = f[..] else {
            return Err(format!("bad contend result `{line}`").into());
        };
        let s = &mut stats[Lib::parse(lib)?.index()];
        s.counts[idx.parse::<usize>()?] += in_window.parse::<u64>()?;
        s.executed += executed.parse::<u64>()?;
        s.gave_up += gave_up.parse::<u64>()?;
        for w in waits.split_whitespace() {
            s.waits_us.push(w.parse()?);
        }
    }
    let seconds = plan.contend_block.as_secs_f64() * 2.0;
    for lib in Lib::BOTH {
        let s = &mut stats[lib.index()];
        let counter: Option<u64> = redis::cmd("GET")
            .arg(contend_counter(lib))
            .query_async(&mut con)
            .await?;
        s.final_counter = counter.unwrap_or(0);
        s.finish(seconds);
    }
    report.contend = stats;
    report.contend_seconds = seconds;
    Ok(())
}

/// One contending process: per block, wait at the barrier, then loop
/// acquire, GET, SET + 1, release until the block's end.
pub async fn child(url: &str, params: &Params) -> Res<()> {
    let idx = params.num("idx")? as usize;
    let block_len = Duration::from_millis(params.num("block_ms")?);
    // rslock as users get it: default retries; when they run out, the loop tries again.
    let libs = Libs::new(url, None)?;
    let mut data = connect(url, Some(Duration::from_secs(5))).await?;
    let mut con = signal_connection(url).await?;
    libs.locker.ping().await?;
    let warm = format!("bench:contend:warm:{idx}");
    for lib in Lib::BOTH {
        let held = libs.acquire_or_fail(lib, &warm, EXPIRE).await?;
        libs.release(held).await?;
    }

    for (block, lib) in Lib::ABBA.into_iter().enumerate() {
        let lock_name = format!("bench:contend:lock:{}", lib.name());
        let counter = contend_counter(lib);
        redis::cmd("INCR")
            .arg(contend_ready(block))
            .query_async::<()>(&mut con)
            .await?;
        let start_at: u64 = blpop(&mut con, &contend_go(block, idx), 60)
            .await?
            .parse()?;
        let now = unix_nanos();
        let start = Instant::now() + Duration::from_nanos(start_at.saturating_sub(now));
        tokio::time::sleep_until(start.into()).await;
        let end = start + block_len;
        let t = critical_sections(&libs, lib, &lock_name, &counter, &mut data, end).await?;
        let waits: Vec<String> = t.waits_us.iter().map(|w| format!("{w:.0}")).collect();
        let line = format!(
            "{idx},{},{},{},{},{}",
            lib.name(),
            t.in_window,
            t.executed,
            t.gave_up,
            waits.join(" ")
        );
        rpush(&mut con, CONTEND_RESULTS, line).await?;
    }
    Ok(())
}

/// Row 5: `ONE_PROCESS_TASKS` tasks of this process loop critical sections
/// on one lock through one lock manager per library; blocks A B B A.
pub async fn tasks(url: &str, plan: &Plan, report: &mut Report) -> Res<()> {
    let libs = Libs::new(url, None)?;
    let data = connect(url, Some(Duration::from_secs(5))).await?;
    for lib in Lib::BOTH {
        let held = libs
            .acquire_or_fail(lib, "bench:tasks:warm", EXPIRE)
            .await?;
        libs.release(held).await?;
    }
    let counter = |lib: Lib| format!("bench:tasks:counter:{}", lib.name());
    let mut stats: [ContendStats; 2] = Default::default();
    for s in &mut stats {
        s.counts = vec![0; ONE_PROCESS_TASKS];
    }
    for lib in Lib::ABBA {
        let end = Instant::now() + plan.contend_block;
        let mut handles = Vec::with_capacity(ONE_PROCESS_TASKS);
        for _ in 0..ONE_PROCESS_TASKS {
            let (libs, mut data, counter) = (libs.clone(), data.clone(), counter(lib));
            handles.push(tokio::spawn(async move {
                let lock_name = format!("bench:tasks:lock:{}", lib.name());
                critical_sections(&libs, lib, &lock_name, &counter, &mut data, end).await
            }));
        }
        let s = &mut stats[lib.index()];
        for (k, handle) in handles.into_iter().enumerate() {
            let t = handle.await??;
            s.counts[k] += t.in_window;
            s.executed += t.executed;
            s.gave_up += t.gave_up;
            s.waits_us.extend(t.waits_us);
        }
    }
    let seconds = plan.contend_block.as_secs_f64() * 2.0;
    let mut data = data;
    for lib in Lib::BOTH {
        let s = &mut stats[lib.index()];
        let value: Option<u64> = redis::cmd("GET")
            .arg(counter(lib))
            .query_async(&mut data)
            .await?;
        s.final_counter = value.unwrap_or(0);
        s.finish(seconds);
    }
    report.tasks = stats;
    report.tasks_seconds = seconds;
    Ok(())
}
