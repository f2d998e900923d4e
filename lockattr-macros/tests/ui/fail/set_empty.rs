use lockattr::{LockError, redis_lock};

#[redis_lock(name = [])]
async fn nothing() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
