use lockattr::{LockError, redis_lock};

#[redis_lock(name = "report", expire = 30, hold_at_least = 45)]
fn report() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "digest", expire = "1s", hold_at_least = "1500ms")]
async fn digest() -> Result<(), LockError> {
    Ok(())
}

// Without `expire` the lease is 10 s.
#[redis_lock(name = "summary", hold_at_least = "11s")]
async fn summary() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
