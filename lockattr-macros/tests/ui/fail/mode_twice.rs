use lockattr::{LockError, redis_lock};

#[redis_lock(name = "catalog", mode = "read", expire = 5, mode = "write")]
async fn read_catalog() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
