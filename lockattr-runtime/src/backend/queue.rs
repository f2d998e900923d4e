//! The acquisition loop of the deployments whose locks queue their waiters
//! in Redis: one server, and one master per lock on a Redis Cluster.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    Attempt, ClusterNodes, FALLBACK_PAUSE, Grant, LockRequest, SingleNode, Wake, Wakeups,
    soon_after,
};
use crate::inner::Inner;
use crate::key::Keys;
use crate::{LockError, io};

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
    /// Tries once to take the lock for `token`. When the lock is held and
    /// `wait` is not zero, queues `token` for `wait` (see
    /// [`super::scripts::ACQUIRE`]); a zero `wait` leaves the queue.
    pub(crate) async fn try_acquire(
        self,
        keys: &Keys,
        token: &str,
        expire: Duration,
        wait: Duration,
    ) -> Result<Attempt, LockError> {
        match self {
            Queued::Single(node) => node.try_acquire(keys, token, expire, wait).await,
            Queued::Cluster(nodes) => nodes.try_acquire(keys, token, expire, wait).await,
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

/// The acquisition loop of one server or a cluster: on the caller's
/// runtime, or on the I/O thread.
///
/// Each attempt is one script call. When the lock is held, the attempt also
/// queues this request in Redis, and the loop sleeps until the first of:
/// - a release hands it the lock (a message on the lock's channel: see
///   [`crate::backend::Wakeups`]); it returns at once, already the owner;
/// - the holder's lease would end (a crashed holder's lock is taken a
///   millisecond after it expires, and a lost message costs at most that);
/// - its acquire timeout ends: then one last attempt, which also leaves the
///   queue, so the wait ends within a round trip of the timeout;
/// - the caller is gone (this future dropped, or `gone` on the I/O thread):
///   it leaves the queue, passing the lock on if it was just handed it. An
///   attempt whose answer will not be read is given back on its own
///   connection (see `SingleNode::try_acquire`).
pub(crate) async fn acquire(
    backend: Queued<'_>,
    lease: LockRequest<'_>,
    mut gone: io::CallerGone,
) -> Result<Grant, LockError> {
    let wait = lease.wait;
    let now = Instant::now();
    let deadline = now
        .checked_add(wait)
        .unwrap_or(now + crate::locker::MAX_EXPIRE);
    let wakeups = backend.wakeups();
    // Uncontended: no pub/sub work at all, unless the channel is already
    // subscribed (a lock in demand), in which case waiting starts warm.
    let mut waiter = wakeups.register_if_subscribed(&lease.keys.channel, &lease.token);
    let mut queued = LeaveOnDrop(None);
    loop {
        let sent = Instant::now();
        let left = deadline.saturating_duration_since(sent);
        let attempt = backend
            .try_acquire(lease.keys, &lease.token, lease.expire, left)
            .await;
        let expires_in = match attempt {
            Ok(Attempt::Acquired { fencing_token }) => {
                queued.0 = None;
                return Ok(Grant {
                    fencing_token,
                    sent,
                    handed: false,
                    token: lease.token,
                });
            }
            Ok(Attempt::Held { expires_in }) => expires_in,
            // `queued` leaves the queue, if this request was in it.
            Err(e) => return Err(e),
        };
        if left.is_zero() {
            // That attempt left the queue.
            queued.0 = None;
            return Err(LockError::Timeout {
                name: lease.name.to_owned(),
                waited: wait,
            });
        }
        if queued.0.is_none() {
            queued.0 = Some((
                lease.locker.clone(),
                lease.keys.clone(),
                lease.token.clone(),
                lease.expire,
            ));
        }
        if waiter.is_none() {
            match wakeups.register(&lease.keys.channel, &lease.token).await {
                Ok(registered) => {
                    // Subscribed only now: the lock may have been handed to
                    // us before. Ask again; from here on, no message is missed.
                    waiter = Some(registered);
                    continue;
                }
                Err(e) => tracing::debug!(
                    lock = %lease.name,
                    error = %e,
                    "cannot subscribe to release notices; checking the lock every {FALLBACK_PAUSE:?}"
                ),
            }
        }
        // When to ask Redis again: at the deadline, when the holder's lease
        // ends, or soon if no release notice can reach us.
        let mut wake_at = deadline;
        if let Some(left) = expires_in {
            wake_at = wake_at.min(soon_after(left));
        }
        if waiter.is_none() {
            wake_at = wake_at.min(soon_after(FALLBACK_PAUSE));
        }
        loop {
            let woken = async {
                match waiter.as_mut() {
                    Some(waiter) => waiter.wait().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                wake = woken => match wake {
                    // The release that handed it over ran after `sent`: the
                    // attempt just sent found the lock held.
                    Wake::Handed { fencing_token } => {
                        queued.0 = None;
                        return Ok(Grant { fencing_token, sent, handed: true, token: lease.token });
                    }
                    Wake::Recheck => {
                        waiter = None;
                        break;
                    }
                    // Another waiter got the lock: a crash of that holder is
                    // what to watch for now.
                    Wake::Rearm { lease } => wake_at = deadline.min(soon_after(lease)),
                },
                () = tokio::time::sleep_until(wake_at.into()) => break,
                () = gone.wait() => return Err(LockError::Runtime {
                    reason: "the caller stopped waiting".into(),
                }),
            }
        }
    }
}

/// A queued request: dropped while set, it takes the request out of the
/// lock's queue in the background; if a release had just handed it the
/// lock, the lock goes on to the next waiter (or is freed).
struct LeaveOnDrop(Option<(Arc<Inner>, Keys, String, Duration)>);

impl Drop for LeaveOnDrop {
    fn drop(&mut self) {
        let Some((locker, keys, token, expire)) = self.0.take() else {
            return;
        };
        let leaving = io::spawn(async move {
            let _ = locker.backend.release(&keys, (&token, 0), "", expire).await;
        });
        if let Err(e) = leaving {
            tracing::debug!(error = %e, "cannot leave a lock's queue; the entry expires with the wait");
        }
    }
}
