//! The asserts several test files share, on the errors of lockattr.

use std::time::Duration;

use lockattr::{LockError, LostReason};

/// Asserts that `err` is the [`LockError::Timeout`] of the lock `name`
/// after waiting `wait`, and that its message names the lock.
pub fn assert_timeout(err: &LockError, name: &str, wait: Duration) {
    match err {
        LockError::Timeout { name: n, waited } => {
            assert_eq!(n, name);
            assert_eq!(*waited, wait);
        }
        other => panic!("expected Timeout for {name}, got {other:?}"),
    }
    assert!(err.is_timeout());
    let msg = err.to_string();
    assert!(msg.contains(name), "the message names the lock: {msg}");
}

/// The reason of a [`LockError::Lost`]; `None` for any other error.
pub fn lost_reason(err: &LockError) -> Option<LostReason> {
    match err {
        LockError::Lost { reason, .. } => Some(*reason),
        _ => None,
    }
}

/// Asserts that `err` is the [`LockError::Lost`] of the lock `name`; its
/// reason.
pub fn assert_lost(err: &LockError, name: &str) -> LostReason {
    match err {
        LockError::Lost {
            name: n, reason, ..
        } => {
            assert_eq!(n, name);
            *reason
        }
        other => panic!("expected Lost, got {other:?}"),
    }
}
