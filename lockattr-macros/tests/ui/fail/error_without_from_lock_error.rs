use lockattr::redis_lock;

#[derive(Debug)]
struct AppError;

#[redis_lock(name = "order:{order_id}")]
async fn pay(order_id: u64) -> Result<u64, AppError> {
    Ok(order_id)
}

fn main() {}
