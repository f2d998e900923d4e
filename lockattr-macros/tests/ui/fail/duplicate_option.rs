use lockattr::{LockError, redis_lock};

#[redis_lock(name = "order", expire = 5, name = "payment")]
fn pay() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
