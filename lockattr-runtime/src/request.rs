//! A lock's request: [`Locker::lock`] makes a [`LockBuilder`], which checks
//! the request and takes the lock. The guard of a lease just taken is made
//! here ([`granted`]), for each name of a lock set too.

use std::borrow::Cow;
use std::time::Duration;

use tracing::Instrument;

use crate::guard::LockGuard;
use crate::hold::{self};
use crate::layout::Keys;
use crate::layout::{MAX_EXPIRE, new_token};
use crate::lease::{Lease, Terms};
use crate::locker::setters;
use crate::observe::{Acquiring, Kind, Report};
use crate::wait;
use crate::{LockError, Locker, io};

/// Default lease of a lock: 10 seconds.
pub const DEFAULT_EXPIRE: Duration = Duration::from_secs(10);
/// Default time to wait for a busy lock: 10 seconds.
pub const DEFAULT_ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest acquire timeout accepted: 30 days (`Duration::MAX` is
/// accepted too, and waits this long). Longer waits are almost always a
/// unit mistake.
pub const MAX_ACQUIRE_TIMEOUT: Duration = MAX_EXPIRE;

impl Locker {
    /// Starts a lock request for `name`; finish it with
    /// [`acquire`](LockBuilder::acquire) or
    /// [`acquire_blocking`](LockBuilder::acquire_blocking).
    ///
    /// `locker.lock("x")` and `#[redis_lock(name = "x")]` are the same lock.
    /// Any UTF-8 text is a valid name, except the empty string.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("report:2024").acquire_blocking()?;
    /// // ... work ...
    /// guard.release_blocking()?;
    /// # Ok(()) }
    /// ```
    pub fn lock(&self, name: impl AsRef<str>) -> LockBuilder<'_> {
        LockBuilder {
            locker: self,
            name: name.as_ref().to_owned(),
            expire: DEFAULT_EXPIRE,
            acquire_timeout: DEFAULT_ACQUIRE_TIMEOUT,
            renew: None,
            renew_for: None,
            hold_at_least: Duration::ZERO,
            kind: None,
            permits: None,
            rw: None,
        }
    }
}

/// A lock request: the name, lease and wait of one acquisition.
///
/// Made by [`Locker::lock`]; finish it with [`acquire`](Self::acquire) or
/// [`acquire_blocking`](Self::acquire_blocking).
///
/// ```no_run
/// # use lockattr_runtime::Locker;
/// # use std::time::Duration;
/// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
/// let guard = locker.lock("nightly-report")
///     .expire(Duration::from_secs(60))
///     .acquire_timeout(Duration::ZERO) // one attempt: skip if someone else runs it
///     .acquire()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a lock request does nothing until `.acquire()` or `.acquire_blocking()`"]
pub struct LockBuilder<'a> {
    locker: &'a Locker,
    name: String,
    expire: Duration,
    acquire_timeout: Duration,
    /// As set with `renew(..)`: `Some(false)` with `renew_for` is refused.
    renew: Option<bool>,
    renew_for: Option<Duration>,
    hold_at_least: Duration,
    kind: Option<Cow<'static, str>>,
    /// A semaphore's number of permits ([`Locker::semaphore`]); `None`: a lock.
    pub(crate) permits: Option<u32>,
    /// The side of a read-write lock ([`Locker::read_lock`],
    /// [`Locker::write_lock`]); `None`: a lock or a semaphore.
    pub(crate) rw: Option<crate::layout::RwMode>,
}

impl LockBuilder<'_> {
    setters! {
        /// The lease: the lock frees itself this long after it is taken unless it
        /// is released or extended first (default 10 s, at most 30 days, not zero).
        ///
        /// ```
        /// # use lockattr_runtime::Locker;
        /// # use std::time::Duration;
        /// # let locker = Locker::new("redis://127.0.0.1/").unwrap();
        /// let request = locker.lock("x").expire(Duration::from_secs(30));
        /// ```
        pub fn expire(expire: Duration) => expire = expire;

        /// How long to wait while another owner holds the lock (default 10 s,
        /// at most [`MAX_ACQUIRE_TIMEOUT`], 30 days; `Duration::MAX` waits that
        /// long). Zero makes exactly one attempt.
        ///
        /// ```
        /// # use lockattr_runtime::Locker;
        /// # use std::time::Duration;
        /// # let locker = Locker::new("redis://127.0.0.1/").unwrap();
        /// let request = locker.lock("x").acquire_timeout(Duration::from_millis(250));
        /// ```
        pub fn acquire_timeout(timeout: Duration) => acquire_timeout = timeout;

        /// Renews the lease while the guard is held (default off): every
        /// `expire / 3` the lock's time left is raised back to `expire`, so the
        /// work may take as long as it needs, while the lock of a crashed owner
        /// still frees itself within `expire`.
        ///
        /// One task per Locker renews all its locks, several per round trip; it
        /// stops before [`LockGuard::release`] returns, and when a guard is
        /// dropped. A renewal only touches a lock that still holds this guard's
        /// token: a released, expired or taken lock is never brought back. When
        /// a renewal finds the lock gone, or none gets through for a whole
        /// lease, the guard is marked lost ([`LockGuard::is_lost`]).
        ///
        /// ```no_run
        /// # use lockattr_runtime::Locker;
        /// # use std::time::Duration;
        /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
        /// let guard = locker
        ///     .lock("rebuild-search-index")
        ///     .expire(Duration::from_secs(15)) // freed within 15 s if this process dies
        ///     .renew(true)                     // held for as long as the work takes
        ///     .acquire()
        ///     .await?;
        /// # Ok(()) }
        /// ```
        pub fn renew(renew: bool) => renew = Some(renew);

        /// Caps renewal: the lease is renewed as with [`renew`](Self::renew)
        /// (which this turns on), but no renewal is sent once `renew_for` has
        /// passed since the lock was taken. The lease then runs out on its
        /// own, at most one `expire` later, and the guard turns lost
        /// ([`LockGuard::is_lost`], [`LockGuard::lost`], reason
        /// [`LostReason::RenewFor`](crate::LostReason::RenewFor)): a stuck
        /// holder cannot keep the lock forever, while one that crashes still
        /// frees it within `expire`.
        ///
        /// - A release before the lease has run out releases as usual, cap
        ///   passed or not.
        /// - [`LockGuard::extend`] is not capped: an explicit extension is the
        ///   holder saying it is still working, and it raises the lease even
        ///   after `renew_for` (renewal stays stopped).
        /// - The time counts from when the lock was granted to this guard.
        ///   A cap shorter than `expire / 3` (the renewal period) means the
        ///   lease is never renewed.
        /// - When renewal stops, a `lockattr` INFO event says so
        ///   (`lock renewal stopped: ...`).
        ///
        /// At acquire, a cap under a millisecond (zero included) or longer than
        /// 30 days, or one together with `.renew(false)`, is refused with
        /// [`LockError::InvalidInput`].
        ///
        /// ```no_run
        /// # use lockattr_runtime::Locker;
        /// # use std::time::Duration;
        /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
        /// let guard = locker
        ///     .lock("import")
        ///     .expire(Duration::from_secs(30))        // freed within 30 s if this process dies
        ///     .renew_for(Duration::from_secs(3600))   // renewed for at most an hour
        ///     .acquire()
        ///     .await?;
        /// // ... the import: if it hangs, renewal stops after an hour, the lock
        /// // frees itself within 30 s more, and `guard.lost()` resolves ...
        /// guard.release().await?;
        /// # Ok(()) }
        /// ```
        pub fn renew_for(renew_for: Duration) => renew_for = Some(renew_for);

        /// Keeps the lock at least this long after it was taken, even when it
        /// is released sooner (default zero: none; ShedLock's
        /// `lockAtLeastFor`). A job scheduled on several machines, whose clocks
        /// differ by a little, then runs once per period: a machine that comes
        /// late finds the lock still held by the one that ran it, however fast
        /// that run was.
        ///
        /// A release (explicit, or by dropping the guard) before that time has
        /// passed does not delete the lock: it sets the lock's time left to what
        /// remains of the hold, counted from when the acquiring request was
        /// sent, and the lock then expires; waiters are told when, and take it
        /// at that moment. A release after that is the usual one. With
        /// [`renew`](Self::renew), renewal goes on while the guard is held and
        /// stops at the release, as always. A guard that no longer owns the
        /// lock changes nothing.
        ///
        /// It must fit in the lease (`hold_at_least <= expire`), so that the
        /// lock is kept that long even when its owner stops without releasing
        /// it; a longer hold is refused with [`LockError::InvalidInput`].
        ///
        /// ```no_run
        /// # use lockattr_runtime::Locker;
        /// # use std::time::Duration;
        /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
        /// // Every replica calls this each minute; the report is built once per minute.
        /// if let Ok(guard) = locker
        ///     .lock("report:12:05")
        ///     .expire(Duration::from_secs(60))
        ///     .hold_at_least(Duration::from_secs(30)) // kept 30 s even if built in 1 s
        ///     .acquire_timeout(Duration::ZERO)
        ///     .acquire()
        ///     .await
        /// {
        ///     // ... build the report ...
        ///     guard.release().await?; // the lock stays until 30 s after it was taken
        /// }
        /// # Ok(()) }
        /// ```
        pub fn hold_at_least(hold: Duration) => hold_at_least = hold;

        /// What kind of lock this is, for metrics (the `metrics` feature): the
        /// value of the `lock` label of every metric about this acquisition and
        /// its guard, in place of the full name, which would make one series
        /// per lock. Without the feature it is not used.
        ///
        /// By default the kind is the part of the name before its first `:`
        /// (`"order"` for `"order:7"`), or the whole name when it has none.
        /// Set it when names have no `:` and are many (`"7"`, `"8"`, ...), or
        /// when their first part is not a kind. `#[redis_lock]` sets it to the
        /// lock's name template (`"order:{order_id}"`). Keep the number of kinds
        /// small and fixed: each is a series of every metric.
        ///
        /// ```no_run
        /// # use lockattr_runtime::Locker;
        /// # async fn run(locker: &Locker, user_id: u64) -> Result<(), lockattr_runtime::LockError> {
        /// let guard = locker
        ///     .lock(user_id.to_string()) // "7": no kind before a `:`
        ///     .kind("user")
        ///     .acquire()
        ///     .await?;
        /// # Ok(()) }
        /// ```
        pub fn kind(kind: impl Into<Cow<'static, str>>) => kind = Some(kind.into());
    }

    /// Takes the lock, waiting up to the acquire timeout while it is held.
    ///
    /// Fails with [`LockError::Timeout`] when the lock stayed busy,
    /// [`LockError::Connection`] when Redis could not be reached, and
    /// [`LockError::InvalidInput`] for an empty name, a lease shorter than a
    /// millisecond or longer than the Locker's `max_lease`, a
    /// [`hold_at_least`](Self::hold_at_least) longer than the lease, a
    /// [`renew_for`](Self::renew_for) under a millisecond, over 30 days or
    /// with `renew(false)`, or an
    /// acquire timeout longer than [`MAX_ACQUIRE_TIMEOUT`]. On one server or a Redis
    /// Cluster, connection errors are retried within the acquire timeout
    /// (pauses of a few milliseconds growing to a quarter of a second), so a
    /// waiter rides out a short Redis restart; the last connection error is
    /// returned once the acquire timeout has passed, and at once with an
    /// acquire timeout of zero (one attempt). A Redlock fails with
    /// [`LockError::NoQuorum`] at once. Dropping the future is safe: a lock
    /// taken for a caller who stopped waiting is released at once.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("x").acquire().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(mut self) -> Result<LockGuard, LockError> {
        let acquiring = Acquiring::start(&self.name, Kind::of(self.kind.take(), &self.name));
        let outcome = async {
            let request = self.checked(acquiring.kind().clone())?;
            let span = acquiring.span().clone();
            if io::can_run_here() {
                acquire(request, io::CallerGone::never())
                    .instrument(span)
                    .await
            } else {
                io::run_watched(|gone| acquire(request, gone).instrument(span)).await
            }
        };
        let outcome = outcome.await;
        let guard = acquiring.finish(outcome)?;
        guard.lease().hold().start();
        Ok(guard)
    }

    /// [`acquire`](Self::acquire) for synchronous code: blocks the calling
    /// thread, needs no async runtime. The guard it returns releases the lock
    /// before its Drop returns.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("x").acquire_blocking()?;
    /// # Ok(()) }
    /// ```
    pub fn acquire_blocking(mut self) -> Result<LockGuard, LockError> {
        let acquiring = Acquiring::start(&self.name, Kind::of(self.kind.take(), &self.name));
        let outcome = self.checked(acquiring.kind().clone()).and_then(|request| {
            let span = acquiring.span().clone();
            io::run_blocking(acquire(request, io::CallerGone::never()).instrument(span))
        });
        let mut guard = acquiring.finish(outcome)?;
        guard.set_blocking();
        guard.lease().hold().start();
        Ok(guard)
    }

    /// Checks the request; the lease to try for and how long to wait.
    pub(crate) fn checked(self, kind: Kind) -> Result<(Terms, Duration), LockError> {
        if self.name.is_empty() {
            return Err(LockError::invalid(
                "lock name",
                "it is empty; give every lock a non-empty name",
            ));
        }
        if self.expire < Duration::from_millis(1) {
            return Err(LockError::invalid(
                "expire",
                format!(
                    "a lease of {:?} (zero whole milliseconds, as Redis counts them) would free \
                     the lock at once; use at least a millisecond",
                    self.expire
                ),
            ));
        }
        let max_lease = self.locker.inner.max_lease;
        if self.expire > max_lease {
            return Err(LockError::invalid(
                "expire",
                format!(
                    "{:?} is longer than the Locker's max_lease ({max_lease:?}); is the unit \
                     right? For long work, take a short lease with `renew(true)`",
                    self.expire
                ),
            ));
        }
        hold::check(self.hold_at_least, self.expire)?;
        self.locker.inner.backend.replicas().check(self.expire)?;
        let renew = check_renew_for(self.renew, self.renew_for)?;
        let mut wait = self.acquire_timeout;
        if wait == Duration::MAX {
            wait = MAX_ACQUIRE_TIMEOUT;
        } else if wait > MAX_ACQUIRE_TIMEOUT {
            return Err(LockError::invalid(
                "acquire timeout",
                format!(
                    "{wait:?} is longer than {MAX_ACQUIRE_TIMEOUT:?}; is the unit right? \
                     (`Duration::MAX` waits as long as allowed)"
                ),
            ));
        }
        let inner = &self.locker.inner;
        let mut keys = Keys::new(&inner.prefix, &self.name, inner.fence_retention);
        keys.holder = inner.holder.clone();
        keys.barge = inner.barge;
        if let Some(permits) = self.permits {
            crate::backend::semaphore::check(&mut keys, permits, &inner.backend)?;
        }
        if let Some(mode) = self.rw {
            crate::backend::rwlock::check(&mut keys, mode, &inner.backend)?;
        }
        let terms = Terms {
            locker: self.locker.inner.clone(),
            name: self.name.clone(),
            keys,
            token: new_token()?,
            expire: self.expire,
            renew,
            renew_for: self.renew_for,
            hold_at_least: self.hold_at_least,
            report: Report::new(self.name, kind),
        };
        Ok((terms, wait))
    }
}

/// `renew` and `renew_for` as set on a builder: whether the lease is
/// renewed, or what is wrong with the cap.
fn check_renew_for(renew: Option<bool>, renew_for: Option<Duration>) -> Result<bool, LockError> {
    let Some(renew_for) = renew_for else {
        return Ok(renew.unwrap_or(false));
    };
    if renew_for < Duration::from_millis(1) {
        return Err(LockError::invalid(
            "renew_for",
            format!(
                "a cap of {renew_for:?} would stop renewal at once; give the work at least a \
                 millisecond, or leave `renew_for` out to renew for as long as the guard is held"
            ),
        ));
    }
    if renew_for > MAX_EXPIRE {
        return Err(LockError::invalid(
            "renew_for",
            format!(
                "{renew_for:?} is longer than 30 days; is the unit right? Leave `renew_for` out \
                 to renew for as long as the guard is held"
            ),
        ));
    }
    if renew == Some(false) {
        return Err(LockError::invalid(
            "renew_for",
            "it caps renewal, and `renew(false)` turns renewal off; drop `renew(false)` \
             (`renew_for` turns renewal on) or drop `renew_for`",
        ));
    }
    Ok(true)
}

/// Takes the lock for `terms`, waiting up to `wait`, with the acquisition
/// loop of the Locker's deployment: on the caller's runtime, or on the I/O
/// thread. True with the guard when a release handed the lock over.
async fn acquire(
    (terms, wait): (Terms, Duration),
    gone: io::CallerGone,
) -> Result<(LockGuard, bool), LockError> {
    let taken = wait::take(&terms, wait, gone).await?;
    let handed = taken.grant.handed;
    Ok((LockGuard::new(Lease::from_grant(terms, taken)), handed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_128_random_bits() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
