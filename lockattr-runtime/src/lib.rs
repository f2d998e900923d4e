//! The runtime of [`lockattr`](https://docs.rs/lockattr): distributed locks on
//! Redis with random owner tokens, fencing tokens, and release on every exit.
//!
//! Use it through the `lockattr` crate, which adds the `#[redis_lock]`
//! attribute and `#[derive(LockKey)]`.
//!
//! ```no_run
//! use lockattr_runtime::Locker;
//!
//! # fn main() -> Result<(), lockattr_runtime::LockError> {
//! let locker = Locker::new("redis://127.0.0.1:6379/")?;
//! let guard = locker.lock("report").acquire_blocking()?;
//! // ... only one process at a time gets here ...
//! guard.release_blocking()?;
//! # Ok(()) }
//! ```

mod address;
mod backend;
mod default;
mod error;
mod guard;
mod inner;
mod inspect;
mod io;
mod key;
mod locker;
mod lost;
mod reentry;
mod watchdog;

#[doc(hidden)]
pub mod __private;

/// The redis crate (redis-rs 1.x) this crate is built on, for
/// [`redis::ConnectionInfo`] and [`redis::IntoConnectionInfo`] of the same
/// version as the one [`RedisAddr`] takes.
pub use redis;

pub use address::RedisAddr;
pub use default::{default_locker, init, set_default};
pub use error::LockError;
pub use guard::LockGuard;
pub use inspect::{Holder, LockInfo};
pub use key::LockKey;
pub use locker::{
    DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_EXPIRE, DEFAULT_FENCE_RETENTION,
    DEFAULT_PREFIX, DEFAULT_REDLOCK_MAX_LEASE, DEFAULT_RESPONSE_TIMEOUT, LockBuilder, Locker,
    LockerBuilder, MAX_ACQUIRE_TIMEOUT, MAX_EXPIRE, MAX_TIMEOUT,
};
pub use lost::LostReason;
