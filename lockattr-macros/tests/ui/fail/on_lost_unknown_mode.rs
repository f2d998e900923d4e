use lockattr::{LockError, redis_lock};

#[redis_lock(name = "report", renew, on_lost = "explode")]
async fn build() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
