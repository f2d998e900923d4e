//! [`Lease`]: what a held lock is, built once, after the grant.
//!
//! A request is checked into its [`Terms`] (who asks, under which keys,
//! for how long); the wait core takes the lock for them ([`Taken`]); and
//! [`Lease::from_grant`] makes the lease of both, whole: its fencing token,
//! the owner token it is held under, until when it surely holds, its hold,
//! its renewal cap and its entry in the watchdog. Nothing changes a lease
//! afterwards but what happens to the lock (renewed, lost, released).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::backend::shared::{Grant, Owner};
use crate::backend::{Extend, Released};
use crate::hold::Hold;
use crate::inner::Inner;
use crate::layout::Keys;
use crate::local::Turn;
use crate::lost::{LeaseState, whole_ms};
use crate::observe::Report;
use crate::sync::lock;
use crate::{LockError, LostReason, watchdog};

/// A checked request for one name: what its lease will be, before the
/// lock is taken.
pub(crate) struct Terms {
    pub(crate) locker: Arc<Inner>,
    pub(crate) name: String,
    /// The keys to take (a read-write lock's or a semaphore's name the
    /// first of theirs; the grant says which one is held).
    pub(crate) keys: Keys,
    /// The owner token of the first attempt.
    pub(crate) token: String,
    pub(crate) expire: Duration,
    /// Whether the watchdog renews it, and for how long at most.
    pub(crate) renew: bool,
    pub(crate) renew_for: Option<Duration>,
    /// How long a release keeps the lock after it was taken.
    pub(crate) hold_at_least: Duration,
    /// Who holds it, for what is reported about it.
    pub(crate) report: Report,
}

/// What the wait core took for [`Terms`].
pub(crate) struct Taken {
    pub(crate) grant: Grant,
    /// The keys held, when not the terms' own (a reader's own key, the
    /// permit taken).
    pub(crate) keys: Option<Keys>,
    /// The task's turn at the name in this process (a lock on one server
    /// or a Cluster): its release names the next task waiting here.
    pub(crate) turn: Option<Turn>,
}

impl Taken {
    /// A grant of the terms' own keys, with no turn in this process.
    pub(crate) fn of(grant: Grant) -> Taken {
        Taken {
            grant,
            keys: None,
            turn: None,
        }
    }
}

/// What a held lock is: who holds it, under which keys, for how long.
pub(crate) struct Lease {
    locker: Arc<Inner>,
    name: String,
    keys: Keys,
    token: String,
    expire: Duration,
    fencing_token: u64,
    /// Whether the watchdog renews it.
    renew: bool,
    /// The cap on renewal (`renew_for`), and the instant it ends (counted
    /// from the grant). No renewal is sent from then on.
    renew_for: Option<Duration>,
    renew_until: Option<Instant>,
    /// Until when it surely holds, and whether it was lost.
    state: LeaseState,
    /// Its entry in the Locker's watchdog, while watched.
    watch: Mutex<Option<u64>>,
    /// How long a release keeps the lock after it was taken.
    hold: Hold,
    /// Its task's turn at the name in this process: its release names the
    /// next task waiting here.
    turn: Mutex<Option<Turn>>,
}

impl Lease {
    /// The lease of `terms`, just taken by a request sent at `sent` (or
    /// handed over by a release that ran after `sent`), entered in the
    /// watchdog when it is renewed.
    ///
    /// A lease handed over started at the release, which may be long after
    /// `sent`: its `valid_until` counted from `sent` is safe but short. When
    /// it would cut more than a tenth of the lease, the watchdog reads the
    /// lease's time left once to make it exact (a renewed lease is renewed
    /// at once instead), in the background: the hand-over itself stays a
    /// single message.
    pub(crate) fn from_grant(terms: Terms, taken: Taken) -> Arc<Lease> {
        let Terms {
            locker,
            name,
            keys,
            token: _,
            expire,
            renew,
            renew_for,
            hold_at_least,
            report,
        } = terms;
        let Taken {
            grant:
                Grant {
                    fencing_token,
                    sent,
                    handed,
                    token,
                },
            keys: held,
            turn,
        } = taken;
        let trusted = trusted(expire, locker.backend.drift(expire));
        let lease = Arc::new(Lease {
            keys: held.unwrap_or(keys),
            token,
            expire,
            fencing_token,
            renew,
            renew_for,
            renew_until: renew_for.and_then(|renew_for| Instant::now().checked_add(renew_for)),
            state: LeaseState::granted(sent + trusted, renew, report),
            watch: Mutex::new(None),
            hold: Hold::new(hold_at_least, sent),
            turn: Mutex::new(turn),
            locker,
            name,
        });
        let watchdog = &lease.locker.watchdog;
        let watch = if renew {
            let period = watchdog::period(expire);
            Some(watchdog.watch(&lease.locker.backend, &lease, sent + period, Some(period)))
        } else if handed && sent.elapsed() > expire / 10 {
            Some(watchdog.watch(&lease.locker.backend, &lease, Instant::now(), None))
        } else {
            None
        };
        *lock(&lease.watch) = watch;
        lease
    }

    /// The Locker it was taken with.
    pub(crate) fn locker(&self) -> &Arc<Inner> {
        &self.locker
    }

    /// The lock's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The keys it holds.
    pub(crate) fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The lease asked for.
    pub(crate) fn expire(&self) -> Duration {
        self.expire
    }

    /// The owner token it is held under.
    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// Its fencing token.
    pub(crate) fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// Whether the watchdog renews it.
    pub(crate) fn renews(&self) -> bool {
        self.renew
    }

    /// Until when it surely holds, and whether it was lost.
    pub(crate) fn state(&self) -> &LeaseState {
        &self.state
    }

    /// How long a release keeps the lock.
    pub(crate) fn hold(&self) -> &Hold {
        &self.hold
    }
}

/// How long a lease of `expire` is trusted from when its request was sent:
/// what Redis keeps of it (whole milliseconds, rounded down), less the
/// drift allowance, rounded down to whole milliseconds.
fn trusted(expire: Duration, drift: Duration) -> Duration {
    whole_ms(whole_ms(expire).saturating_sub(drift))
}

impl crate::watchdog::Renewable for Lease {
    fn keys(&self) -> &Keys {
        &self.keys
    }
    fn token(&self) -> &str {
        &self.token
    }
    fn expire(&self) -> Duration {
        self.expire
    }
    fn renew_for(&self) -> Option<Duration> {
        self.renew_for
    }
    fn renew_until(&self) -> Option<Instant> {
        self.renew_until
    }
    fn state(&self) -> &LeaseState {
        &self.state
    }
    fn confirmed(&self, sent: Instant, left: Duration) {
        self.state.confirmed(sent, left);
        // The tasks of this process waiting for it wait that much longer
        // before they go to Redis on their own.
        if let Some(turn) = lock(&self.turn).as_mut() {
            turn.held(sent, left);
        }
    }
}

impl Lease {
    /// Who the backend's requests are for.
    fn owner(&self) -> Owner<'_> {
        Owner {
            keys: &self.keys,
            token: &self.token,
        }
    }

    fn not_owned(&self) -> LockError {
        LockError::NotOwned {
            name: self.name.clone(),
        }
    }

    pub(crate) fn lost_error(&self, reason: LostReason) -> LockError {
        LockError::Lost {
            name: self.name.clone(),
            reason,
            lost_after: self
                .state
                .lost_times()
                .map(|(taken, at)| whole_ms(at.saturating_duration_since(taken))),
            ran_on: None,
        }
    }

    /// [`lost_error`](Self::lost_error) for a body that ran to its end:
    /// with how long it ran on after the loss.
    pub(crate) fn lost_in_body(&self, reason: LostReason) -> LockError {
        let mut error = self.lost_error(reason);
        if let LockError::Lost { ran_on, .. } = &mut error {
            *ran_on = self
                .state
                .lost_times()
                .map(|(_, at)| whole_ms(at.elapsed()));
        }
        error
    }

    /// Leaves the watchdog: no renewal starts after this returns.
    pub(crate) fn unwatch(&self) {
        let id = lock(&self.watch).take();
        if let Some(id) = id {
            self.locker.watchdog.unwatch(id);
        }
    }

    /// An addition to the lease, sent now (see [`Extend::Add`]): until when
    /// the lease surely holds, or now when it is not known to.
    pub(crate) fn add(&self) -> Extend {
        Extend::Add {
            held_until: self
                .state
                .standing()
                .held_until()
                .unwrap_or_else(Instant::now),
        }
    }

    /// Releases the lock. A release whose answer was lost with its
    /// connection is sent again; when the re-send finds the lock no longer
    /// this token's (and its fence counter still near this fencing token:
    /// not started again after Redis lost the lock), the first try may have
    /// released it, or the lease may have run out first. It counts as
    /// released when the first try was sent while the lease surely held
    /// (not lost, before `valid_until`): the work under the lock then
    /// finished inside its lease, which is what exclusion needs. Otherwise
    /// it is [`LockError::NotOwned`].
    ///
    /// Within its `hold_at_least`, a release keeps the lock instead: its
    /// time left becomes what remains of the hold (see [`crate::hold`]).
    pub(crate) async fn release(&self) -> Result<(), LockError> {
        if let Some(left) = self.hold.left() {
            let left = left.min(self.locker.max_lease);
            return self.extend(left, Extend::Hold).await;
        }
        let in_lease = self.state.standing().held_until().is_some();
        let turn = lock(&self.turn).take();
        let backend = &self.locker.backend;
        let released = crate::local::release(
            backend,
            (self.owner(), self.fencing_token),
            (&self.name, self.expire),
            turn,
            backend.replicas().wanted(),
        )
        .await?;
        self.released(released, in_lease)
    }

    /// What a release that found `released` means for this lease;
    /// `in_lease`: the release was sent while the lease surely held.
    pub(crate) fn released(&self, released: Released, in_lease: bool) -> Result<(), LockError> {
        match released {
            Released::Done => Ok(()),
            Released::Unsure if in_lease => Ok(()),
            Released::Unsure | Released::NotOwned => {
                self.state.taken();
                Err(self.not_owned())
            }
        }
    }

    pub(crate) async fn extend(&self, by: Duration, how: Extend) -> Result<(), LockError> {
        // Redis counts whole milliseconds: `by` is rounded down, never up.
        if by < Duration::from_millis(1) {
            return Err(LockError::invalid(
                "lease extension",
                "it must be at least a millisecond (Redis counts whole milliseconds)",
            ));
        }
        let max_lease = self.locker.max_lease;
        if by > max_lease {
            return Err(LockError::invalid(
                "lease extension",
                format!(
                    "{by:?} is longer than the Locker's max_lease ({max_lease:?}); is the unit \
                     right? For long work, renew a short lease instead"
                ),
            ));
        }
        let sent = Instant::now();
        match self
            .locker
            .backend
            .extend(
                self.owner(),
                (by, how),
                (&self.name, self.expire, max_lease),
            )
            .await?
        {
            Some(left) => {
                crate::watchdog::Renewable::confirmed(self, sent, left);
                Ok(())
            }
            None => {
                self.state.taken();
                Err(self.not_owned())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_trusted_in_whole_milliseconds() {
        let us = Duration::from_micros;
        // Redis keeps 1 ms of a 1.9 ms lease.
        assert_eq!(trusted(us(1_900), Duration::ZERO), us(1_000));
        assert_eq!(trusted(us(10_000_999), Duration::ZERO), us(10_000_000));
        // The drift comes off what Redis keeps; the rest is rounded down.
        assert_eq!(trusted(us(1_000_900), us(12_300)), us(987_000));
        assert_eq!(trusted(us(1_000), us(3_000)), Duration::ZERO);
    }
}
