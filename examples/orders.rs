//! A service: several workers, each with its own connection as if on its own
//! machine, sweep the same queue of orders. `#[redis_lock]` makes sure each
//! order is charged exactly once, however the workers race.
//!
//! Run with `cargo run --example orders`. Uses `REDIS_URL` when set,
//! otherwise starts a throwaway `redis-server` itself.

mod common;

use std::time::Duration;

use lockattr::{LockError, Locker, redis_lock};
use redis::AsyncCommands;

const ORDERS: u64 = 20;
const WORKERS: usize = 6;

#[derive(Debug)]
enum WorkerError {
    Lock(LockError),
    Db(redis::RedisError),
}

impl std::fmt::Display for WorkerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WorkerError::Lock(e) => write!(f, "lock: {e}"),
            WorkerError::Db(e) => write!(f, "database: {e}"),
        }
    }
}

impl std::error::Error for WorkerError {}

impl From<LockError> for WorkerError {
    fn from(e: LockError) -> Self {
        WorkerError::Lock(e)
    }
}

impl From<redis::RedisError> for WorkerError {
    fn from(e: redis::RedisError) -> Self {
        WorkerError::Db(e)
    }
}

/// One worker's connections: its own Locker and its own database connection.
struct Worker {
    id: usize,
    locks: Locker,
    db: redis::aio::MultiplexedConnection,
}

impl Worker {
    /// Charges an order unless it is already paid. The check and the write
    /// are two round trips: without the lock, two workers could both see
    /// "pending" and charge twice. One attempt: a busy order is someone
    /// else's, skip it.
    #[redis_lock(name = "order:{order_id}", expire = 10, acquire_time = 0, locker = &self.locks)]
    async fn charge(&mut self, order_id: u64) -> Result<bool, WorkerError> {
        let status: Option<String> = self.db.hget("orders", order_id).await?;
        if status.as_deref() != Some("pending") {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(5)).await; // the payment provider
        let charges: u64 = self.db.hincr("charges", order_id, 1).await?;
        self.db
            .hset::<_, _, _, ()>("orders", order_id, format!("paid by worker {}", self.id))
            .await?;
        Ok(charges == 1)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let redis = common::redis()?;
    let client = redis::Client::open(redis.url.as_str())?;
    let mut db = client.get_multiplexed_async_connection().await?;
    let _: () = redis::cmd("DEL")
        .arg("orders")
        .arg("charges")
        .query_async(&mut db)
        .await?;
    for order in 0..ORDERS {
        let _: () = db.hset("orders", order, "pending").await?;
    }

    let mut workers = Vec::new();
    for id in 0..WORKERS {
        let mut worker = Worker {
            id,
            locks: Locker::new(&redis.url)?,
            db: client.get_multiplexed_async_connection().await?,
        };
        workers.push(tokio::spawn(async move {
            let (mut charged, mut skipped_busy) = (0, 0);
            for order in 0..ORDERS {
                match worker.charge(order).await {
                    Ok(true) => charged += 1,
                    Ok(false) => {}
                    Err(WorkerError::Lock(e)) if e.is_timeout() => skipped_busy += 1,
                    Err(e) => return Err(e),
                }
            }
            Ok::<_, WorkerError>((worker.id, charged, skipped_busy))
        }));
    }
    for worker in workers {
        let (id, charged, busy) = worker.await??;
        println!(
            "worker {id}: charged {}, skipped {busy} busy",
            plural(charged, "order", "orders")
        );
    }

    let charges: Vec<u64> = db.hvals("charges").await?;
    let twice = charges.iter().filter(|&&c| c > 1).count();
    println!(
        "{} of {ORDERS} charged, {twice} charged more than once",
        plural(charges.len() as u64, "order", "orders")
    );
    assert_eq!(charges.len() as u64, ORDERS);
    assert_eq!(twice, 0);
    Ok(())
}

/// `1 order`, `2 orders`.
fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}
