use lockattr::{LockError, redis_lock};

#[redis_lock(name = "gpu", permits = -2)]
async fn train() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
