//! `locker = ...` and `guard = ...`.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]

use std::sync::{Arc, LazyLock};

use lockattr::{LockError, LockGuard, Locker, redis_lock};

static LOCKER: LazyLock<Locker> =
    LazyLock::new(|| Locker::new("redis://127.0.0.1:6379/").expect("a valid URL"));

struct Repo {
    locks: Locker,
    shared: Arc<Locker>,
}

impl Repo {
    #[redis_lock(name = "repo", locker = &self.locks)]
    fn own(&self) -> Result<(), LockError> {
        Ok(())
    }

    #[redis_lock(name = "repo", locker = &self.shared, guard = g)]
    async fn shared(&self) -> Result<u64, LockError> {
        Ok(g.fencing_token())
    }
}

#[redis_lock(name = "static", locker = &LOCKER)]
fn static_locker() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "static", locker = &LOCKER, guard = g)]
async fn static_locker_async() -> Result<u64, LockError> {
    Ok(g.fencing_token())
}

#[redis_lock(name = "arg:{id}", locker = locker, guard = guard)]
fn argument_locker(locker: &Locker, id: u32) -> Result<String, LockError> {
    let guard: &LockGuard = guard;
    Ok(format!(
        "{id} {} {:?}",
        guard.fencing_token(),
        guard.expire()
    ))
}

#[redis_lock(name = "token", guard = g)]
fn guard_only() -> Result<u64, LockError> {
    let token = g.fencing_token();
    g.extend_blocking(std::time::Duration::from_secs(1))?;
    Ok(token)
}

#[redis_lock(name = "token", guard = g)]
async fn guard_only_async() -> Result<u64, LockError> {
    g.extend(std::time::Duration::from_secs(1)).await?;
    Ok(g.fencing_token())
}

pub fn main() {
    let _ = Repo::own;
    let _ = Repo::shared;
    let _ = static_locker;
    let _ = static_locker_async;
    let _ = argument_locker;
    let _ = guard_only;
    let _ = guard_only_async;
}
