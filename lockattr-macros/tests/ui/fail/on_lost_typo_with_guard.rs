use lockattr::{LockError, redis_lock};

#[redis_lock(name = "job:{id}", renew, on_lost = "abrot", guard = g)]
async fn run(id: u64) -> Result<u64, LockError> {
    if g.is_lost() {
        return Ok(0);
    }
    Ok(g.fencing_token())
}

fn main() {}
