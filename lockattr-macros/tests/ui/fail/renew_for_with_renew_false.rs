use lockattr::{LockError, redis_lock};

// Nothing to cap: renewal is off.
#[redis_lock(name = "import", renew = false, renew_for = "1h")]
async fn import() -> Result<(), LockError> {
    Ok(())
}

#[redis_lock(name = "export", renew_for = "10m", expire = 30, renew = false)]
fn export() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
