//! What a guard knows about its lease: until when it surely holds the lock,
//! and whether it has lost it.
//!
//! A lease is held until a time this process can only bound from below: the
//! lock was set, or last extended, by a request sent at `sent`, for `ttl`, so
//! the key exists until at least `sent + ttl` (the server's clock and ours
//! run at the same rate; a process paused or a clock stepped breaks that,
//! which is what fencing tokens are for). That bound is `valid_until`.
//!
//! A guard has lost its lock:
//! - when Redis said so (a renewal or an extension found the key gone or
//!   another owner's token in it), at once;
//! - when `valid_until` passes: the lease may have run out. With renewal on,
//!   that means renewals could not reach Redis for a whole lease.
//!
//! Lost is sticky: once observed, it stays, even if a late renewal succeeds.
//!
//! Redis keeps leases in whole milliseconds (a `PX` of 1.9 ms is 1 ms), so
//! every time left this trusts is rounded down to whole milliseconds first
//! ([`whole_ms`]): a guard never counts on the fraction Redis dropped.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::LostReason;
use crate::observe::Report;
use crate::sync::lock;

/// Where a lease stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Held until at least `until`.
    Held { until: Instant },
    /// Lost, for this reason.
    Lost(LostReason),
}

impl Standing {
    /// The reason, once lost.
    pub(crate) fn lost(self) -> Option<LostReason> {
        match self {
            Standing::Lost(reason) => Some(reason),
            Standing::Held { .. } => None,
        }
    }

    /// Until when it holds at least, while held.
    pub(crate) fn held_until(self) -> Option<Instant> {
        match self {
            Standing::Held { until } => Some(until),
            Standing::Lost(_) => None,
        }
    }
}

/// `d` rounded down to whole milliseconds: what Redis keeps of a lease.
pub(crate) fn whole_ms(d: Duration) -> Duration {
    d - Duration::from_nanos(u64::from(d.subsec_nanos() % 1_000_000))
}

/// The shared lease state of a guard and everything that watches it.
#[derive(Debug)]
pub(crate) struct LeaseState {
    inner: Mutex<Inner>,
    /// Blocking waiters for a loss.
    blocked: Condvar,
    /// Async waiters for a loss.
    notify: Notify,
    /// The lease is renewed by the watchdog (what a timeout means).
    renewed: bool,
    /// Who holds it: the loss is reported there, once.
    report: Report,
}

#[derive(Debug)]
struct Inner {
    valid_until: Instant,
    lost: Option<LostReason>,
    /// When the lock was granted (at the latest).
    taken: Instant,
    /// From when it counts as lost: the end of the lease it could vouch
    /// for, or the moment Redis said the lock was not its own.
    lost_at: Option<Instant>,
    /// Renewal stopped at its `renew_for` cap: running out now means that.
    capped: bool,
}

impl LeaseState {
    /// The state of a lease just granted: held until at least
    /// `valid_until`.
    pub(crate) fn granted(valid_until: Instant, renewed: bool, mut report: Report) -> LeaseState {
        report.granted();
        LeaseState {
            inner: Mutex::new(Inner {
                valid_until,
                lost: None,
                taken: Instant::now(),
                lost_at: None,
                capped: false,
            }),
            blocked: Condvar::new(),
            notify: Notify::new(),
            renewed,
            report,
        }
    }

    /// Who holds the lease, for what is reported about it.
    pub(crate) fn report(&self) -> &Report {
        &self.report
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// Redis confirmed the lease: a request sent at `sent` found it owned
    /// with `ttl` left. Finding the token still there proves the lock never
    /// lapsed (once a lease ends, only its owner could write that token
    /// back, and none does), so this holds even if `valid_until` passed
    /// meanwhile; but a loss already observed stays.
    /// The time left is trusted in whole milliseconds, rounded down.
    pub(crate) fn confirmed(&self, sent: Instant, ttl: Duration) {
        let mut inner = self.lock();
        if inner.lost.is_none() {
            inner.valid_until = sent + whole_ms(ttl);
        }
    }

    /// Redis said the lock is not this guard's.
    pub(crate) fn taken(&self) {
        let mut inner = self.lock();
        if inner.lost.is_none() {
            inner.lost = Some(LostReason::Taken);
            inner.lost_at = Some(Instant::now());
            drop(inner);
            self.report.lost(LostReason::Taken);
            self.wake();
        }
    }

    /// Renewal stopped for good: `renew_for` has passed since the lock was
    /// taken. The lease runs out on its own from here (unless extended or
    /// released); when it does, the loss says why. Reported once.
    pub(crate) fn renewal_capped(&self, renew_for: Duration) {
        let mut inner = self.lock();
        if inner.lost.is_none() && !inner.capped {
            inner.capped = true;
            let left = inner.valid_until.saturating_duration_since(Instant::now());
            drop(inner);
            self.report.renewal_capped(renew_for, left);
        }
    }

    /// Marks the lease lost if its time has passed; true when lost.
    fn expired(&self, inner: &mut Inner) -> bool {
        if inner.lost.is_none() && Instant::now() >= inner.valid_until {
            let reason = if inner.capped {
                LostReason::RenewFor
            } else if self.renewed {
                LostReason::Unrenewed
            } else {
                LostReason::Expired
            };
            inner.lost = Some(reason);
            inner.lost_at = Some(inner.valid_until);
            self.report.lost(reason);
            self.wake();
        }
        inner.lost.is_some()
    }

    fn wake(&self) {
        self.blocked.notify_all();
        self.notify.notify_waiters();
    }

    /// Where the lease stands now: held until at least a moment, or lost
    /// and why.
    pub(crate) fn standing(&self) -> Standing {
        let mut inner = self.lock();
        self.expired(&mut inner);
        match inner.lost {
            Some(reason) => Standing::Lost(reason),
            None => Standing::Held {
                until: inner.valid_until,
            },
        }
    }

    /// When the lock was granted (at the latest).
    pub(crate) fn taken_at(&self) -> Instant {
        self.lock().taken
    }

    /// When the lock was taken and from when it counts as lost, once lost.
    pub(crate) fn lost_times(&self) -> Option<(Instant, Instant)> {
        let inner = self.lock();
        inner.lost_at.map(|at| (inner.taken, at))
    }

    /// Resolves once the lock is lost.
    pub(crate) async fn lost(&self) -> LostReason {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            // Registered before checking, so a loss between the check and the
            // wait is not missed.
            notified.as_mut().enable();
            let until = match self.standing() {
                Standing::Lost(reason) => return reason,
                Standing::Held { until } => until,
            };
            tokio::select! {
                () = notified => {}
                () = crate::io::sleep_until(until) => {}
            }
        }
    }

    /// Blocks until the lock is lost or `timeout` has passed.
    pub(crate) fn lost_blocking(&self, timeout: Duration) -> Option<LostReason> {
        let now = Instant::now();
        let end = now.checked_add(timeout);
        let mut inner = self.lock();
        loop {
            if self.expired(&mut inner) {
                return inner.lost;
            }
            let now = Instant::now();
            if end.is_some_and(|end| now >= end) {
                return None;
            }
            let until = match end {
                Some(end) => end.min(inner.valid_until),
                None => inner.valid_until,
            };
            inner = self
                .blocked
                .wait_timeout(inner, until.saturating_duration_since(now))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        Report::new("x".into(), crate::observe::Kind::of(None, "x"))
    }

    #[test]
    fn whole_ms_rounds_down() {
        let us = Duration::from_micros;
        assert_eq!(whole_ms(us(1_999)), us(1_000));
        assert_eq!(whole_ms(us(999)), Duration::ZERO);
        assert_eq!(whole_ms(Duration::from_secs(3)), Duration::from_secs(3));
        assert_eq!(
            whole_ms(Duration::new(5, 123_456_789)),
            Duration::new(5, 123_000_000)
        );
        assert_eq!(
            whole_ms(Duration::MAX),
            Duration::new(u64::MAX, 999_000_000)
        );
    }

    #[test]
    fn a_confirmed_lease_is_trusted_in_whole_milliseconds() {
        let sent = Instant::now();
        let state = LeaseState::granted(sent, false, report());
        state.confirmed(sent, Duration::from_micros(10_900_700));
        assert_eq!(
            state.standing(),
            Standing::Held {
                until: sent + Duration::from_millis(10_900)
            }
        );
    }
}
