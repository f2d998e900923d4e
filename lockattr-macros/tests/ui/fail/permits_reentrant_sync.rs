use lockattr::{LockError, redis_lock};

// `reentrant = true` is accepted on a sync fn, but a semaphore is never
// re-entered, sync or async.
#[redis_lock(name = "gpu", permits = 4, reentrant = true)]
fn train() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
