use lockattr::{LockError, redis_lock};

#[redis_lock(name = "report", renew, on_lost = abort)]
async fn build() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
