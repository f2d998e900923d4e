use lockattr::{LockError, redis_lock};

#[redis_lock(name = "catalog", mode = "write", reentrant)]
async fn read_catalog() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
