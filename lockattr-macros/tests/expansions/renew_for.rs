//! `renew_for` in every duration form, with the options it meets.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]

use std::time::Duration;

use lockattr::{LockError, Locker, redis_lock};

const CAP: Duration = Duration::from_secs(3600);

// `renew_for` turns renewal on; `renew` may say so too.
#[redis_lock(name = "import:{feed}", expire = 30, renew_for = "1h")]
async fn units(feed: u32) -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "seconds", renew, renew_for = 90, on_lost = "error")]
fn seconds() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "explicit", renew = true, renew_for = 1.5, on_lost = "abort", guard = g)]
async fn float() -> Result<bool, LockError> {
    Ok(g.is_lost())
}

// Shorter than the lease, longer than the hold: allowed.
#[redis_lock(name = "short", expire = "10s", renew_for = "1ms", hold_at_least = "2s")]
fn short() -> Result<(), LockError> {
    Ok(())
}

// Expressions are checked when called.
#[redis_lock(name = "expr", renew_for = CAP, locker = locker)]
async fn expression(locker: &Locker) -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "nested", renew_for = Duration::from_secs(mins * 60), reentrant)]
async fn nested(mins: u64) -> Result<(), LockError> {
    Ok(())
}

pub fn main() {
    let _ = units;
    let _ = seconds;
    let _ = float;
    let _ = short;
    let _ = expression;
    let _ = nested;
}
