//! What a holder asks of every node of a Redlock, each settled by a
//! majority: release (one name, or every name of a set), extend and renew
//! (the time a majority still holds it, less the drift of the lease), and a
//! ping.

use std::sync::Arc;
use std::time::Duration;

use super::fanout::{NodeOp, Redlock};
use super::votes::drift;
use crate::LockError;
use crate::backend::shared::{Extend, Owner, Released, Renewal};
use crate::backend::single::SingleNode;
use crate::layout::Keys;

impl Redlock {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::redlock::fanout::tests::five;

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
}
