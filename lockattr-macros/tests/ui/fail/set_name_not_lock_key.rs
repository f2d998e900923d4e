use lockattr::{LockError, redis_lock};

struct Plain;

#[redis_lock(name = ["a", plain])]
async fn f(plain: Plain) -> Result<(), LockError> {
    let _ = plain;
    Ok(())
}

fn main() {}
