//! Lockers (and servers) as several test files start them.

use std::time::Duration;

use lockattr::Locker;

use super::{RedisServer, lock_key};

/// A server of our own and a Locker of it with the default settings.
pub fn setup() -> (RedisServer, Locker) {
    let server = RedisServer::start();
    let locker = Locker::new(server.url()).unwrap();
    (server, locker)
}

/// A Locker of `server` with the default settings.
pub fn locker(server: &RedisServer) -> Locker {
    Locker::new(server.url()).unwrap()
}

/// A Locker of `server` that gives up on a connection or a reply after
/// 300 ms.
pub fn quick_locker(server: &RedisServer) -> Locker {
    Locker::builder(server.url())
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300))
        .build()
        .unwrap()
}

/// A Locker of `server` whose holders are recorded with `label`.
pub fn labelled(server: &RedisServer, label: &str) -> Locker {
    Locker::builder(server.url()).label(label).build().unwrap()
}

/// The URLs of `nodes`.
pub fn urls(nodes: &[RedisServer]) -> Vec<String> {
    nodes.iter().map(RedisServer::url).collect()
}

/// The owner token of the lock `name` on each of `nodes`.
pub fn owners(nodes: &[RedisServer], name: &str) -> Vec<Option<String>> {
    nodes.iter().map(|n| n.owner(&lock_key(name))).collect()
}
