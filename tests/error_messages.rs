//! What the errors say about addresses: a refused connection is not told to
//! raise timeouts, a malformed URL names the part that is wrong (never its
//! password), and a Unix socket is named by its path and database.

use crate::support;

use lockattr::{LockError, Locker};

#[test]
fn a_refused_connection_does_not_suggest_raising_timeouts() {
    let port = support::free_port();
    let locker = Locker::new(format!("redis://127.0.0.1:{port}/")).unwrap();
    let err = locker.ping_blocking().unwrap_err();
    assert!(matches!(err, LockError::Connection { .. }), "{err}");
    let message = err.to_string();
    assert!(!message.contains("timeout"), "{message}");
    assert!(
        message.contains(&format!("127.0.0.1:{port}/0")),
        "{message}"
    );
    assert!(message.contains("check that the server is up"), "{message}");
}

#[test]
fn a_unix_socket_is_named_by_its_path_and_database() {
    let dir = std::env::temp_dir().join(format!("lockattr-nosock-{}", std::process::id()));
    let path = dir.join("x.sock");
    let locker = Locker::new(format!("unix://{}?db=3", path.display())).unwrap();
    let message = locker.ping_blocking().unwrap_err().to_string();
    assert!(
        message.contains(&format!("{} (database 3)", path.display())),
        "{message}"
    );
    assert!(!message.contains("x.sock/3"), "{message}");
}

#[test]
fn a_malformed_url_names_the_part_that_is_wrong_without_the_password() {
    for (url, part) in [
        ("http://:hunter2@localhost:6379/", "scheme `http`"),
        ("localhost:6379", "scheme"),
        ("redis://:hunter2@localhost:63a9/", "port"),
        ("redis://:hunter2@localhost:99999/", "port"),
        ("redis://:hunter2@/", "host"),
        ("redis://:hunter2@localhost:6379/x1", "database"),
    ] {
        let err = Locker::new(url).unwrap_err();
        assert!(
            matches!(err, LockError::InvalidInput { .. }),
            "{url}: {err}"
        );
        let message = err.to_string();
        assert!(message.contains(part), "{url}: {message}");
        assert!(!message.contains("hunter2"), "{url}: {message}");
        assert!(!format!("{err:?}").contains("hunter2"), "{url}: {err:?}");
    }
}
