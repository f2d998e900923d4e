use lockattr::{LockError, redis_lock};

trait Payments {
    #[redis_lock(name = "order:{order_id}")]
    fn pay(&self, order_id: u64) -> Result<(), LockError>;
}

fn main() {}
