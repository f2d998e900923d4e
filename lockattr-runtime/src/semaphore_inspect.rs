//! For operators, semaphores as [`crate::inspect`] does locks: who holds
//! each permit of a semaphore and who waits ([`Locker::inspect_semaphore`]),
//! which semaphores are in use ([`Locker::semaphores`]), and freeing a
//! stuck permit ([`Locker::force_unlock_permit`]).
//!
//! A permit is a lock key (see `backend::semaphore`): its holder is
//! recorded the same way, and read back as a [`Holder`]. The owner token is
//! never part of what these functions return.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::Backend;
use crate::backend::semaphore::{self as sem, SemaphoreSeen};
use crate::holder::parse_holder;
use crate::inner::Inner;
use crate::inspect::{Forced, hold, name_of};
use crate::layout::{Keys, SEM_PERMIT, permit_of};
use crate::listing::glob_literal;
use crate::listing::{Listing, foreign, glob_matches, scan_pattern};
use crate::{Holder, LockError, Locker, MAX_PERMITS, io};

/// A semaphore in use, as [`Locker::inspect_semaphore`] and
/// [`Locker::semaphores`] see it: its permits, who holds each, and who
/// waits.
///
/// ```no_run
/// # use lockattr_runtime::Locker;
/// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
/// if let Some(info) = locker.inspect_semaphore("gpu").await? {
///     println!("{} of {} permits held, {} waiting", info.holders.len(), info.permits, info.waiters);
///     for permit in &info.holders {
///         println!("permit {} fencing token {} for {:?} more", permit.permit, permit.fencing_token, permit.ttl);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreInfo {
    /// The semaphore's name (as given to [`Locker::semaphore`]).
    pub name: String,
    /// How many permits it has, as its callers asked for them: every held
    /// permit records the number, and so does a record kept while callers
    /// take permits and wait. When neither tells (permits held by an older
    /// version of lockattr, after the record expired), the highest permit
    /// held plus one.
    pub permits: u32,
    /// The permits held, by permit index.
    pub holders: Vec<PermitInfo>,
    /// Callers queued for a permit.
    pub waiters: usize,
    /// The oldest of them (at most 100), oldest first: each [`Holder`]'s
    /// `since` is when it queued.
    pub waiting: Vec<Holder>,
}

/// One held permit of a semaphore: a [`LockInfo`](crate::LockInfo) of its
/// own, less the name and the waiters (the semaphore's).
///
/// ```no_run
/// # use lockattr_runtime::Locker;
/// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
/// if let Some(info) = locker.inspect_semaphore("gpu").await? {
///     for permit in &info.holders {
///         if let Some(holder) = &permit.holder {
///             println!("permit {} held by {holder}", permit.permit);
///         }
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitInfo {
    /// The permit's index, from 0 to `permits - 1`.
    pub permit: u32,
    /// Time left of the holder's lease.
    pub ttl: Duration,
    /// The holder's fencing token, the one to pass to
    /// [`Locker::force_unlock_permit`] (a permit handed to a waiter has the
    /// token of the hand-over at once, whether or not that waiter is still
    /// alive to read it); 0 only for a permit taken by an older version of
    /// lockattr, which did not record it.
    pub fencing_token: u64,
    /// Who holds it; `None` when not recorded.
    pub holder: Option<Holder>,
}

/// How [`Locker::inspect_semaphore`] reads a name: its keys, checked.
fn checked(locker: &Locker, name: &str) -> Result<Keys, LockError> {
    if let Backend::Redlock(_) = *locker.inner.backend {
        return Err(LockError::invalid(
            "semaphore",
            "semaphores are not supported on a Redlock Locker",
        ));
    }
    locker.keys_of(name)
}

/// How many permit keys of the semaphore at `keys` to look at: its
/// record of the number of permits, or the highest permit key found plus
/// one (0: none held); with what the first look saw.
async fn count(inner: &Inner, keys: &Keys) -> Result<(u32, SemaphoreSeen), LockError> {
    let first = sem::inspect(&inner.backend, keys, 0).await?;
    if let Some(recorded) = first.recorded {
        return Ok((recorded.min(MAX_PERMITS), first));
    }
    let mut pattern = String::new();
    for c in keys.lock.chars() {
        glob_literal(&mut pattern, c);
    }
    pattern.push_str(SEM_PERMIT);
    pattern.push('*');
    let keep = |key: &str| permit_of(key).map(|(_, index)| index);
    let found = inner
        .backend
        .scan(&pattern, MAX_PERMITS as usize, &keep)
        .await?
        .found;
    let highest = found.last().copied();
    Ok((highest.map_or(0, |i| (i + 1).min(MAX_PERMITS)), first))
}

/// The semaphore `name` at `keys`; `None` when no permit is held and
/// nobody waits.
async fn look(
    inner: &Inner,
    keys: &Keys,
    name: String,
) -> Result<Option<SemaphoreInfo>, LockError> {
    let (permits, first) = count(inner, keys).await?;
    let seen = if permits > 0 {
        sem::inspect(&inner.backend, keys, permits).await?
    } else {
        first
    };
    if seen.held.is_empty() && seen.waiters == 0 {
        return Ok(None);
    }
    // Without the record, the number the held permits record.
    let permits = match seen.recorded {
        Some(_) => permits,
        None => seen
            .held
            .iter()
            .filter_map(|p| p.permits)
            .max()
            .map_or(permits, |n| n.clamp(permits, MAX_PERMITS)),
    };
    let holders = seen
        .held
        .into_iter()
        .map(|p| {
            let (ttl, fencing_token, holder) = hold(&p.seen);
            PermitInfo {
                permit: p.index,
                ttl,
                fencing_token,
                holder,
            }
        })
        .collect();
    Ok(Some(SemaphoreInfo {
        name,
        permits,
        holders,
        waiters: seen.waiters,
        waiting: seen.oldest.iter().filter_map(|w| parse_holder(w)).collect(),
    }))
}

/// The semaphores whose names match `pattern` that have a permit held, at
/// most `limit`, in name order.
/// Empty on a Redlock, which has no semaphores.
async fn list(
    inner: Arc<Inner>,
    pattern: String,
    limit: usize,
) -> Result<Listing<SemaphoreInfo>, LockError> {
    if let Backend::Redlock(_) = *inner.backend {
        return Ok(Listing::new(Vec::new(), 0));
    }
    let prefix = inner.prefix.clone();
    let glob = pattern.clone();
    // The names matched here, since a key spells some characters of its
    // name otherwise.
    let keep = move |key: &str| {
        let name = name_of(&prefix, permit_of(key)?.0)?;
        glob_matches(&glob, &name).then_some(name)
    };
    let scanned = inner
        .backend
        .scan(&scan_pattern(&inner.prefix, &pattern), limit, &keep)
        .await?;
    let mut skipped = scanned.unreadable.len();
    let mut out = Vec::with_capacity(scanned.found.len());
    for name in scanned.found {
        let keys = Keys::new(&inner.prefix, &name, inner.fence_retention);
        match look(&inner, &keys, name).await {
            Ok(info) => out.extend(info),
            // A key lockattr did not write: skipped, counted.
            Err(e) if foreign(&e) => skipped += 1,
            Err(e) => return Err(e),
        }
    }
    Ok(Listing::new(out, skipped))
}

/// Frees the permit with `fencing_token` of semaphore `name`.
async fn force(
    inner: Arc<Inner>,
    keys: Keys,
    name: String,
    fencing_token: u64,
) -> Result<bool, LockError> {
    let (permits, _) = count(&inner, &keys).await?;
    if permits == 0 {
        return Ok(false);
    }
    let Some(who) = sem::force_release(&inner.backend, &keys, permits, fencing_token).await? else {
        return Ok(false);
    };
    crate::inspect::forced_event(&inner, &name, &who, Forced::Permit(fencing_token));
    Ok(true)
}

impl Locker {
    /// The task of [`inspect_semaphore`](Self::inspect_semaphore).
    fn semaphore_task(
        &self,
        name: &str,
    ) -> Result<impl Future<Output = Result<Option<SemaphoreInfo>, LockError>> + use<>, LockError>
    {
        let keys = checked(self, name)?;
        let inner = self.inner.clone();
        let name = name.to_owned();
        Ok(async move { look(&inner, &keys, name).await })
    }

    /// The task of [`force_unlock_permit`](Self::force_unlock_permit).
    fn permit_task(
        &self,
        name: &str,
        fencing_token: u64,
    ) -> Result<impl Future<Output = Result<bool, LockError>> + use<>, LockError> {
        if fencing_token == 0 {
            return Err(LockError::invalid(
                "fencing token",
                "0 is no permit holder's token; read the holder's token with `inspect_semaphore`",
            ));
        }
        let keys = checked(self, name)?;
        Ok(force(
            self.inner.clone(),
            keys,
            name.to_owned(),
            fencing_token,
        ))
    }
}

impl Locker {
    /// The semaphore `name` ([`Locker::semaphore`]): its number of
    /// permits, who holds each held permit (host, pid, label, since, time
    /// left, fencing token) and who waits; `None` when no permit is held
    /// and nobody waits. Two round trips (a third, a `SCAN`, when the
    /// record of its number of permits has expired while a permit is still
    /// held: its holders renewed it past the record, or nobody took a
    /// permit for a while). A Redlock Locker, which has no semaphores,
    /// fails with [`LockError::InvalidInput`].
    ///
    /// A semaphore and a lock of the same name are apart: this never
    /// reports the lock `name` ([`inspect`](Self::inspect) does).
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// match locker.inspect_semaphore("gpu").await? {
    ///     Some(info) => println!("{}/{} held, {} waiting", info.holders.len(), info.permits, info.waiters),
    ///     None => println!("no permit held"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect_semaphore(&self, name: &str) -> Result<Option<SemaphoreInfo>, LockError> {
        io::run_here(self.semaphore_task(name)?).await
    }

    /// [`inspect_semaphore`](Self::inspect_semaphore) for synchronous code.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let in_use = locker.inspect_semaphore_blocking("gpu")?.is_some();
    /// # Ok(()) }
    /// ```
    pub fn inspect_semaphore_blocking(
        &self,
        name: &str,
    ) -> Result<Option<SemaphoreInfo>, LockError> {
        io::run_blocking(self.semaphore_task(name)?)
    }

    /// The semaphores with a permit held whose names match the glob
    /// `pattern` (as [`locks`](Self::locks)), at most `limit` of them, in
    /// name order. Found with `SCAN` for their permit keys, as `locks`
    /// finds locks, then each [inspected](Self::inspect_semaphore); one
    /// freed meanwhile is left out; a key that lockattr did not write (a
    /// list at a permit key) is skipped and counted in
    /// [`Listing::skipped`](crate::Listing::skipped). Empty on a Redlock
    /// Locker.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// for info in locker.semaphores("*", 100).await? {
    ///     println!("{} {}/{}", info.name, info.holders.len(), info.permits);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn semaphores(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<Listing<SemaphoreInfo>, LockError> {
        io::run_here(list(self.inner.clone(), pattern.to_owned(), limit)).await
    }

    /// [`semaphores`](Self::semaphores) for synchronous code.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let in_use = locker.semaphores_blocking("*", 1000)?;
    /// # Ok(()) }
    /// ```
    pub fn semaphores_blocking(
        &self,
        pattern: &str,
        limit: usize,
    ) -> Result<Listing<SemaphoreInfo>, LockError> {
        io::run_blocking(list(self.inner.clone(), pattern.to_owned(), limit))
    }

    /// Frees the permit of semaphore `name` held with `fencing_token` (from
    /// [`inspect_semaphore`](Self::inspect_semaphore)), whoever holds it: an
    /// operator's tool for a stuck holder. False when no permit is held
    /// with that token (it was released, or handed on meanwhile): only the
    /// holder looked at is ever freed, as with
    /// [`force_unlock_if`](Self::force_unlock_if).
    ///
    /// It is what the holder's release would have done: the permit goes to
    /// the oldest waiter (with a new fencing token), or is freed. The
    /// holder's guard finds out at its next renewal (it turns lost), or its
    /// next `release` or `extend` ([`LockError::NotOwned`]). A `warn` event
    /// (target `lockattr`, `semaphore permit force-released`) records the
    /// semaphore, the token, the holder and this Locker's label, host and
    /// process. Sent once, never again: check with `inspect_semaphore`.
    ///
    /// [`LockError::InvalidInput`] for a token of 0 or a Redlock Locker.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// if let Some(info) = locker.inspect_semaphore("gpu").await? {
    ///     if let Some(stuck) = info.holders.iter().find(|p| p.ttl.as_secs() > 3600) {
    ///         if !locker.force_unlock_permit("gpu", stuck.fencing_token).await? {
    ///             println!("it changed hands meanwhile; look again");
    ///         }
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn force_unlock_permit(
        &self,
        name: &str,
        fencing_token: u64,
    ) -> Result<bool, LockError> {
        io::run_here(self.permit_task(name, fencing_token)?).await
    }

    /// [`force_unlock_permit`](Self::force_unlock_permit) for synchronous
    /// code.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let freed = locker.force_unlock_permit_blocking("gpu", 42)?;
    /// # Ok(()) }
    /// ```
    pub fn force_unlock_permit_blocking(
        &self,
        name: &str,
        fencing_token: u64,
    ) -> Result<bool, LockError> {
        io::run_blocking(self.permit_task(name, fencing_token)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    #[test]
    fn a_waiter_entry_reads_as_a_holder() {
        let waiter = parse_holder("web-1\n4242\nbilling\n1700000000123").unwrap();
        assert_eq!(
            waiter.since,
            SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_123)
        );
    }
}
