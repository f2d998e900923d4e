//! The deployments whose locks queue their waiters in Redis (one server,
//! and one master per lock on a Redis Cluster), and what every waiting loop
//! needs to know of their errors. The loop itself is `crate::wait`.

use std::time::Duration;

use super::cluster::ClusterNodes;
use super::deployment::Backend;
use super::shared::Attempt;
use super::single::SingleNode;
use super::wake::Wakeups;
use crate::LockError;
use crate::layout::Keys;

pub(crate) use super::shared::RECHECK;

/// A deployment whose locks queue their waiters (one server, or one master
/// per lock on a cluster).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Queued<'a> {
    /// One server.
    Single(&'a SingleNode),
    /// A cluster.
    Cluster(&'a ClusterNodes),
}

impl<'a> Queued<'a> {
    /// The deployment of `backend`, unless it is a Redlock.
    pub(crate) fn of(backend: &'a Backend) -> Option<Queued<'a>> {
        match backend {
            Backend::Single(node) => Some(Queued::Single(node)),
            Backend::Cluster(nodes) => Some(Queued::Cluster(nodes)),
            Backend::Redlock(_) => None,
        }
    }

    /// Tries once to take the lock for `token`. When the lock is held and
    /// `wait` is not zero, queues `token` for `wait` (see
    /// [`super::scripts::ACQUIRE`]); a zero `wait` leaves the queue.
    /// `queued`: an earlier attempt may have queued `token`.
    pub(crate) async fn try_acquire(
        self,
        keys: &Keys,
        token: &str,
        expire: Duration,
        wait: Duration,
        queued: bool,
    ) -> Result<Attempt, LockError> {
        match self {
            Queued::Single(node) => node.try_acquire(keys, token, expire, wait, queued).await,
            Queued::Cluster(nodes) => nodes.try_acquire(keys, token, expire, wait, queued).await,
        }
    }

    /// Gives back whatever `token` holds: releases the lock if it owns it
    /// (handing it to the next waiter), or takes it out of the queue.
    pub(crate) async fn give_back(self, keys: &Keys, token: &str) -> Result<(), LockError> {
        match self {
            Queued::Single(node) => node.release(keys, token, 0, false).await.map(drop),
            Queued::Cluster(nodes) => nodes.release(keys, token, 0).await.map(drop),
        }
    }

    /// Where waiters hear that a release handed them the lock.
    pub(crate) fn wakeups(self) -> &'a Wakeups {
        match self {
            Queued::Single(node) => node.wakeups(),
            Queued::Cluster(nodes) => nodes.wakeups(),
        }
    }
}

pub(crate) fn stopped_waiting() -> LockError {
    LockError::Runtime {
        reason: "the caller stopped waiting".into(),
    }
}

/// Errors worth trying again while the acquire time lasts: Redis could not
/// be reached or did not answer in time, or said it cannot serve the
/// request yet (loading its data, a cluster reconfiguring).
pub(crate) fn retryable(e: &LockError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    match e {
        LockError::Connection { .. } => !e.is_tls_refusal(),
        LockError::Redis { source, .. } => {
            source.downcast_ref::<redis::RedisError>().is_some_and(|e| {
                matches!(
                    e.kind(),
                    ErrorKind::Server(
                        ServerErrorKind::BusyLoading
                            | ServerErrorKind::TryAgain
                            | ServerErrorKind::ClusterDown
                            | ServerErrorKind::MasterDown
                    ) | ErrorKind::ClusterConnectionNotFound
                )
            })
        }
        _ => false,
    }
}

/// False only when the error shows the request never left (the connection
/// was refused); otherwise it may have run and must be given back.
pub(crate) fn may_have_run(e: &LockError) -> bool {
    let LockError::Connection { source, .. } = e else {
        return true;
    };
    !source
        .downcast_ref::<redis::RedisError>()
        .is_some_and(redis::RedisError::is_connection_refusal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_retried() {
        let refused =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let refused = LockError::from_redis("x", refused);
        assert!(retryable(&refused));
        assert!(!may_have_run(&refused));
        let reset = LockError::from_redis(
            "x",
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        );
        assert!(retryable(&reset) && may_have_run(&reset));
        assert!(!retryable(&LockError::NotConfigured));
        assert!(!retryable(&LockError::Timeout {
            name: "x".into(),
            waited: Duration::ZERO
        }));
    }
}
