//! The key layout (`layout.rs`) for the workspace's tests, so that they
//! compute every key name instead of spelling it. Not a public API: it may
//! change in any release.

use std::time::Duration;

use crate::layout::{Keys, Permits, RwKeys, RwMode};

/// The keys of one name of one kind, as its scripts use them.
#[derive(Debug, Clone)]
pub struct KeyNames {
    /// The key a holder holds: the lock's, the writer's, the first
    /// permit's.
    pub lock: String,
    /// The fencing counter.
    pub fence: String,
    /// The queue of waiters' tokens.
    pub queue: String,
    /// Each queued waiter's deadline, lease and holder.
    pub waiters: String,
    /// The pub/sub channel of hand-overs.
    pub channel: String,
}

impl From<Keys> for KeyNames {
    fn from(keys: Keys) -> KeyNames {
        KeyNames {
            lock: keys.lock,
            fence: keys.fence,
            queue: keys.queue,
            waiters: keys.waiters,
            channel: keys.channel,
        }
    }
}

fn keys(prefix: &str, name: &str) -> Keys {
    Keys::new(prefix, name, Duration::ZERO)
}

/// The keys of the lock `name` under `prefix`.
pub fn lock(prefix: &str, name: &str) -> KeyNames {
    keys(prefix, name).into()
}

/// The keys of the read-write lock `name`; `lock` is the writer's key.
pub fn read_write(prefix: &str, name: &str) -> KeyNames {
    keys(prefix, name).read_write().into()
}

/// The index of readers of the read-write lock `name`.
pub fn readers(prefix: &str, name: &str) -> String {
    RwKeys::make(&mut keys(prefix, name), RwMode::Read).readers
}

/// The key the reader `token` of the read-write lock `name` holds.
pub fn reader(prefix: &str, name: &str, token: &str) -> String {
    RwKeys::make(&mut keys(prefix, name), RwMode::Read).holder_key(token)
}

/// The keys of the semaphore `name`; `lock` is its first permit's key.
pub fn semaphore(prefix: &str, name: &str) -> KeyNames {
    let mut keys = keys(prefix, name);
    Permits::make(&mut keys, 1);
    keys.into()
}

/// The key of permit `index` of the semaphore `name`.
pub fn permit(prefix: &str, name: &str, index: u32) -> String {
    let permits = Permits::make(&mut keys(prefix, name), index + 1);
    permits.slots[index as usize].clone()
}

/// The record of the semaphore `name`'s number of permits.
pub fn permits_record(prefix: &str, name: &str) -> String {
    Permits::make(&mut keys(prefix, name), 1).record
}
