use lockattr::{LockError, redis_lock};

#[redis_lock(name = ["catalog", "prices"], mode = "read")]
async fn read_catalog() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
