//! Methods in trait impls, including native `async fn` in traits, and a
//! default method with a body in the trait itself.
#![deny(warnings, unused_qualifications, unused_results, clippy::all)]

use std::future::Future;

use lockattr::{LockError, LockKey, redis_lock};

#[derive(LockKey)]
struct Job {
    #[lock_key]
    id: u64,
}

trait Worker {
    fn run(&self, n: u64) -> Result<u64, LockError>;

    async fn run_async(&self, n: u64) -> Result<u64, LockError>;

    /// An async method whose future the trait requires to be `Send`.
    fn run_send(&self, n: u64) -> impl Future<Output = Result<u64, LockError>> + Send;

    #[redis_lock(name = "default:{n}")]
    fn provided(&self, n: u64) -> Result<u64, LockError> {
        Ok(n)
    }
}

impl Worker for Job {
    #[redis_lock]
    fn run(&self, n: u64) -> Result<u64, LockError> {
        Ok(self.id + n)
    }

    #[redis_lock(name = "job:{n}")]
    async fn run_async(&self, n: u64) -> Result<u64, LockError> {
        Ok(self.id + n)
    }

    #[redis_lock]
    async fn run_send(&self, n: u64) -> Result<u64, LockError> {
        Ok(self.id * n)
    }
}

pub fn main() {
    let _ = <Job as Worker>::run;
    let _ = <Job as Worker>::run_async;
    let _ = <Job as Worker>::run_send;
    let _ = <Job as Worker>::provided;
}
