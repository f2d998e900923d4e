//! Redlock: one lock on several independent Redis masters, held while a
//! majority of them hold it.
//!
//! # What differs from the published algorithm, and why
//!
//! - **Concurrent fan-out.** Every request goes to all nodes at once, so an
//!   acquisition costs about one round trip, not one per node. Each node's
//!   answer is awaited for at most the node timeout: a frozen node delays
//!   an operation by that much, never by the acquire time.
//! - **Connections are opened apart from requests.** A node without a
//!   connection gets one from a task of its own, bounded by the connect
//!   timeout (and the response timeout for what is read on it), not by the
//!   node timeout; the task finishes even when the operation that started it
//!   gives up, so the next operation finds the connection. An operation
//!   waits for the nodes that are connecting until they are done, or, once
//!   a majority is ready, for at most one node timeout more. The node
//!   timeout then bounds only the lock request. A request cut off by it
//!   leaves its connection in place (the response timeout decides whether a
//!   connection is broken); an acquisition cut off is given back on the
//!   same connection, queued before any later request, and the next attempt
//!   uses a new owner token, so a late give-back never frees a newer
//!   acquisition.
//! - **Validity** is counted from when the request was sent: `expire`, less
//!   the clock drift allowance ([`drift`]), from the send time.
//!   Time spent waiting for slow nodes comes off it.
//! - **Restarted nodes do not vote at once** (unless turned off): a node
//!   that has kept its data for less than the Locker's `max_lease` does not
//!   count toward any majority. A node restarted without persistence has
//!   forgotten its locks, and could otherwise give a second owner the
//!   majority while the first still holds a lease, which may be as long as
//!   `max_lease` (the requesting lock's own lease says nothing about the
//!   holder's). This is the "delayed restart" of the Redlock description,
//!   enforced by the clients instead of by the operators. When a node last
//!   started (or lost its data) is read on every new connection, from INFO
//!   and from a marker key (see `node_facts`), and a restart breaks the
//!   connections, so it is seen. A node whose start cannot be read at all
//!   does not vote.
//! - **Each server counts once.** Nodes are told apart by the server
//!   itself (INFO's `run_id`, or the id in the marker), not by their URLs:
//!   two URLs that reach one server count once, and an acquisition fails
//!   with [`LockError::InvalidInput`] naming their positions in the list.
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
//!   and try again after a random pause that grows with each split. A
//!   waiter that cannot reach a majority tries again, with a growing pause,
//!   until its acquire time ends, and then returns the last error.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::join_all;

use super::node_facts;
use super::shared::{
    Attempt, Backoff, Extend, FALLBACK_PAUSE, Grant, Owner, RETRY_MAX, Released, Renewal,
    random_fraction, soon_after,
};
use super::single::SingleNode;
use super::wake::Waiter;
use crate::layout::Keys;
use crate::{LockError, io};

mod fanout;
pub(crate) mod set;

pub(crate) use fanout::Redlock;
use fanout::{Late, NodeOp};

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

/// Why a node that granted a lock does not count toward its majority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NoVote {
    /// It has kept its data for less than `max_lease`.
    Young,
    /// When it last restarted, or which server it is, is not known: why.
    Unknown(String),
}

/// What the nodes said to one acquisition attempt; `F` is what a node that
/// granted it reports: its fencing counter (`u64`), or one per name for a
/// set (`Vec<u64>`).
#[derive(Debug)]
pub(crate) struct Votes<F = u64> {
    /// The nodes that granted the lock (voting or not), with their fencing
    /// counters.
    pub(crate) granted: Vec<(usize, F)>,
    /// How many of them vote: known, and old enough.
    pub(crate) voters: usize,
    /// The nodes among them that do not vote, and why.
    pub(crate) not_voting: Vec<(usize, NoVote)>,
    /// Nodes that answered at all.
    pub(crate) answered: usize,
    /// The shortest lease left of another owner, among the nodes that said so.
    pub(crate) held_for: Option<Duration>,
    /// The first failure, for messages.
    pub(crate) first_error: Option<LockError>,
    /// Nodes whose TLS handshake failed on a certificate: they will not
    /// answer by waiting.
    pub(crate) refused: usize,
}

impl<F> Default for Votes<F> {
    fn default() -> Self {
        Votes {
            granted: Vec::new(),
            voters: 0,
            not_voting: Vec::new(),
            answered: 0,
            held_for: None,
            first_error: None,
            refused: 0,
        }
    }
}

impl<F> Votes<F> {
    /// Node `i` granted it with `counters`; `vote` says whether it counts.
    fn grant(&mut self, i: usize, counters: F, vote: Result<(), NoVote>) {
        self.answered += 1;
        self.granted.push((i, counters));
        match vote {
            Ok(()) => self.voters += 1,
            Err(why) => self.not_voting.push((i, why)),
        }
    }

    /// A node said another owner holds it, for `left` if it said so.
    fn held(&mut self, left: Option<Duration>) {
        self.answered += 1;
        if let Some(left) = left {
            self.held_for = Some(self.held_for.map_or(left, |h| h.min(left)));
        }
    }

    /// A node did not answer.
    fn failed(&mut self, e: LockError) {
        if e.is_tls_refusal() {
            self.refused += 1;
            // The most useful failure to show.
            self.first_error = Some(e);
        } else {
            self.first_error.get_or_insert(e);
        }
    }
}

/// The clock drift allowance of a lease: 1% of it plus 2 ms. A lease is
/// trusted for `expire - drift` from when its request was sent, on every
/// node's clock.
pub(crate) fn drift(expire: Duration) -> Duration {
    expire / 100 + Duration::from_millis(2)
}

impl Redlock {
    /// The error for an operation that fewer than a majority answered.
    pub(crate) fn no_majority(
        &self,
        what: &str,
        answered: usize,
        first_error: Option<LockError>,
    ) -> LockError {
        self.no_quorum(what, answered, first_error)
    }

    /// Per node: whether it counts in a majority at all, as far as known
    /// now: which server it is is known, and no node before it in the list
    /// is the same server.
    fn counted(&self) -> Vec<bool> {
        let ids: Vec<_> = self.nodes.iter().map(|n| facts(n).identity()).collect();
        (0..ids.len())
            .map(|i| {
                ids[i].as_ref().is_some_and(|id| {
                    !ids[..i]
                        .iter()
                        .flatten()
                        .any(|earlier| earlier.same_server(id))
                })
            })
            .collect()
    }

    /// `InvalidInput` when two nodes have turned out to be one server.
    fn refuse_duplicates(&self) -> Result<(), LockError> {
        let ids: Vec<_> = self.nodes.iter().map(|n| facts(n).identity()).collect();
        for (j, b) in ids.iter().enumerate() {
            let Some(b) = b else { continue };
            if let Some((i, a)) = ids[..j]
                .iter()
                .enumerate()
                .find_map(|(i, a)| a.as_ref().filter(|a| a.same_server(b)).map(|a| (i, a)))
            {
                return Err(LockError::invalid(
                    "Redlock nodes",
                    format!(
                        "nodes {} and {} of the list (counting from 1) reach one Redis server \
                         ({}), which would count twice in every majority; give each node \
                         once: a Redlock needs independent masters",
                        i + 1,
                        j + 1,
                        a.how_same(b)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Asks every node for the lock once. Fails only when two nodes are one
    /// server.
    ///
    /// Done as soon as a majority of voters granted it with one fencing
    /// counter: the answers still on their way are the [`LateGrants`]
    /// (none when no majority granted, or their counters differed: then
    /// every answer is in the votes).
    pub(crate) async fn attempt(
        &self,
        keys: &Keys,
        token: &str,
        expire: Duration,
    ) -> Result<(Votes, LateGrants), LockError> {
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        let limit = self.timeout(expire);
        // Connected first: only then is each node's server known.
        let ready = self.ready(&all, limit).await;
        self.refuse_duplicates()?;
        let (keys, token): (Arc<Keys>, Arc<str>) = (Arc::new(keys.clone()), Arc::from(token));
        let mut requests = self.start_each(all.into_iter().zip(ready), limit, |node| {
            let (keys, token) = (keys.clone(), token.clone());
            async move {
                node.try_acquire(
                    Owner {
                        keys: &keys,
                        token: &token,
                    },
                    expire,
                    (Duration::ZERO, false),
                )
                .await
            }
        });
        let mut votes = Votes::default();
        // Done once a majority of voters granted it with one counter (the
        // usual case: the nodes' counters move in step). Counters that
        // differ (new counters, a node that missed acquisitions) are
        // written back to every node that granted it (see `fence`), so
        // then every answer is waited for.
        while !(votes.voters >= self.quorum
            && votes.granted.iter().all(|&(_, c)| c == votes.granted[0].1))
            && let Some((i, answer)) = requests.next().await
        {
            match answer {
                Ok(Attempt::Acquired { fencing_token }) => {
                    votes.grant(i, fencing_token, self.votes(i, &self.counted()));
                }
                Ok(Attempt::Held { expires_in }) => votes.held(expires_in),
                Err(e) => votes.failed(e),
            }
        }
        Ok((
            votes,
            LateGrants {
                requests: Late(requests),
                nodes: self.nodes.clone(),
                keys,
                token,
            },
        ))
    }

    /// Whether node `i` counts toward a majority now: it counts at all (see
    /// [`counted`](Self::counted)), and, unless the delay is off, it has
    /// kept its data for at least `max_lease`, the longest lease any holder
    /// of any lock on these nodes may still have.
    fn votes(&self, i: usize, counted: &[bool]) -> Result<(), NoVote> {
        let facts = facts(&self.nodes[i]);
        let age = facts.age();
        if !counted[i] {
            return Err(NoVote::Unknown(match (facts.identity(), age) {
                (Some(_), _) => "another node of the list is the same server".into(),
                (None, Err(why)) => why,
                (None, Ok(_)) => "which server it is cannot be told (INFO has no run_id, and the \
                                  marker cannot be read)"
                    .into(),
            }));
        }
        if !self.delay_restarted {
            return Ok(());
        }
        match age {
            Ok(age) if age >= self.max_lease => Ok(()),
            Ok(_) => Err(NoVote::Young),
            Err(why) => Err(NoVote::Unknown(why)),
        }
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
        self.confirmed(raised).then_some(top)
    }

    /// Whether a majority of voters answered a fence write-back saying
    /// they still hold the lock.
    fn confirmed(&self, raised: Vec<(usize, Result<bool, LockError>)>) -> bool {
        let counted = self.counted();
        raised
            .into_iter()
            .filter(|(i, owned)| matches!(owned, Ok(true)) && self.votes(*i, &counted).is_ok())
            .count()
            >= self.quorum
    }
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
    pub(crate) fn unreachable<F>(&self, name: &str, votes: Votes<F>) -> LockError {
        self.no_quorum(name, votes.answered, votes.first_error)
    }

    /// The error for an acquisition kept from a majority by nodes that
    /// granted it but do not vote: too recently restarted, or of unknown
    /// restart time.
    pub(crate) fn too_young<F>(&self, name: &str, votes: &Votes<F>) -> LockError {
        let young = votes
            .not_voting
            .iter()
            .filter(|(_, why)| *why == NoVote::Young)
            .count();
        let mut parts = Vec::new();
        if young > 0 {
            parts.push(format!(
                "{young} of the nodes that granted the lock have kept their data for less than \
                 the Locker's max_lease ({:?}) and do not vote yet: a node restarted without \
                 persistence has forgotten its locks, and a lease of up to max_lease may still \
                 run on the others (see `LockerBuilder::delay_restarted_nodes` and \
                 `LockerBuilder::max_lease`)",
                self.max_lease
            ));
        }
        let unknown: Vec<String> = votes
            .not_voting
            .iter()
            .filter_map(|(i, why)| match why {
                NoVote::Unknown(why) => Some(format!("node {}: {why}", i + 1)),
                NoVote::Young => None,
            })
            .collect();
        if !unknown.is_empty() {
            parts.push(format!(
                "{} of them cannot tell when they last restarted, or which server they are, \
                 and do not vote ({}); let the Locker's Redis user run `INFO` (it is in \
                 @dangerous: add `+info`), or read and write the key `{}` with EVAL",
                unknown.len(),
                unknown.join("; "),
                self.marker_key
            ));
        }
        LockError::NoQuorum {
            name: name.to_owned(),
            needed: self.quorum,
            nodes: self.nodes.len(),
            detail: parts.join("; "),
        }
    }

    /// `answers` with those of nodes that count in no majority (see
    /// [`counted`](Self::counted)) turned into errors: one server never
    /// counts twice, and a node that cannot be identified not at all.
    fn only_counted<T>(
        &self,
        answers: Vec<(usize, Result<T, LockError>)>,
    ) -> Vec<(usize, Result<T, LockError>)> {
        let counted = self.counted();
        answers
            .into_iter()
            .map(|(i, answer)| match answer {
                Ok(_) if !counted[i] => (
                    i,
                    Err(LockError::Connection {
                        server: self.nodes[i].server().to_owned(),
                        source: "not counted: which server it is is unknown, or another node \
                                 of the list is the same server"
                            .into(),
                    }),
                ),
                answer => (i, answer),
            })
            .collect()
    }

    /// Releases everywhere; done when a majority still held the lock,
    /// unsure when that majority needs nodes whose re-sent release found
    /// the lock gone (see [`Released::Unsure`]).
    pub(crate) async fn release(
        &self,
        Owner { keys, token }: Owner<'_>,
        fencing_token: u64,
        (name, expire): (&str, Duration),
    ) -> Result<Released, LockError> {
        let (keys, token): (Arc<Keys>, Arc<str>) = (Arc::new(keys.clone()), Arc::from(token));
        let released = self
            .release_everywhere(1, (name, expire), |node| {
                let (keys, token) = (keys.clone(), token.clone());
                async move {
                    let owner = Owner {
                        keys: &keys,
                        token: &token,
                    };
                    Ok(vec![node.release(owner, fencing_token, true).await?])
                }
            })
            .await?;
        Ok(released.into_iter().next().unwrap_or(Released::NotOwned))
    }

    /// Releases every name of a set held under `token` (`members`: each
    /// name's keys and the fencing token it was granted) everywhere, one
    /// call per node; per name, as [`release`](Self::release) decides.
    /// `names` names the set in an error.
    pub(crate) async fn release_set(
        &self,
        token: &str,
        members: &[(&Keys, u64)],
        (names, expire): (&str, Duration),
    ) -> Result<Vec<Released>, LockError> {
        let owned: Arc<(Vec<(Keys, u64)>, String)> = Arc::new((
            members.iter().map(|(k, f)| ((*k).clone(), *f)).collect(),
            token.to_owned(),
        ));
        self.release_everywhere(members.len(), (names, expire), |node| {
            let owned = owned.clone();
            async move {
                let (members, token) = &*owned;
                let members: Vec<(&Keys, u64)> = members.iter().map(|(k, f)| (k, *f)).collect();
                node.release_set(token, &members, true).await
            }
        })
        .await
    }

    /// Sends `op`, a release of `count` names, to every node; per name,
    /// done when a majority still held it, unsure when that majority needs
    /// nodes whose re-sent release found it gone. [`LockError::NoQuorum`]
    /// (naming `name`) when too few nodes answered.
    async fn release_everywhere<F: NodeOp<Vec<Released>>>(
        &self,
        count: usize,
        (name, expire): (&str, Duration),
        op: impl Fn(Arc<SingleNode>) -> F,
    ) -> Result<Vec<Released>, LockError> {
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        let limit = self.timeout(expire);
        let requests = self.start_uncut(&all, limit, op).await;
        let mut owned = vec![0; count];
        let answers = self
            .gather(requests, &all, limit, |i, answer| {
                if let Ok(released) = answer
                    && self.counted()[i]
                {
                    for (owned, released) in owned.iter_mut().zip(released) {
                        *owned += usize::from(matches!(released, Released::Done));
                    }
                }
                // Released: the other nodes' releases go on in the background.
                owned.iter().all(|&owned| owned >= self.quorum)
            })
            .await;
        let (mut answered, mut first_error) = (0, None);
        let (mut done, mut unsure) = (vec![0; count], vec![0; count]);
        for (_, answer) in self.only_counted(answers) {
            match answer {
                Ok(released) => {
                    answered += 1;
                    for (j, released) in released.iter().enumerate().take(count) {
                        match released {
                            Released::Done => done[j] += 1,
                            Released::Unsure => unsure[j] += 1,
                            Released::NotOwned => {}
                        }
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if answered < self.quorum {
            return Err(self.no_quorum(name, answered, first_error));
        }
        Ok(done
            .iter()
            .zip(&unsure)
            .map(|(&done, &unsure)| {
                if done >= self.quorum {
                    Released::Done
                } else if done + unsure >= self.quorum {
                    Released::Unsure
                } else {
                    Released::NotOwned
                }
            })
            .collect())
    }

    /// Changes the lease everywhere; the time a majority still holds it
    /// (less the drift), or `None` when a majority does not.
    pub(crate) async fn extend(
        &self,
        Owner { keys, token }: Owner<'_>,
        (by, how): (Duration, Extend),
        (name, expire): (&str, Duration),
    ) -> Result<Option<Duration>, LockError> {
        let mut answers = self
            .each(0..self.nodes.len(), self.timeout(expire), |node| {
                node.extend(Owner { keys, token }, (by, how), self.max_lease)
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
        let (answered, left, first_error) = tally(self.only_counted(answers));
        if answered < self.quorum {
            return Err(self.no_quorum(name, answered, first_error));
        }
        Ok(self.extended_left(left))
    }

    /// How long a majority keeps holding a lock, given each owning node's
    /// time left: the `quorum`-th longest, less the drift of a lease of
    /// `expire`.
    fn majority_left(&self, left: Vec<Duration>, expire: Duration) -> Option<Duration> {
        self.quorum_left(left)
            .map(|left| left.saturating_sub(drift(expire)))
    }

    /// [`majority_left`](Self::majority_left) after an extend: each node's
    /// time left is the new lease, so the drift is that lease's, not the
    /// original one's (a lock taken for 1 s and extended by an hour drifts
    /// over an hour).
    fn extended_left(&self, left: Vec<Duration>) -> Option<Duration> {
        self.quorum_left(left)
            .map(|left| left.saturating_sub(drift(left)))
    }

    /// The `quorum`-th longest time left: how long a majority keeps a lock.
    fn quorum_left(&self, mut left: Vec<Duration>) -> Option<Duration> {
        if left.len() < self.quorum {
            return None;
        }
        left.sort_unstable_by(|a, b| b.cmp(a));
        Some(left[self.quorum - 1])
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
            .unwrap_or(self.timeouts.response);
        let answers = self
            .each(0..self.nodes.len(), self.timeout(shortest), |node| {
                node.renew(leases)
            })
            .await;
        let answers = self.only_counted(answers);
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
            .each(
                0..self.nodes.len(),
                self.timeouts.response,
                SingleNode::ping,
            )
            .await;
        let (answered, _, first_error) = tally(self.only_counted(answers));
        if answered < self.quorum {
            return Err(self.no_quorum("(ping)", answered, first_error));
        }
        Ok(())
    }
}

/// The acquisition requests still on their way when a majority had
/// granted an attempt (see [`Redlock::attempt`]).
pub(crate) struct LateGrants {
    requests: Late<Attempt>,
    nodes: Vec<Arc<SingleNode>>,
    keys: Arc<Keys>,
    token: Arc<str>,
}

impl LateGrants {
    /// The acquisition succeeded with `fencing_token`: in the background,
    /// each node that grants it late is brought to that token, so that
    /// every node holding the lock for this owner has its fencing token as
    /// its counter (what `inspect` and `force_unlock_if` read): a counter
    /// below it (a node that missed earlier acquisitions) is raised to it;
    /// a node whose counter is past it (one started again from its clock)
    /// gives the lock back. The majority holds it either way.
    pub(crate) fn settle(mut self, fencing_token: u64) {
        let requests = std::mem::take(&mut self.requests.0);
        if requests.is_empty() {
            return;
        }
        let (nodes, keys, token) = (
            std::mem::take(&mut self.nodes),
            self.keys.clone(),
            self.token.clone(),
        );
        let settling = io::spawn_here(async move {
            let mut requests = requests;
            while let Some((i, answer)) = requests.next().await {
                let Ok(Attempt::Acquired {
                    fencing_token: counter,
                }) = answer
                else {
                    continue;
                };
                let node = &nodes[i];
                if counter < fencing_token {
                    let _ = node.raise_fence(&keys, &token, fencing_token).await;
                } else if counter > fencing_token {
                    let _ = node
                        .release(
                            Owner {
                                keys: &keys,
                                token: &token,
                            },
                            0,
                            false,
                        )
                        .await;
                }
            }
        });
        if let Err(e) = settling {
            tracing::debug!(target: "lockattr", error = %e, "cannot settle the late answers of a Redlock acquisition");
        }
    }

    /// Waits for the late answers of an acquisition that failed after all
    /// (each within the node timeout): the nodes that granted it too, to
    /// give back.
    pub(crate) async fn granted(mut self) -> Vec<usize> {
        let mut granted = Vec::new();
        while let Some((i, answer)) = self.requests.0.next().await {
            if matches!(answer, Ok(Attempt::Acquired { .. })) {
                granted.push(i);
            }
        }
        granted
    }

    /// Whether every answer is in.
    fn is_empty(&self) -> bool {
        self.requests.0.is_empty()
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

/// The facts of a Redlock node (every node tracks them).
fn facts(node: &SingleNode) -> &node_facts::NodeFacts {
    node.facts()
        .expect("Redlock nodes are made with `track_restarts`")
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
/// [`acquire`]).
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
        if let Some(held) = votes.held_for {
            wake_at = wake_at.min(soon_after(Instant::now(), held));
        }
        if votes.granted.is_empty() {
            self.splits = 0;
        } else {
            self.splits += 1;
            wake_at = wake_at.min(Instant::now() + split_pause(self.splits));
        }
        if waiters.is_empty() {
            wake_at = wake_at.min(soon_after(Instant::now(), FALLBACK_PAUSE));
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
    use fanout::tests::five;

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
    fn an_extended_lease_drifts_as_the_new_lease_not_the_original() {
        let r = five();
        let s = Duration::from_secs;
        // A lock taken for 1 s, extended to an hour on four nodes: the
        // majority's hour drifts by 36 s + 2 ms, not by the 1 s lease's 12 ms.
        let left = vec![s(3600), s(3599), s(3600), s(3600)];
        assert_eq!(
            r.extended_left(left),
            Some(s(3600) - Duration::from_millis(36_002))
        );
        // Shortened to 100 ms: 3 ms of drift, not the original lease's.
        let ms = Duration::from_millis;
        assert_eq!(
            r.extended_left(vec![ms(100), ms(100), ms(100)]),
            Some(ms(97))
        );
        assert_eq!(r.extended_left(vec![ms(100), ms(100)]), None);
    }

    #[test]
    fn drift_is_one_percent_and_two_ms() {
        assert_eq!(drift(Duration::from_secs(10)), Duration::from_millis(102));
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
}
