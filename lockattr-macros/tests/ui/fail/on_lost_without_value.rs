use lockattr::{LockError, redis_lock};

#[redis_lock(name = "report", renew, on_lost)]
async fn build() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
