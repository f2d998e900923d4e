use lockattr::{LockError, redis_lock};

#[redis_lock(name = "order:{id}")]
async fn pay(order_id: u64, amount: u64) -> Result<u64, LockError> {
    Ok(order_id + amount)
}

fn main() {}
