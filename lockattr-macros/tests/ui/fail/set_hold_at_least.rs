use lockattr::{LockError, redis_lock};

#[redis_lock(name = ["a", "b"], hold_at_least = "5s")]
async fn both() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
