//! The size of a lock set: at most `MAX_SET_NAMES` distinct names, a name
//! given twice counting once; a larger set is refused with `InvalidInput`
//! before anything is sent to Redis.

use crate::support;

use lockattr::{LockError, MAX_SET_NAMES};
use support::lockers::setup;

/// `count` distinct names.
fn names(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("item:{i}")).collect()
}

#[tokio::test]
async fn a_set_past_the_maximum_is_refused_before_anything_is_sent() {
    let (server, locker) = setup();
    let err = locker
        .lock_all(names(MAX_SET_NAMES + 1))
        .acquire()
        .await
        .unwrap_err();
    match &err {
        LockError::InvalidInput { what, reason } => {
            assert_eq!(*what, "lock set");
            assert!(
                reason.contains(&(MAX_SET_NAMES + 1).to_string())
                    && reason.contains(&MAX_SET_NAMES.to_string()),
                "the reason names the set's size and the maximum: {reason}"
            );
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    assert_eq!(server.scripts_run(), 0, "nothing was sent");
    assert!(server.keys("*").is_empty());
    // The blocking path refuses it the same way.
    let blocking = locker.lock_all(names(MAX_SET_NAMES + 1)).acquire_blocking();
    assert!(
        matches!(blocking, Err(LockError::InvalidInput { .. })),
        "{blocking:?}"
    );
    assert_eq!(server.scripts_run(), 0, "nothing was sent");
}

#[tokio::test]
async fn a_set_of_the_maximum_is_taken_whole_and_duplicates_count_once() {
    let (server, locker) = setup();
    // Every name three times: the maximum once it is counted once.
    let given: Vec<String> = (0..3).flat_map(|_| names(MAX_SET_NAMES)).collect();
    let guard = locker.lock_all(given).acquire().await.unwrap();
    assert_eq!(server.held_locks().len(), MAX_SET_NAMES);
    guard.release().await.unwrap();
    assert!(server.held_locks().is_empty());
}
