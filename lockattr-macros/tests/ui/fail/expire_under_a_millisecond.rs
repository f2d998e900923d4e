use lockattr::{LockError, redis_lock};

#[redis_lock(name = "order", expire = "999us")]
fn pay() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "order", expire = 0.0005)]
async fn pay_later() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
