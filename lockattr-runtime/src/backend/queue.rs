//! The acquisition loop of the deployments whose locks queue their waiters
//! in Redis: one server, and one master per lock on a Redis Cluster.
//!
//! # Waiting
//!
//! A request that finds the lock held queues its owner token in Redis (in
//! the same script call) and sleeps until a release hands it the lock and
//! says so on the lock's channel (see [`crate::backend::Wakeups`]). The
//! message is the fast path, not the only one: the waiter also asks Redis
//! once a second ([`RECHECK`]), when the holder's lease would end, and at
//! its deadline. A waiter that was handed the lock finds its own token on
//! it, which the acquire script counts as taken, so a hand-over whose
//! message was lost (a subscriber link that silently stopped passing
//! traffic) is noticed within about a second. That check is one short
//! script call per waiter per second, and only while waiting.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    Attempt, ClusterNodes, FALLBACK_PAUSE, Grant, LockRequest, SingleNode, Wake, Wakeups,
    soon_after,
};
use crate::inner::Inner;
use crate::key::Keys;
use crate::{LockError, io};

/// How often a waiter asks Redis whatever it hears: a hand-over whose
/// message never arrived is noticed this long after it at most.
pub(crate) const RECHECK: Duration = Duration::from_secs(1);

/// After Redis refused SUBSCRIBE, how long a waiter checks the lock every
/// [`FALLBACK_PAUSE`] before it tries to subscribe again.
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(1);

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
/// - the channel is subscribed (the first time it waits, or after the
///   subscriber connection was replaced): one more attempt, since a
///   release may have come before;
/// - [`RECHECK`] has passed since the last attempt, in case a message was
///   lost;
/// - the holder's lease would end (a crashed holder's lock is taken a
///   millisecond after it expires);
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
    // Redis refused SUBSCRIBE: check the lock often until this moment.
    let mut polling_until: Option<Instant> = None;
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
        let now = Instant::now();
        if polling_until.is_some_and(|until| now >= until) {
            polling_until = None;
        }
        if waiter.is_none() && polling_until.is_none() {
            // Subscribes in the background; `Wake::Subscribed` says when
            // no notice can be missed any more.
            waiter = Some(wakeups.watch(&lease.keys.channel, &lease.token));
        }
        // When to ask Redis again: at the deadline, when the holder's lease
        // ends, within a second in any case, and often while no release
        // notice can reach us.
        let recheck = deadline.min(now + RECHECK);
        let mut wake_at = next_check(recheck, expires_in, polling_until.is_some());
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
                    // From now on no notice is missed; one may have come
                    // before: ask again.
                    Wake::Subscribed => break,
                    Wake::Recheck => {
                        waiter = None;
                        break;
                    }
                    Wake::Refused => {
                        waiter = None;
                        polling_until = Some(Instant::now() + RESUBSCRIBE_AFTER);
                        wake_at = wake_at.min(soon_after(FALLBACK_PAUSE));
                    }
                    // Another waiter got the lock: a crash of that holder is
                    // what to watch for now.
                    Wake::Rearm { lease } => {
                        wake_at = next_check(recheck, Some(lease), polling_until.is_some());
                    }
                },
                () = tokio::time::sleep_until(wake_at.into()) => break,
                () = gone.wait() => return Err(LockError::Runtime {
                    reason: "the caller stopped waiting".into(),
                }),
            }
        }
    }
}

/// When a waiter asks Redis again: at `recheck` (its deadline or a second
/// from now), when a lease of `lease` ends, and soon when `polling`.
fn next_check(recheck: Instant, lease: Option<Duration>, polling: bool) -> Instant {
    let mut at = recheck;
    if let Some(lease) = lease {
        at = at.min(soon_after(lease));
    }
    if polling {
        at = at.min(soon_after(FALLBACK_PAUSE));
    }
    at
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
            let _ = locker.backend.release(&keys, &token, "", expire).await;
        });
        if let Err(e) = leaving {
            tracing::debug!(error = %e, "cannot leave a lock's queue; the entry expires with the wait");
        }
    }
}
