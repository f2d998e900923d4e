use lockattr::{LockError, redis_lock};

#[redis_lock(name = "account:{id}", reentrant = 1)]
fn withdraw(id: u64) -> Result<(), LockError> {
    Ok(())
}

fn main() {}
