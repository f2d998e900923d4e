//! Every form of the attribute on one-line bodies (`{ Ok(id) }`), under
//! `#![deny(warnings)]`: no lint may fire on the user's own code. A sync
//! body was once spliced in as the function's tail block, and rustc called
//! its braces unnecessary (`unused_braces`, "around block return value").
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]
// Its `main` uses nothing: the functions are here to be compiled.
#![allow(dead_code)]

use std::fmt::Display;

use lockattr::{LockError, LockKey, Locker, redis_lock};

#[derive(Debug)]
struct AppError;

impl From<LockError> for AppError {
    fn from(_: LockError) -> Self {
        Self
    }
}

#[derive(LockKey)]
#[lock_key(prefix = "account")]
struct Account {
    #[lock_key]
    id: u64,
    locker: Locker,
}

fn key_for(day: u32) -> String {
    format!("day:{day}")
}

// ---- plain locks ----

#[redis_lock(name = "order:{id}")]
fn sync_value(id: u64) -> Result<u64, LockError> { Ok(id) }

#[redis_lock(name = "order:{id}")]
async fn async_value(id: u64) -> Result<u64, LockError> { Ok(id) }

#[redis_lock(name = "order")]
fn sync_unit() -> Result<(), LockError> { Ok(()) }

#[redis_lock(name = "order")]
async fn async_unit() -> Result<(), LockError> { Ok(()) }

#[redis_lock]
fn sync_no_arguments() -> Result<(), AppError> { Ok(()) }

#[redis_lock]
async fn async_no_arguments() -> Result<(), AppError> { Ok(()) }

#[redis_lock(name = "order:{id}", expire = 30, acquire_time = 5)]
fn sync_app_error(id: u64) -> Result<u64, AppError> { Ok(id) }

#[redis_lock(name = "order:{id}", expire = 30, acquire_time = 5)]
async fn async_app_error(id: u64) -> Result<u64, AppError> { Ok(id) }

#[redis_lock(name = "order:{id}")]
fn sync_impl_trait(id: u64) -> Result<impl Display, LockError> { Ok(id) }

#[redis_lock(name = "order:{id}")]
async fn async_impl_trait(id: u64) -> Result<impl Display, LockError> { Ok(id) }

#[redis_lock(name = "order:{id}")]
fn sync_question_mark(id: &str) -> Result<u64, AppError> { id.parse().map_err(|_| AppError) }

#[redis_lock(name = format!("order:{}", id + 1), locker = locker)]
fn sync_expression(locker: &Locker, id: u64) -> Result<u64, LockError> { Ok(id) }

#[redis_lock(name = format!("order:{}", id + 1), locker = locker)]
async fn async_expression(locker: &Locker, id: u64) -> Result<u64, LockError> { Ok(id) }

#[redis_lock(name = "order:{id}", guard = g)]
fn sync_guard(id: u64) -> Result<u64, LockError> { Ok(id + g.fencing_token()) }

#[redis_lock(name = "order:{id}", guard = g)]
async fn async_guard(id: u64) -> Result<u64, LockError> { Ok(id + g.fencing_token()) }

#[redis_lock(name = "order:{id}", renew, hold_at_least = 1)]
fn sync_renew(id: u64) -> Result<u64, LockError> { Ok(id) }

#[redis_lock(name = "order:{id}", renew_for = "1h")]
async fn async_renew_for(id: u64) -> Result<u64, LockError> { Ok(id) }

#[redis_lock(name = "order:{id}", on_lost = "error")]
fn sync_on_lost_error(id: u64) -> Result<u64, LockError> { Ok(id) }

#[redis_lock(name = "order:{id}", on_lost = "error")]
async fn async_on_lost_error(id: u64) -> Result<u64, LockError> { Ok(id) }

#[redis_lock(name = "order:{id}", renew, on_lost = "abort")]
async fn async_on_lost_abort(id: u64) -> Result<u64, LockError> { Ok(id) }

#[redis_lock(name = "order:{id}", on_lost = "ignore")]
fn sync_on_lost_ignore(id: u64) -> Result<u64, LockError> { Ok(id) }

#[redis_lock(name = "order:{id}", on_lost = "ignore")]
async fn async_on_lost_ignore(id: u64) -> Result<u64, LockError> { Ok(id) }

#[redis_lock(name = "shelf:{id}", mode = "write", on_lost = "ignore")]
fn sync_write_on_lost_ignore(id: u64) -> Result<u64, LockError> { Ok(id) }

#[redis_lock(name = ["account:{from}", "account:{to}"], on_lost = "ignore", reentrant)]
fn sync_set_on_lost_ignore(from: u64, to: u64) -> Result<(), LockError> { Ok(()) }

#[redis_lock(name = "gpu", permits = 2, on_lost = "ignore")]
async fn async_permits_on_lost_ignore() -> Result<(), LockError> { Ok(()) }

#[redis_lock(name = "order:{id}")]
fn sync_generic<T: Display>(id: u64, label: T) -> Result<String, LockError> { Ok(format!("{label}{id}")) }

// ---- reentrant ----

#[redis_lock(name = "order:{id}", reentrant)]
fn sync_reentrant(id: u64) -> Result<u64, LockError> { Ok(id) }

#[redis_lock(name = "order:{id}", reentrant = true)]
fn sync_reentrant_true(id: u64) -> Result<u64, LockError> { sync_reentrant(id) }

#[redis_lock(name = "order:{id}", reentrant = false)]
fn sync_reentrant_false(id: u64) -> Result<u64, LockError> { Ok(id) }

#[redis_lock(name = "order:{id}", reentrant = false)]
async fn async_reentrant_false(id: u64) -> Result<u64, LockError> { Ok(id) }

// ---- mode ----

#[redis_lock(name = "shelf:{id}", mode = "read")]
fn sync_read(id: u64) -> Result<u64, LockError> { Ok(id) }

#[redis_lock(name = "shelf:{id}", mode = "read")]
async fn async_read(id: u64) -> Result<u64, LockError> { Ok(id) }

#[redis_lock(name = "shelf:{id}", mode = "write", guard = g)]
fn sync_write(id: u64) -> Result<u64, LockError> { Ok(id + g.fencing_token()) }

#[redis_lock(name = "shelf:{id}", mode = "write")]
async fn async_write(id: u64) -> Result<(), LockError> { Ok(()) }

// ---- permits ----

#[redis_lock(name = "gpu", permits = 4)]
fn sync_permits() -> Result<(), LockError> { Ok(()) }

#[redis_lock(name = "gpu:{id}", permits = 4, guard = g)]
async fn async_permits(id: u64) -> Result<u64, LockError> { Ok(id + g.fencing_token()) }

// ---- several names ----

#[redis_lock(name = ["account:{from}", "account:{to}"])]
fn sync_set(from: u64, to: u64) -> Result<u64, LockError> { Ok(from + to) }

#[redis_lock(name = ["account:{from}", "account:{to}"], guard = g)]
async fn async_set(from: u64, to: u64) -> Result<u64, LockError> { Ok(from + to + g.fencing_token_of("x").unwrap_or(0)) }

#[redis_lock(name = ["report", key_for(day)], reentrant)]
fn sync_set_reentrant(day: u32) -> Result<(), LockError> { Ok(()) }

#[redis_lock(name = [key_for(day), "report"], on_lost = "error")]
async fn async_set_on_lost(day: u32) -> Result<(), AppError> { Ok(()) }

// ---- LockKey: self and the first argument ----

impl Account {
    #[redis_lock(locker = &self.locker)]
    fn sync_self(&self) -> Result<u64, LockError> { Ok(self.id) }

    #[redis_lock(locker = &self.locker)]
    async fn async_self(&self) -> Result<u64, LockError> { Ok(self.id) }

    #[redis_lock(locker = &self.locker, reentrant)]
    fn sync_self_mut(&mut self) -> Result<(), LockError> { Ok(()) }

    #[redis_lock(locker = &self.locker, mode = "write")]
    async fn async_self_write(&mut self) -> Result<(), LockError> { Ok(()) }

    #[redis_lock(locker = &self.locker, permits = 2)]
    fn sync_self_permits(&self) -> Result<(), LockError> { Ok(()) }
}

#[redis_lock]
fn sync_first_argument(account: &Account) -> Result<u64, LockError> { Ok(account.id) }

#[redis_lock]
async fn async_first_argument(account: &Account) -> Result<u64, LockError> { Ok(account.id) }

#[redis_lock]
fn sync_first_argument_integer(id: u64) -> Result<u64, LockError> { Ok(id) }

pub fn main() {}
