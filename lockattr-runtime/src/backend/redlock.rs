//! Redlock: one lock on several independent Redis masters, held while a
//! majority of them hold it.
//!
//! # What differs from the published algorithm, and why
//!
//! - **Concurrent fan-out.** Every request goes to all nodes at once, so an
//!   acquisition costs about one round trip, not one per node. Each node's
//!   answer is awaited for at most the node timeout: a frozen node delays
//!   an operation by that much, never by the acquire time.
//! - **Validity** is counted from when the request was sent: `expire`, less
//!   the clock drift allowance ([`drift`]), from the send time.
//!   Time spent waiting for slow nodes comes off it.
//! - **Restarted nodes do not vote at once** (unless turned off): a node
//!   that has been up for less than a lock's `expire` does not count toward
//!   that lock's majority. A node restarted without persistence has
//!   forgotten its locks, and could otherwise give a second owner the
//!   majority while the first still holds a lease. This is the "delayed
//!   restart" of the Redlock description, enforced by the clients instead
//!   of by the operators. The uptime comes from INFO on every new
//!   connection, and a restart breaks the connections, so it is seen.
//! - **Fencing tokens** come from the nodes' fence counters: the largest of
//!   the counters of the nodes that granted the lock. When they differ, that
//!   value is written back to those nodes (if the lock is still theirs)
//!   before the guard is returned, and the acquisition succeeds only if a
//!   majority took it. The next owner's majority shares a node with that
//!   majority, whose counter it increments past the token. When the nodes
//!   already agree (every acquisition that reached every node keeps them
//!   equal), there is no extra round trip.
//! - **Waiting** is not queued: each node would hand the lock to a different
//!   waiter. A release publishes a notice on every node; waiters subscribed
//!   on each node try again when the first notice arrives. After a split
//!   vote (some nodes granted, too few), the losers give their nodes back
//!   and try again after a random pause that grows with each split.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::wake::Waiter;
use super::{
    Attempt, Backend, Extend, FALLBACK_PAUSE, Grant, LockRequest, Released, Renewal, SingleNode,
    Timeouts, soon_after,
};
use crate::inner::Inner;
use crate::key::Keys;
use crate::{LockError, io};

/// The shortest default node timeout.
const MIN_NODE_TIMEOUT: Duration = Duration::from_millis(10);

/// Several independent Redis masters.
#[derive(Debug)]
pub(crate) struct Redlock {
    nodes: Vec<SingleNode>,
    /// A majority: `nodes / 2 + 1`.
    quorum: usize,
    /// How long each node may take to answer; `None`: from the lease.
    node_timeout: Option<Duration>,
    /// The response timeout: the longest default node timeout.
    response: Duration,
    /// Nodes up for less than a lock's lease do not vote for it.
    delay_restarted: bool,
    /// The longest lease of any lock on these nodes.
    #[allow(dead_code)] // the restarted-node delay is to use it
    max_lease: Duration,
    server: String,
}

/// What the nodes said to one acquisition attempt.
#[derive(Debug, Default)]
pub(crate) struct Votes {
    /// The nodes that granted the lock (voting or not), with their fencing
    /// counters.
    pub(crate) granted: Vec<(usize, u64)>,
    /// How many of them vote: up for at least the lease.
    pub(crate) voters: usize,
    /// Nodes that answered at all.
    pub(crate) answered: usize,
    /// The shortest lease left of another owner, among the nodes that said so.
    pub(crate) held_for: Option<Duration>,
    /// The first failure, for messages.
    pub(crate) first_error: Option<LockError>,
}

/// The clock drift allowance of a lease: 1% of it plus 2 ms. A lease is
/// trusted for `expire - drift` from when its request was sent, on every
/// node's clock.
pub(crate) fn drift(expire: Duration) -> Duration {
    expire / 100 + Duration::from_millis(2)
}

impl Redlock {
    /// Parses the URLs; does not connect.
    pub(crate) fn new(
        urls: &[String],
        timeouts: Timeouts,
        node_timeout: Option<Duration>,
        delay_restarted: bool,
        max_lease: Duration,
    ) -> Result<Redlock, LockError> {
        if urls.len() < 3 || urls.len().is_multiple_of(2) {
            let hint = if urls.len() == 1 {
                "use `Locker::new(url)` for a single server"
            } else {
                "a majority of an even number tolerates no more failed nodes than the odd \
                 number below it: use 3, 5 or 7 independent masters"
            };
            return Err(LockError::invalid(
                "Redlock nodes",
                format!("{} URLs given; {hint}", urls.len()),
            ));
        }
        let nodes = urls
            .iter()
            .map(|url| SingleNode::new(url, timeouts).map(SingleNode::track_restarts))
            .collect::<Result<Vec<_>, _>>()?;
        let mut servers: Vec<&str> = nodes.iter().map(SingleNode::server).collect();
        servers.sort_unstable();
        if servers.windows(2).any(|pair| pair[0] == pair[1]) {
            return Err(LockError::invalid(
                "Redlock nodes",
                "the same server is given twice; each node must be an independent master",
            ));
        }
        let server = format!("redlock[{}]", servers.join(","));
        Ok(Redlock {
            quorum: nodes.len() / 2 + 1,
            nodes,
            node_timeout,
            response: timeouts.response,
            delay_restarted,
            max_lease,
            server,
        })
    }

    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    pub(crate) fn quorum(&self) -> usize {
        self.quorum
    }

    /// How long each node may take for a lock with this lease: the setting,
    /// or a hundredth of the lease, at least 10 ms and at most the response
    /// timeout.
    fn timeout(&self, expire: Duration) -> Duration {
        self.node_timeout
            .unwrap_or_else(|| (expire / 100).max(MIN_NODE_TIMEOUT).min(self.response))
    }

    /// Runs `op` on the nodes in `which` at once, each for at most `limit`.
    async fn each<'a, T, F>(
        &'a self,
        which: impl Iterator<Item = usize>,
        limit: Duration,
        op: impl Fn(&'a SingleNode) -> F,
    ) -> Vec<(usize, Result<T, LockError>)>
    where
        F: Future<Output = Result<T, LockError>>,
    {
        join_all(which.map(|i| {
            let node = &self.nodes[i];
            let op = op(node);
            async move {
                let result = match tokio::time::timeout(limit, op).await {
                    Ok(result) => result,
                    Err(_) => Err(LockError::Connection {
                        server: node.server().to_owned(),
                        source: format!("no answer within the node timeout ({limit:?})").into(),
                    }),
                };
                (i, result)
            }
        }))
        .await
    }

    /// Asks every node for the lock once.
    pub(crate) async fn attempt(&self, keys: &Keys, token: &str, expire: Duration) -> Votes {
        let answers = self
            .each(0..self.nodes.len(), self.timeout(expire), |node| {
                node.try_acquire(keys, token, expire, Duration::ZERO)
            })
            .await;
        let mut votes = Votes::default();
        for (i, answer) in answers {
            match answer {
                Ok(Attempt::Acquired { fencing_token }) => {
                    votes.answered += 1;
                    votes.granted.push((i, fencing_token));
                    if self.votes(i, expire) {
                        votes.voters += 1;
                    }
                }
                Ok(Attempt::Held { expires_in }) => {
                    votes.answered += 1;
                    if let Some(left) = expires_in {
                        votes.held_for = Some(votes.held_for.map_or(left, |h| h.min(left)));
                    }
                }
                Err(e) => {
                    votes.first_error.get_or_insert(e);
                }
            }
        }
        votes
    }

    /// Whether node `i` counts toward the majority of a lock with this lease.
    fn votes(&self, i: usize, expire: Duration) -> bool {
        !self.delay_restarted || self.nodes[i].uptime().is_none_or(|up| up >= expire)
    }

    /// The fencing token of an acquisition that won `votes`: the largest
    /// counter, written back to the granting nodes when they differ. `None`
    /// when the write-back did not reach a majority of voters that still
    /// hold the lock (then the acquisition failed).
    pub(crate) async fn fence(
        &self,
        keys: &Keys,
        token: &str,
        expire: Duration,
        votes: &Votes,
    ) -> Option<u64> {
        let top = votes.granted.iter().map(|&(_, fence)| fence).max()?;
        if votes.granted.iter().all(|&(_, fence)| fence == top) {
            return Some(top);
        }
        let raised = self
            .each(
                votes.granted.iter().map(|&(i, _)| i),
                self.timeout(expire),
                |node| node.raise_fence(keys, token, top),
            )
            .await;
        let confirmed = raised
            .into_iter()
            .filter(|(i, owned)| matches!(owned, Ok(true)) && self.votes(*i, expire))
            .count();
        (confirmed >= self.quorum).then_some(top)
    }

    /// Releases on the nodes in `which` (an acquisition that failed) and
    /// waits for their answers.
    pub(crate) async fn give_back(
        &self,
        keys: &Keys,
        token: &str,
        expire: Duration,
        which: &[usize],
    ) {
        self.each(which.iter().copied(), self.timeout(expire), |node| {
            node.release(keys, token, 0, false)
        })
        .await;
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

    /// The error for an operation that fewer than a majority answered.
    fn no_quorum(&self, name: &str, answered: usize, first_error: Option<LockError>) -> LockError {
        let mut detail = format!("{answered} of {} nodes answered", self.nodes.len());
        if let Some(e) = first_error {
            detail.push_str(&format!("; first failure: {e}"));
        }
        detail.push_str("; check that the nodes are up and reachable");
        LockError::NoQuorum {
            name: name.to_owned(),
            needed: self.quorum,
            nodes: self.nodes.len(),
            detail,
        }
    }

    /// The error for an acquisition that answered nodes could not grant.
    pub(crate) fn unreachable(&self, name: &str, votes: Votes) -> LockError {
        self.no_quorum(name, votes.answered, votes.first_error)
    }

    /// The error for an acquisition kept from a majority by nodes too
    /// recently started to vote.
    pub(crate) fn too_young(&self, name: &str, expire: Duration, votes: &Votes) -> LockError {
        let young = votes.granted.len() - votes.voters;
        LockError::NoQuorum {
            name: name.to_owned(),
            needed: self.quorum,
            nodes: self.nodes.len(),
            detail: format!(
                "{young} of the nodes that granted the lock have been up for less than its \
                 lease ({expire:?}) and do not vote yet: a node restarted without persistence \
                 has forgotten its locks (see `LockerBuilder::delay_restarted_nodes`)"
            ),
        }
    }

    /// Releases everywhere; done when a majority still held the lock,
    /// unsure when that majority needs nodes whose re-sent release found
    /// the lock gone (see [`Released::Unsure`]).
    pub(crate) async fn release(
        &self,
        keys: &Keys,
        (token, fencing_token): (&str, u64),
        name: &str,
        expire: Duration,
    ) -> Result<Released, LockError> {
        let answers = self
            .each(0..self.nodes.len(), self.timeout(expire), |node| {
                node.release(keys, token, fencing_token, true)
            })
            .await;
        let unsure = answers
            .iter()
            .filter(|(_, answer)| matches!(answer, Ok(Released::Unsure)))
            .count();
        let (answered, owned, first_error) = tally(answers);
        if owned.len() >= self.quorum {
            Ok(Released::Done)
        } else if owned.len() + unsure >= self.quorum {
            Ok(Released::Unsure)
        } else if answered < self.quorum {
            Err(self.no_quorum(name, answered, first_error))
        } else {
            Ok(Released::NotOwned)
        }
    }

    /// Changes the lease everywhere; the time a majority still holds it
    /// (less the drift), or `None` when a majority does not.
    pub(crate) async fn extend(
        &self,
        keys: &Keys,
        token: &str,
        by: Duration,
        how: Extend,
        name: &str,
        expire: Duration,
    ) -> Result<Option<Duration>, LockError> {
        let mut answers = self
            .each(0..self.nodes.len(), self.timeout(expire), |node| {
                node.extend(keys, token, by, how, self.max_lease)
            })
            .await;
        // A lease beyond the max lease is the caller's mistake, not an outage.
        if let Some(i) = answers
            .iter()
            .position(|(_, answer)| matches!(answer, Err(LockError::InvalidInput { .. })))
            && let (_, Err(e)) = answers.swap_remove(i)
        {
            return Err(e);
        }
        let (answered, left, first_error) = tally(answers);
        if answered < self.quorum {
            return Err(self.no_quorum(name, answered, first_error));
        }
        Ok(self.majority_left(left, expire))
    }

    /// How long a majority keeps holding a lock, given each owning node's
    /// time left: the `quorum`-th longest, less the drift.
    fn majority_left(&self, mut left: Vec<Duration>, expire: Duration) -> Option<Duration> {
        if left.len() < self.quorum {
            return None;
        }
        left.sort_unstable_by(|a, b| b.cmp(a));
        Some(left[self.quorum - 1].saturating_sub(drift(expire)))
    }

    /// Renews a batch on every node; per lease, the time a majority still
    /// holds it, or `None` when a majority of the nodes that answered does
    /// not. An error when fewer than a majority answered: the batch is
    /// tried again.
    pub(crate) async fn renew(
        &self,
        leases: &[Renewal<'_>],
    ) -> Result<Vec<Option<Duration>>, LockError> {
        let shortest = leases
            .iter()
            .map(|l| l.expire)
            .min()
            .unwrap_or(self.response);
        let answers = self
            .each(0..self.nodes.len(), self.timeout(shortest), |node| {
                node.renew(leases)
            })
            .await;
        let mut per_lease: Vec<Vec<Duration>> = vec![Vec::new(); leases.len()];
        let mut answered = 0;
        let mut first_error = None;
        for (_, answer) in answers {
            match answer {
                Ok(left) => {
                    answered += 1;
                    for (found, left) in per_lease.iter_mut().zip(left) {
                        found.extend(left);
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if answered < self.quorum {
            return Err(self.no_quorum("(renewals)", answered, first_error));
        }
        Ok(per_lease
            .into_iter()
            .zip(leases)
            .map(|(left, lease)| self.majority_left(left, lease.expire))
            .collect())
    }

    /// A PING to every node; fails when fewer than a majority answer.
    pub(crate) async fn ping(&self) -> Result<(), LockError> {
        let answers = self
            .each(0..self.nodes.len(), self.response, SingleNode::ping)
            .await;
        let (answered, _, first_error) = tally(answers);
        if answered < self.quorum {
            return Err(self.no_quorum("(ping)", answered, first_error));
        }
        Ok(())
    }
}

/// How many nodes answered, the values they gave (`Some` or `true`), and the
/// first failure.
fn tally<T: Found>(
    answers: Vec<(usize, Result<T, LockError>)>,
) -> (usize, Vec<T::Value>, Option<LockError>) {
    let mut answered = 0;
    let mut values = Vec::new();
    let mut first_error = None;
    for (_, answer) in answers {
        match answer {
            Ok(found) => {
                answered += 1;
                values.extend(found.value());
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    (answered, values, first_error)
}

/// A node's answer that says the token still owned the lock there.
trait Found {
    type Value;
    fn value(self) -> Option<Self::Value>;
}

impl Found for Released {
    type Value = ();
    fn value(self) -> Option<()> {
        (self == Released::Done).then_some(())
    }
}

impl Found for bool {
    type Value = ();
    fn value(self) -> Option<()> {
        self.then_some(())
    }
}

impl Found for Option<Duration> {
    type Value = Duration;
    fn value(self) -> Option<Duration> {
        self
    }
}

impl Found for () {
    type Value = ();
    fn value(self) -> Option<()> {
        Some(())
    }
}

/// When to try again after a split vote: a random pause of up to 2 ms,
/// doubling with each split in a row, at most 100 ms.
pub(crate) fn split_pause(splits: u32) -> Duration {
    let ceiling = Duration::from_millis(2u64 << splits.min(6)).min(Duration::from_millis(100));
    let mut bytes = [0_u8; 4];
    // Without randomness the pause is the ceiling: slower, still correct.
    let fraction = getrandom::fill(&mut bytes)
        .map(|()| f64::from(u32::from_le_bytes(bytes)) / f64::from(u32::MAX))
        .unwrap_or(1.0);
    ceiling.mul_f64(fraction)
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
/// Each attempt asks every node at once (see [`Redlock::attempt`]). With a
/// majority of voting nodes, and time left on the lease after the drift
/// allowance, the lock is taken. Otherwise the nodes that granted it are
/// released, and the loop waits for the first of:
/// - a release notice from any node (waiters do not queue on a Redlock;
///   each subscribes to the lock's channel on every node it can reach);
/// - the end of the holder's lease, as the nodes reported it;
/// - after a split vote, a random pause that grows with each split in a
///   row, so that contenders stop taking a minority each;
/// - its acquire timeout: then one last attempt.
///
/// It fails at once with [`LockError::NoQuorum`] when fewer than a majority
/// of the nodes answer. An attempt cut short (this future dropped) gives
/// back what it had taken, in the background.
pub(crate) async fn acquire(
    nodes: &Redlock,
    lease: LockRequest<'_>,
    mut gone: io::CallerGone,
) -> Result<Grant, LockError> {
    let wait = lease.wait;
    let now = Instant::now();
    let deadline = now
        .checked_add(wait)
        .unwrap_or(now + crate::locker::MAX_EXPIRE);
    let expire = lease.expire;
    let trusted = expire.saturating_sub(drift(expire));
    let mut waiters: Option<Vec<Waiter>> = None;
    let mut splits = 0;
    loop {
        if let Some(list) = waiters.as_mut() {
            // Notices heard before this attempt are answered by it.
            list.retain_mut(Waiter::drain);
        }
        let sent = Instant::now();
        let left = deadline.saturating_duration_since(sent);
        let votes = nodes.attempt(lease.keys, &lease.token, expire).await;
        let taken: Vec<usize> = votes.granted.iter().map(|&(i, _)| i).collect();
        let mut give_back = GiveBackOnDrop {
            locker: lease.locker,
            keys: lease.keys,
            token: &lease.token,
            expire,
            nodes: taken,
        };
        if votes.voters >= nodes.quorum()
            && let Some(fence) = nodes.fence(lease.keys, &lease.token, expire, &votes).await
            && sent.elapsed() < trusted
        {
            give_back.nodes.clear();
            drop(give_back);
            return Ok(Grant {
                fencing_token: fence,
                sent,
                handed: false,
                token: lease.token,
            });
        }
        let taken = std::mem::take(&mut give_back.nodes);
        drop(give_back);
        if !taken.is_empty() {
            nodes
                .give_back(lease.keys, &lease.token, expire, &taken)
                .await;
        }
        if votes.answered < nodes.quorum() {
            return Err(nodes.unreachable(lease.name, votes));
        }
        if left.is_zero() {
            if votes.granted.len() >= nodes.quorum() && votes.voters < nodes.quorum() {
                return Err(nodes.too_young(lease.name, expire, &votes));
            }
            return Err(LockError::Timeout {
                name: lease.name.to_owned(),
                waited: wait,
            });
        }
        if waiters.is_none() {
            // Subscribed only now: the lock may have been freed before.
            waiters = Some(
                nodes
                    .register(&lease.keys.channel, &lease.token, expire)
                    .await,
            );
            continue;
        }
        let mut wake_at = deadline;
        if let Some(held) = votes.held_for {
            wake_at = wake_at.min(soon_after(held));
        }
        if votes.granted.is_empty() {
            splits = 0;
        } else {
            splits += 1;
            wake_at = wake_at.min(Instant::now() + split_pause(splits));
        }
        let waiters = waiters.as_deref_mut().unwrap_or_default();
        if waiters.is_empty() {
            wake_at = wake_at.min(soon_after(FALLBACK_PAUSE));
        }
        tokio::select! {
            () = any_notice(waiters) => {}
            () = tokio::time::sleep_until(wake_at.into()) => {}
            () = gone.wait() => return Err(LockError::Runtime {
                reason: "the caller stopped waiting".into(),
            }),
        }
    }
}

/// Nodes of a Redlock that granted an attempt still in progress: dropped
/// with nodes listed (the caller stopped waiting), it releases them in the
/// background.
struct GiveBackOnDrop<'a> {
    locker: &'a Arc<Inner>,
    keys: &'a Keys,
    token: &'a str,
    expire: Duration,
    nodes: Vec<usize>,
}

impl Drop for GiveBackOnDrop<'_> {
    fn drop(&mut self) {
        if self.nodes.is_empty() {
            return;
        }
        let (locker, keys, token) = (
            self.locker.clone(),
            self.keys.clone(),
            self.token.to_owned(),
        );
        let (expire, nodes) = (self.expire, std::mem::take(&mut self.nodes));
        let giving = io::spawn(async move {
            if let Backend::Redlock(redlock) = &locker.backend {
                redlock.give_back(&keys, &token, expire, &nodes).await;
            }
        });
        if let Err(e) = giving {
            tracing::debug!(error = %e, "cannot give back a partial Redlock acquisition; its leases free it");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn five() -> Redlock {
        let urls: Vec<String> = (1..=5).map(|i| format!("redis://10.0.0.{i}/")).collect();
        let timeouts = Timeouts {
            connect: Duration::from_secs(1),
            response: Duration::from_secs(1),
        };
        Redlock::new(&urls, timeouts, None, true, Duration::from_secs(60)).unwrap()
    }

    #[test]
    fn a_majority_is_needed() {
        assert_eq!(five().quorum, 3);
    }

    #[test]
    fn the_lease_left_is_the_majoritys() {
        let r = five();
        let ms = Duration::from_millis;
        let expire = ms(1000);
        // Three owning nodes: the third longest counts, less 12 ms drift.
        assert_eq!(
            r.majority_left(vec![ms(900), ms(500), ms(800), ms(700)], expire),
            Some(ms(700 - 12))
        );
        assert_eq!(r.majority_left(vec![ms(900), ms(800)], expire), None);
    }

    #[test]
    fn drift_is_one_percent_and_two_ms() {
        assert_eq!(drift(Duration::from_secs(10)), Duration::from_millis(102));
    }

    #[test]
    fn node_timeout_follows_the_lease_within_bounds() {
        let r = five();
        assert_eq!(
            r.timeout(Duration::from_secs(10)),
            Duration::from_millis(100)
        );
        assert_eq!(r.timeout(Duration::from_millis(100)), MIN_NODE_TIMEOUT);
        assert_eq!(r.timeout(Duration::from_secs(3600)), Duration::from_secs(1));
    }

    #[test]
    fn split_pauses_grow_and_stay_bounded() {
        for splits in 1..20 {
            let pause = split_pause(splits);
            assert!(
                pause <= Duration::from_millis(2 << splits.min(6)).min(Duration::from_millis(100))
            );
        }
    }

    #[test]
    fn node_lists_are_checked() {
        let t = Timeouts {
            connect: Duration::from_secs(1),
            response: Duration::from_secs(1),
        };
        let urls = |n: usize| {
            (0..n)
                .map(|i| format!("redis://10.0.0.{i}/"))
                .collect::<Vec<_>>()
        };
        for n in [0, 1, 2, 4, 6] {
            let err = Redlock::new(&urls(n), t, None, true, Duration::from_secs(60))
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("{n} URLs")), "{err}");
        }
        let twice = vec![
            "redis://a/".to_string(),
            "redis://b/".into(),
            "redis://a/".into(),
        ];
        assert!(
            Redlock::new(&twice, t, None, true, Duration::from_secs(60))
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
    }
}
