//! What every deployment of the backend shares: the answers of attempts,
//! renewals, extensions and releases, and the timing of retries. It sits
//! below every other file of `backend/`.

use std::time::{Duration, Instant};

use crate::LockError;
use crate::layout::Keys;

/// How long to wait for Redis.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// Opening a connection, handshake included.
    pub(crate) connect: Duration,
    /// One command's answer.
    pub(crate) response: Duration,
}

impl Timeouts {
    /// How long finding a Sentinel group's master may take: asking a
    /// sentinel, then checking the master's role on a connection to it.
    pub(crate) fn locate(&self) -> Duration {
        (self.connect + self.response) * 2
    }
}

/// How many replicas must hold a grant before its caller is told
/// (`LockerBuilder::min_replicas`), and how long the master waits for them.
///
/// Redis replicates asynchronously: a grant that only the master holds is
/// gone when a replica that never saw it is promoted. With `min` above
/// zero, every script that grants time (an acquisition, the confirmation
/// of a hand-over, a renewal, an extension) is followed by `WAIT min
/// timeout` in the same pipeline, on a connection of its own (WAIT blocks
/// the connection it is sent on), and the grant only counts when `min`
/// replicas acknowledged it. On one server or a Sentinel group, the grants
/// of a runtime share their WAITs instead (see `group_commit`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Replicas {
    /// How many replicas must acknowledge; 0: none (no WAIT is sent).
    pub(crate) min: u32,
    /// How long the master waits for them.
    pub(crate) timeout: Duration,
}

impl Replicas {
    /// Whether grants wait for replicas.
    pub(crate) fn wanted(self) -> bool {
        self.min > 0
    }

    /// Refuses a lease too short for this wait: a grant may wait for its
    /// replicas for the replica timeout, which comes off the lease.
    pub(crate) fn check(self, expire: Duration) -> Result<(), LockError> {
        if self.wanted() && self.timeout.saturating_mul(2) > expire {
            return Err(LockError::invalid(
                "expire",
                format!(
                    "a lease of {expire:?} is too short for the Locker's replica_timeout \
                     ({:?}): waiting for replicas may take that long, and it comes off the \
                     lease; use a lease at least twice the replica timeout, or a shorter \
                     `replica_timeout`",
                    self.timeout
                ),
            ));
        }
        Ok(())
    }

    /// `Ok` when `acknowledged` replicas are enough, else the error that
    /// says so for `server`.
    pub(crate) fn enough(self, server: &str, acknowledged: i64) -> Result<(), LockError> {
        let acknowledged = u32::try_from(acknowledged.max(0)).unwrap_or(u32::MAX);
        if acknowledged >= self.min {
            return Ok(());
        }
        Err(LockError::Replicas {
            server: server.to_owned(),
            acknowledged,
            wanted: self.min,
            waited: self.timeout,
            held_until: None,
        })
    }
}

/// A grant's answer and `WAIT`'s: how many replicas acknowledged it.
#[derive(Debug)]
pub(crate) struct Acked<T> {
    /// The script's answer.
    pub(crate) reply: T,
    /// How many replicas held every write of the connection when WAIT
    /// returned.
    pub(crate) replicas: i64,
}

impl<T: redis::FromRedisValue> redis::FromRedisValue for Acked<T> {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        let (reply, replicas) = redis::FromRedisValue::from_redis_value(v)?;
        Ok(Acked { reply, replicas })
    }
}

/// How often a waiter asks Redis whatever it hears: a hand-over whose
/// message never arrived is noticed this long after it at most.
pub(crate) const RECHECK: Duration = Duration::from_secs(1);

/// What one attempt found: the one answer of every kind (a lock, a side of
/// a read-write lock, a permit, a set) on every deployment. Each kind's
/// backend file decodes its own reply into it.
#[derive(Debug)]
pub(crate) enum Attempt {
    /// Taken: the fencing token (a set's first name's), the permit's index
    /// (0 for the other kinds) and each name of a set's fencing token
    /// (empty for one name).
    Taken {
        fencing_token: u64,
        slot: usize,
        of_set: Vec<u64>,
    },
    /// Held; the first holder's lease ends in this much time, if known.
    Busy(Option<Duration>),
    /// Nothing written: ask again at once (a semaphore asked to look at
    /// every permit).
    Again,
    /// Refused for good (nothing written by this attempt).
    Refused(LockError),
}

impl Attempt {
    /// One name taken, with its fencing token and the permit's index.
    pub(crate) fn taken(fencing_token: u64, slot: usize) -> Attempt {
        Attempt::Taken {
            fencing_token,
            slot,
            of_set: Vec::new(),
        }
    }

    /// Held, the first holder's lease ending in `left` ms (unknown when
    /// negative).
    pub(crate) fn busy_ms(left: i64) -> Attempt {
        Attempt::Busy(u64::try_from(left).ok().map(Duration::from_millis))
    }

    /// Whether `scripts::ACQUIRE`'s reply is a grant.
    pub(crate) fn granted(&(taken, _): &(i64, i64)) -> bool {
        taken == 1
    }

    /// From `scripts::ACQUIRE`'s reply.
    pub(crate) fn from_reply((taken, value): (i64, i64)) -> Attempt {
        if taken == 1 {
            Attempt::taken(u64::try_from(value).unwrap_or(0), 0)
        } else {
            Attempt::busy_ms(value)
        }
    }
}

/// Who a request is for: a hold's keys and its owner token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Owner<'a> {
    pub(crate) keys: &'a Keys,
    pub(crate) token: &'a str,
}

/// A waiter of the releasing process that a release of a lock hands the
/// lock to when nobody is queued in Redis, or queues last otherwise (see
/// `scripts::RELEASE` and `crate::local`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Successor<'a> {
    /// Its owner token.
    pub(crate) token: &'a str,
    /// The lease it asked for.
    pub(crate) lease: Duration,
    /// How much longer it waits.
    pub(crate) wait: Duration,
    /// Who it is recorded as (`<host>\n<pid>\n<label>`).
    pub(crate) holder: &'a str,
}

/// A lock taken by an acquisition loop.
#[derive(Debug)]
pub(crate) struct Grant {
    /// Its fencing token.
    pub(crate) fencing_token: u64,
    /// When the request that took it was sent: the lease started after.
    pub(crate) sent: Instant,
    /// Whether a release handed it over while this caller waited.
    pub(crate) handed: bool,
    /// The owner token it is held under.
    pub(crate) token: String,
}

/// One lease in a `Backend::renew` batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renewal<'a> {
    /// The keys of the hold: its holder key, and those the renewal keeps
    /// alive with it (fence counter, index of holders).
    pub(crate) keys: &'a Keys,
    /// Its owner's token.
    pub(crate) token: &'a str,
    /// The lease to raise it to; `None` only reads the time left.
    pub(crate) lease: Option<Duration>,
    /// The guard's lease (for a Redlock's drift and node timeout).
    pub(crate) expire: Duration,
}

/// How `Backend::extend` changes a lease.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Extend {
    /// Add to the time left. Adding is not safe to repeat, so a request
    /// whose answer was lost with its connection is sent again as a raise
    /// to `held_until + by` (counted from when it is sent again): until
    /// when the guard knew its lease held when it sent the first try (the
    /// send time when it knew of none). A first try that ran left at least
    /// that much, so the raise leaves it alone: one of the two applies,
    /// never both.
    Add {
        /// Until when the lease surely held when the first try was sent.
        held_until: Instant,
    },
    /// Replace the time left (safe to repeat).
    Set,
    /// Replace the time left, and tell the lock's waiters when it now ends
    /// (a release within `hold_at_least`: the lock is kept until then, and
    /// expires). Safe to repeat. The notice, `-:0:<time left in ms>` on the
    /// lock's channel, names no waiter: each moves its next check to that
    /// moment (see `Wake::Rearm`), instead of the end of the lease it was
    /// told of before.
    Hold,
}

impl Extend {
    /// The mode argument of `scripts::EXTEND`.
    pub(crate) fn mode(self) -> &'static str {
        match self {
            Extend::Add { .. } => "add",
            Extend::Set => "set",
            Extend::Hold => "hold",
        }
    }
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The token owned the lock; it is deleted or handed over.
    Done,
    /// The token did not own the lock: nothing was changed.
    NotOwned,
    /// The first try's answer was lost with its connection, and the
    /// release sent again found the lock not the token's, with its fence
    /// counter still near the token's fencing token: the first try may
    /// have released it, or the lease had run out. The guard tells which it
    /// counts as (see `Lease::release`).
    Unsure,
}

/// What a renewal found for one lease.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Renewed {
    /// Still owned, with this much time left.
    Left(Duration),
    /// Not owned any more: deleted, expired or taken.
    NotOwned,
    /// Not known: the node holding it did not answer (try again).
    Unknown,
}

impl Renewed {
    /// From a script's "time left in ms, or -1 when not owned".
    pub(crate) fn from_ms(ms: i64) -> Renewed {
        left_of(ms).map_or(Renewed::NotOwned, Renewed::Left)
    }
}

/// A millisecond after `lease` from `now`: when a lease that has `lease`
/// left has surely ended. Far in the future for absurd leases.
pub(crate) fn soon_after(now: Instant, lease: Duration) -> Instant {
    now.checked_add(lease.saturating_add(Duration::from_millis(1)))
        .unwrap_or(now + crate::layout::MAX_EXPIRE)
}

/// How often a waiter that cannot subscribe to release notices checks the
/// lock (a server whose ACL forbids SUBSCRIBE, a subscriber connection that
/// cannot be opened).
pub(crate) const FALLBACK_PAUSE: Duration = Duration::from_millis(50);

/// The next check after a notice at `now` that another waiter took the
/// name, whose lease is `lease` (see the module docs of `crate::wait`): for
/// one name, when that lease ends (later or earlier than planned, never
/// after `recheck`); for a set, which waits on several names, never later
/// than planned.
pub(crate) fn rearmed(
    now: Instant,
    wake_at: Instant,
    (recheck, lease): (Instant, Duration),
    one_name: bool,
    polling: bool,
) -> Instant {
    if one_name {
        next_check(now, recheck, Some(lease), polling)
    } else {
        wake_at.min(soon_after(now, lease))
    }
}

/// When a waiter asks Redis again: at `recheck` (its deadline or a second
/// from now), when a lease of `lease` from `now` ends, and soon when
/// `polling`.
pub(crate) fn next_check(
    now: Instant,
    recheck: Instant,
    lease: Option<Duration>,
    polling: bool,
) -> Instant {
    let mut at = recheck;
    if let Some(lease) = lease {
        at = at.min(soon_after(now, lease));
    }
    if polling {
        at = at.min(soon_after(now, FALLBACK_PAUSE));
    }
    at
}

/// A script's "time left in ms, or -1 when not owned".
pub(crate) fn left_of(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

/// `scripts::EXTEND`'s answer: the time left, `None` when not owned, or
/// the refusal of a lease longer than `max_lease`.
pub(crate) fn extended(reply: i64, max_lease: Duration) -> Result<Option<Duration>, LockError> {
    if reply == -2 {
        return Err(LockError::invalid(
            "lease extension",
            format!(
                "the lease would have more than the Locker's max_lease ({max_lease:?}) left; \
                 extend by less, or raise `LockerBuilder::max_lease`"
            ),
        ));
    }
    Ok(left_of(reply))
}

/// Whole milliseconds, rounded down, saturating (a retention or a wait may
/// be zero).
pub(crate) fn whole_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Milliseconds for Redis: at least 1 (PX 0 is an error), saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// The first pause before trying again after a connection error.
pub(crate) const RETRY_FIRST: Duration = Duration::from_millis(5);

/// The longest pause between tries of a waiter while Redis (or a Redlock
/// majority) cannot be reached.
pub(crate) const RETRY_MAX: Duration = Duration::from_millis(250);

/// Pauses between tries after connection errors: from [`RETRY_FIRST`],
/// doubling up to a ceiling, each pause drawn between half and all of its
/// step, so that the waiters of many processes do not come back together.
pub(crate) struct Backoff {
    step: Duration,
    max: Duration,
    /// Each pause drawn at random (all but the explorer's, whose schedules
    /// replay exactly).
    jitter: bool,
}

impl Backoff {
    pub(crate) fn new(max: Duration) -> Backoff {
        Backoff {
            step: RETRY_FIRST,
            max,
            jitter: true,
        }
    }

    /// The same pauses, each at its longest.
    #[cfg(test)]
    pub(crate) fn without_jitter(self) -> Backoff {
        Backoff {
            jitter: false,
            ..self
        }
    }

    /// The current step, for the explorer's fingerprints.
    #[cfg(test)]
    pub(crate) fn step(&self) -> Duration {
        self.step
    }

    /// Back to the first step (after a success).
    pub(crate) fn reset(&mut self) {
        self.step = RETRY_FIRST;
    }

    /// The next pause.
    pub(crate) fn next(&mut self) -> Duration {
        let step = self.step;
        self.step = (self.step * 2).min(self.max);
        let fraction = if self.jitter { random_fraction() } else { 1.0 };
        step / 2 + (step / 2).mul_f64(fraction)
    }
}

/// A random fraction in 0..=1; 1 without randomness (pauses are then at
/// their longest: slower, still correct).
pub(crate) fn random_fraction() -> f64 {
    let mut bytes = [0_u8; 4];
    getrandom::fill(&mut bytes)
        .map(|()| f64::from(u32::from_le_bytes(bytes)) / f64::from(u32::MAX))
        .unwrap_or(1.0)
}

/// A script's answer that is 0 when there is nothing to report, else a
/// `T` (what an operator's call reads).
pub(crate) struct OrNone<T>(pub(crate) Option<T>);

impl<T: redis::FromRedisValue> redis::FromRedisValue for OrNone<T> {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        match v {
            redis::Value::Int(0) => Ok(OrNone(None)),
            v => T::from_redis_value(v).map(|t| OrNone(Some(t))),
        }
    }
}

/// An operator's forced release's answer: 0 when nothing was freed, else
/// `{1, <holder>}`, the holder it was taken from.
pub(crate) struct Forced(pub(crate) Option<String>);

impl redis::FromRedisValue for Forced {
    fn from_redis_value(v: redis::Value) -> Result<Self, redis::ParsingError> {
        let freed: OrNone<(i64, String)> = redis::FromRedisValue::from_redis_value(v)?;
        Ok(Forced(freed.0.map(|(_, who)| who)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_ceiling_with_jitter() {
        let mut backoff = Backoff::new(RETRY_MAX);
        let mut steps = Vec::new();
        for _ in 0..10 {
            let step = backoff.step;
            let pause = backoff.next();
            assert!(pause >= step / 2 && pause <= step, "{pause:?} for {step:?}");
            steps.push(step);
        }
        assert_eq!(steps[0], RETRY_FIRST);
        assert_eq!(steps[1], RETRY_FIRST * 2);
        assert_eq!(*steps.last().unwrap(), RETRY_MAX);
        backoff.reset();
        assert_eq!(backoff.step, RETRY_FIRST);
    }

    #[test]
    fn a_rearm_moves_one_names_check_to_the_new_lease_and_a_sets_only_earlier() {
        let now = Instant::now();
        let (soon, recheck) = (now + Duration::from_millis(50), now + RECHECK);
        let later = Duration::from_millis(500);
        // One name: the holder whose lease was watched is gone; the new
        // holder's lease is what counts, even when it ends later.
        let one = rearmed(now, soon, (recheck, later), true, false);
        assert_eq!(one, now + later + Duration::from_millis(1));
        // Never past the recheck.
        let long = rearmed(now, soon, (recheck, Duration::from_secs(60)), true, false);
        assert_eq!(long, recheck);
        // A set: another of its names may still end first.
        assert_eq!(rearmed(now, soon, (recheck, later), false, false), soon);
        let earlier = rearmed(
            now,
            recheck,
            (recheck, Duration::from_millis(5)),
            false,
            false,
        );
        assert_eq!(earlier, now + Duration::from_millis(6));
    }

    #[test]
    fn a_polling_waiter_checks_soon_whatever_the_lease() {
        let now = Instant::now();
        let at = rearmed(now, now + RECHECK, (now + RECHECK, RECHECK), true, true);
        assert_eq!(at, now + FALLBACK_PAUSE + Duration::from_millis(1));
    }
}
