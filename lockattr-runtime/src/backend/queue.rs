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
//!
//! # Outages
//!
//! Within its acquire time a waiter rides out a Redis restart, a dropped
//! connection or a server that answers too late: it tries again after a
//! pause that starts at a few milliseconds and doubles up to
//! [`RETRY_MAX`] (jittered, so that the waiters of many processes do not
//! come back in step), until its deadline; at the deadline it returns the
//! last connection error. A caller with an acquire time of zero asked for
//! one attempt and gets the error at once.
//!
//! An attempt whose answer was lost may still have run (queued the token,
//! or taken the lock). So the next attempt uses a new owner token, and the
//! old one is given back first (its release frees whatever it got or leaves
//! the queue): a give-back that arrives late can only ever touch the old
//! token's lock, never the new attempt's. Tokens still owed a give-back
//! when the loop ends are given back in the background, retried while the
//! lease they might hold could still run.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    Attempt, Backoff, ClusterNodes, FALLBACK_PAUSE, Grant, LockRequest, RETRY_MAX, SingleNode,
    Wake, Wakeups, soon_after,
};
use crate::inner::Inner;
use crate::key::Keys;
use crate::{LockError, io};

/// How often a waiter asks Redis whatever it hears: a hand-over whose
/// message never arrived is noticed this long after it at most.
pub(crate) const RECHECK: Duration = Duration::from_secs(1);

/// The longest pause between tries of a give-back in the background.
const GIVE_BACK_RETRY_MAX: Duration = Duration::from_secs(1);

/// How long a give-back in the background is tried at most (and never
/// longer than the lease it would free).
const GIVE_BACK_FOR: Duration = Duration::from_secs(60);

/// After Redis refused SUBSCRIBE, how long a waiter checks the lock every
/// [`FALLBACK_PAUSE`] before it tries to subscribe again.
pub(crate) const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(1);

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
    async fn give_back(self, keys: &Keys, token: &str) -> Result<(), LockError> {
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
///
/// Connection errors are retried until the deadline with a new token each
/// time (see the module docs).
pub(crate) async fn acquire(
    backend: Queued<'_>,
    lease: LockRequest<'_>,
    mut gone: io::CallerGone,
) -> Result<Grant, LockError> {
    let LockRequest {
        locker,
        name,
        keys,
        mut token,
        expire,
        wait,
    } = lease;
    let now = Instant::now();
    let deadline = now
        .checked_add(wait)
        .unwrap_or(now + crate::locker::MAX_EXPIRE);
    let wakeups = backend.wakeups();
    // Uncontended: no pub/sub work at all, unless the channel is already
    // subscribed (a lock in demand), in which case waiting starts warm.
    let mut waiter = wakeups.register_if_subscribed(&keys.channel, &token);
    let mut owed = Owed {
        locker,
        keys,
        expire,
        stale: Vec::new(),
        queued: None,
    };
    let mut retry = Backoff::new(RETRY_MAX);
    // Redis refused SUBSCRIBE: check the lock often until this moment.
    let mut polling_until: Option<Instant> = None;
    loop {
        // Attempts whose answer was lost come first: their tokens are given
        // back before a new token tries.
        if let Err(e) = owed.settle(backend).await {
            retry.pause(e, deadline, &mut gone).await?;
            continue;
        }
        let sent = Instant::now();
        let left = deadline.saturating_duration_since(sent);
        let queued = owed.queued.as_deref() == Some(token.as_str());
        let attempt = backend
            .try_acquire(keys, &token, expire, left, queued)
            .await;
        let expires_in = match attempt {
            Ok(Attempt::Acquired { fencing_token }) => {
                owed.queued = None;
                return Ok(Grant {
                    fencing_token,
                    sent,
                    handed: false,
                    token,
                });
            }
            Ok(Attempt::Held { expires_in }) => expires_in,
            Err(e) if retryable(&e) => {
                // The request may have run: `token` may be queued or even
                // hold the lock. It is given back, and the next attempt
                // uses a new token, so that a late give-back can never
                // free the lock of a later attempt.
                // (Queued by an earlier attempt, it is owed in any case.)
                if owed.queued.take().is_some() || may_have_run(&e) {
                    owed.stale.push(token);
                }
                token = crate::locker::new_token()?;
                waiter = None;
                retry.pause(e, deadline, &mut gone).await?;
                continue;
            }
            Err(e) => {
                // `owed` gives the token back, if this request was queued.
                return Err(e);
            }
        };
        retry.reset();
        if left.is_zero() {
            // That attempt left the queue.
            owed.queued = None;
            return Err(LockError::Timeout {
                name: name.to_owned(),
                waited: wait,
            });
        }
        owed.queued = Some(token.clone());
        let now = Instant::now();
        if polling_until.is_some_and(|until| now >= until) {
            polling_until = None;
        }
        if waiter.is_none() && polling_until.is_none() {
            // Subscribes in the background; `Wake::Subscribed` says when
            // no notice can be missed any more.
            waiter = Some(wakeups.watch(&keys.channel, &token));
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
                        owed.queued = None;
                        return Ok(Grant { fencing_token, sent, handed: true, token });
                    }
                    // From now on no notice is missed; one may have come
                    // before: ask again.
                    Wake::Subscribed => break,
                    // A release left the lock free and this waiter is the
                    // oldest: take it, unless a newcomer was quicker.
                    Wake::TryNow => break,
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
                () = gone.wait() => return Err(stopped_waiting()),
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

impl Backoff {
    /// After `error`: sleeps the next pause, cut at `deadline`; `error`
    /// itself once the deadline has passed (or the caller is gone).
    pub(crate) async fn pause(
        &mut self,
        error: LockError,
        deadline: Instant,
        gone: &mut io::CallerGone,
    ) -> Result<(), LockError> {
        let now = Instant::now();
        if now >= deadline {
            return Err(error);
        }
        tracing::debug!(target: "lockattr", error = %error, "a waiter cannot reach Redis; trying again");
        let until = deadline.min(now + self.next());
        tokio::select! {
            () = tokio::time::sleep_until(until.into()) => Ok(()),
            () = gone.wait() => Err(stopped_waiting()),
        }
    }
}

/// The tokens of one acquisition that must be given back: dropped with any
/// left, it gives them back in the background (a cancelled waiter leaves
/// the queue, passing the lock on if it was just handed it).
struct Owed<'a> {
    locker: &'a Arc<Inner>,
    keys: &'a Keys,
    expire: Duration,
    /// Tokens of attempts whose answer was lost.
    stale: Vec<String>,
    /// The token queued by the last attempt.
    queued: Option<String>,
}

impl Owed<'_> {
    /// Gives back the stale tokens, oldest last; the error of the first
    /// that could not be given back for lack of Redis (it stays owed).
    async fn settle(&mut self, backend: Queued<'_>) -> Result<(), LockError> {
        while let Some(token) = self.stale.last() {
            match backend.give_back(self.keys, token).await {
                Ok(()) => {}
                Err(e) if retryable(&e) => return Err(e),
                // Nothing to gain from trying again: the lease frees it.
                Err(e) => {
                    tracing::debug!(target: "lockattr", error = %e, "cannot give back an abandoned attempt")
                }
            }
            self.stale.pop();
        }
        Ok(())
    }
}

impl Drop for Owed<'_> {
    fn drop(&mut self) {
        let mut tokens = std::mem::take(&mut self.stale);
        tokens.extend(self.queued.take());
        if tokens.is_empty() {
            return;
        }
        let (locker, keys, expire) = (self.locker.clone(), self.keys.clone(), self.expire);
        let until = Instant::now() + expire.min(GIVE_BACK_FOR);
        let giving = io::spawn(async move {
            let mut retry = Backoff::new(GIVE_BACK_RETRY_MAX);
            for token in tokens {
                loop {
                    match locker.backend.release(&keys, (&token, 0), "", expire).await {
                        Ok(_) => break,
                        Err(e) if retryable(&e) && Instant::now() < until => {
                            tokio::time::sleep(retry.next()).await;
                        }
                        Err(e) => {
                            tracing::debug!(target: "lockattr", error = %e, "cannot give back a lock's queue entry; it expires with its lease or wait");
                            break;
                        }
                    }
                }
            }
        });
        if let Err(e) = giving {
            tracing::debug!(target: "lockattr", error = %e, "cannot leave a lock's queue; the entry expires with the wait");
        }
    }
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
