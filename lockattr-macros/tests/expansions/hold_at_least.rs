//! `hold_at_least` in every duration form, with the options it meets.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]

use std::time::Duration;

use lockattr::{LockError, Locker, redis_lock};

const PERIOD: Duration = Duration::from_secs(60);

#[redis_lock(name = "report:{period}", expire = 90, hold_at_least = 50, acquire_time = 0)]
fn seconds(period: u64) -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "float", expire = 2, hold_at_least = 1.5)]
async fn float() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "units", expire = "1m", hold_at_least = "59s", renew)]
async fn units() -> Result<u32, LockError> {
    Ok(1)
}

// As long as the lease is allowed; the default lease (10 s) takes 10 s.
#[redis_lock(name = "equal", expire = "500ms", hold_at_least = "500ms")]
fn equal() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "default lease", hold_at_least = 10)]
async fn default_lease() -> Result<(), LockError> {
    Ok(())
}

// Expressions are checked when called.
#[redis_lock(name = "expr", expire = PERIOD, hold_at_least = PERIOD / 2, locker = locker)]
async fn expression(locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "expr hold", expire = 30, hold_at_least = Duration::from_secs(secs))]
fn expression_hold(secs: u64) -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "nested", hold_at_least = 5, reentrant, on_lost = "error", guard = g)]
async fn nested() -> Result<bool, LockError> {
    Ok(g.is_lost())
}

pub fn main() {
    let _ = seconds;
    let _ = float;
    let _ = units;
    let _ = equal;
    let _ = default_lease;
    let _ = expression;
    let _ = expression_hold;
    let _ = nested;
}
