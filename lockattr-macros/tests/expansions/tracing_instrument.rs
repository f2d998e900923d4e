//! Next to `#[tracing::instrument]`, in both orders.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]

use lockattr::{LockError, redis_lock};

#[tracing::instrument]
#[redis_lock(name = "order:{order_id}")]
async fn instrument_outside(order_id: u64) -> Result<u64, LockError> {
    Ok(order_id)
}

#[redis_lock(name = "order:{order_id}")]
#[tracing::instrument]
async fn instrument_inside(order_id: u64) -> Result<u64, LockError> {
    Ok(order_id)
}

#[tracing::instrument(err)]
#[redis_lock(name = "order:{order_id}")]
fn instrument_sync(order_id: u64) -> Result<u64, LockError> {
    Ok(order_id)
}

#[redis_lock(name = "order:{order_id}")]
#[tracing::instrument(skip(order_id))]
fn instrument_sync_inside(order_id: u64) -> Result<u64, LockError> {
    Ok(order_id)
}

fn assert_send<T: Send>(_: T) {}

pub fn main() {
    if false {
        assert_send(instrument_outside(1));
        assert_send(instrument_inside(1));
        let _ = instrument_sync(1);
        let _ = instrument_sync_inside(1);
    }
}
