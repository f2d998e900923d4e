//! Every duration form, and `acquire_time = 0`.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]

use std::time::Duration;

use lockattr::{LockError, redis_lock};

const LEASE: Duration = Duration::from_secs(45);

#[redis_lock(name = "int", expire = 30, acquire_time = 5)]
fn integer() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "float", expire = 0.5, acquire_time = 1.25)]
fn float() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "units", expire = "1.5s", acquire_time = "250ms")]
fn units() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "minutes", expire = "2m", acquire_time = "1h")]
async fn minutes() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "small", expire = "500000us", acquire_time = "10ns")]
fn small_units() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "no wait", acquire_time = 0)]
fn no_wait() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "expr", expire = Duration::from_secs(secs), acquire_time = LEASE / 3)]
fn expression(secs: u64) -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "expr", expire = LEASE, acquire_time = Duration::ZERO)]
async fn expression_async() -> Result<(), LockError> {
    Ok(())
}

pub fn main() {
    let _ = integer;
    let _ = float;
    let _ = units;
    let _ = minutes;
    let _ = small_units;
    let _ = no_wait;
    let _ = expression;
    let _ = expression_async;
}
