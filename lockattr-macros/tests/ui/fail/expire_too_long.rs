use lockattr::{LockError, redis_lock};

#[redis_lock(name = "order", expire = "721h")]
fn pay() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "order", expire = 3_000_000)]
fn pay_later() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
