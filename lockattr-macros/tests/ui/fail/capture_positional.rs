use lockattr::{LockError, redis_lock};

#[redis_lock(name = "order:{}")]
fn pay(order_id: u64) -> Result<u64, LockError> {
    Ok(order_id)
}

fn main() {}
