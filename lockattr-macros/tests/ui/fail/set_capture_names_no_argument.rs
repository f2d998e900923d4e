use lockattr::{LockError, redis_lock};

#[redis_lock(name = ["account:{from}", "account:{too}"])]
async fn transfer(from: u64, to: u64) -> Result<u64, LockError> {
    Ok(from + to)
}

fn main() {}
