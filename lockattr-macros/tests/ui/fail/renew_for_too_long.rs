use lockattr::{LockError, redis_lock};

#[redis_lock(name = "import", renew_for = "721h")]
async fn import() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "export", renew, renew_for = 3_000_000)]
fn export() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
