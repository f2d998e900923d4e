use lockattr::{LockError, redis_lock};

#[redis_lock(name = "catalog", mode = "read", reentrant = true)]
fn read_catalog() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
