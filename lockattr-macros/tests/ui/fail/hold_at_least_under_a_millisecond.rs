use lockattr::{LockError, redis_lock};

#[redis_lock(name = "report", hold_at_least = "500us")]
fn report() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
