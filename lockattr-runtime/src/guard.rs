//! [`LockGuard`]: a held lock.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::Extend;
use crate::key::Keys;
use crate::locker::Inner;
use crate::{LockError, io};

/// What a held lock is: who holds it, under which keys, for how long.
pub(crate) struct Lease {
    pub(crate) locker: Arc<Inner>,
    pub(crate) name: String,
    pub(crate) keys: Keys,
    pub(crate) token: String,
    pub(crate) expire: Duration,
    pub(crate) fencing_token: u64,
}

impl Lease {
    fn not_owned(&self) -> LockError {
        LockError::NotOwned {
            name: self.name.clone(),
        }
    }

    async fn release(&self) -> Result<(), LockError> {
        if self.locker.backend.release(&self.keys, &self.token).await? {
            Ok(())
        } else {
            Err(self.not_owned())
        }
    }

    async fn extend(&self, by: Duration, how: Extend) -> Result<(), LockError> {
        if by.is_zero() {
            return Err(LockError::invalid(
                "lease extension",
                "it must be longer than zero",
            ));
        }
        if self
            .locker
            .backend
            .extend(&self.keys, &self.token, by, how)
            .await?
        {
            Ok(())
        } else {
            Err(self.not_owned())
        }
    }
}

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
/// lock. A guard only ever deletes or extends the lock while its own random
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
            .field("name", &self.lease.name)
            .field("fencing_token", &self.lease.fencing_token)
            .field("expire", &self.lease.expire)
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    pub(crate) fn new(lease: Lease) -> LockGuard {
        LockGuard {
            lease: Arc::new(lease),
            held: true,
            blocking: false,
        }
    }

    pub(crate) fn set_blocking(&mut self) {
        self.blocking = true;
    }

    /// Marks the guard released and hands out its lease.
    fn take(&mut self) -> Option<Arc<Lease>> {
        std::mem::take(&mut self.held).then(|| self.lease.clone())
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
        &self.lease.name
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
        self.lease.expire
    }

    /// This acquisition's fencing token: it strictly increases with every
    /// acquisition of the same lock name, across processes and across
    /// expiries. Storage that remembers the highest token it has seen and
    /// refuses writes carrying a lower one is safe even from an owner whose
    /// lease ran out while it was paused.
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
        self.lease.fencing_token
    }

    /// Releases the lock. [`LockError::NotOwned`] when the lease had run out
    /// or another owner holds the lock; that owner's lock is left alone.
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
            Some(lease) => release_here(lease).await,
            None => Ok(()),
        }
    }

    /// Releases the lock; a failure is logged as a warning, not returned
    /// (what an annotated function does after its body).
    pub(crate) async fn release_or_warn(mut self) {
        if let Some(lease) = self.take()
            && let Err(e) = release_here(lease.clone()).await
        {
            tracing::warn!(lock = %lease.name, error = %e, "#[redis_lock] could not release its lock");
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
            Some(lease) => io::run_blocking(async move { lease.release().await }),
            None => Ok(()),
        }
    }

    /// Adds `by` to the time the lease has left, if this guard still owns the
    /// lock ([`LockError::NotOwned`] otherwise: an expired lock is not
    /// revived).
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
        io::run_here(async move { lease.extend(by, Extend::Add).await }).await
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
        io::run_blocking(async move { lease.extend(by, Extend::Add).await })
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
        io::run_here(async move { lease.extend(lease.expire, Extend::Set).await }).await
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
        io::run_blocking(async move { lease.extend(lease.expire, Extend::Set).await })
    }
}

/// Releases `lease` on the caller's runtime when it can, otherwise on the
/// I/O thread. If the caller drops this future before Redis answered, the
/// release is sent again from the I/O thread: releasing twice is harmless,
/// the second finds the lock no longer this token's and leaves it alone.
async fn release_here(lease: Arc<Lease>) -> Result<(), LockError> {
    if !io::can_run_here() {
        return io::run(async move { lease.release().await }).await;
    }
    let mut unfinished = ReleaseOnDrop(Some(lease.clone()));
    let outcome = lease.release().await;
    unfinished.0 = None;
    outcome
}

/// Releases its lease from the I/O thread when dropped while set.
struct ReleaseOnDrop(Option<Arc<Lease>>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if let Some(lease) = self.0.take() {
            release_in_background(lease);
        }
    }
}

/// Releases `lease` on the I/O thread; failures are logged.
fn release_in_background(lease: Arc<Lease>) {
    let outcome = io::spawn(async move {
        if let Err(e) = lease.release().await {
            tracing::warn!(lock = %lease.name, error = %e, "dropped lock guard could not release its lock");
        }
    });
    if let Err(e) = outcome {
        tracing::warn!(error = %e, "dropped lock guard could not release its lock; it frees itself at expiry");
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let Some(lease) = self.take() else {
            return;
        };
        if !self.blocking {
            return release_in_background(lease);
        }
        let outcome = io::run_blocking({
            let lease = lease.clone();
            async move { lease.release().await }
        });
        if let Err(e) = outcome {
            tracing::warn!(lock = %lease.name, error = %e, "dropped lock guard could not release its lock");
        }
    }
}
