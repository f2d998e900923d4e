//! Distributed locks on Redis, as one attribute.
//!
//! ```no_run
//! use lockattr::{redis_lock, LockError};
//!
//! #[redis_lock(name = "order:{order_id}", expire = 30, acquire_time = 5)]
//! async fn pay(order_id: u64, amount: u64) -> Result<u64, LockError> {
//!     // Only one caller in the whole deployment runs this for a given order.
//!     Ok(amount)
//! }
//!
//! # #[tokio::main] async fn main() -> Result<(), LockError> {
//! lockattr::init("redis://127.0.0.1:6379/")?; // once, at start-up
//! pay(7, 100).await?;
//! # Ok(()) }
//! ```
//!
//! `#[redis_lock]` rewrites the function: it takes the lock (waiting up to
//! `acquire_time` while someone else holds it), runs the body, and releases
//! the lock on every way out: a value, `return`, `?`, a panic, or a future
//! dropped mid-body. When the lock cannot be had the body does not run and
//! the function returns `Err(LockError::Timeout { .. }.into())`.
//!
//! # Options
//!
//! | option | value | default |
//! |---|---|---|
//! | `name` | `"text"`; a format string capturing arguments, `"order:{order_id}"`; or any expression whose value implements [`LockKey`] | the first argument's [`LockKey`] (`self` included); the function's path when it has no arguments |
//! | `expire` | the lease: seconds (`30`, `0.5`), a string with a unit (`"250ms"`, `"1.5s"`, `"2m"`, `"1h"`), or a `Duration` expression | 10 s |
//! | `acquire_time` | how long to wait for a busy lock, same forms; `0` tries once | 10 s |
//! | `locker` | an expression that coerces to `&Locker`, evaluated per call (`locker = &self.locks`) | the process default ([`init`], [`set_default`]) |
//! | `guard` | a name to bind the held `&LockGuard` to inside the body (`guard = g`, then `g.fencing_token()`) | none |
//!
//! Literal durations and format strings are checked at compile time.
//!
//! The function must return `Result<T, E>` with `E: From<LockError>`.
//!
//! # Naming locks from values
//!
//! ```no_run
//! use lockattr::{redis_lock, LockError, LockKey};
//!
//! #[derive(LockKey)]
//! #[lock_key(prefix = "account")]
//! struct Account {
//!     #[lock_key]
//!     id: u64,
//!     balance: i64,
//! }
//!
//! impl Account {
//!     #[redis_lock] // the lock "account:<id>", from self
//!     fn withdraw(&mut self, amount: i64) -> Result<(), LockError> {
//!         self.balance -= amount;
//!         Ok(())
//!     }
//! }
//! ```
//!
//! # The code the attribute stands for
//!
//! ```no_run
//! # use lockattr::{LockError, Locker};
//! # use std::time::Duration;
//! # fn pay_body(order_id: u64) -> Result<(), LockError> { Ok(()) }
//! fn pay(order_id: u64) -> Result<(), LockError> {
//!     let locker: &Locker = lockattr::default_locker()?;
//!     let _guard = locker
//!         .lock(format!("order:{order_id}"))
//!         .expire(Duration::from_secs(30))
//!         .acquire_timeout(Duration::from_secs(5))
//!         .acquire_blocking()?;
//!     pay_body(order_id) // the guard's Drop releases the lock
//! }
//! ```
//!
//! Mistakes are compile errors at the offending token:
//!
//! ```compile_fail
//! #[lockattr::redis_lock(name = "order:{order_id}", expire = 0)] // `expire` cannot be zero
//! fn pay(order_id: u64) -> Result<(), lockattr::LockError> { Ok(()) }
//! ```

/// Takes a Redis lock around a function's body; see the [crate documentation](crate).
///
/// ```no_run
/// #[lockattr::redis_lock(name = "report:{day}", expire = "2m", acquire_time = 0)]
/// fn build_report(day: u32) -> Result<(), lockattr::LockError> {
///     Ok(())
/// }
/// ```
pub use lockattr_macros::redis_lock;

/// Derives [`LockKey`] from the fields marked `#[lock_key]`.
///
/// The name is the prefix (`#[lock_key(prefix = "...")]` on the type, or the
/// type's name) followed by each marked field's key, joined by `:`.
///
/// ```
/// use lockattr::LockKey;
///
/// #[derive(LockKey)]
/// #[lock_key(prefix = "seat")]
/// struct Seat { #[lock_key] row: u32, #[lock_key] number: u32, holder: String }
///
/// let seat = Seat { row: 5, number: 12, holder: "ann".into() };
/// assert_eq!(seat.lock_key(), "seat:5:12");
/// ```
pub use lockattr_macros::LockKey;

#[doc(inline)]
pub use lockattr_runtime::{
    DEFAULT_ACQUIRE_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_EXPIRE, DEFAULT_PREFIX,
    DEFAULT_RESPONSE_TIMEOUT, LockBuilder, LockError, LockGuard, LockKey, Locker, LockerBuilder,
    MAX_EXPIRE, default_locker, init, set_default,
};

#[doc(hidden)]
pub use lockattr_runtime::__private;
