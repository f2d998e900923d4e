//! An async function's future stays `Send`, whatever the options.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use lockattr::{LockError, LockKey, Locker, redis_lock};

static LOCKER: LazyLock<Locker> =
    LazyLock::new(|| Locker::new("redis://127.0.0.1:6379/").expect("a valid URL"));

#[derive(LockKey)]
struct User {
    #[lock_key]
    id: u64,
}

#[redis_lock(name = "order:{order_id}", expire = "2m", acquire_time = 0)]
async fn by_format(order_id: u64) -> Result<u64, LockError> {
    tokio::task::yield_now().await;
    Ok(order_id)
}

#[redis_lock]
async fn by_key(user: User) -> Result<u64, LockError> {
    tokio::time::sleep(Duration::from_millis(1)).await;
    Ok(user.id)
}

#[redis_lock(locker = &LOCKER, guard = g, expire = Duration::from_secs(3))]
async fn with_guard(user: Arc<User>) -> Result<u64, LockError> {
    tokio::task::yield_now().await;
    Ok(g.fencing_token() + user.id)
}

#[redis_lock(name = "catalog", mode = "read", guard = g, renew)]
async fn reading(user: Arc<User>) -> Result<u64, LockError> {
    tokio::task::yield_now().await;
    Ok(g.fencing_token() + user.id)
}

#[redis_lock(name = "catalog", mode = "write", on_lost = "abort", renew)]
async fn writing(id: u64) -> Result<u64, LockError> {
    tokio::task::yield_now().await;
    Ok(id)
}

struct Service {
    locks: Arc<Locker>,
}

impl Service {
    #[redis_lock(name = "svc", locker = &self.locks)]
    async fn work(&self) -> Result<(), LockError> {
        tokio::task::yield_now().await;
        Ok(())
    }
}

fn assert_send<T: Send>(_: T) {}

pub fn main() {
    if false {
        assert_send(by_format(1));
        assert_send(by_key(User { id: 1 }));
        assert_send(with_guard(Arc::new(User { id: 1 })));
        assert_send(reading(Arc::new(User { id: 1 })));
        assert_send(writing(1));
        let service = Service {
            locks: Arc::new(LOCKER.clone()),
        };
        assert_send(service.work());
        drop(tokio::spawn(by_format(2)));
    }
}
