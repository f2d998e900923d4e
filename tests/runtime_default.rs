//! The process-wide default Locker: `NotConfigured` (with instructions)
//! before `init`, usable after, and `AlreadyConfigured` on a second `init` or
//! `set_default`. The default is global to the process, so this file holds a
//! single test that walks through the states in order.
mod support;

use std::time::Duration;

use lockattr::{LockError, Locker, default_locker, init, set_default};
use support::outages::take_leased_blocking;
use support::{RedisServer, lock_key};

#[test]
fn default_locker_lifecycle() {
    // Nothing configured yet.
    let err = default_locker().unwrap_err();
    assert!(matches!(err, LockError::NotConfigured), "{err:?}");
    let msg = err.to_string();
    for hint in ["init", "set_default", "locker ="] {
        assert!(
            msg.contains(hint),
            "the message should mention `{hint}`: {msg}"
        );
    }

    // A refused URL configures nothing.
    let bad = init("http://not-redis/").unwrap_err();
    assert!(matches!(bad, LockError::InvalidInput { .. }), "{bad:?}");
    assert!(matches!(
        default_locker().unwrap_err(),
        LockError::NotConfigured
    ));

    let server = RedisServer::start();
    init(server.url()).unwrap();
    let locker = default_locker().unwrap();
    assert_eq!(locker.prefix(), "lockattr:");
    let guard = take_leased_blocking(locker, "default", Duration::from_secs(30));
    assert!(server.exists(&lock_key("default")));
    guard.release_blocking().unwrap();

    // Second configuration attempts fail and change nothing.
    let err = init(server.url()).unwrap_err();
    assert!(matches!(err, LockError::AlreadyConfigured), "{err:?}");
    assert!(err.to_string().contains("already"), "{err}");
    let other = Locker::builder(server.url())
        .prefix("other:")
        .build()
        .unwrap();
    let err = set_default(other).unwrap_err();
    assert!(matches!(err, LockError::AlreadyConfigured), "{err:?}");
    assert_eq!(default_locker().unwrap().prefix(), "lockattr:");
    // The same Locker every time.
    assert!(std::ptr::eq(
        default_locker().unwrap(),
        default_locker().unwrap()
    ));

    // Usable from async code too.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let guard = default_locker()
            .unwrap()
            .lock("default")
            .acquire()
            .await
            .unwrap();
        guard.release().await.unwrap();
    });
}
