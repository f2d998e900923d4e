use lockattr::{LockError, redis_lock};

#[redis_lock(name = "report", expire = 30, hold_at_least = -5)]
fn report() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
