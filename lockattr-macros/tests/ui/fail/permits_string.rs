use lockattr::{LockError, redis_lock};

#[redis_lock(name = "gpu", permits = "4")]
fn train() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
