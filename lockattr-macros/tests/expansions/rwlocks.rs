//! `mode = "read"` / `mode = "write"`: on sync and async functions and
//! methods, with every way of naming the lock and the other options.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]

use std::time::Duration;

use lockattr::{LockError, LockGuard, LockKey, Locker, redis_lock};

#[redis_lock(name = "catalog", mode = "read")]
async fn read_catalog() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "catalog", mode = "write", expire = 30, acquire_time = "500ms", renew, guard = g)]
fn write_catalog() -> Result<u64, LockError> {
    let g: &LockGuard = g;
    Ok(g.fencing_token())
}

/// A template capturing an argument, and `reentrant = false` (what a
/// read-write hold does anyway).
#[redis_lock(name = "shard:{id}", mode = "read", reentrant = false, on_lost = "abort", locker = locker)]
async fn scan(locker: &Locker, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

/// An expression, `hold_at_least` and `renew_for`.
#[redis_lock(name = format!("shard:{}", id + 1), mode = "write", expire = 60, hold_at_least = "5s", renew_for = Duration::from_secs(600), on_lost = "error")]
fn rebuild(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

#[derive(LockKey)]
#[lock_key(prefix = "table")]
struct Table {
    #[lock_key]
    id: u64,
    locker: Locker,
}

impl Table {
    /// Named after `self` through `LockKey`.
    #[redis_lock(mode = "read", locker = &self.locker)]
    async fn rows(&self) -> Result<u64, LockError> {
        Ok(self.id)
    }

    #[redis_lock(mode = "write", locker = &self.locker, guard = g)]
    fn truncate(&self) -> Result<u64, LockError> {
        Ok(g.fencing_token())
    }
}

/// Named after the first argument's `LockKey`.
#[redis_lock(mode = "write")]
async fn drop_table(table: &Table) -> Result<u64, LockError> {
    Ok(table.id)
}

pub fn main() {
    let _ = (read_catalog(), write_catalog(), rebuild(1));
    let _ = scan;
    let _ = (Table::rows, Table::truncate, drop_table);
}
