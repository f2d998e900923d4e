use lockattr::{LockError, redis_lock};

#[redis_lock(name = "order", expire = "10")]
fn pay() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
