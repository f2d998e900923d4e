//! Group commit of the grants that wait for replicas on one server or a
//! Sentinel group's master: the grants of a runtime share their `WAIT`s
//! instead of queueing one each.
//!
//! `WAIT` blocks the connection it is sent on until the replicas hold
//! every write that connection made so far (or its timeout passed). So the
//! runtime's WAITs go on a connection of their own, one at a time, each
//! right after a `PUBLISH` on a channel that nobody listens to
//! ([`GroupCommit::beat`]): a write, which Redis replicates, so the WAIT
//! behind it counts every write the master ran before it, whichever
//! connection sent it.
//!
//! A grant that finds no WAIT in flight takes the turn and sends its
//! script, the PUBLISH and the WAIT in one pipeline on that connection: one
//! round trip, as without batching. A grant that finds a WAIT in flight
//! sends its script on the runtime's shared connection, which nothing
//! blocks, and once its answer granted time, it takes a ticket and waits
//! for the first WAIT sent after that: the next one, sent as soon as the
//! one in flight returned. A grant waits for the rest of the WAIT in
//! flight and one more, never for one WAIT per grant ahead of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redis::RedisResult;
use tokio::sync::{OwnedMutexGuard, watch};

/// The latest WAIT's answer, and the last ticket it covers (see
/// [`GroupCommit::ticket`]); no answer before the first WAIT returned.
type Latest = (u64, Option<RedisResult<i64>>);

/// The right to send the next WAIT: at most one is in flight.
pub(crate) type Turn = OwnedMutexGuard<()>;

/// The WAITs of one runtime's grants.
pub(crate) struct GroupCommit {
    /// How many tickets were taken so far: a grant's ticket is this count
    /// once it added itself, and a WAIT covers every ticket taken before
    /// it was sent.
    asked: AtomicU64,
    /// Held while a WAIT is in flight.
    sending: Arc<tokio::sync::Mutex<()>>,
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
            sending: Arc::default(),
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

    /// The turn, when no WAIT is in flight.
    pub(crate) fn idle(&self) -> Option<Turn> {
        Arc::clone(&self.sending).try_lock_owned().ok()
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
    /// while `turn` was held; the turn is given up with it.
    pub(crate) fn answered(&self, turn: Turn, covers: u64, answer: RedisResult<i64>) {
        self.done.send_replace((covers, Some(answer)));
        drop(turn);
    }

    /// Waits until a WAIT covers `ticket`, or until the turn to send one
    /// is free.
    pub(crate) async fn next(&self, ticket: u64) -> Next {
        let mut done = self.done.subscribe();
        loop {
            if let Some(answer) = covering(&done.borrow_and_update(), ticket) {
                return Next::Covered(answer);
            }
            tokio::select! {
                // Held by `self` as long as this runs: never closed.
                _ = done.changed() => {}
                turn = Arc::clone(&self.sending).lock_owned() => {
                    // The WAIT that just gave the turn up may cover it.
                    return match covering(&done.borrow_and_update(), ticket) {
                        Some(answer) => Next::Covered(answer),
                        None => Next::Turn(turn),
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
    async fn a_ticket_waits_for_the_wait_sent_after_it() {
        let commit = GroupCommit::new("lockattr:replicated");
        let first = commit.idle().expect("no WAIT in flight");
        assert!(commit.idle().is_none(), "one WAIT at a time");
        let covers = commit.covers();
        let ticket = commit.ticket();
        // The WAIT in flight was sent before the ticket: it gives up the
        // turn without covering it, and the ticket sends the next.
        commit.answered(first, covers, Ok(1));
        let Next::Turn(second) = commit.next(ticket).await else {
            panic!("covered by a WAIT sent before the ticket");
        };
        commit.answered(second, commit.covers(), Ok(1));
        assert!(matches!(commit.next(ticket).await, Next::Covered(Ok(1))));
    }
}
