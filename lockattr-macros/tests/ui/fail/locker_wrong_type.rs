use lockattr::{LockError, redis_lock};

#[redis_lock(name = "order", locker = 5)]
fn pay() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
