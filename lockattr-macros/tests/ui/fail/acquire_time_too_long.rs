use lockattr::{LockError, redis_lock};

#[redis_lock(name = "order", acquire_time = "721h")]
fn pay() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "order", acquire_time = 3_000_000)]
async fn pay_later() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
