//! `renew`, `on_lost` and `reentrant`, in every accepted form, on sync and
//! async functions (`reentrant` opts sync ones in, per thread), free and as
//! methods, with `guard = g`, `return`, `?` and an `impl Trait` in the
//! return type.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]

use std::fmt::Display;

use lockattr::{LockError, LockKey, Locker, redis_lock};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        Self
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(_: std::num::ParseIntError) -> Self {
        Self
    }
}

// ---- renew ----

#[redis_lock(name = "r", renew)]
fn renew() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "r", renew)]
async fn renew_async() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "r", renew = true, expire = "300ms")]
fn renew_true() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "r", renew = false)]
async fn renew_false_async() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "r", renew = false)]
fn renew_false() -> Result<(), LockError> {
    Ok(())
}

// ---- reentrant ----

#[redis_lock(name = "r", reentrant = false, acquire_time = 0)]
fn not_reentrant() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "r", reentrant = false)]
async fn not_reentrant_async() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "r", reentrant)]
async fn reentrant_flag_async() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "r", reentrant = true, renew)]
async fn reentrant_true_async() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "r", reentrant)]
fn reentrant_flag() -> Result<(), AppError> {
    let _ = reentrant_true(1)?;
    Ok(())
}

#[redis_lock(name = "r", reentrant = true, expire = 5, renew, hold_at_least = 1, guard = g)]
fn reentrant_true(n: u64) -> Result<u64, AppError> {
    if n == 0 {
        return Ok(g.fencing_token());
    }
    Ok(reentrant_true(n - 1)? + "1".parse::<u64>()?)
}

// The `?` of a nested call in a checked body, kept as users write it.
#[allow(clippy::needless_question_mark)]
#[redis_lock(name = "r", reentrant = true, on_lost = "error", guard = g)]
fn reentrant_true_checked() -> Result<impl Display, AppError> {
    if g.is_lost() {
        return Ok(0);
    }
    Ok(reentrant_true(2)?)
}

// ---- on_lost ----

#[redis_lock(name = "job:{id}", renew, on_lost = "abort", guard = g)]
async fn abort_async(id: u64) -> Result<u64, AppError> {
    tokio::task::yield_now().await;
    Ok(id + g.fencing_token())
}

#[redis_lock(name = "job:{id}", on_lost = "error", guard = g)]
fn error_sync(id: u64) -> Result<u64, AppError> {
    Ok(id + g.fencing_token())
}

#[redis_lock(name = "job:{id}", renew, on_lost = "error", guard = g)]
async fn error_async(id: u64) -> Result<bool, AppError> {
    tokio::task::yield_now().await;
    Ok(id > 0 && !g.is_lost())
}

/// `return` and `?` in a sync body that is run as a closure.
#[redis_lock(name = "q:{text}", on_lost = "error", guard = g)]
fn error_sync_control_flow(text: &str) -> Result<u32, AppError> {
    if text.is_empty() {
        return Ok(0);
    }
    if g.is_lost() {
        return Err(AppError);
    }
    let n: u32 = text.parse()?;
    Ok(n)
}

#[redis_lock(name = "q:{text}", renew, on_lost = "abort")]
async fn abort_async_control_flow(text: &str) -> Result<u32, AppError> {
    if text.is_empty() {
        return Ok(0);
    }
    let n: u32 = text.parse()?;
    Ok(n)
}

#[redis_lock(name = "d", on_lost = "error")]
fn error_impl_trait(n: u32) -> Result<impl Display, LockError> {
    if n == 0 {
        return Ok(n);
    }
    Ok(n * 2)
}

#[redis_lock(name = "d", on_lost = "error")]
async fn error_impl_trait_async(n: u32) -> Result<impl Display, LockError> {
    Ok(n)
}

#[redis_lock(name = "d", on_lost = "abort")]
async fn abort_impl_trait_async(n: u32) -> Result<impl Display, LockError> {
    Ok(n)
}

#[redis_lock(name = "q:{text}", on_lost = "ignore", guard = g)]
fn ignore_sync_control_flow(text: &str) -> Result<u32, AppError> {
    if text.is_empty() || g.is_lost() {
        return Ok(0);
    }
    let n: u32 = text.parse()?;
    Ok(n)
}

#[redis_lock(name = "q:{text}", renew, on_lost = "ignore")]
async fn ignore_async_control_flow(text: &str) -> Result<impl Display, AppError> {
    if text.is_empty() {
        return Ok(0);
    }
    let n: u32 = text.parse()?;
    Ok(n)
}

// ---- all at once, on methods ----

#[derive(LockKey)]
#[lock_key(prefix = "account")]
struct Account {
    #[lock_key]
    id: u64,
    balance: i64,
    locks: Locker,
}

impl Account {
    #[redis_lock(locker = &self.locks, expire = 5, renew, on_lost = "error", reentrant = false, guard = g)]
    fn withdraw(&mut self, amount: i64) -> Result<i64, AppError> {
        if g.is_lost() {
            return Err(AppError);
        }
        self.balance -= amount;
        Ok(self.balance)
    }

    #[redis_lock(locker = &self.locks, expire = 5, renew = true, on_lost = "abort", reentrant = true, guard = g)]
    async fn withdraw_async(&mut self, amount: i64) -> Result<i64, AppError> {
        tokio::select! {
            lost = g.lost() => Err(lost.into()),
            () = tokio::task::yield_now() => {
                self.balance -= amount;
                Ok(self.balance)
            }
        }
    }

    #[redis_lock(locker = &self.locks, on_lost = "error", guard = g)]
    async fn deposit_async(&mut self, amount: i64) -> Result<i64, AppError> {
        self.balance += amount;
        let _: Option<LockError> = g.lost_blocking(std::time::Duration::ZERO);
        Ok(self.balance + i64::try_from(self.id).map_err(|_| AppError)?)
    }
}

pub fn main() {
    let _ = renew;
    let _ = renew_async;
    let _ = renew_true;
    let _ = renew_false_async;
    let _ = renew_false;
    let _ = not_reentrant;
    let _ = not_reentrant_async;
    let _ = reentrant_flag_async;
    let _ = reentrant_true_async;
    let _ = reentrant_flag;
    let _ = reentrant_true_checked;
    let _ = abort_async;
    let _ = error_sync;
    let _ = error_async;
    let _ = error_sync_control_flow;
    let _ = abort_async_control_flow;
    let _ = error_impl_trait;
    let _ = error_impl_trait_async;
    let _ = abort_impl_trait_async;
    let _ = Account::withdraw;
    let _ = Account::withdraw_async;
    let _ = Account::deposit_async;
}
