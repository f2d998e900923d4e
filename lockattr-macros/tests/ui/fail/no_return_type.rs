use lockattr::redis_lock;

#[redis_lock(name = "order:{order_id}", guard = g)]
fn pay(order_id: u64) {
    println!("{order_id} {}", g.fencing_token());
}

fn main() {}
