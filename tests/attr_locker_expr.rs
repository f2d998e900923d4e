//! `locker = ...`: a field of `self` (`&self.locks`), a
//! `std::sync::LazyLock<Locker>` static (`&*STATIC`), and an expression
//! evaluated on every call (choosing between two servers per call); the lock
//! lands on the server of the Locker given, and nowhere else.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{LazyLock, OnceLock};

use lockattr::{LockError, Locker, redis_lock};
use support::{RedisServer, lock_key};

struct Service {
    locks: Locker,
    name: &'static str,
}

impl Service {
    #[redis_lock(name = "svc:{job}", locker = &self.locks)]
    fn run(&self, job: u32, server: &RedisServer) -> Result<(bool, &'static str), LockError> {
        Ok((server.exists(&lock_key(&format!("svc:{job}"))), self.name))
    }

    #[redis_lock(name = "svc:{job}", locker = &self.locks)]
    async fn run_async(&mut self, job: u32, server: &RedisServer) -> Result<bool, LockError> {
        self.name = "changed";
        Ok(server.exists(&lock_key(&format!("svc:{job}"))))
    }
}

#[tokio::test]
async fn locker_from_a_field_of_self() {
    let server = RedisServer::start();
    let mut service = Service {
        locks: Locker::new(server.url()).unwrap(),
        name: "billing",
    };
    assert_eq!(service.run(1, &server).unwrap(), (true, "billing"));
    assert!(service.run_async(2, &server).await.unwrap());
    assert_eq!(service.name, "changed");
    assert!(server.held_locks().is_empty());
}

static STATIC_URL: OnceLock<String> = OnceLock::new();
static STATIC_LOCKER: LazyLock<Locker> =
    LazyLock::new(|| Locker::new(STATIC_URL.get().expect("URL set first")).unwrap());

/// `&*STATIC`: the explicit deref adds no clippy warning.
#[redis_lock(name = "static:{n}", locker = &*STATIC_LOCKER)]
fn with_static(n: u32, server: &RedisServer) -> Result<bool, LockError> {
    Ok(server.exists(&lock_key(&format!("static:{n}"))))
}

/// `&STATIC` (auto-deref) works too.
#[redis_lock(name = "static:{n}", locker = &STATIC_LOCKER)]
async fn with_static_async(n: u32, server: &RedisServer) -> Result<bool, LockError> {
    Ok(server.exists(&lock_key(&format!("static:{n}"))))
}

#[tokio::test]
async fn locker_from_a_lazy_lock_static() {
    let server = RedisServer::start();
    STATIC_URL.set(server.url()).unwrap();
    assert!(with_static(1, &server).unwrap());
    assert!(with_static_async(2, &server).await.unwrap());
    assert!(server.held_locks().is_empty());
}

/// Counts its evaluations and picks a Locker per call.
fn pick<'a>(lockers: &'a [Locker], which: usize, evaluations: &AtomicUsize) -> &'a Locker {
    evaluations.fetch_add(1, Ordering::SeqCst);
    &lockers[which]
}

#[redis_lock(name = "routed", locker = pick(lockers, which, evaluations))]
fn routed(
    lockers: &[Locker],
    which: usize,
    evaluations: &AtomicUsize,
    servers: &[RedisServer],
) -> Result<Vec<bool>, LockError> {
    Ok(servers
        .iter()
        .map(|s| s.exists(&lock_key("routed")))
        .collect())
}

#[redis_lock(name = "routed", locker = pick(lockers, which, evaluations))]
async fn routed_async(
    lockers: &[Locker],
    which: usize,
    evaluations: &AtomicUsize,
    servers: &[RedisServer],
) -> Result<Vec<bool>, LockError> {
    Ok(servers
        .iter()
        .map(|s| s.exists(&lock_key("routed")))
        .collect())
}

#[tokio::test]
async fn locker_expression_is_evaluated_per_call() {
    let servers = [RedisServer::start(), RedisServer::start()];
    let lockers = [
        Locker::new(servers[0].url()).unwrap(),
        Locker::new(servers[1].url()).unwrap(),
    ];
    let evaluations = AtomicUsize::new(0);
    assert_eq!(
        routed(&lockers, 0, &evaluations, &servers).unwrap(),
        [true, false]
    );
    assert_eq!(
        routed(&lockers, 1, &evaluations, &servers).unwrap(),
        [false, true]
    );
    assert_eq!(
        routed_async(&lockers, 1, &evaluations, &servers)
            .await
            .unwrap(),
        [false, true]
    );
    assert_eq!(
        routed_async(&lockers, 0, &evaluations, &servers)
            .await
            .unwrap(),
        [true, false]
    );
    assert_eq!(evaluations.load(Ordering::SeqCst), 4, "once per call");

    // The lock held on one server does not block the call routed to the other.
    let _held = lockers[0].lock("routed").acquire().await.unwrap();
    assert_eq!(
        routed(&lockers, 1, &evaluations, &servers).unwrap(),
        [true, true]
    );
}
