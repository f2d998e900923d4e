//! Group commit of the grants that wait for replicas: the grants of one
//! connection share their `WAIT`s instead of queueing one each.
//!
//! `WAIT` counts every write its client made on its connection so far, and
//! blocks that connection until the replicas answered or its timeout
//! passed. So a grant's script is sent as it comes, without WAIT; once its
//! answer is read, the grant asks for a WAIT and takes the answer of the
//! first WAIT sent after it asked. At most one WAIT is in flight per
//! connection: every grant that asks meanwhile is covered by the next one,
//! sent as soon as the one in flight returned and the scripts sent before
//! then were answered. A script sent while a WAIT blocks the connection
//! runs when that WAIT returns, so the next WAIT, sent once its answer is
//! read, covers it: a grant waits for the rest of the WAIT in flight and
//! one more, not for one WAIT per grant ahead of it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use redis::aio::ConnectionLike;
use redis::{RedisResult, Value};
use tokio::sync::{OwnedMutexGuard, watch};

use super::scripts::Invocation;
use super::shared::{Replicas, millis};
use crate::sync::lock;

/// The latest WAIT's answer, and the last ticket it covers (see
/// [`GroupCommit::asked`]); no answer before the first WAIT returned.
type Latest = (u64, Option<RedisResult<i64>>);

/// The WAITs of one connection.
pub(crate) struct GroupCommit {
    /// How many grants asked for a WAIT so far: a grant's ticket is this
    /// count once it added itself, and a WAIT covers every ticket taken
    /// before it was sent.
    asked: AtomicU64,
    /// Held while a WAIT is in flight.
    sending: Arc<tokio::sync::Mutex<()>>,
    /// How many scripts were sent on the connection, and how many of them
    /// were answered (or given up): the next WAIT is sent once every
    /// script sent before it was answered, so that it covers them.
    sent: AtomicU64,
    answered: watch::Sender<u64>,
    /// The latest WAIT's answer.
    done: watch::Sender<Latest>,
}

impl GroupCommit {
    fn new() -> GroupCommit {
        GroupCommit {
            asked: AtomicU64::new(0),
            sending: Arc::default(),
            sent: AtomicU64::new(0),
            answered: watch::Sender::new(0),
            done: watch::Sender::new((0, None)),
        }
    }

    /// Sends `invocation` on `connection` (the script loaded on NOSCRIPT),
    /// then, when its answer `granted`, waits for `replicas` with the WAIT
    /// that the connection sends next. Answers as the pipeline `EVALSHA;
    /// WAIT` would: the script's answer and how many replicas acknowledged
    /// it (0 when it granted nothing).
    ///
    /// The WAIT returns within the replica timeout of being sent, and is
    /// sent at once, or when the one in flight (sent just before this grant
    /// asked) returned and the scripts sent before then were answered. The
    /// grant waits for it at most twice the replica timeout from the
    /// script's answer, and then counts as acknowledged by none, whatever
    /// happened to the connection meanwhile.
    pub(crate) async fn grant<C: ConnectionLike + Clone + Send + 'static>(
        self: &Arc<Self>,
        invocation: &Invocation,
        replicas: Replicas,
        granted: &(dyn Fn(&Value) -> bool + Sync),
        connection: &mut C,
    ) -> RedisResult<Value> {
        let answering = Answering::new(self);
        let reply: Value = invocation.invoke_async(connection).await?;
        drop(answering);
        let acknowledged = if granted(&reply) {
            let waiting = self.acknowledged(connection, replicas);
            tokio::time::timeout(replicas.timeout.saturating_mul(2), waiting)
                .await
                .unwrap_or(Ok(0))?
        } else {
            0
        };
        Ok(Value::Array(vec![reply, Value::Int(acknowledged)]))
    }

    /// The answer of the first WAIT on `connection` sent after this call:
    /// the one not yet sent, which this call sends when no WAIT is in
    /// flight, or which the grant that gets the turn next sends.
    async fn acknowledged<C: ConnectionLike + Clone + Send + 'static>(
        self: &Arc<Self>,
        connection: &C,
        replicas: Replicas,
    ) -> RedisResult<i64> {
        let ticket = self.asked.fetch_add(1, Ordering::AcqRel) + 1;
        let mut done = self.done.subscribe();
        loop {
            let answer = covering(&done.borrow_and_update(), ticket);
            if let Some(answer) = answer {
                return answer;
            }
            tokio::select! {
                // Held by `self` as long as this runs: never closed.
                _ = done.changed() => {}
                turn = Arc::clone(&self.sending).lock_owned() => {
                    let answer = covering(&done.borrow_and_update(), ticket);
                    if let Some(answer) = answer {
                        return answer;
                    }
                    self.send_wait(turn, connection.clone(), replicas);
                }
            }
        }
    }

    /// Sends one WAIT covering every ticket taken by then, and publishes
    /// its answer, in a task of its own: a grant that stops waiting never
    /// leaves the others without an answer. `turn` is held until then.
    ///
    /// The WAIT is sent once the scripts sent so far were answered (they
    /// run before it anyway: a client's commands run in order), so that the
    /// grants among them are covered by this WAIT, not the next; or after
    /// the replica timeout, whichever comes first.
    fn send_wait<C: ConnectionLike + Send + 'static>(
        self: &Arc<Self>,
        turn: OwnedMutexGuard<()>,
        mut connection: C,
        replicas: Replicas,
    ) {
        let commit = Arc::clone(self);
        let mut wait = redis::cmd("WAIT");
        wait.arg(replicas.min).arg(millis(replicas.timeout));
        let target = self.sent.load(Ordering::Acquire);
        let mut answered = self.answered.subscribe();
        drop(tokio::spawn(async move {
            // For at most the replica timeout (a caller that stopped polling
            // its grant never counts it answered). Never closed: `commit`
            // holds the sender.
            let scripts = answered.wait_for(|n| *n >= target);
            drop(tokio::time::timeout(replicas.timeout, scripts).await);
            let covers = commit.asked.load(Ordering::Acquire);
            let answer = wait.query_async(&mut connection).await;
            commit.done.send_replace((covers, Some(answer)));
            drop(turn);
        }));
    }
}

/// A script on its way: counted as sent when made, and as answered when
/// dropped (answered, failed, or given up).
struct Answering<'a>(&'a GroupCommit);

impl Answering<'_> {
    fn new(commit: &GroupCommit) -> Answering<'_> {
        commit.sent.fetch_add(1, Ordering::AcqRel);
        Answering(commit)
    }
}

impl Drop for Answering<'_> {
    fn drop(&mut self) {
        self.0.answered.send_modify(|n| *n += 1);
    }
}

/// `latest`'s answer when it covers `ticket`.
fn covering(latest: &Latest, ticket: u64) -> Option<RedisResult<i64>> {
    match latest {
        (covers, Some(answer)) if *covers >= ticket => Some(answer.clone()),
        _ => None,
    }
}

/// The group commit of a runtime's current connection, made again for
/// each new connection (by its generation): a WAIT only counts the writes
/// of its own connection.
#[derive(Default)]
pub(crate) struct Generations(Mutex<Option<(u64, Arc<GroupCommit>)>>);

impl Generations {
    /// The group commit of the connection of `generation`; one of its
    /// own, not kept, for a connection older than the latest seen (a grant
    /// that started before it was replaced).
    pub(crate) fn of(&self, generation: u64) -> Arc<GroupCommit> {
        let mut current = lock(&self.0);
        match current.as_ref() {
            Some((seen, commit)) if *seen == generation => Arc::clone(commit),
            Some((seen, _)) if *seen > generation => Arc::new(GroupCommit::new()),
            _ => {
                let commit = Arc::new(GroupCommit::new());
                *current = Some((generation, Arc::clone(&commit)));
                commit
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_connection_has_its_own_group_commit() {
        let generations = Generations::default();
        let first = generations.of(1);
        assert!(Arc::ptr_eq(&first, &generations.of(1)));
        let second = generations.of(2);
        assert!(!Arc::ptr_eq(&first, &second));
        // A late grant on the older connection leaves the newer one's be.
        assert!(!Arc::ptr_eq(&generations.of(1), &second));
        assert!(Arc::ptr_eq(&second, &generations.of(2)));
    }

    #[test]
    fn a_wait_covers_the_tickets_taken_before_it() {
        let answered = (3, Some(Ok(1)));
        assert_eq!(covering(&answered, 3).map(Result::unwrap), Some(1));
        assert!(covering(&answered, 4).is_none());
        assert!(covering(&(0, None), 1).is_none());
    }
}
