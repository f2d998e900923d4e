//! The process-wide default [`Locker`], used by `#[redis_lock]` without `locker = ...`.

use once_cell::sync::OnceCell;

use crate::{LockError, Locker, RedisAddr};

static DEFAULT: OnceCell<Locker> = OnceCell::new();

/// Sets the process-wide default Locker to one for the Redis server at `url`
/// (a URL or a `redis::ConnectionInfo`: see [`RedisAddr`]).
///
/// Call it once at start-up, before the first call of a function annotated
/// with `#[redis_lock]` that has no `locker = ...`. A second call (or a call
/// after [`set_default`]) fails with [`LockError::AlreadyConfigured`] and
/// changes nothing. Does not connect.
///
/// ```no_run
/// # use lockattr_runtime as lockattr; // the doctest builds without the facade
/// lockattr::init("redis://127.0.0.1:6379/")?;
/// # Ok::<(), lockattr::LockError>(())
/// ```
pub fn init(url: impl RedisAddr) -> Result<(), LockError> {
    set_default(Locker::new(url)?)
}

/// Sets the process-wide default Locker; see [`init`].
///
/// ```
/// # use lockattr_runtime as lockattr; // the doctest builds without the facade
/// use lockattr::{Locker, set_default, default_locker};
///
/// let locker = Locker::builder("redis://127.0.0.1:6379/").prefix("app:").build()?;
/// set_default(locker)?;
/// assert_eq!(default_locker()?.prefix(), "app:");
/// # Ok::<(), lockattr_runtime::LockError>(())
/// ```
pub fn set_default(locker: Locker) -> Result<(), LockError> {
    DEFAULT
        .set(locker)
        .map_err(|_| LockError::AlreadyConfigured)
}

/// The process-wide default Locker, or [`LockError::NotConfigured`].
///
/// ```
/// # use lockattr_runtime as lockattr; // the doctest builds without the facade
/// // Nothing was configured in this process:
/// assert!(lockattr::default_locker().is_err());
/// ```
pub fn default_locker() -> Result<&'static Locker, LockError> {
    DEFAULT.get().ok_or(LockError::NotConfigured)
}
