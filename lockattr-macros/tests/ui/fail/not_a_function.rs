use lockattr::redis_lock;

#[redis_lock(name = "order")]
struct Order {
    id: u64,
}

fn main() {
    let _ = Order { id: 1 }.id;
}
