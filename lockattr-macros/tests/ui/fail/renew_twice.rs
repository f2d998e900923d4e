use lockattr::{LockError, redis_lock};

#[redis_lock(name = "report", renew, expire = 30, renew = false)]
async fn build() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
