use lockattr::redis_lock;

#[redis_lock(name = "order:{order_id}")]
async fn pay(order_id: u64) -> Option<u64> {
    Some(order_id)
}

fn main() {}
