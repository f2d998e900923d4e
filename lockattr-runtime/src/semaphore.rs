//! Semaphores: at most N holders of one name at once
//! ([`Locker::semaphore`]). The Redis side is in `backend::semaphore`.

use crate::{LockBuilder, Locker};

impl Locker {
    /// A request for one of the `permits` permits of the semaphore `name`:
    /// at most `permits` guards of this name are held at once, across all
    /// processes using the same Redis and prefix.
    ///
    /// The builder and the guard are a lock's: `expire`, `acquire_timeout`,
    /// `renew`, `renew_for`, `hold_at_least` and `kind` mean the same per
    /// permit, and [`LockGuard`](crate::LockGuard) releases, renews,
    /// extends and reports a loss exactly as for a lock. Each holder has its
    /// own owner token, lease and [fencing
    /// token](crate::LockGuard::fencing_token); fencing tokens increase
    /// across all holders of one name. A permit whose holder crashed is
    /// free when its lease ends.
    ///
    /// Waiters are served first come, first served: a release hands its
    /// permit straight to the oldest waiter (and wakes it through pub/sub),
    /// and a newcomer never takes a permit while an older waiter waits.
    ///
    /// At acquire:
    /// - `permits` must be from 1 to [`MAX_PERMITS`]; otherwise
    ///   [`LockError::InvalidInput`].
    /// - Every caller of one name must ask for the same number:
    ///   [`LockError::PermitsMismatch`] otherwise, at once and taking
    ///   nothing, while the name is in use: while any permit is held (each
    ///   held permit records the number, through renewal, `extend` and
    ///   hand-overs), waited for, or taken less than a lease plus the
    ///   Locker's `fence_retention` ago. A caller asking for fewer permits
    ///   is refused too when the only permits held are beyond its number.
    /// - One server (Sentinel included) and a Redis Cluster are supported:
    ///   all of a semaphore's keys share one hash tag. A Redlock Locker
    ///   refuses with [`LockError::InvalidInput`]: counting permits by
    ///   majority across independent masters is not done.
    ///
    /// A semaphore and a lock of the same name are independent (their keys
    /// differ): taking one does not exclude the other. A semaphore is never
    /// re-entered: a nested call on it takes a permit of its own.
    /// `Locker::inspect` and `force_unlock` see locks only; a semaphore's
    /// operators use [`inspect_semaphore`](Locker::inspect_semaphore),
    /// [`semaphores`](Locker::semaphores) and
    /// [`force_unlock_permit`](Locker::force_unlock_permit).
    ///
    /// [`MAX_PERMITS`]: crate::MAX_PERMITS
    /// [`LockError::InvalidInput`]: crate::LockError::InvalidInput
    /// [`LockError::PermitsMismatch`]: crate::LockError::PermitsMismatch
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # use std::time::Duration;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// // At most 4 jobs on the GPUs at once.
    /// let permit = locker
    ///     .semaphore("gpu", 4)
    ///     .expire(Duration::from_secs(30))
    ///     .renew(true)
    ///     .acquire_timeout(Duration::from_secs(60))
    ///     .acquire()
    ///     .await?;
    /// let token = permit.fencing_token(); // this holder's own
    /// // ... use the GPU ...
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn semaphore(&self, name: impl AsRef<str>, permits: u32) -> LockBuilder<'_> {
        let mut builder = self.lock(name);
        builder.permits = Some(permits);
        builder
    }
}
