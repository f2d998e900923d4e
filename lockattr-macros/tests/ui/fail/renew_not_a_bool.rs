use lockattr::{LockError, redis_lock};

#[redis_lock(name = "report", renew = "yes")]
fn build() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
