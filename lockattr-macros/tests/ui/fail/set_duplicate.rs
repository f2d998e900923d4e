use lockattr::{LockError, redis_lock};

#[redis_lock(name = ["account:{from}", "ledger", "account:{from}"])]
async fn transfer(from: u64) -> Result<u64, LockError> {
    Ok(from)
}

fn main() {}
