//! [`Backend`]: one way of reaching Redis, and what the guard, the
//! watchdog and operator calls ask of it whatever the deployment.

use std::time::Duration;

use super::cluster::ClusterNodes;
use super::redlock::{self, Redlock};
use super::shared::{Extend, Owner, Released, Renewal, Renewed, Replicas, Successor};
use super::single::SingleNode;
use crate::LockError;
use crate::layout::Keys;

/// One way of reaching Redis.
#[derive(Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "one per Locker, inside its Arc: the size costs nothing"
)]
pub(crate) enum Backend {
    /// A single Redis server.
    Single(SingleNode),
    /// Independent masters, locked by majority.
    Redlock(std::sync::Arc<Redlock>),
    /// A Redis Cluster.
    Cluster(ClusterNodes),
}

impl Backend {
    /// How much of a lease is not trusted, for clocks that run at slightly
    /// different rates: none on one server, whose clock alone times it.
    pub(crate) fn drift(&self, expire: Duration) -> Duration {
        match self {
            Backend::Redlock(_) => redlock::drift(expire),
            Backend::Single(_) | Backend::Cluster(_) => Duration::ZERO,
        }
    }

    /// Deletes the lock if `token` (granted `fencing_token`; 0 for a
    /// waiter leaving the queue) owns it, handing it to the oldest waiter;
    /// [`Released::NotOwned`] when it did not own it (then `token` leaves
    /// the queue). On a Redlock: done when a majority still held it.
    ///
    /// On one server or a Cluster, `successor` (a waiter of this process;
    /// see [`Successor`]) takes the lock at once when nobody is queued, or
    /// is queued last; also the notice of the hand-over, when the lock was
    /// handed to a waiter: `<token>:<fencing token>:<lease ms>`. A Redlock
    /// has no queue: it hands nothing to anyone.
    pub(crate) async fn release_to(
        &self,
        owner: Owner<'_>,
        fencing_token: u64,
        (name, expire): (&str, Duration),
        successor: Option<&Successor<'_>>,
    ) -> Result<(Released, Option<String>), LockError> {
        match self {
            Backend::Single(node) => {
                node.release_to(owner, fencing_token, false, successor)
                    .await
            }
            Backend::Cluster(nodes) => {
                let (owned, notice) = nodes.release_to(owner, fencing_token, successor).await?;
                let released = if owned {
                    Released::Done
                } else {
                    Released::NotOwned
                };
                Ok((released, notice))
            }
            Backend::Redlock(nodes) => Ok((
                nodes.release(owner, fencing_token, (name, expire)).await?,
                None,
            )),
        }
    }

    /// Releases every name of a set held under `token` (`members`: each
    /// name's keys and the fencing token it was granted), in one call per
    /// server or Cluster slot; per name, as [`release_to`](Self::release_to)
    /// answers. `names` names the set in an error.
    pub(crate) async fn release_set(
        &self,
        token: &str,
        members: &[(&Keys, u64)],
        (names, expire): (&str, Duration),
    ) -> Result<Vec<Released>, LockError> {
        match self {
            Backend::Single(node) => node.release_set(token, members, false).await,
            Backend::Redlock(nodes) => nodes.release_set(token, members, (names, expire)).await,
            Backend::Cluster(nodes) => Ok(nodes
                .release_set(token, members)
                .await?
                .into_iter()
                .map(|owned| {
                    if owned {
                        Released::Done
                    } else {
                        Released::NotOwned
                    }
                })
                .collect()),
        }
    }

    /// Changes the lease if `owner` owns the lock; its new time left, or
    /// `None` when it did not own it. [`LockError::InvalidInput`] (and
    /// no change) when the lease would have more than `max_lease` left.
    pub(crate) async fn extend(
        &self,
        owner: Owner<'_>,
        change: (Duration, Extend),
        (name, expire, max_lease): (&str, Duration, Duration),
    ) -> Result<Option<Duration>, LockError> {
        match self {
            Backend::Single(node) => node.extend(owner, change, max_lease).await,
            Backend::Redlock(nodes) => nodes.extend(owner, change, (name, expire)).await,
            Backend::Cluster(nodes) => nodes.extend(owner, change, max_lease).await,
        }
    }

    /// Renews a batch of leases (see [`RENEW`](super::scripts::RENEW)); per lease, what
    /// the renewal found. An error when the whole batch failed.
    ///
    /// When grants wait for replicas, a renewal vouches for no more than
    /// the lease it asked for: a lease the master has longer (an extension
    /// its replicas never acknowledged, asked on another connection) does
    /// not count.
    pub(crate) async fn renew(&self, leases: &[Renewal<'_>]) -> Result<Vec<Renewed>, LockError> {
        let mut found = match self {
            Backend::Single(node) => node.renew(leases).await.map(renewed)?,
            Backend::Redlock(nodes) => nodes.renew(leases).await.map(renewed)?,
            Backend::Cluster(nodes) => nodes.renew(leases).await?,
        };
        if self.replicas().wanted() {
            for (found, lease) in found.iter_mut().zip(leases) {
                if let (Renewed::Left(left), Some(asked)) = (found, lease.lease) {
                    *left = (*left).min(asked);
                }
            }
        }
        Ok(found)
    }

    /// How many replicas must hold a grant (none on a Redlock).
    pub(crate) fn replicas(&self) -> Replicas {
        match self {
            Backend::Single(node) => node.replicas(),
            Backend::Cluster(nodes) => nodes.replicas(),
            Backend::Redlock(_) => Replicas::default(),
        }
    }

    /// One PING round trip (to every node at once, for a Redlock).
    pub(crate) async fn ping(&self) -> Result<(), LockError> {
        match self {
            Backend::Single(node) => node.ping().await,
            Backend::Redlock(nodes) => nodes.ping().await,
            Backend::Cluster(nodes) => nodes.ping().await,
        }
    }

    /// The server(s), for messages: never with credentials.
    pub(crate) fn server(&self) -> &str {
        match self {
            Backend::Single(node) => node.server(),
            Backend::Redlock(nodes) => nodes.server(),
            Backend::Cluster(nodes) => nodes.server(),
        }
    }
}

/// Each lease's time left, or `None` when not owned, as renewal outcomes.
fn renewed(left: Vec<Option<Duration>>) -> Vec<Renewed> {
    left.into_iter()
        .map(|left| left.map_or(Renewed::NotOwned, Renewed::Left))
        .collect()
}
