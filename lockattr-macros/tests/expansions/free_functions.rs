//! Free functions, sync and async, with every error-type shape.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]

use std::fmt;

use lockattr::{LockError, redis_lock};

/// An application error that can carry a lock failure.
#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Invalid,
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        Self::Lock(e)
    }
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Lock(e) => write!(f, "lock: {e}"),
            Self::Invalid => f.write_str("invalid"),
        }
    }
}

type AppResult<T> = Result<T, AppError>;

#[redis_lock(name = "order:{order_id}", expire = 30, acquire_time = 5)]
async fn pay(order_id: u64, amount: u64) -> Result<u64, AppError> {
    if amount == 0 {
        return Err(AppError::Invalid);
    }
    Ok(order_id + amount)
}

#[redis_lock(name = "order:{order_id}", expire = 30, acquire_time = 5)]
fn pay_blocking(order_id: u64, amount: u64) -> Result<u64, AppError> {
    if amount == 0 {
        return Err(AppError::Invalid);
    }
    Ok(order_id + amount)
}

#[redis_lock(name = "report")]
fn report() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock]
async fn no_arguments() -> AppResult<()> {
    Ok(())
}

#[redis_lock]
fn no_arguments_blocking() -> AppResult<()> {
    Ok(())
}

#[redis_lock(name = "boxed")]
fn boxed_error() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    Ok(())
}

#[redis_lock(name = "unit")]
pub(crate) async fn unit_value() -> Result<(), LockError> {
    Ok(())
}

pub fn main() {
    if false {
        let _future = pay(1, 2);
        let _ = pay_blocking(1, 2);
        let _ = report();
        let _future = no_arguments();
        let _ = no_arguments_blocking();
        let _ = boxed_error();
        let _future = unit_value();
    }
}
