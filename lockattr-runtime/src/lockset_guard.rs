//! The guard of several names held at once: [`LockSetGuard`], made by a
//! lock set's request (`lockset.rs`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use crate::guard::{self, Leases};
use crate::lease::Lease;
use crate::{LockError, LockGuard};

/// Several locks held at once (see [`Locker::lock_all`](crate::Locker::lock_all) and
/// `#[redis_lock(name = ["...", "..."])]`). Dropping it releases every name,
/// as dropping a [`LockGuard`] does.
///
/// Each name has its own lease and its own fencing token
/// ([`fencing_token_of`](Self::fencing_token_of)), increasing per name as
/// for a single lock. The set is lost when any of its names is
/// ([`is_lost`](Self::is_lost), [`lost`](Self::lost)).
///
/// ```no_run
/// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
/// let guard = locker.lock_all(["account:1", "account:2"]).acquire().await?;
/// let from_token = guard.fencing_token_of("account:1").unwrap();
/// // ... writes to account 1 carry `from_token` ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "the locks are released as soon as the guard is dropped"]
pub struct LockSetGuard {
    /// In the order the names were taken in.
    pub(crate) members: Vec<LockGuard>,
}

impl std::fmt::Debug for LockSetGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The members' Debug never shows an owner token.
        f.debug_struct("LockSetGuard")
            .field("members", &self.members)
            .finish()
    }
}

impl LockSetGuard {
    /// A set of guards made elsewhere (a nested call's reentry).
    pub(crate) fn from_members(members: Vec<LockGuard>) -> LockSetGuard {
        LockSetGuard { members }
    }

    /// The leases, for the reentry scope of an annotated body.
    pub(crate) fn leases(&self) -> impl Iterator<Item = &Arc<Lease>> {
        self.members.iter().map(LockGuard::lease)
    }

    /// Each name with its fencing token, in the order they were taken in.
    pub(crate) fn members(&self) -> impl Iterator<Item = (&str, u64)> {
        self.members.iter().map(|g| (g.name(), g.fencing_token()))
    }

    /// True when this guard releases its locks (it is not a reentry).
    pub(crate) fn is_outermost(&self) -> bool {
        self.members.iter().all(LockGuard::is_outermost)
    }

    /// The names held, each once, in the order they were taken in (by
    /// Cluster slot, then key).
    ///
    /// ```no_run
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock_all(["b", "a", "b"]).acquire().await?;
    /// assert_eq!(guard.names().count(), 2);
    /// # Ok(()) }
    /// ```
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.members.iter().map(LockGuard::name)
    }

    /// The guard of one name of the set (to [`extend`](LockGuard::extend)
    /// it, say); `None` when the set does not hold `name`. It cannot be
    /// released alone: the set releases it.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock_all(["a", "b"]).acquire().await?;
    /// guard.guard_of("a").unwrap().extend(Duration::from_secs(5)).await?;
    /// # Ok(()) }
    /// ```
    pub fn guard_of(&self, name: &str) -> Option<&LockGuard> {
        self.members.iter().find(|g| g.name() == name)
    }

    /// The fencing token of `name` in this acquisition (see
    /// [`LockGuard::fencing_token`]); `None` when the set does not hold
    /// `name`. Each name has its own counter: tokens increase per name.
    ///
    /// ```no_run
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock_all(["a", "b"]).acquire().await?;
    /// let a = guard.fencing_token_of("a").unwrap();
    /// # Ok(()) }
    /// ```
    pub fn fencing_token_of(&self, name: &str) -> Option<u64> {
        self.guard_of(name).map(LockGuard::fencing_token)
    }

    /// The lease every name was acquired with.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock_all(["a", "b"]).expire(Duration::from_secs(3)).acquire().await?;
    /// assert_eq!(guard.expire(), Duration::from_secs(3));
    /// # Ok(()) }
    /// ```
    pub fn expire(&self) -> Duration {
        self.members
            .first()
            .map_or(Duration::ZERO, LockGuard::expire)
    }

    /// Whether the leases are renewed while held.
    ///
    /// ```no_run
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock_all(["a", "b"]).renew(true).acquire().await?;
    /// assert!(guard.is_renewed());
    /// # Ok(()) }
    /// ```
    pub fn is_renewed(&self) -> bool {
        self.members.iter().all(LockGuard::is_renewed)
    }

    /// True once any name of the set may no longer be this guard's (see
    /// [`LockGuard::is_lost`]). Once true, it stays true.
    ///
    /// ```no_run
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock_all(["a", "b"]).renew(true).acquire().await?;
    /// if guard.is_lost() {
    ///     // someone else may hold one of the names now
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.members.iter().any(LockGuard::is_lost)
    }

    /// Resolves once any name of the set is lost, to the
    /// [`LockError::Lost`] of that name.
    ///
    /// ```no_run
    /// # async fn work() -> Result<(), lockattr_runtime::LockError> { Ok(()) }
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock_all(["a", "b"]).renew(true).acquire().await?;
    /// tokio::select! {
    ///     done = work() => done?,
    ///     lost = guard.lost() => return Err(lost),
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) -> LockError {
        let mut all: Vec<Pin<Box<dyn Future<Output = LockError> + Send + '_>>> = self
            .members
            .iter()
            .map(|g| Box::pin(g.lost()) as Pin<Box<dyn Future<Output = LockError> + Send + '_>>)
            .collect();
        std::future::poll_fn(|cx| {
            for lost in &mut all {
                if let Poll::Ready(e) = lost.as_mut().poll(cx) {
                    return Poll::Ready(e);
                }
            }
            Poll::Pending
        })
        .await
    }

    /// [`lost`](Self::lost) for synchronous code: blocks until a name is
    /// lost or `timeout` has passed; `None` when every name is still held.
    /// A loss is seen within about 20 ms.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock_all(["a", "b"]).renew(true).acquire_blocking()?;
    /// if let Some(lost) = guard.lost_blocking(Duration::from_secs(1)) {
    ///     return Err(lost);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn lost_blocking(&self, timeout: Duration) -> Option<LockError> {
        const SLICE: Duration = Duration::from_millis(20);
        let start = Instant::now();
        loop {
            if let Some(lost) = self.lost_now() {
                return Some(lost);
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return None;
            }
            let first = self.members.first()?;
            if let Some(lost) = first.lost_blocking(left.min(SLICE)) {
                return Some(lost);
            }
        }
    }

    /// The loss of the first name found lost, if any.
    pub(crate) fn lost_now(&self) -> Option<LockError> {
        self.members.iter().find_map(LockGuard::lost_now)
    }

    /// When the set was granted (at the latest).
    pub(crate) fn taken_at(&self) -> Option<Instant> {
        self.members.iter().map(LockGuard::taken_at).max()
    }

    /// [`lost_now`](Self::lost_now) after a body that ran to its end.
    pub(crate) fn lost_in_body(&self) -> Option<LockError> {
        self.members.iter().find_map(LockGuard::lost_in_body)
    }

    /// Releases every name (each handed to its oldest waiter, as a single
    /// lock's release does), all at once: one call per server (per slot on
    /// a Redis Cluster, per node on a Redlock), as the set was taken. The
    /// first error, after every name was tried: [`LockError::NotOwned`]
    /// naming a name whose lease had run out or that another owner holds
    /// (the other names are released all the same).
    ///
    /// ```no_run
    /// # async fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock_all(["a", "b"]).acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<(), LockError> {
        match self.take() {
            Some(leases) => guard::release_here(leases).await,
            None => Ok(()),
        }
    }

    /// [`release`](Self::release) for synchronous code.
    ///
    /// ```no_run
    /// # fn run(locker: &lockattr_runtime::Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let guard = locker.lock_all(["a", "b"]).acquire_blocking()?;
    /// guard.release_blocking()?;
    /// # Ok(()) }
    /// ```
    pub fn release_blocking(mut self) -> Result<(), LockError> {
        match self.take() {
            Some(leases) => guard::release_blocking(leases),
            None => Ok(()),
        }
    }

    /// Releases, reporting a name no longer owned as a warning (the
    /// attribute's release). A set already known to be lost is not worth
    /// a warning on release.
    pub(crate) async fn release_or_warn(mut self) {
        let lost = self.is_lost();
        let Some(leases) = self.take() else {
            return;
        };
        if let Err(e) = guard::release_here(leases).await {
            let names = self.names().collect::<Vec<_>>().join(", ");
            if lost {
                tracing::debug!(target: "lockattr", lock = %names, error = %e, "#[redis_lock] released a lock it had lost");
            } else {
                tracing::warn!(target: "lockattr", lock = %names, error = %e, "#[redis_lock] could not release its lock");
            }
        }
    }

    /// Marks every name released and hands out the leases this guard
    /// releases (none for a reentry, or once released), after stopping
    /// their renewal.
    fn take(&mut self) -> Option<Leases> {
        let leases: Vec<_> = self
            .members
            .iter_mut()
            .filter_map(LockGuard::take)
            .collect();
        (!leases.is_empty()).then_some(Leases::Set(leases))
    }
}

/// Releases every name together, as [`LockSetGuard::release`] does, in the
/// background (or before returning, for a set taken by a blocking call).
impl Drop for LockSetGuard {
    fn drop(&mut self) {
        let blocking = self.members.iter().any(LockGuard::is_blocking);
        let Some(leases) = self.take() else {
            return;
        };
        if blocking {
            guard::release_blocking_or_warn(leases);
        } else {
            guard::release_in_background(Arc::new(leases));
        }
    }
}
