//! Group commit of the grants that wait for replicas on one server or a
//! Sentinel group's master: the grants of a runtime share their `WAIT`s
//! instead of queueing one each.
//!
//! `WAIT` blocks the connection it is sent on until the replicas hold
//! every write that connection made so far (or its timeout passed). So the
//! runtime's WAITs go on connections of their own ([`WAITS_IN_FLIGHT`] at
//! most, one WAIT at a time on each), each right after a `PUBLISH` on a
//! channel that nobody listens to ([`GroupCommit::beat`]): a write, which
//! Redis replicates, so the WAIT behind it counts every write the master
//! ran before it, whichever connection sent it.
//!
//! A grant that finds one of those connections idle takes its turn and
//! sends its script, the PUBLISH and the WAIT in one pipeline on it: one
//! round trip, as without batching. A grant that finds them all busy sends
//! its script on the runtime's shared connection, which nothing blocks,
//! and once its answer granted time, it takes a ticket and waits for the
//! first WAIT sent after that, which covers every grant answered before it
//! was sent: the next one, sent as soon as a connection is free. A grant
//! waits for a part of one WAIT and one more, never for one WAIT per grant
//! ahead of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::future::select_all;

use redis::RedisResult;
use tokio::sync::{OwnedMutexGuard, watch};

/// The latest WAIT's answer, and the last ticket it covers (see
/// [`GroupCommit::ticket`]); no answer before the first WAIT returned.
type Latest = (u64, Option<RedisResult<i64>>);

/// How many WAITs of a runtime's grants may be in flight at once, each on a
/// connection of its own. With one, a grant answered just after a WAIT was
/// sent waits for that WAIT's whole round trip before the next is sent;
/// with more, the next goes at once. Row 13 of the bench (150 tasks, the
/// replica 5 ms away each way), acquire p50 against the same without
/// replicas, one run each on a shared machine: 5.8× with one, 5.3× with
/// four, 5.3× with 64 (and ten times the WAITs): the replica's round trip
/// is what is left.
pub(crate) const WAITS_IN_FLIGHT: usize = 4;

/// The right to send a WAIT on one of the connections of the grants'
/// WAITs: at most one is in flight on each.
pub(crate) struct Turn {
    /// Which connection (`0..WAITS_IN_FLIGHT`).
    index: usize,
    _held: OwnedMutexGuard<()>,
}

impl Turn {
    /// Which of the connections of WAITs this turn is for.
    pub(crate) fn index(&self) -> usize {
        self.index
    }
}

/// The WAITs of one runtime's grants.
pub(crate) struct GroupCommit {
    /// How many tickets were taken so far: a grant's ticket is this count
    /// once it added itself, and a WAIT covers every ticket taken before
    /// it was sent.
    asked: AtomicU64,
    /// One per connection of WAITs, held while a WAIT is in flight on it.
    sending: [Arc<tokio::sync::Mutex<()>>; WAITS_IN_FLIGHT],
    /// The latest WAIT's answer.
    done: watch::Sender<Latest>,
    /// `PUBLISH <channel> ""`, sent right before each WAIT.
    beat: redis::Cmd,
}

/// What a grant waiting for its acknowledgement gets next.
pub(crate) enum Next {
    /// The answer of a WAIT that covers its ticket: how many replicas
    /// acknowledged.
    Covered(RedisResult<i64>),
    /// The turn: no WAIT is in flight, and none sent since the ticket was
    /// taken answered; the grant sends the next one.
    Turn(Turn),
}

impl GroupCommit {
    /// The group commit of a runtime whose WAITs follow a `PUBLISH` on
    /// `channel`.
    pub(crate) fn new(channel: &str) -> GroupCommit {
        let mut beat = redis::cmd("PUBLISH");
        beat.arg(channel).arg("");
        GroupCommit {
            asked: AtomicU64::new(0),
            sending: std::array::from_fn(|_| Arc::default()),
            done: watch::Sender::new((0, None)),
            beat,
        }
    }

    /// The write sent right before each WAIT, so that the WAIT counts
    /// every write the master ran before it, on any connection (a WAIT
    /// only counts up to its own connection's last write). A `PUBLISH` on
    /// the Locker's channel for it, `<prefix>replicated`, which no lock's
    /// channel (`<prefix>{name}:wake`) can be and nobody subscribes to.
    pub(crate) fn beat(&self) -> &redis::Cmd {
        &self.beat
    }

    /// The turn of the first connection with no WAIT in flight, if any.
    pub(crate) fn idle(&self) -> Option<Turn> {
        self.sending
            .iter()
            .enumerate()
            .find_map(|(index, sending)| {
                let held = Arc::clone(sending).try_lock_owned().ok()?;
                Some(Turn { index, _held: held })
            })
    }

    /// The tickets a WAIT sent now covers: every one taken so far (their
    /// scripts were answered before it).
    pub(crate) fn covers(&self) -> u64 {
        self.asked.load(Ordering::Acquire)
    }

    /// A ticket for a grant whose script was answered.
    pub(crate) fn ticket(&self) -> u64 {
        self.asked.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The answer of a WAIT that covered the tickets up to `covers`, sent
    /// while `turn` was held; the turn is given up with it. WAITs in flight
    /// at once may answer out of order: the one that covers the most
    /// tickets is kept (any answer of a WAIT that covers a ticket is true
    /// of it).
    pub(crate) fn answered(&self, turn: Turn, covers: u64, answer: RedisResult<i64>) {
        self.done.send_if_modified(|latest| {
            let newer = latest.1.is_none() || covers >= latest.0;
            if newer {
                *latest = (covers, Some(answer));
            }
            newer
        });
        drop(turn);
    }

    /// Waits until a WAIT covers `ticket`, or until a connection of WAITs
    /// is free.
    pub(crate) async fn next(&self, ticket: u64) -> Next {
        let mut done = self.done.subscribe();
        loop {
            if let Some(answer) = covering(&done.borrow_and_update(), ticket) {
                return Next::Covered(answer);
            }
            if let Some(turn) = self.idle() {
                return Next::Turn(turn);
            }
            let free = self
                .sending
                .iter()
                .map(|sending| Box::pin(Arc::clone(sending).lock_owned()));
            tokio::select! {
                // Held by `self` as long as this runs: never closed.
                _ = done.changed() => {}
                (held, index, _) = select_all(free) => {
                    // The WAIT that just gave the turn up may cover it.
                    return match covering(&done.borrow_and_update(), ticket) {
                        Some(answer) => Next::Covered(answer),
                        None => Next::Turn(Turn { index, _held: held }),
                    };
                }
            }
        }
    }
}

/// `latest`'s answer when it covers `ticket`.
fn covering(latest: &Latest, ticket: u64) -> Option<RedisResult<i64>> {
    match latest {
        (covers, Some(answer)) if *covers >= ticket => Some(answer.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_covers_the_tickets_taken_before_it() {
        let answered = (3, Some(Ok(1)));
        assert_eq!(covering(&answered, 3).map(Result::unwrap), Some(1));
        assert!(covering(&answered, 4).is_none());
        assert!(covering(&(0, None), 1).is_none());
    }

    #[tokio::test]
    async fn a_ticket_waits_for_a_wait_sent_after_it() {
        let commit = GroupCommit::new("lockattr:replicated");
        let sent: Vec<_> = std::iter::from_fn(|| commit.idle()).collect();
        assert_eq!(
            sent.len(),
            WAITS_IN_FLIGHT,
            "one WAIT at a time per connection"
        );
        let covers = commit.covers();
        let ticket = commit.ticket();
        // The WAITs in flight were sent before the ticket: they give up
        // their turns without covering it, and the ticket sends the next.
        let mut sent = sent.into_iter();
        let first = sent.next().unwrap();
        let index = first.index();
        commit.answered(first, covers, Ok(1));
        let Next::Turn(next) = commit.next(ticket).await else {
            panic!("covered by a WAIT sent before the ticket");
        };
        assert_eq!(next.index(), index);
        commit.answered(next, commit.covers(), Ok(1));
        // A WAIT sent earlier that answers later does not hide it.
        commit.answered(sent.next().unwrap(), covers, Ok(0));
        assert!(matches!(commit.next(ticket).await, Next::Covered(Ok(1))));
    }
}
