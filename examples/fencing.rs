//! Fencing tokens, end to end: a worker whose lease ran out while it was
//! paused tries to write, and the storage refuses it.
//!
//! 1. Worker A takes the lock `invoice:42` with a 300 ms lease and gets a
//!    fencing token.
//! 2. A stalls for 600 ms (here a sleep; in real life a GC pause, a stalled
//!    disk, a suspended VM). Its lease runs out.
//! 3. Worker B, on "another machine" (its own Locker), takes the lock, with
//!    a higher fencing token, and writes the invoice total.
//! 4. A resumes and writes its stale total. The lock cannot stop it: A is
//!    past every check it made. The storage can: A's token is lower than
//!    B's, so the write is refused.
//!
//! Run with `cargo run --example fencing`. Uses `REDIS_URL` when set,
//! otherwise starts a throwaway `redis-server` itself.

mod common;
#[path = "common/fenced.rs"]
mod fenced;

use std::time::Duration;

use fenced::{FencedStore, Write};
use lockattr::Locker;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let redis = common::redis()?;
    let record = "invoice:42:total";
    let mut store = FencedStore::open(&redis.url).await?;

    let machine_a = Locker::new(&redis.url)?;
    let a = machine_a
        .lock("invoice:42")
        .expire(Duration::from_millis(300))
        .acquire()
        .await?;
    println!("A holds the lock with fencing token {}", a.fencing_token());

    // A stalls past its lease.
    tokio::time::sleep(Duration::from_millis(600)).await;

    let machine_b = Locker::new(&redis.url)?;
    let b = machine_b.lock("invoice:42").acquire().await?;
    println!("B holds the lock with fencing token {}", b.fencing_token());
    let written = store.write(record, b.fencing_token(), "B: 120.00").await?;
    println!("B writes its total: {written:?}");
    b.release().await?;

    // A resumes. Its guard knows the lease is gone, but A is past its checks.
    println!("A resumes; its guard says lost = {}", a.is_lost());
    let written = store.write(record, a.fencing_token(), "A: 99.00").await?;
    println!("A writes its stale total: {written:?}");
    assert!(matches!(written, Write::Stale { .. }));
    println!("the record holds {:?}", store.read(record).await?);
    if let Err(e) = a.release().await {
        println!("A's release: {e}");
    }
    Ok(())
}
