//! [`LockGuard`]: a held lock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::Extend;
use crate::lease::Lease;
use crate::{LockError, io};

/// A held lock. Dropping it releases the lock.
///
/// Release it explicitly with [`release`](Self::release) (async) or
/// [`release_blocking`](Self::release_blocking) to learn whether the lock was
/// still owned. When a guard is dropped instead:
/// - one from [`acquire_blocking`](crate::LockBuilder::acquire_blocking)
///   releases before its Drop returns;
/// - one from [`acquire`](crate::LockBuilder::acquire) schedules the release
///   on the library's I/O thread and returns at once, so Drop never blocks an
///   executor thread (the lock is free a round trip later).
///
/// Drop never panics; if Redis is unreachable, the lease's expiry frees the
/// lock. With [`hold_at_least`](crate::LockBuilder::hold_at_least), a
/// release or a drop before the hold has passed keeps the lock for the rest
/// of the hold, then lets it expire. A guard only ever deletes or extends the lock while its own random
/// token is stored there: never another owner's.
///
/// ```no_run
/// # use lockattr_runtime::Locker;
/// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
/// let guard = locker.lock("invoice:9").acquire().await?;
/// let token = guard.fencing_token(); // pass it to storage that checks it
/// guard.release().await?;            // Err(NotOwned) if the lease had run out
/// # Ok(()) }
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
pub struct LockGuard {
    lease: Arc<Lease>,
    /// False once released (explicitly or by Drop).
    held: bool,
    /// Acquired by the blocking path: Drop releases before returning.
    blocking: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The owner token is a capability (it can delete the lock): not shown.
        f.debug_struct("LockGuard")
            .field("name", &self.lease.name())
            .field("fencing_token", &self.lease.fencing_token())
            .field("expire", &self.lease.expire())
            .field("renewed", &self.lease.renews())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

impl crate::observe::Granted for LockGuard {
    fn name(&self) -> &str {
        LockGuard::name(self)
    }

    fn fencing_token(&self) -> u64 {
        LockGuard::fencing_token(self)
    }
}

impl LockGuard {
    pub(crate) fn new(lease: Arc<Lease>) -> LockGuard {
        LockGuard {
            lease,
            held: true,
            blocking: false,
        }
    }

    /// A guard on a lease an outer guard holds (reentry): it never releases.
    pub(crate) fn nested(lease: Arc<Lease>) -> LockGuard {
        LockGuard {
            lease,
            held: false,
            blocking: false,
        }
    }

    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// True when this guard releases the lock (it is not a reentry).
    pub(crate) fn is_outermost(&self) -> bool {
        self.held
    }

    pub(crate) fn set_blocking(&mut self) {
        self.blocking = true;
    }

    /// Whether it was taken by a blocking call (its Drop then releases
    /// before returning).
    pub(crate) fn is_blocking(&self) -> bool {
        self.blocking
    }

    /// Marks the guard released and hands out its lease, after stopping its
    /// renewal; `None` when it releases nothing (released already, or a
    /// reentry).
    pub(crate) fn take(&mut self) -> Option<Arc<Lease>> {
        let lease = std::mem::take(&mut self.held).then(|| self.lease.clone())?;
        lease.unwatch();
        lease.state().report().released();
        Some(lease)
    }

    /// The lock's name.
    ///
    /// ```no_run
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("order:7").acquire().await?;
    /// assert_eq!(guard.name(), "order:7");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.lease.name()
    }

    /// The lease this guard was acquired with.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("x").expire(Duration::from_secs(3)).acquire().await?;
    /// assert_eq!(guard.expire(), Duration::from_secs(3));
    /// # Ok(()) }
    /// ```
    pub fn expire(&self) -> Duration {
        self.lease.expire()
    }

    /// This acquisition's fencing token: it strictly increases with every
    /// acquisition of the same lock name, across processes and across
    /// expiries. Storage that remembers the highest token it has seen and
    /// refuses writes carrying a lower one is safe even from an owner whose
    /// lease ran out while it was paused.
    ///
    /// A name's first token is the Redis server's time in microseconds, and
    /// each later one is one more, so tokens also keep increasing after Redis
    /// lost the counter (a restart without persistence), unless the server's
    /// clock stepped back. Compare tokens; do not count on their values.
    ///
    /// On a Redlock the token is the largest counter among the nodes that
    /// granted the lock, written back to them when they disagreed, so it
    /// also increases from one owner to the next (see
    /// [`Locker::redlock`](crate::Locker::redlock)).
    ///
    /// ```no_run
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let first = locker.lock("x").acquire().await?;
    /// let a = first.fencing_token();
    /// first.release().await?;
    /// let second = locker.lock("x").acquire().await?;
    /// assert!(second.fencing_token() > a);
    /// # Ok(()) }
    /// ```
    pub fn fencing_token(&self) -> u64 {
        self.lease.fencing_token()
    }

    /// True once the lock may no longer be this guard's: its lease ran out
    /// (without renewal, or with renewals failing for a whole lease), or
    /// Redis found it deleted or taken. Once true, it stays true.
    ///
    /// Without [`renew`](crate::LockBuilder::renew) this turns true when the
    /// lease ends, counted from when the acquiring request was sent; with
    /// it, when a renewal finds the lock gone (within `expire / 3` of that
    /// happening), or when no renewal got through for a whole lease. A guard
    /// does not ask Redis on its own otherwise: a lock deleted from outside
    /// is noticed by the next renewal, extension or release.
    ///
    /// ```no_run
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("batch").renew(true).acquire().await?;
    /// for step in 0..100 {
    ///     if guard.is_lost() {
    ///         break; // someone else may be running the batch now
    ///     }
    ///     // ... step ...
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.lease.state().standing().lost().is_some()
    }

    /// Resolves once the lock is lost (see [`is_lost`](Self::is_lost)), to a
    /// [`LockError::Lost`] that says how. Race it against the work to stop
    /// the work when the lock goes:
    ///
    /// ```no_run
    /// # async fn work() -> Result<(), lockattr_runtime::LockError> { Ok(()) }
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("rebuild").renew(true).acquire().await?;
    /// tokio::select! {
    ///     done = work() => done?,
    ///     lost = guard.lost() => return Err(lost),
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// `#[redis_lock(on_lost = "abort")]` does this for a whole function.
    pub async fn lost(&self) -> LockError {
        let reason = self.lease.state().lost().await;
        self.lease.lost_error(reason)
    }

    /// [`lost`](Self::lost) for synchronous code: blocks until the lock is
    /// lost or `timeout` has passed, whichever comes first; `None` when the
    /// lock is still held. Use it as a pause that ends early when the lock
    /// goes.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("poller").renew(true).acquire_blocking()?;
    /// loop {
    ///     // ... poll something ...
    ///     if let Some(lost) = guard.lost_blocking(Duration::from_secs(1)) {
    ///         return Err(lost);
    ///     }
    /// }
    /// # }
    /// ```
    pub fn lost_blocking(&self, timeout: Duration) -> Option<LockError> {
        let reason = self.lease.state().lost_blocking(timeout)?;
        Some(self.lease.lost_error(reason))
    }

    /// Whether the lease is renewed while held (see
    /// [`LockBuilder::renew`](crate::LockBuilder::renew)).
    ///
    /// ```no_run
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("x").renew(true).acquire().await?;
    /// assert!(guard.is_renewed());
    /// # Ok(()) }
    /// ```
    pub fn is_renewed(&self) -> bool {
        self.lease.renews()
    }

    /// Releases the lock. [`LockError::NotOwned`] when the lease had run out
    /// or another owner holds the lock; that owner's lock is left alone.
    ///
    /// When the connection drops with the release on its way, the release
    /// is sent once more on a new connection (running it twice never
    /// touches another owner's lock). If that second try finds the lock
    /// gone, the first may have released it: this returns `Ok` when the
    /// first try was sent while the lease still held (so the work under
    /// the lock finished inside its lease) and the lock's fencing counter
    /// shows no sign that Redis lost the lock meanwhile (it would have
    /// started again from the clock, see
    /// [`fence_retention`](crate::LockerBuilder::fence_retention)), and
    /// `NotOwned` otherwise.
    ///
    /// Within [`hold_at_least`](crate::LockBuilder::hold_at_least) of the
    /// acquisition, the lock is not deleted: its time left becomes what
    /// remains of the hold, and this returns `Ok` once that is set.
    ///
    /// Safe to cancel: the release goes on in the background.
    ///
    /// ```no_run
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("x").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<(), LockError> {
        match self.take() {
            Some(lease) => release_here(Leases::One(lease)).await,
            None => Ok(()),
        }
    }

    /// The loss, if the lock is lost by now.
    pub(crate) fn lost_now(&self) -> Option<LockError> {
        let reason = self.lease.state().standing().lost()?;
        Some(self.lease.lost_error(reason))
    }

    /// When the lock was granted (at the latest).
    pub(crate) fn taken_at(&self) -> Instant {
        self.lease.state().taken_at()
    }

    /// The loss, if the lock is lost by now, after a body that ran to its
    /// end (see [`Lease::lost_in_body`]).
    pub(crate) fn lost_in_body(&self) -> Option<LockError> {
        let reason = self.lease.state().standing().lost()?;
        Some(self.lease.lost_in_body(reason))
    }

    /// Releases the lock; a failure is logged as a warning, not returned
    /// (what an annotated function does after its body). A lock already
    /// known to be lost is not worth a warning on release.
    pub(crate) async fn release_or_warn(mut self) {
        let lost = self.is_lost();
        if let Some(lease) = self.take()
            && let Err(e) = release_here(Leases::One(lease.clone())).await
        {
            if lost {
                tracing::debug!(target: "lockattr", lock = %lease.name(), error = %e, "#[redis_lock] released a lock it had lost");
            } else {
                tracing::warn!(target: "lockattr", lock = %lease.name(), error = %e, "#[redis_lock] could not release its lock");
            }
        }
    }

    /// [`release`](Self::release) for synchronous code; needs no async runtime.
    ///
    /// ```no_run
    /// # fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("x").acquire_blocking()?;
    /// guard.release_blocking()?;
    /// # Ok(()) }
    /// ```
    pub fn release_blocking(mut self) -> Result<(), LockError> {
        match self.take() {
            Some(lease) => release_blocking(Leases::One(lease)),
            None => Ok(()),
        }
    }

    /// Adds `by` to the time the lease has left, if this guard still owns the
    /// lock ([`LockError::NotOwned`] otherwise: an expired lock is not
    /// revived).
    ///
    /// `by` counts in whole milliseconds, rounded down, as Redis does: less
    /// than a millisecond is refused, and so is more than the Locker's
    /// [`max_lease`](crate::LockerBuilder::max_lease), or an extension that
    /// would leave more than `max_lease` on the lease
    /// ([`LockError::InvalidInput`], nothing changed). An extension is
    /// applied once even when its answer is lost with a dropped
    /// connection: it is then sent again as "at least the time the lease
    /// had, plus `by`, less the time since", which a first try that ran
    /// already satisfies.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("x").acquire().await?;
    /// guard.extend(Duration::from_secs(10)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn extend(&self, by: Duration) -> Result<(), LockError> {
        let lease = self.lease.clone();
        io::run_here(async move { lease.extend(by, lease.add()).await }).await
    }

    /// [`extend`](Self::extend) for synchronous code.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("x").acquire_blocking()?;
    /// guard.extend_blocking(Duration::from_secs(10))?;
    /// # Ok(()) }
    /// ```
    pub fn extend_blocking(&self, by: Duration) -> Result<(), LockError> {
        let lease = self.lease.clone();
        io::run_blocking(async move { lease.extend(by, lease.add()).await })
    }

    /// Resets the time the lease has left to the full `expire`, if this guard
    /// still owns the lock ([`LockError::NotOwned`] otherwise).
    ///
    /// ```no_run
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("x").acquire().await?;
    /// guard.reacquire().await?;
    /// # Ok(()) }
    /// ```
    pub async fn reacquire(&self) -> Result<(), LockError> {
        let lease = self.lease.clone();
        io::run_here(async move { lease.extend(lease.expire(), Extend::Set).await }).await
    }

    /// [`reacquire`](Self::reacquire) for synchronous code.
    ///
    /// ```no_run
    /// # fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock("x").acquire_blocking()?;
    /// guard.reacquire_blocking()?;
    /// # Ok(()) }
    /// ```
    pub fn reacquire_blocking(&self) -> Result<(), LockError> {
        let lease = self.lease.clone();
        io::run_blocking(async move { lease.extend(lease.expire(), Extend::Set).await })
    }
}

/// What one release frees: a lock, or the names of a set taken together.
pub(crate) enum Leases {
    One(Arc<Lease>),
    /// Taken under one owner token by one Locker (see `Locker::lock_all`).
    Set(Vec<Arc<Lease>>),
}

impl Leases {
    /// Releases them; for a set, the first error after every name was
    /// tried.
    ///
    /// A set's names are released together, in one call per server or
    /// Cluster slot (see `Backend::release_set`), each as its own release
    /// would. A name within its `hold_at_least` keeps the lock for what
    /// remains of the hold instead, by a call of its own.
    async fn release(&self) -> Result<(), LockError> {
        let leases = match self {
            Leases::One(lease) => return lease.release().await,
            Leases::Set(leases) => leases,
        };
        let (holding, free): (Vec<_>, Vec<_>) = leases
            .iter()
            .partition(|lease| lease.hold().left().is_some());
        let together = async {
            let Some(first) = free.first() else {
                return Ok(());
            };
            let in_lease: Vec<bool> = free
                .iter()
                .map(|l| l.state().standing().held_until().is_some())
                .collect();
            let members: Vec<(&crate::layout::Keys, u64)> =
                free.iter().map(|l| (l.keys(), l.fencing_token())).collect();
            let names = free.iter().map(|l| l.name()).collect::<Vec<_>>();
            let released = first
                .locker()
                .backend
                .release_set(first.token(), &members, (&names.join(", "), first.expire()))
                .await?;
            free.iter()
                .zip(in_lease)
                .zip(released)
                .map(|((lease, in_lease), released)| lease.released(released, in_lease))
                .fold(Ok(()), Result::and)
        };
        let (held, together) = futures_util::future::join(
            futures_util::future::join_all(holding.iter().map(|lease| lease.release())),
            together,
        )
        .await;
        held.into_iter().fold(Ok(()), Result::and).and(together)
    }

    /// The names, for a log line.
    fn names(&self) -> String {
        match self {
            Leases::One(lease) => lease.name().to_owned(),
            Leases::Set(leases) => leases
                .iter()
                .map(|l| l.name())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// Releases `leases` on the caller's runtime when it can, otherwise on the
/// I/O thread. If the caller drops this future before Redis answered, the
/// release is sent again from the I/O thread: releasing twice is harmless,
/// the second finds the lock no longer this token's and leaves it alone.
pub(crate) async fn release_here(leases: Leases) -> Result<(), LockError> {
    let leases = Arc::new(leases);
    if !io::can_run_here() {
        return io::run(async move { leases.release().await }).await;
    }
    let mut unfinished = ReleaseOnDrop(Some(leases.clone()));
    let outcome = leases.release().await;
    unfinished.0 = None;
    outcome
}

/// Releases its leases from the I/O thread when dropped while set.
struct ReleaseOnDrop(Option<Arc<Leases>>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if let Some(leases) = self.0.take() {
            release_in_background(leases);
        }
    }
}

/// Releases `leases` on the I/O thread; failures are logged.
pub(crate) fn release_in_background(leases: Arc<Leases>) {
    release_in_background_of(leases, false);
}

/// [`release_in_background`]; `lost`: the lock was reported lost (its
/// warning given), so a release that fails is no news: logged at debug.
fn release_in_background_of(leases: Arc<Leases>, lost: bool) {
    let outcome = io::spawn({
        let leases = leases.clone();
        async move {
            if let Err(e) = leases.release().await {
                dropped_release_failed(&leases.names(), &e, lost);
            }
        }
    });
    if let Err(e) = outcome {
        tracing::warn!(target: "lockattr", lock = %leases.names(), error = %e, "dropped lock guard could not release its lock; it frees itself at expiry");
    }
}

/// Releases `leases` before returning; needs no async runtime.
pub(crate) fn release_blocking(leases: Leases) -> Result<(), LockError> {
    io::run_blocking(async move { leases.release().await })
}

/// [`release_blocking`] for a guard's Drop: failures are logged.
pub(crate) fn release_blocking_or_warn(leases: Leases) {
    release_blocking_of(leases, false);
}

/// [`release_blocking_or_warn`]; `lost` as [`release_in_background_of`].
fn release_blocking_of(leases: Leases, lost: bool) {
    let names = leases.names();
    if let Err(e) = release_blocking(leases) {
        dropped_release_failed(&names, &e, lost);
    }
}

/// A dropped guard's release of `names` failed with `e`: a warning, unless
/// the lock was reported lost already (`lost`), which said it all.
fn dropped_release_failed(names: &str, e: &LockError, lost: bool) {
    if lost {
        tracing::debug!(target: "lockattr", lock = %names, error = %e, "dropped lock guard released a lock it had lost");
    } else {
        tracing::warn!(target: "lockattr", lock = %names, error = %e, "dropped lock guard could not release its lock");
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let lost = self.is_lost();
        let Some(lease) = self.take() else {
            return;
        };
        if self.blocking {
            release_blocking_of(Leases::One(lease), lost);
        } else {
            release_in_background_of(Arc::new(Leases::One(lease)), lost);
        }
    }
}
