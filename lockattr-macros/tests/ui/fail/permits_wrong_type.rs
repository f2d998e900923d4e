use lockattr::{LockError, redis_lock};

#[redis_lock(name = "gpu", permits = SLOTS)]
async fn train() -> Result<(), LockError> {
    Ok(())
}

const SLOTS: i64 = 4;

fn main() {}
