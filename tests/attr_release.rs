//! `#[redis_lock]` releases its lock on every ordinary way out of the body,
//! sync and async: a value, an early `return`, `?` with an error; and an
//! `Err` made by the body reaches the caller unchanged.
//!
//! Panics and cancellation have their own files (`attr_panic.rs`,
//! `attr_cancel.rs`).

use crate::support;

use std::time::Duration;

use lockattr::{LockError, Locker, redis_lock};
use support::lockers::setup;
use support::{RedisServer, lock_key};

/// An application error that can carry a lock failure.
#[derive(Debug, PartialEq)]
enum AppError {
    Lock(String),
    Parse(std::num::ParseIntError),
    Refused { code: u32, why: String },
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e.to_string())
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(e: std::num::ParseIntError) -> Self {
        AppError::Parse(e)
    }
}

/// Which way the body leaves.
#[derive(Clone, Copy, Debug)]
enum Exit {
    Value,
    EarlyReturn,
    QuestionMark,
    ErrValue,
}

/// What the body parses: not a number for `?` to pass on, or 41.
fn text_of(exit: Exit) -> &'static str {
    match exit {
        Exit::QuestionMark => "not a number",
        _ => "41",
    }
}

/// The error the body returns as its own value.
fn refused() -> AppError {
    AppError::Refused {
        code: 409,
        why: "already paid".into(),
    }
}

#[redis_lock(name = "release:sync", expire = 30, acquire_time = 0, locker = locker)]
fn sync_exit(locker: &Locker, exit: Exit, entered: &mut u32) -> Result<u64, AppError> {
    *entered += 1;
    if let Exit::EarlyReturn = exit {
        return Ok(7);
    }
    let n: u64 = text_of(exit).parse()?;
    if let Exit::ErrValue = exit {
        return Err(refused());
    }
    Ok(n + 1)
}

#[redis_lock(name = "release:async", expire = 30, acquire_time = 0, locker = locker)]
async fn async_exit(locker: &Locker, exit: Exit, entered: &mut u32) -> Result<u64, AppError> {
    *entered += 1;
    tokio::task::yield_now().await;
    if let Exit::EarlyReturn = exit {
        return Ok(7);
    }
    let n: u64 = text_of(exit).parse()?;
    tokio::time::sleep(Duration::from_millis(1)).await;
    if let Exit::ErrValue = exit {
        return Err(refused());
    }
    Ok(n + 1)
}

fn check(exit: Exit, result: Result<u64, AppError>) {
    match exit {
        Exit::Value => assert_eq!(result, Ok(42)),
        Exit::EarlyReturn => assert_eq!(result, Ok(7)),
        Exit::QuestionMark => match result {
            Err(AppError::Parse(e)) => assert_eq!(e, "not a number".parse::<u64>().unwrap_err()),
            other => panic!("`?` should pass the parse error through, got {other:?}"),
        },
        Exit::ErrValue => assert_eq!(result, Err(refused())),
    }
}

/// Calls `async_exit` once with each exit, checks what it gave, and that
/// the lock was released by the time it returned (the async expansion
/// awaits the release before returning); `round` names the pass.
async fn every_async_exit(server: &RedisServer, locker: &Locker, entered: &mut u32, round: &str) {
    for exit in EXITS {
        let result = async_exit(locker, exit, entered).await;
        check(exit, result);
        assert!(
            !server.exists(&lock_key("release:async")),
            "{round}: lock still held after {exit:?}"
        );
    }
}

const EXITS: [Exit; 4] = [
    Exit::Value,
    Exit::EarlyReturn,
    Exit::QuestionMark,
    Exit::ErrValue,
];

#[test]
fn sync_releases_on_every_exit() {
    let (server, locker) = setup();
    let mut entered = 0;
    // Twice round: with acquire_time = 0, the second round only runs if
    // every exit of the first one gave the lock back.
    for round in 0..2 {
        for exit in EXITS {
            let result = sync_exit(&locker, exit, &mut entered);
            check(exit, result);
            // A sync guard releases before the function returns.
            assert!(
                !server.exists(&lock_key("release:sync")),
                "round {round}: lock still held after {exit:?}"
            );
        }
    }
    assert_eq!(entered, 8);
}

#[tokio::test]
async fn async_releases_on_every_exit() {
    let (server, locker) = setup();
    let mut entered = 0;
    for round in 0..2 {
        every_async_exit(&server, &locker, &mut entered, &format!("round {round}")).await;
    }
    assert_eq!(entered, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_releases_on_every_exit_multi_thread() {
    let (server, locker) = setup();
    let mut entered = 0;
    every_async_exit(&server, &locker, &mut entered, "one round").await;
    assert_eq!(entered, 4);
}

/// `Result<T, LockError>` directly: the body's own LockError comes back as is.
#[redis_lock(name = "release:lockerror", acquire_time = 0, locker = locker)]
fn returns_its_own_lock_error(locker: &Locker) -> Result<(), LockError> {
    Err(LockError::NotOwned {
        name: "made by the body".into(),
    })
}

#[test]
fn a_lock_error_made_by_the_body_is_returned_unchanged() {
    let (server, locker) = setup();
    for _ in 0..2 {
        match returns_its_own_lock_error(&locker) {
            Err(LockError::NotOwned { name }) => assert_eq!(name, "made by the body"),
            other => panic!("{other:?}"),
        }
    }
    assert!(!server.exists(&lock_key("release:lockerror")));
}
