//! A lock held by a majority of independent Redis masters (Redlock), with
//! the same attribute as on one server.
//!
//! Set `REDLOCK_URLS` to your masters, comma-separated (an odd number, at
//! least 3); otherwise the example starts five throwaway redis-servers.
//!
//! ```sh
//! cargo run --example redlock
//! ```

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use lockattr::{LockError, Locker, redis_lock};

static REDLOCK: OnceLock<Locker> = OnceLock::new();

fn redlock() -> &'static Locker {
    REDLOCK.get().expect("set in main")
}

/// Only one caller at a time, on any machine, while 3 of the 5 masters agree.
#[redis_lock(name = "invoice:{id}", locker = redlock(), expire = 10, acquire_time = 5)]
async fn bill(id: u64, amount: u64) -> Result<u64, LockError> {
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(amount)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (urls, _servers) = match std::env::var("REDLOCK_URLS") {
        Ok(urls) => (urls.split(',').map(str::to_owned).collect(), Vec::new()),
        Err(_) => {
            let servers = (0..5)
                .map(|_| common::throwaway())
                .collect::<Result<Vec<_>, _>>()?;
            let urls: Vec<String> = servers.iter().map(|s| s.url.clone()).collect();
            (urls, servers)
        }
    };
    let mut builder = Locker::redlock_builder(&urls);
    if std::env::var("REDLOCK_URLS").is_err() {
        // The throwaway servers have just started: by default a node up for
        // less than a lease does not vote (it may have restarted and
        // forgotten a lock), so the first locks would wait 10 s.
        builder = builder.delay_restarted_nodes(false);
    }
    REDLOCK.set(builder.build()?).map_err(|_| "set twice")?;

    // Two concurrent calls on one invoice: the second waits for the first.
    let (a, b) = tokio::join!(bill(7, 100), bill(7, 250));
    println!("billed {} and {}", a?, b?);

    // The builder API works the same way.
    let guard = redlock().lock("report").acquire().await?;
    println!("fencing token {}", guard.fencing_token());
    guard.release().await?;
    Ok(())
}
