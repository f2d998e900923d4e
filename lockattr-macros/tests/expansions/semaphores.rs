//! `permits = N`: a literal or a `u32` constant, on sync and async
//! functions and methods, with the other options.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]

use lockattr::{LockError, LockGuard, Locker, redis_lock};

const SLOTS: u32 = 8;

#[redis_lock(name = "gpu", permits = 4)]
async fn train() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "gpu", permits = 4, expire = 30, acquire_time = "500ms", renew, guard = g)]
fn train_blocking() -> Result<u64, LockError> {
    let g: &LockGuard = g;
    Ok(g.fencing_token())
}

#[redis_lock(name = "pool:{id}", permits = SLOTS, reentrant = false, on_lost = "abort", locker = locker)]
async fn job(locker: &Locker, id: u64) -> Result<u64, LockError> {
    Ok(id)
}

struct Worker {
    locker: Locker,
}

impl Worker {
    #[redis_lock(name = "export", permits = 2, hold_at_least = "1s", locker = &self.locker)]
    async fn export(&self) -> Result<(), LockError> {
        Ok(())
    }

    #[redis_lock(name = "export", permits = 2u32, renew_for = "1h", locker = &self.locker)]
    fn export_blocking(&self) -> Result<(), LockError> {
        Ok(())
    }
}

pub fn main() {
    let _ = (train(), train_blocking());
    let _ = job;
    let _ = (Worker::export, Worker::export_blocking);
}
