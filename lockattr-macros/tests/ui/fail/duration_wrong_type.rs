use lockattr::{LockError, redis_lock};

const WAIT: u64 = 5;

#[redis_lock(name = "order", acquire_time = WAIT)]
fn pay() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
