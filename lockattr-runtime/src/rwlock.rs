//! Read-write locks: many readers or one writer of one name
//! ([`Locker::read_lock`], [`Locker::write_lock`]). The Redis side, keys
//! and protocol are in `backend::rwlock`.

use crate::layout::RwMode;
use crate::{LockBuilder, Locker};

impl Locker {
    /// A request to read under the read-write lock `name`: any number of
    /// readers hold it at once, across all processes using the same Redis
    /// and prefix, and none while a writer holds it.
    ///
    /// The builder and the guard are a lock's: `expire`, `acquire_timeout`,
    /// `renew`, `renew_for`, `hold_at_least` and `kind` mean the same per
    /// reader, and [`LockGuard`](crate::LockGuard) releases, renews,
    /// extends and reports a loss exactly as for a lock. Each reader has its
    /// own owner token and lease: a crashed reader's share is free when its
    /// lease ends.
    ///
    /// Writer-preferring: a reader does not get in while a writer waits, so
    /// a stream of readers does not starve writers. A writer's release hands
    /// the lock at once to every reader queued before the next writer, each
    /// woken through pub/sub.
    ///
    /// A reader's [`fencing_token`](crate::LockGuard::fencing_token) is the
    /// token of the last write of the name (the last [`write_lock`]
    /// granted), or 0 when none is known: the name was never written, or
    /// its counter expired `fence_retention` after the last lease.
    ///
    /// At acquire, one server (Sentinel included) and a Redis Cluster are
    /// supported; a Redlock Locker refuses with [`LockError::InvalidInput`](crate::LockError::InvalidInput).
    /// A read-write lock shares no key with the lock or the semaphore of the
    /// same name, and does not exclude them (`Locker::inspect` and
    /// `force_unlock` see locks only). It is never re-entered: a
    /// nested call takes a hold of its own, so a writer that takes the read
    /// side of its own name in a nested call waits for itself (until its
    /// acquire timeout).
    ///
    /// [`write_lock`]: Locker::write_lock
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # use std::time::Duration;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let reading = locker
    ///     .read_lock("catalog")
    ///     .expire(Duration::from_secs(30))
    ///     .renew(true)
    ///     .acquire()
    ///     .await?;
    /// let version = reading.fencing_token(); // the last write's token
    /// // ... read the catalog, with other readers ...
    /// reading.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn read_lock(&self, name: impl AsRef<str>) -> LockBuilder<'_> {
        let mut builder = self.lock(name);
        builder.rw = Some(RwMode::Read);
        builder
    }

    /// A request to write under the read-write lock `name`: held by this
    /// writer alone, with no reader and no other writer.
    ///
    /// The builder and the guard are a lock's (see [`read_lock`] for what
    /// holds of both sides). A writer waits for the readers inside to
    /// leave, keeping new readers out meanwhile; the last reader's release
    /// hands it the lock and wakes it through pub/sub. Waiting writers are
    /// served first come, first served. Writers' fencing tokens increase
    /// with every write of the name.
    ///
    /// One server (Sentinel included) and a Redis Cluster are supported; a
    /// Redlock Locker refuses with [`LockError::InvalidInput`](crate::LockError::InvalidInput).
    ///
    /// [`read_lock`]: Locker::read_lock
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # use std::time::Duration;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let writing = locker
    ///     .write_lock("catalog")
    ///     .acquire_timeout(Duration::from_secs(60))
    ///     .acquire()
    ///     .await?;
    /// let token = writing.fencing_token(); // larger than every write before
    /// // ... change the catalog, alone ...
    /// writing.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn write_lock(&self, name: impl AsRef<str>) -> LockBuilder<'_> {
        let mut builder = self.lock(name);
        builder.rw = Some(RwMode::Write);
        builder
    }
}
