use lockattr::{LockError, redis_lock};

#[redis_lock]
fn pay((order_id, amount): (u64, u64)) -> Result<u64, LockError> {
    Ok(order_id + amount)
}

fn main() {}
