//! What talks to Redis.
//!
//! The guard, the builder and the macro only see [`Backend`]; each deployment
//! shape (one node today; several independent masters or a cluster later) is
//! one variant, so adding one touches nothing above this module.

pub(crate) mod scripts;
mod single;
mod wake;

use std::time::Duration;

pub(crate) use single::{SingleNode, Timeouts};
pub(crate) use wake::{Wake, Wakeups};

use crate::LockError;
use crate::key::Keys;

/// The answer to one attempt to take a lock.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Attempt {
    /// Taken; the lock's new fencing token.
    Acquired { fencing_token: u64 },
    /// Held by another owner, whose lease has this much time left
    /// (`None` when Redis did not say).
    Held { expires_in: Option<Duration> },
}

/// One lease in a [`Backend::renew`] batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renewal<'a> {
    /// The lock's key.
    pub(crate) key: &'a str,
    /// Its owner's token.
    pub(crate) token: &'a str,
    /// The lease to raise it to; `None` only reads the time left.
    pub(crate) lease: Option<Duration>,
}

/// How [`Backend::extend`] changes a lease.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Extend {
    /// Add to the time left.
    Add,
    /// Replace the time left.
    Set,
}

/// One way of reaching Redis.
#[derive(Debug)]
pub(crate) enum Backend {
    /// A single Redis server.
    Single(SingleNode),
}

impl Backend {
    /// Tries once to take the lock for `token`. When the lock is held and
    /// `wait` is not zero, queues `token` for `wait` (see
    /// [`scripts::ACQUIRE`]); a zero `wait` leaves the queue.
    pub(crate) async fn try_acquire(
        &self,
        keys: &Keys,
        token: &str,
        expire: Duration,
        wait: Duration,
    ) -> Result<Attempt, LockError> {
        match self {
            Backend::Single(node) => node.try_acquire(keys, token, expire, wait).await,
        }
    }

    /// Where waiters hear that a release handed them the lock.
    pub(crate) fn wakeups(&self) -> &Wakeups {
        match self {
            Backend::Single(node) => node.wakeups(),
        }
    }

    /// Deletes the lock if `token` owns it, handing it to the oldest waiter;
    /// false when it did not own it (then `token` leaves the queue).
    pub(crate) async fn release(&self, keys: &Keys, token: &str) -> Result<bool, LockError> {
        match self {
            Backend::Single(node) => node.release(keys, token).await,
        }
    }

    /// Changes the lease if `token` owns the lock; its new time left, or
    /// `None` when `token` did not own it.
    pub(crate) async fn extend(
        &self,
        keys: &Keys,
        token: &str,
        by: Duration,
        how: Extend,
    ) -> Result<Option<Duration>, LockError> {
        match self {
            Backend::Single(node) => node.extend(keys, token, by, how).await,
        }
    }

    /// Renews a batch of leases (see [`scripts::RENEW`]); per lease, its
    /// time left, or `None` when its token no longer owns the lock.
    pub(crate) async fn renew(
        &self,
        leases: &[Renewal<'_>],
    ) -> Result<Vec<Option<Duration>>, LockError> {
        match self {
            Backend::Single(node) => node.renew(leases).await,
        }
    }

    /// One PING round trip.
    pub(crate) async fn ping(&self) -> Result<(), LockError> {
        match self {
            Backend::Single(node) => node.ping().await,
        }
    }

    /// The server(s), for messages: never with credentials.
    pub(crate) fn server(&self) -> &str {
        match self {
            Backend::Single(node) => node.server(),
        }
    }
}

/// Milliseconds for Redis: at least 1 (PX 0 is an error), saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}
