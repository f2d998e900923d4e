//! Counting a Redlock's votes: which nodes count (each server once, and,
//! unless turned off, only those that have kept their data for
//! `max_lease`), one attempt's answers and its majority, the fencing token
//! across the nodes that granted it, its late grants, and the errors of
//! too few answers or voters.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use super::fanout::{Late, Redlock};
use crate::backend::node_facts;
use crate::backend::shared::{Attempt, Owner};
use crate::backend::single::SingleNode;
use crate::layout::Keys;
use crate::{LockError, io};

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
    pub(super) fn grant(&mut self, i: usize, counters: F, vote: Result<(), NoVote>) {
        self.answered += 1;
        self.granted.push((i, counters));
        match vote {
            Ok(()) => self.voters += 1,
            Err(why) => self.not_voting.push((i, why)),
        }
    }

    /// A node said another owner holds it, for `left` if it said so.
    pub(super) fn held(&mut self, left: Option<Duration>) {
        self.answered += 1;
        if let Some(left) = left {
            self.held_for = Some(self.held_for.map_or(left, |h| h.min(left)));
        }
    }

    /// A node did not answer.
    pub(super) fn failed(&mut self, e: LockError) {
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
    pub(super) fn counted(&self) -> Vec<bool> {
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
    pub(super) fn refuse_duplicates(&self) -> Result<(), LockError> {
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
                node.attempt(
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
                Ok(Attempt::Taken { fencing_token, .. }) => {
                    votes.grant(i, fencing_token, self.votes(i, &self.counted()));
                }
                Ok(Attempt::Busy(expires_in)) => votes.held(expires_in),
                // Not an answer a lock's script gives.
                Ok(Attempt::Again | Attempt::Refused(_)) => votes.held(None),
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
    pub(super) fn votes(&self, i: usize, counted: &[bool]) -> Result<(), NoVote> {
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
    pub(super) fn confirmed(&self, raised: Vec<(usize, Result<bool, LockError>)>) -> bool {
        let counted = self.counted();
        raised
            .into_iter()
            .filter(|(i, owned)| matches!(owned, Ok(true)) && self.votes(*i, &counted).is_ok())
            .count()
            >= self.quorum
    }

    /// The error for an operation that fewer than a majority answered.
    pub(super) fn no_quorum(
        &self,
        name: &str,
        answered: usize,
        first_error: Option<LockError>,
    ) -> LockError {
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
    pub(super) fn only_counted<T>(
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
                let Ok(Attempt::Taken {
                    fencing_token: counter,
                    ..
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
            if matches!(answer, Ok(Attempt::Taken { .. })) {
                granted.push(i);
            }
        }
        granted
    }

    /// Whether every answer is in.
    pub(super) fn is_empty(&self) -> bool {
        self.requests.0.is_empty()
    }
}

/// The facts of a Redlock node (every node tracks them).
fn facts(node: &SingleNode) -> &node_facts::NodeFacts {
    node.facts()
        .expect("Redlock nodes are made with `track_restarts`")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_one_percent_and_two_ms() {
        assert_eq!(drift(Duration::from_secs(10)), Duration::from_millis(102));
    }
}
