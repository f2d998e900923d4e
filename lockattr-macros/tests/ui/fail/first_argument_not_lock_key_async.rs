use lockattr::{LockError, redis_lock};

struct Order {
    id: u64,
}

#[redis_lock]
async fn pay(order: Order, amount: u64) -> Result<u64, LockError> {
    Ok(order.id + amount)
}

fn main() {}
