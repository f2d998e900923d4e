//! Taking one lock on a Redlock: the acquisition loop ([`acquire`]) and how
//! it waits between attempts ([`Retry`], shared with the set's loop). It is
//! a retry loop because a Redlock cannot queue its waiters: each node would
//! hand the lock to a different waiter. A failed attempt gives back what it
//! took, and the next one tries again under a new owner token.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::fanout::Redlock;
use super::votes::{LateGrants, Votes, drift};
use crate::backend::shared::{Backoff, Grant, Owner, RETRY_MAX, next_check, random_fraction};
use crate::backend::wake::Waiter;
use crate::layout::Keys;
use crate::{LockError, io};

/// One acquisition of a lock on a Redlock.
pub(crate) struct LockRequest<'a> {
    /// The nodes, for give-backs that outlive the loop.
    pub(crate) redlock: &'a Arc<Redlock>,
    /// The lock's name, for errors.
    pub(crate) name: &'a str,
    /// The lock's keys.
    pub(crate) keys: &'a Keys,
    /// The owner token to take it with.
    pub(crate) token: String,
    /// The lease.
    pub(crate) expire: Duration,
    /// How long to wait while it is held.
    pub(crate) wait: Duration,
}

impl Redlock {
    /// Releases on the nodes in `which` (an acquisition that failed) and
    /// waits for their answers within the node timeout; the releases still
    /// on their way then finish in the background.
    pub(crate) async fn give_back(
        &self,
        keys: &Keys,
        token: &str,
        expire: Duration,
        which: &[usize],
    ) {
        let limit = self.timeout(expire);
        let (keys, token): (Arc<Keys>, Arc<str>) = (Arc::new(keys.clone()), Arc::from(token));
        let requests = self
            .start_uncut(which, limit, |node| {
                let (keys, token) = (keys.clone(), token.clone());
                async move {
                    node.release(
                        Owner {
                            keys: &keys,
                            token: &token,
                        },
                        0,
                        false,
                    )
                    .await
                }
            })
            .await;
        self.gather(requests, which, limit, |_, _| false).await;
    }

    /// Subscribes `token` to the release notices of every node that can be
    /// reached.
    pub(crate) async fn register(
        &self,
        channel: &str,
        token: &str,
        expire: Duration,
    ) -> Vec<Waiter> {
        let limit = self.timeout(expire);
        let waiters = join_all(self.nodes.iter().map(|node| async move {
            tokio::time::timeout(limit, node.wakeups().register(channel, token)).await
        }))
        .await;
        waiters.into_iter().filter_map(|w| w.ok()?.ok()).collect()
    }
}

/// When to try again after a split vote: a random pause of up to 2 ms,
/// doubling with each split in a row, at most 100 ms.
pub(crate) fn split_pause(splits: u32) -> Duration {
    let ceiling = Duration::from_millis(2u64 << splits.min(6)).min(Duration::from_millis(100));
    ceiling.mul_f64(random_fraction())
}

/// The moment a waiter of a Redlock may try again: a notice from any node.
pub(crate) async fn any_notice(waiters: &mut [Waiter]) {
    if waiters.is_empty() {
        return std::future::pending().await;
    }
    std::future::poll_fn(|cx| {
        for waiter in waiters.iter_mut() {
            if waiter.poll_wait(cx).is_ready() {
                return std::task::Poll::Ready(());
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// The acquisition loop of a Redlock.
///
/// Each attempt asks every node at once (see [`Redlock::attempt`]), under an
/// owner token of its own: a give-back of an earlier attempt that arrives
/// late can only free that attempt's acquisition. With a majority of voting
/// nodes, and time left on the lease after the drift allowance, the lock is
/// taken. Otherwise the nodes that granted it are released, and the loop
/// waits for the first of:
/// - a release notice from any node (waiters do not queue on a Redlock;
///   each subscribes to the lock's channel on every node it can reach);
/// - the end of the holder's lease, as the nodes reported it;
/// - after a split vote, a random pause that grows with each split in a
///   row, so that contenders stop taking a minority each;
/// - when fewer than a majority answered, a pause that grows with each
///   such attempt in a row (see [`Backoff`]): a short outage, a
///   restart, is ridden out within the acquire time;
/// - its acquire timeout: then one last attempt, whose failure is returned
///   ([`LockError::NoQuorum`] when too few nodes answered or voted,
///   [`LockError::Timeout`] when the lock was held).
///
/// A caller that asked for one attempt (`acquire_timeout` zero) gets
/// [`LockError::NoQuorum`] at once. Two nodes that turn out to be one server
/// fail the acquisition with [`LockError::InvalidInput`]. An attempt cut
/// short (this future dropped) gives back what it had taken, in the
/// background.
pub(crate) async fn acquire(
    nodes: &Redlock,
    lease: LockRequest<'_>,
    mut gone: io::CallerGone,
) -> Result<Grant, LockError> {
    let expire = lease.expire;
    let trusted = expire.saturating_sub(drift(expire));
    let mut token = lease.token;
    let mut retry = Retry::new(lease.wait, expire);
    loop {
        retry.drain();
        let sent = Instant::now();
        let left = retry.left(sent);
        let (votes, late) = nodes.attempt(lease.keys, &token, expire).await?;
        let taken: Vec<usize> = votes.granted.iter().map(|&(i, _)| i).collect();
        let mut give_back = GiveBackOnDrop {
            redlock: lease.redlock,
            keys: lease.keys,
            token: &token,
            expire,
            nodes: taken,
            late: Some(late),
        };
        if votes.voters >= nodes.quorum()
            && let Some(fence) = nodes.fence(lease.keys, &token, expire, &votes).await
            && sent.elapsed() < trusted
        {
            give_back.nodes.clear();
            // The nodes that grant it late hold it for this owner too, and
            // are released with it.
            if let Some(late) = give_back.late.take() {
                late.settle(fence);
            }
            drop(give_back);
            return Ok(Grant {
                fencing_token: fence,
                sent,
                handed: false,
                token,
            });
        }
        if let Some(late) = give_back.late.take() {
            let granted = late.granted().await;
            give_back.nodes.extend(granted);
        }
        let taken = std::mem::take(&mut give_back.nodes);
        drop(give_back);
        if !taken.is_empty() {
            nodes.give_back(lease.keys, &token, expire, &taken).await;
        }
        // The next attempt is another owner: whatever of this one is still
        // on its way can never be taken for it.
        token = crate::layout::new_token()?;
        retry
            .after(
                nodes,
                votes,
                lease.name,
                &[&lease.keys.channel],
                &token,
                left,
                &mut gone,
            )
            .await?;
    }
}

/// How an acquisition on a Redlock waits between its attempts (see
/// [`acquire`]). It is a retry loop because a Redlock cannot queue its
/// waiters (each node would hand the lock to a different one); its next
/// check is a queued waiter's ([`next_check`]), with the pauses of split
/// votes and outages on top.
pub(crate) struct Retry {
    wait: Duration,
    deadline: Instant,
    expire: Duration,
    /// Subscribed to the release notices of every node, after the first
    /// attempt that found the lock held.
    waiters: Option<Vec<Waiter>>,
    /// Split votes in a row.
    splits: u32,
    /// Attempts in a row that fewer than a majority answered.
    outage: Backoff,
}

impl Retry {
    /// For a caller who waits up to `wait` for a lease of `expire`.
    pub(crate) fn new(wait: Duration, expire: Duration) -> Retry {
        let now = Instant::now();
        Retry {
            wait,
            deadline: now
                .checked_add(wait)
                .unwrap_or(now + crate::layout::MAX_EXPIRE),
            expire,
            waiters: None,
            splits: 0,
            outage: Backoff::new(RETRY_MAX),
        }
    }

    /// Before an attempt: the notices heard so far are answered by it.
    pub(crate) fn drain(&mut self) {
        if let Some(list) = self.waiters.as_mut() {
            list.retain_mut(Waiter::drain);
        }
    }

    /// The time left to wait, at `now`.
    pub(crate) fn left(&self, now: Instant) -> Duration {
        self.deadline.saturating_duration_since(now)
    }

    /// After an attempt that failed with `votes` (its nodes given back),
    /// `left` before the deadline when it was sent: waits until the next
    /// attempt is worth making, or says why there is none. `channels` are
    /// the release channels of the names, `token` the next attempt's.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn after<F>(
        &mut self,
        nodes: &Redlock,
        votes: Votes<F>,
        name: &str,
        channels: &[&str],
        token: &str,
        left: Duration,
        gone: &mut io::CallerGone,
    ) -> Result<(), LockError> {
        let mut wake_at = self.deadline;
        if votes.answered < nodes.quorum() {
            // Certificates refused on too many nodes for a majority: waiting
            // cannot help.
            if left.is_zero() || nodes.nodes.len() - votes.refused < nodes.quorum() {
                return Err(nodes.unreachable(name, votes));
            }
            wake_at = wake_at.min(Instant::now() + self.outage.next());
            return tokio::select! {
                () = tokio::time::sleep_until(wake_at.into()) => Ok(()),
                () = gone.wait() => Err(LockError::Runtime {
                    reason: "the caller stopped waiting".into(),
                }),
            };
        }
        self.outage.reset();
        if left.is_zero() {
            if votes.granted.len() >= nodes.quorum() && votes.voters < nodes.quorum() {
                return Err(nodes.too_young(name, &votes));
            }
            return Err(LockError::Timeout {
                name: name.to_owned(),
                waited: self.wait,
            });
        }
        let Some(waiters) = self.waiters.as_mut() else {
            // Subscribed only now: the lock may have been freed before.
            let mut waiters = Vec::new();
            for channel in channels {
                waiters.extend(nodes.register(channel, token, self.expire).await);
            }
            self.waiters = Some(waiters);
            return Ok(());
        };
        // As for a waiter queued in Redis: when the holder's lease ends, and
        // soon when no node could subscribe it.
        let now = Instant::now();
        wake_at = next_check(now, wake_at, votes.held_for, waiters.is_empty());
        if votes.granted.is_empty() {
            self.splits = 0;
        } else {
            self.splits += 1;
            wake_at = wake_at.min(now + split_pause(self.splits));
        }
        tokio::select! {
            () = any_notice(waiters) => Ok(()),
            () = tokio::time::sleep_until(wake_at.into()) => Ok(()),
            () = gone.wait() => Err(LockError::Runtime {
                reason: "the caller stopped waiting".into(),
            }),
        }
    }
}

/// Nodes of a Redlock that granted an attempt still in progress: dropped
/// with nodes listed or answers to come (the caller stopped waiting), it
/// releases them in the background, with those of the late answers that
/// grant it.
struct GiveBackOnDrop<'a> {
    redlock: &'a Arc<Redlock>,
    keys: &'a Keys,
    token: &'a str,
    expire: Duration,
    nodes: Vec<usize>,
    late: Option<LateGrants>,
}

impl Drop for GiveBackOnDrop<'_> {
    fn drop(&mut self) {
        let late = self.late.take().filter(|late| !late.is_empty());
        if self.nodes.is_empty() && late.is_none() {
            return;
        }
        let (redlock, keys, token) = (
            self.redlock.clone(),
            self.keys.clone(),
            self.token.to_owned(),
        );
        let (expire, mut nodes) = (self.expire, std::mem::take(&mut self.nodes));
        let giving = io::spawn(async move {
            if let Some(late) = late {
                nodes.extend(late.granted().await);
            }
            if !nodes.is_empty() {
                redlock.give_back(&keys, &token, expire, &nodes).await;
            }
        });
        if let Err(e) = giving {
            tracing::debug!(target: "lockattr", error = %e, "cannot give back a partial Redlock acquisition; its leases free it");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_pauses_grow_and_stay_bounded() {
        for splits in 1..20 {
            let pause = split_pause(splits);
            assert!(
                pause <= Duration::from_millis(2 << splits.min(6)).min(Duration::from_millis(100))
            );
        }
    }
}
