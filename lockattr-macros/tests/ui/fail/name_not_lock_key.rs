use lockattr::{LockError, redis_lock};

#[redis_lock(name = 1.5)]
fn pay() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
