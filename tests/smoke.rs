//! Smoke test: one async and one sync annotated function against a private redis-server.
use crate::support;
use lockattr::{LockError, Locker, redis_lock};
use support::lockers::setup;

#[redis_lock(name = "order:{id}", expire = 30, acquire_time = 0, locker = locker)]
async fn pay(locker: &Locker, id: u64) -> Result<u64, LockError> {
    Ok(id * 2)
}

#[redis_lock(name = "sync:{id}", locker = locker, guard = g)]
fn sync_pay(locker: &Locker, id: u64) -> Result<u64, LockError> {
    Ok(g.fencing_token() + id)
}

#[tokio::test]
async fn smoke() {
    let (_server, locker) = setup();
    assert_eq!(pay(&locker, 4).await.unwrap(), 8);
    let g = locker.lock("x").acquire().await.unwrap();
    assert!(
        locker
            .lock("x")
            .acquire_timeout(std::time::Duration::ZERO)
            .acquire()
            .await
            .unwrap_err()
            .is_timeout()
    );
    g.release().await.unwrap();
    let l2 = locker.clone();
    std::thread::spawn(move || {
        sync_pay(&l2, 1).unwrap();
    })
    .join()
    .unwrap();
}
