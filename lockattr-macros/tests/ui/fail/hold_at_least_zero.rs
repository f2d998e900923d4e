use lockattr::{LockError, redis_lock};

#[redis_lock(name = "report", hold_at_least = 0)]
fn report() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "digest", hold_at_least = "0ms")]
async fn digest() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
