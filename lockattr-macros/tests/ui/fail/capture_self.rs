use lockattr::{LockError, redis_lock};

struct Order {
    id: u64,
}

impl Order {
    #[redis_lock(name = "order:{self}")]
    fn pay(&self) -> Result<u64, LockError> {
        Ok(self.id)
    }
}

fn main() {}
