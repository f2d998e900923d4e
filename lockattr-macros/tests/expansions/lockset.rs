//! Several names at once: format strings, `LockKey` expressions, with every
//! option a set supports, on sync and async functions and methods.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]

use lockattr::{LockError, LockKey, LockSetGuard, Locker, redis_lock};

#[derive(LockKey)]
#[lock_key(prefix = "account")]
struct Account {
    #[lock_key]
    id: u64,
    balance: i64,
}

#[redis_lock(name = ["account:{from}", "account:{to}"], expire = 30, acquire_time = 5, guard = g)]
async fn transfer(from: u64, to: u64, amount: u64) -> Result<u64, LockError> {
    let _: &LockSetGuard = g;
    Ok(amount + g.fencing_token_of(&format!("account:{from}")).unwrap_or(0) + to)
}

#[redis_lock(name = [from, to], renew, on_lost = "abort", guard = g)]
async fn move_balance(from: &mut Account, to: &mut Account) -> Result<(), LockError> {
    if g.is_lost() {
        return Ok(());
    }
    from.balance -= 1;
    to.balance += 1;
    Ok(())
}

#[redis_lock(name = ["report", "report:{day}", key_for(day)], renew_for = "1h", on_lost = "error")]
fn nightly(day: u32) -> Result<u32, LockError> {
    Ok(day)
}

fn key_for(day: u32) -> String {
    format!("archive:{day}")
}

struct Bank {
    locks: Locker,
}

impl Bank {
    #[redis_lock(name = ["bank:{a}", "bank:{b}"], locker = &self.locks, reentrant = false)]
    async fn settle(&self, a: u32, b: u32) -> Result<u32, LockError> {
        Ok(a + b)
    }

    #[redis_lock(name = ["single"], locker = &self.locks)]
    fn one(&self) -> Result<(), LockError> {
        Ok(())
    }

    /// Sync, re-entered on the same thread: a nested call on a subset goes
    /// straight in.
    #[redis_lock(name = ["bank:{a}", "bank:{b}"], locker = &self.locks, reentrant = true, guard = g)]
    fn audit(&self, a: u32, b: u32) -> Result<u64, LockError> {
        let _ = self.audit_one(a)?;
        Ok(g.fencing_token_of(&format!("bank:{b}")).unwrap_or(0))
    }

    #[redis_lock(name = ["bank:{a}"], locker = &self.locks, reentrant)]
    fn audit_one(&self, a: u32) -> Result<u32, LockError> {
        Ok(a)
    }
}

/// A body is the user's, never rewritten: its own `__private` paths stay
/// as written.
mod __private {
    pub(crate) fn answer() -> u32 {
        42
    }
}

#[redis_lock(name = ["ledger:a", "ledger:b"])]
fn own_private_path() -> Result<u32, LockError> {
    Ok(__private::answer())
}

#[redis_lock(name = ["ledger:a", "ledger:b"])]
async fn own_private_path_async() -> Result<u32, LockError> {
    Ok(__private::answer())
}

pub fn main() {
    let _ = (
        own_private_path,
        own_private_path_async,
        transfer,
        move_balance,
        nightly,
        Bank::settle,
        Bank::one,
        Bank::audit,
    );
}
