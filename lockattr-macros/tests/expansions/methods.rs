//! Methods taking every kind of receiver.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]

use std::sync::Arc;

use lockattr::{LockError, LockKey, Locker, redis_lock};

#[derive(LockKey)]
#[lock_key(prefix = "account")]
struct Account {
    #[lock_key]
    id: u64,
    balance: i64,
    locks: Locker,
}

impl Account {
    /// Named after `self` through `LockKey`.
    #[redis_lock]
    fn balance(&self) -> Result<i64, LockError> {
        Ok(self.balance)
    }

    #[redis_lock]
    async fn balance_async(&self) -> Result<i64, LockError> {
        Ok(self.balance)
    }

    #[redis_lock(locker = &self.locks)]
    fn withdraw(&mut self, amount: i64) -> Result<i64, LockError> {
        self.balance -= amount;
        Ok(self.balance)
    }

    #[redis_lock(name = "account:{id}", locker = &self.locks, guard = g)]
    async fn withdraw_async(&mut self, id: u64, amount: i64) -> Result<u64, LockError> {
        self.balance -= amount;
        Ok(g.fencing_token() + id)
    }

    #[redis_lock]
    fn close(self) -> Result<i64, LockError> {
        Ok(self.balance)
    }

    #[redis_lock(name = "close")]
    async fn close_async(self) -> Result<i64, LockError> {
        Ok(self.balance)
    }

    #[redis_lock]
    fn shared(self: Arc<Self>) -> Result<u64, LockError> {
        Ok(self.id)
    }

    #[redis_lock(locker = &self.locks)]
    async fn shared_async(self: Arc<Self>) -> Result<u64, LockError> {
        Ok(self.id)
    }

    /// An associated function without arguments: named after its path.
    #[redis_lock]
    fn housekeeping() -> Result<(), LockError> {
        Ok(())
    }
}

pub fn main() {
    let _ = Account::balance;
    let _ = Account::balance_async;
    let _ = Account::withdraw;
    let _ = Account::withdraw_async;
    let _ = Account::close;
    let _ = Account::close_async;
    let _ = Account::shared;
    let _ = Account::shared_async;
    let _ = Account::housekeeping;
}
