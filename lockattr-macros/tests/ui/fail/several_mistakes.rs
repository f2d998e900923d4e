use lockattr::{LockError, redis_lock};

#[redis_lock(name = "order:{id}", expire = 0, acquire_time = "5 min", colour = "blue", guard = g)]
fn pay(order_id: u64) -> Result<u64, LockError> {
    Ok(order_id + g.fencing_token())
}

fn main() {}
