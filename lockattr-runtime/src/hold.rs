//! `hold_at_least`: a lock kept for a minimum time after it was taken
//! (ShedLock's `lockAtLeastFor`), so that a job scheduled on several
//! machines whose clocks differ a little runs once per period.
//!
//! A release before the hold has passed does not delete the lock: it sets
//! the lock's time left to what remains of the hold (rounded up to whole
//! milliseconds), through the extend script, which also tells the lock's
//! waiters when it now ends; the lock then expires. A release after that is
//! the usual one (delete, or hand-over to the oldest waiter).
//!
//! The hold counts from when the request that took the lock was sent, as
//! the lease does: the lock is never given up sooner than `hold_at_least`
//! after that instant. It must fit in the lease (`hold_at_least <=
//! expire`), so that it also holds when the owner stops without releasing:
//! the lease alone then keeps the lock at least as long.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::LockError;
use crate::sync::lock;

/// The hold of one lease.
#[derive(Debug)]
pub(crate) struct Hold {
    /// When the hold of the acquisition ends: known once granted, counted
    /// only once the guard reached its caller (see [`start`](Self::start)).
    granted_end: Option<Instant>,
    /// When a release stops keeping the lock, once the hold counts. Raised
    /// by reentrant nested calls, never lowered.
    end: Mutex<Option<Instant>>,
}

impl Hold {
    /// A hold of `at_least` (zero: none) of a lock taken by a request sent
    /// at `sent`, not yet counting.
    pub(crate) fn new(at_least: Duration, sent: Instant) -> Hold {
        let granted_end = (!at_least.is_zero()).then(|| sent.checked_add(at_least).unwrap_or(sent));
        Hold {
            granted_end,
            end: Mutex::new(None),
        }
    }

    fn end(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        lock(&self.end)
    }

    /// The guard reached its caller: from now on a release keeps the lock
    /// until the hold's end. Until then a release gives it up at once, so a
    /// lock taken for a caller who stopped waiting is not kept for nothing.
    pub(crate) fn start(&self) {
        if let Some(granted) = self.granted_end {
            self.raise(granted);
        }
    }

    /// A reentrant nested call asked for `hold` from `entered`: the hold
    /// ends then at the earliest, and never earlier than it already did.
    pub(crate) fn at_least_until(&self, entered: Instant, hold: Duration) {
        if !hold.is_zero() {
            self.raise(entered.checked_add(hold).unwrap_or(entered));
        }
    }

    fn raise(&self, until: Instant) {
        let mut end = self.end();
        *end = Some(end.map_or(until, |end| end.max(until)));
    }

    /// What remains of the hold now, in whole milliseconds rounded up (what
    /// to leave on the lock); `None` once it has passed, or without a hold.
    pub(crate) fn left(&self) -> Option<Duration> {
        let end = (*self.end())?;
        let left = end.saturating_duration_since(Instant::now());
        (!left.is_zero()).then(|| ceil_ms(left))
    }
}

/// `d` rounded up to whole milliseconds: Redis keeps whole milliseconds,
/// and rounding down would give the lock up before the hold's end.
fn ceil_ms(d: Duration) -> Duration {
    let ms = d.as_nanos().div_ceil(1_000_000);
    Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
}

/// Refuses a hold that does not fit in a lease of `expire`: the lock would
/// not be kept that long if its owner stopped without releasing.
pub(crate) fn check(hold: Duration, expire: Duration) -> Result<(), LockError> {
    if hold > expire {
        return Err(LockError::invalid(
            "hold_at_least",
            format!(
                "{hold:?} is longer than the lease ({expire:?}): the lock would not be kept \
                 that long if its owner stopped without releasing it; raise `expire` to at \
                 least the hold"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_to_whole_milliseconds() {
        let us = Duration::from_micros;
        assert_eq!(ceil_ms(us(1)), us(1_000));
        assert_eq!(ceil_ms(us(1_000)), us(1_000));
        assert_eq!(ceil_ms(us(1_001)), us(2_000));
        assert_eq!(ceil_ms(Duration::from_secs(3)), Duration::from_secs(3));
    }

    #[test]
    fn counts_only_once_started() {
        let sent = Instant::now();
        let hold = Hold::new(Duration::from_secs(60), sent);
        assert_eq!(hold.left(), None, "not started: released at once");
        hold.start();
        let left = hold.left().unwrap();
        assert!(left <= Duration::from_secs(60) && left > Duration::from_secs(59));
    }

    #[test]
    fn no_hold_keeps_nothing() {
        let hold = Hold::new(Duration::ZERO, Instant::now());
        hold.start();
        assert_eq!(hold.left(), None);
        hold.at_least_until(Instant::now(), Duration::ZERO);
        assert_eq!(hold.left(), None);
    }

    #[test]
    fn a_passed_hold_keeps_nothing() {
        let hold = Hold::new(
            Duration::from_millis(1),
            Instant::now() - Duration::from_secs(1),
        );
        hold.start();
        assert_eq!(hold.left(), None);
    }

    #[test]
    fn nested_calls_only_lengthen_it() {
        let now = Instant::now();
        let hold = Hold::new(Duration::from_secs(60), now);
        hold.start();
        hold.at_least_until(now, Duration::from_secs(1));
        assert!(hold.left().unwrap() > Duration::from_secs(59));
        hold.at_least_until(now, Duration::from_secs(120));
        assert!(hold.left().unwrap() > Duration::from_secs(119));
        // A nested hold on a lease without one starts one.
        let plain = Hold::new(Duration::ZERO, now);
        plain.at_least_until(now, Duration::from_secs(5));
        assert!(plain.left().unwrap() > Duration::from_secs(4));
    }

    #[test]
    fn must_fit_in_the_lease() {
        let s = Duration::from_secs;
        assert!(check(s(5), s(5)).is_ok());
        assert!(check(Duration::ZERO, s(5)).is_ok());
        let e = check(s(6), s(5)).unwrap_err().to_string();
        assert!(e.contains("hold_at_least") && e.contains("expire"), "{e}");
    }
}
