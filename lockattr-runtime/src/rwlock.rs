//! Read-write locks: many readers or one writer of one name
//! ([`Locker::read_lock`], [`Locker::write_lock`]).

use std::time::Duration;

use crate::backend::queue::Queued;
use crate::backend::rwlock::{self as redis_side, RwKeys};
use crate::backend::{Backend, Grant, LockRequest};
use crate::guard::Lease;
use crate::key::Keys;
use crate::{LockBuilder, LockError, Locker, io};

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

/// Checks a read-write request and makes its keys: refused on a Redlock.
pub(crate) fn check(keys: &mut Keys, mode: RwMode, backend: &Backend) -> Result<(), LockError> {
    if let Backend::Redlock(_) = backend {
        return Err(LockError::invalid(
            "read-write lock",
            "read-write locks need one server or a Redis Cluster: a Redlock Locker would have to \
             count readers and hand the lock over by majority across independent masters, which \
             is not supported; use a Locker on one server (or Sentinel) or a Cluster for \
             read-write locks",
        ));
    }
    RwKeys::make(keys, mode);
    Ok(())
}

/// Takes the side of `lease` for its lease, waiting up to `wait`; the
/// lease, now keyed by the key it holds, and the grant.
pub(crate) async fn acquire(
    mut lease: Lease,
    wait: Duration,
    gone: io::CallerGone,
) -> Result<(Lease, Grant), LockError> {
    let Some(rw) = lease.keys.rw.clone() else {
        return Err(LockError::invalid(
            "read-write lock",
            "not a read-write lock request",
        ));
    };
    let backend = match &lease.locker.backend {
        Backend::Single(node) => Queued::Single(node),
        Backend::Cluster(nodes) => Queued::Cluster(nodes),
        Backend::Redlock(_) => {
            return Err(LockError::invalid(
                "read-write lock",
                "read-write locks are not supported on a Redlock Locker",
            ));
        }
    };
    let request = LockRequest {
        locker: &lease.locker,
        name: &lease.name,
        keys: &lease.keys,
        token: lease.token.clone(),
        expire: lease.expire,
        wait,
    };
    let grant = redis_side::acquire(backend, request, &rw, gone).await?;
    lease.keys.lock = rw.holder_key(&grant.token);
    Ok((lease, grant))
}
