use lockattr::{LockError, redis_lock};

#[redis_lock(name = "import", renew_for = "500us")]
async fn import() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
