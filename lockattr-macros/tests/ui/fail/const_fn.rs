use lockattr::{LockError, redis_lock};

#[redis_lock(name = "order")]
const fn pay() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
