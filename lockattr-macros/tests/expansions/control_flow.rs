//! Bodies with `?`, early `return`, and diverging worker loops.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]

use std::fmt::Display;

use lockattr::{LockError, redis_lock};

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

fn step(n: u32) -> Result<u32, AppError> {
    if n > 10 { Err(AppError) } else { Ok(n + 1) }
}

#[redis_lock(name = "q:{text}")]
fn question_mark(text: &str) -> Result<u32, AppError> {
    let n: u32 = text.parse()?;
    let n = step(n)?;
    Ok(n)
}

#[redis_lock(name = "q:{text}")]
async fn question_mark_async(text: &str) -> Result<u32, AppError> {
    let n: u32 = text.parse()?;
    let n = step(n)?;
    Ok(n)
}

#[redis_lock(name = "r")]
fn early_return(n: u32) -> Result<u32, AppError> {
    if n == 0 {
        return Ok(0);
    }
    if n > 100 {
        return Err(AppError);
    }
    Ok(n * 2)
}

#[redis_lock(name = "r")]
async fn early_return_async(n: u32) -> Result<u32, AppError> {
    if n == 0 {
        return Ok(0);
    }
    if n > 100 {
        return Err(AppError);
    }
    Ok(n * 2)
}

#[redis_lock(name = "worker")]
fn worker(mut n: u32) -> Result<(), AppError> {
    loop {
        n = step(n)?;
    }
}

#[redis_lock(name = "worker")]
async fn worker_async(mut n: u32) -> Result<(), AppError> {
    loop {
        n = step(n)?;
        tokio::task::yield_now().await;
    }
}

#[redis_lock(name = "worker")]
async fn worker_async_never(mut n: u32) -> Result<std::convert::Infallible, AppError> {
    loop {
        n = step(n)?;
    }
}

#[redis_lock(name = "worker")]
async fn worker_async_impl_trait(mut n: u32) -> Result<impl Display, AppError> {
    if n == 7 {
        return Ok(n);
    }
    loop {
        n = step(n)?;
    }
}

#[redis_lock(name = "break")]
async fn loop_with_break(mut n: u32) -> Result<u32, AppError> {
    let last = loop {
        n = step(n)?;
        if n > 5 {
            break n;
        }
    };
    Ok(last)
}

#[redis_lock(name = "panic")]
fn panics() -> Result<(), AppError> {
    panic!("the guard's Drop releases the lock")
}

#[redis_lock(name = "panic")]
async fn panics_async() -> Result<(), AppError> {
    unimplemented!()
}

pub fn main() {
    let _ = question_mark;
    let _ = question_mark_async;
    let _ = early_return;
    let _ = early_return_async;
    let _ = worker;
    let _ = worker_async;
    let _ = worker_async_never;
    let _ = worker_async_impl_trait;
    let _ = loop_with_break;
    let _ = panics;
    let _ = panics_async;
}
