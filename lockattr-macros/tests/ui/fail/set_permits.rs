use lockattr::{LockError, redis_lock};

#[redis_lock(name = ["a", "b"], permits = 2)]
async fn both() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
