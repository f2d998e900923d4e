//! Several names at once on a Redlock.
//!
//! Each node takes every name of the set or none, in one script call
//! ([`ACQUIRE_SET`](crate::backend::lockset::ACQUIRE_SET), as on one
//! server), and the set is held when a majority of voting nodes took it
//! within the lease's trusted time: on no node does a caller ever hold part
//! of a set, so two callers locking `{a, b}` and `{b, a}` cannot deadlock,
//! and a split vote is undone like a single name's (the nodes that took it
//! give it back, and the losers try again after a random pause).
//!
//! What differs from one name:
//! - every node's answer is waited for (within the node timeout) before
//!   the votes are counted: there is no early finish at a majority;
//! - the fencing token of each name is the largest of that name's
//!   counters among the nodes that took the set, written back to them when
//!   they differ, as for one name;
//! - a waiter subscribes to the channel of every name on every node, and
//!   tries again at the first release notice of any of them.
//!
//! Once taken, each name is an ordinary Redlock lock: renewed, extended and
//! released on every node, name by name.

use std::time::{Duration, Instant};

use super::acquire::Retry;
use super::fanout::Redlock;
use super::votes::{Votes, drift};
use crate::backend::lockset::{self, SetGrant};
use crate::backend::shared::Attempt;
use crate::layout::Keys;
use crate::{LockError, io};

/// A set to take on a Redlock: see the module docs.
pub(crate) struct SetOnNodes<'a> {
    pub(crate) keys: &'a [Keys],
    /// The names joined, for errors.
    pub(crate) name: &'a str,
    pub(crate) token: String,
    pub(crate) expire: Duration,
    pub(crate) wait: Duration,
}

impl Redlock {
    /// Asks every node for the whole set once, and waits for every answer
    /// within the node timeout. A request cut off by it is given back on
    /// its connection, after it. Fails only when two nodes are one server.
    async fn attempt_set(
        &self,
        group: &[&Keys],
        token: &str,
        expire: Duration,
    ) -> Result<Votes<Vec<u64>>, LockError> {
        let all: Vec<usize> = (0..self.nodes.len()).collect();
        let limit = self.timeout(expire);
        // Connected first: only then is each node's server known.
        let ready = self.ready(&all, limit).await;
        self.refuse_duplicates()?;
        let answers = self
            .each_ready(all.into_iter().zip(ready), limit, |node| async move {
                let invocation = lockset::acquire_call(group, token, expire, Duration::ZERO, false);
                let reply: Vec<i64> = node
                    .run_script_or_give_back(&invocation, &|| lockset::give_back_eval(group, token))
                    .await?;
                lockset::answer(&reply, group.len(), node.server())
            })
            .await;
        let counted = self.counted();
        let mut votes = Votes::default();
        for (i, answer) in answers {
            match answer {
                Ok(Attempt::Taken { of_set, .. }) => {
                    votes.grant(i, of_set, self.votes(i, &counted))
                }
                Ok(Attempt::Busy(left)) => votes.held(left),
                // Not an answer a set's script gives.
                Ok(Attempt::Again | Attempt::Refused(_)) => votes.held(None),
                Err(e) => votes.failed(e),
            }
        }
        Ok(votes)
    }

    /// The fencing token of each name of a set that won `votes`: the
    /// largest of its counters, written back to the nodes that took the set
    /// when they differ (see [`fence`](Redlock::fence)). `None` when the
    /// write-back did not reach a majority of voters that still hold it.
    async fn fence_set(
        &self,
        group: &[&Keys],
        token: &str,
        expire: Duration,
        votes: &Votes<Vec<u64>>,
    ) -> Option<Vec<u64>> {
        let (_, first) = votes.granted.first()?;
        let mut top = first.clone();
        for (_, counters) in &votes.granted[1..] {
            for (top, &counter) in top.iter_mut().zip(counters) {
                *top = (*top).max(counter);
            }
        }
        if votes.granted.iter().all(|(_, counters)| *counters == top) {
            return Some(top);
        }
        let top_ref = &top;
        let raised = self
            .each(
                votes.granted.iter().map(|&(i, _)| i),
                self.timeout(expire),
                |node| async move {
                    for (keys, &fence) in group.iter().zip(top_ref) {
                        if !node.raise_fence(keys, token, fence).await? {
                            return Ok(false);
                        }
                    }
                    Ok(true)
                },
            )
            .await;
        self.confirmed(raised).then_some(top)
    }

    /// Gives a set back on the nodes in `which` (an attempt that failed, or
    /// was abandoned) and waits for their answers within the node timeout;
    /// the rest finish in the background.
    pub(crate) async fn give_back_set(
        &self,
        keys: &[Keys],
        token: &str,
        expire: Duration,
        which: &[usize],
    ) {
        let group: Vec<&Keys> = keys.iter().collect();
        let invocation = std::sync::Arc::new(lockset::give_back_call(&group, token));
        let limit = self.timeout(expire);
        let requests = self
            .start_uncut(which, limit, |node| {
                let invocation = invocation.clone();
                async move { node.run_script::<i64>(&invocation).await.map(drop) }
            })
            .await;
        self.gather(requests, which, limit, |_, _| false).await;
    }

    /// Every node, for a give-back of an attempt whose answers are unknown.
    pub(crate) fn every_node(&self) -> Vec<usize> {
        (0..self.nodes.len()).collect()
    }
}

/// Takes every name of the set on a majority of the nodes, waiting up to
/// its acquire timeout; see the module docs. `owed` lists the tokens of
/// attempts not given back yet (the caller gives them back if this future
/// is dropped or fails).
pub(crate) async fn acquire(
    nodes: &Redlock,
    set: SetOnNodes<'_>,
    owed: &mut Vec<String>,
    mut gone: io::CallerGone,
) -> Result<SetGrant, LockError> {
    let SetOnNodes {
        keys,
        name,
        mut token,
        expire,
        wait,
    } = set;
    let group: Vec<&Keys> = keys.iter().collect();
    let channels: Vec<&str> = keys.iter().map(|k| k.channel.as_str()).collect();
    let trusted = expire.saturating_sub(drift(expire));
    let mut retry = Retry::new(wait, expire);
    loop {
        retry.drain();
        let sent = Instant::now();
        let left = retry.left(sent);
        owed.push(token.clone());
        let votes = nodes.attempt_set(&group, &token, expire).await?;
        if votes.voters >= nodes.quorum()
            && let Some(fencing_tokens) = nodes.fence_set(&group, &token, expire, &votes).await
            && sent.elapsed() < trusted
        {
            owed.retain(|t| *t != token);
            return Ok(SetGrant {
                fencing_tokens,
                sent,
                token,
            });
        }
        let taken: Vec<usize> = votes.granted.iter().map(|&(i, _)| i).collect();
        if !taken.is_empty() {
            nodes.give_back_set(keys, &token, expire, &taken).await;
        }
        owed.retain(|t| *t != token);
        // The next attempt is another owner: whatever of this one is still
        // on its way can never be taken for it.
        token = crate::layout::new_token()?;
        retry
            .after(nodes, votes, name, &channels, &token, left, &mut gone)
            .await?;
    }
}
