//! Quick start: one sync and one async function, each under a Redis lock.
//!
//! Run with `cargo run --example quickstart`. Uses `REDIS_URL` when set,
//! otherwise starts a throwaway `redis-server` itself.

mod common;

use std::time::Duration;

use lockattr::{LockError, LockKey, redis_lock};

/// An error type of the application: the lock's errors convert into it.
#[derive(Debug)]
enum AppError {
    Lock(LockError),
    Insufficient { balance: i64, wanted: i64 },
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppError::Lock(e) => write!(f, "{e}"),
            AppError::Insufficient { balance, wanted } => {
                write!(f, "balance {balance} is less than {wanted}")
            }
        }
    }
}

impl std::error::Error for AppError {}

/// The lock of an account is named after its id: `account:<id>`.
#[derive(LockKey)]
#[lock_key(prefix = "account")]
struct Account {
    #[lock_key]
    id: u64,
    balance: i64,
}

impl Account {
    /// Synchronous: locks `account:<id>` (from `self`) while it runs.
    #[redis_lock(expire = 30, acquire_time = 5)]
    fn withdraw(&mut self, amount: i64) -> Result<i64, AppError> {
        if self.balance < amount {
            return Err(AppError::Insufficient {
                balance: self.balance,
                wanted: amount,
            });
        }
        self.balance -= amount;
        Ok(self.balance)
    }
}

/// Asynchronous: locks `order:<order_id>`; `g` is the held guard.
#[redis_lock(name = "order:{order_id}", expire = "30s", acquire_time = 5, guard = g)]
async fn pay(order_id: u64, amount: u64) -> Result<String, AppError> {
    tokio::time::sleep(Duration::from_millis(50)).await; // the payment call
    Ok(format!(
        "paid {amount} for order {order_id} under lock `{}` (fencing token {})",
        g.name(),
        g.fencing_token()
    ))
}

/// One attempt (`acquire_time = 0`): fails at once if the order is busy.
#[redis_lock(name = "order:{order_id}", acquire_time = 0)]
async fn refund(order_id: u64) -> Result<String, AppError> {
    Ok(format!("refunded order {order_id}"))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let redis = common::redis()?;
    lockattr::init(&redis.url)?; // once, at start-up

    // Sync code: the attribute blocks this thread while it waits for the lock.
    let mut account = Account {
        id: 42,
        balance: 100,
    };
    let left = tokio::task::spawn_blocking(move || account.withdraw(30)).await??;
    println!("withdrew 30 from account 42, {left} left");

    // Async code: two payments of one order contend; they run one at a time.
    let (a, b) = tokio::join!(pay(7, 100), pay(7, 100));
    println!("{}", a?);
    println!("{}", b?);

    // The same lock by hand, with the builder: while it is held, `refund`
    // (which makes one attempt) does not run its body.
    let locker = lockattr::default_locker()?;
    let guard = locker.lock("order:7").acquire().await?;
    println!("while held elsewhere: {}", refund(7).await.unwrap_err());
    guard.release().await?;
    println!("once released: {}", refund(7).await?);
    Ok(())
}
