//! Built without a TLS feature, lockattr refuses `rediss://` URLs when the
//! Locker is built, with `InvalidInput` naming the features that would
//! enable TLS, instead of connecting in plain text or failing on first use.
//! No server is needed: nothing listens on the ports below, and nothing
//! connects.

#![cfg(not(any(feature = "tls-rustls", feature = "tls-native-tls")))]

use lockattr::{LockError, Locker};

fn assert_needs_a_tls_feature(result: Result<Locker, LockError>, what: &str) {
    match result {
        Err(LockError::InvalidInput { reason, .. }) => {
            for feature in ["tls-rustls", "tls-native-tls"] {
                assert!(
                    reason.contains(feature),
                    "{what}: the message does not name `{feature}`: {reason}"
                );
            }
        }
        Err(err) => panic!("{what}: expected InvalidInput, got {err:?}"),
        Ok(locker) => panic!("{what}: built {locker:?}"),
    }
}

#[test]
fn a_tls_url_needs_a_tls_feature() {
    assert_needs_a_tls_feature(Locker::new("rediss://127.0.0.1:6390/"), "Locker::new");
    assert_needs_a_tls_feature(
        Locker::builder("rediss://localhost:6390/").build(),
        "Locker::builder",
    );
    assert_needs_a_tls_feature(
        Locker::new("rediss://127.0.0.1:6390/#insecure"),
        "#insecure",
    );
}

#[test]
fn a_redlock_with_a_tls_node_needs_a_tls_feature() {
    assert_needs_a_tls_feature(
        Locker::redlock([
            "rediss://127.0.0.1:6390/",
            "rediss://127.0.0.1:6391/",
            "rediss://127.0.0.1:6392/",
        ]),
        "Redlock, every node TLS",
    );
    // One TLS node among plain ones is enough to be refused.
    assert_needs_a_tls_feature(
        Locker::redlock([
            "redis://127.0.0.1:6390/",
            "redis://127.0.0.1:6391/",
            "rediss://127.0.0.1:6392/",
        ]),
        "Redlock, one node TLS",
    );
}

#[test]
fn a_cluster_with_a_tls_seed_needs_a_tls_feature() {
    assert_needs_a_tls_feature(Locker::cluster(["rediss://127.0.0.1:6390/"]), "cluster");
    assert_needs_a_tls_feature(
        Locker::cluster_builder(["rediss://127.0.0.1:6390/", "rediss://127.0.0.1:6391/"]).build(),
        "cluster builder",
    );
}
