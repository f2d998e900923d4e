use lockattr::redis_lock;

#[redis_lock(name = "order:{order_id}")]
fn pay(order_id: u64) -> u32 {
    order_id as u32
}

fn main() {}
