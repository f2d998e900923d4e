use lockattr::{LockError, redis_lock};

#[redis_lock(name = ["a", ["b", "c"]])]
async fn nested() -> Result<(), LockError> {
    Ok(())
}

fn main() {}
