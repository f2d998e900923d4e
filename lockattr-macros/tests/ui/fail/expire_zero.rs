use lockattr::{LockError, redis_lock};

#[redis_lock(name = "order", expire = 0)]
async fn pay() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
