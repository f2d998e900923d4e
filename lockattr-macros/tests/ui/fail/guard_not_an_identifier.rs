use lockattr::{LockError, redis_lock};

#[redis_lock(name = "order", guard = 3)]
fn pay() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
