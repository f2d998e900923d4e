use lockattr::{LockError, redis_lock};

#[redis_lock(name)]
fn pay(id: u64) -> Result<u64, LockError> {
    Ok(id)
}

fn main() {}
