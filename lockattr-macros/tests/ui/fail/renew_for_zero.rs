use lockattr::{LockError, redis_lock};

#[redis_lock(name = "import", renew_for = 0)]
fn import() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "export", expire = 30, renew_for = "0s")]
async fn export() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
