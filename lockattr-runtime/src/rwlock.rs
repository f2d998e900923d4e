//! Read-write locks: many readers or one writer of one name
//! ([`Locker::read_lock`], [`Locker::write_lock`]).

use crate::{LockBuilder, LockError, Locker};

/// Which side of a read-write lock a request takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RwMode {
    /// A shared hold: any number of readers at once, no writer.
    Read,
    /// An exclusive hold: no reader and no other writer.
    Write,
}

impl Locker {
    /// A request to read under the read-write lock `name`: any number of
    /// readers hold it at once, and none while a writer holds it.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let reading = locker.read_lock("catalog").acquire().await?;
    /// // ... read the catalog ...
    /// reading.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn read_lock(&self, name: impl AsRef<str>) -> LockBuilder<'_> {
        let mut builder = self.lock(name);
        builder.rw = Some(RwMode::Read);
        builder
    }

    /// A request to write under the read-write lock `name`: held by this
    /// writer alone, with no reader.
    ///
    /// ```no_run
    /// # use lockattr_runtime::Locker;
    /// # async fn run(locker: &Locker) -> Result<(), lockattr_runtime::LockError> {
    /// let writing = locker.write_lock("catalog").acquire().await?;
    /// // ... change the catalog ...
    /// writing.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn write_lock(&self, name: impl AsRef<str>) -> LockBuilder<'_> {
        let mut builder = self.lock(name);
        builder.rw = Some(RwMode::Write);
        builder
    }
}

/// Checks a read-write request.
pub(crate) fn check(_mode: RwMode) -> Result<(), LockError> {
    Err(LockError::invalid(
        "read-write lock",
        "read-write locks are not available yet",
    ))
}
