//! How `#[redis_lock]` names its lock, checked by the Redis key that exists
//! while the body runs: format-string captures, expressions, the default from
//! `#[derive(LockKey)]` on `self` (`&self`, `&mut self`, `self: Arc<Self>`) or
//! on a first argument, two key fields, an integer first argument, the
//! function's path when there are no arguments; and different argument
//! values are different locks, held at the same time.

mod support;

use std::sync::{Arc, Barrier, OnceLock};
use std::time::Duration;

use lockattr::{LockError, LockKey, Locker, redis_lock};
use support::lockers::setup;
use support::{RedisServer, lock_key};

/// The lock keys held (from outside) while a body runs.
fn held(server: &RedisServer) -> Vec<String> {
    server.held_locks()
}

// ---- format strings ----

#[redis_lock(name = "order:{order_id}", locker = locker)]
fn order(locker: &Locker, server: &RedisServer, order_id: u64) -> Result<Vec<String>, LockError> {
    Ok(held(server))
}

#[redis_lock(name = "{tenant}/{user}:{order_id:>4}{{x}}", locker = locker)]
async fn many_captures(
    locker: &Locker,
    server: &RedisServer,
    tenant: &str,
    user: String,
    order_id: u32,
) -> Result<Vec<String>, LockError> {
    tokio::task::yield_now().await;
    Ok(held(server))
}

#[test]
fn format_string_captures_arguments() {
    let (server, locker) = setup();
    assert_eq!(order(&locker, &server, 7).unwrap(), [lock_key("order:7")]);
    assert_eq!(order(&locker, &server, 8).unwrap(), [lock_key("order:8")]);
    assert!(held(&server).is_empty());
}

#[tokio::test]
async fn format_string_with_several_captures_and_specs() {
    let (server, locker) = setup();
    let keys = many_captures(&locker, &server, "acme", "ann".into(), 42)
        .await
        .unwrap();
    // `{{x}}` is a literal `{x}`; its `}` is escaped in the key (`\x7d`).
    assert_eq!(keys, ["lockattr:{acme/ann:  42{x\\x7d}"]);
    assert!(held(&server).is_empty());
}

// ---- expressions ----

struct User {
    email: String,
}

#[redis_lock(name = format!("user:{}", user.email.to_lowercase()), locker = locker)]
fn by_format_expr(
    locker: &Locker,
    server: &RedisServer,
    user: &User,
) -> Result<Vec<String>, LockError> {
    Ok(held(server))
}

#[redis_lock(name = user.email, locker = locker)]
fn by_field_expr(
    locker: &Locker,
    server: &RedisServer,
    user: &User,
) -> Result<Vec<String>, LockError> {
    Ok(held(server))
}

#[redis_lock(name = shard * 100 + 5, locker = locker)]
async fn by_arith_expr(
    locker: &Locker,
    server: &RedisServer,
    shard: u32,
) -> Result<Vec<String>, LockError> {
    Ok(held(server))
}

const REPORT_LOCK: &str = "nightly-report";

#[redis_lock(name = REPORT_LOCK, locker = locker)]
fn by_const(locker: &Locker, server: &RedisServer) -> Result<Vec<String>, LockError> {
    Ok(held(server))
}

#[tokio::test]
async fn expression_names() {
    let (server, locker) = setup();
    let user = User {
        email: "Ann@Example.com".into(),
    };
    assert_eq!(
        by_format_expr(&locker, &server, &user).unwrap(),
        [lock_key("user:ann@example.com")]
    );
    assert_eq!(
        by_field_expr(&locker, &server, &user).unwrap(),
        [lock_key("Ann@Example.com")]
    );
    assert_eq!(
        by_arith_expr(&locker, &server, 3).await.unwrap(),
        [lock_key("305")]
    );
    assert_eq!(
        by_const(&locker, &server).unwrap(),
        [lock_key("nightly-report")]
    );
    assert!(held(&server).is_empty());
}

// ---- #[derive(LockKey)] and self ----

#[derive(LockKey)]
#[lock_key(prefix = "account")]
struct Account {
    #[lock_key]
    id: u64,
    balance: i64,
    locker: Locker,
}

impl Account {
    #[redis_lock(locker = &self.locker)]
    fn balance(&self, server: &RedisServer) -> Result<(i64, Vec<String>), LockError> {
        Ok((self.balance, held(server)))
    }

    #[redis_lock(locker = &self.locker)]
    fn withdraw(&mut self, amount: i64, server: &RedisServer) -> Result<Vec<String>, LockError> {
        self.balance -= amount;
        Ok(held(server))
    }

    #[redis_lock(locker = &self.locker)]
    async fn deposit(
        &mut self,
        amount: i64,
        server: &RedisServer,
    ) -> Result<Vec<String>, LockError> {
        tokio::task::yield_now().await;
        self.balance += amount;
        Ok(held(server))
    }

    #[redis_lock(locker = &self.locker)]
    fn shared(self: Arc<Self>, server: &RedisServer) -> Result<Vec<String>, LockError> {
        Ok(held(server))
    }

    #[redis_lock(locker = &self.locker)]
    async fn shared_async(self: Arc<Self>, server: &RedisServer) -> Result<Vec<String>, LockError> {
        Ok(held(server))
    }
}

#[tokio::test]
async fn derive_lock_key_names_the_lock_from_self() {
    let server = RedisServer::start();
    let mut account = Account {
        id: 42,
        balance: 100,
        locker: Locker::new(server.url()).unwrap(),
    };
    let expected = [lock_key("account:42")];
    assert_eq!(account.balance(&server).unwrap(), (100, expected.to_vec()));
    assert_eq!(account.withdraw(30, &server).unwrap(), expected);
    assert_eq!(account.deposit(5, &server).await.unwrap(), expected);
    assert_eq!(account.balance, 75);
    let account = Arc::new(account);
    assert_eq!(account.clone().shared(&server).unwrap(), expected);
    assert_eq!(
        account.clone().shared_async(&server).await.unwrap(),
        expected
    );
    assert!(held(&server).is_empty());
}

#[derive(LockKey)]
#[lock_key(prefix = "seat")]
struct Seat {
    #[lock_key]
    row: u32,
    #[lock_key]
    number: u32,
    holder: String,
}

#[redis_lock(locker = locker)]
fn book(seat: &Seat, locker: &Locker, server: &RedisServer) -> Result<Vec<String>, LockError> {
    assert_eq!(seat.holder, "ann");
    Ok(held(server))
}

#[redis_lock(locker = locker)]
async fn book_owned(
    seat: Seat,
    locker: &Locker,
    server: &RedisServer,
) -> Result<Vec<String>, LockError> {
    Ok(held(server))
}

/// No `prefix`: the type's path is the prefix.
#[derive(LockKey)]
struct Invoice {
    #[lock_key]
    number: String,
}

#[redis_lock(locker = locker)]
fn pay_invoice(
    invoice: &Invoice,
    locker: &Locker,
    server: &RedisServer,
) -> Result<Vec<String>, LockError> {
    Ok(held(server))
}

#[tokio::test]
async fn derive_lock_key_on_the_first_argument() {
    let (server, locker) = setup();
    let seat = Seat {
        row: 5,
        number: 12,
        holder: "ann".into(),
    };
    assert_eq!(
        book(&seat, &locker, &server).unwrap(),
        [lock_key("seat:5:12")]
    );
    assert_eq!(
        book_owned(seat, &locker, &server).await.unwrap(),
        [lock_key("seat:5:12")]
    );
    let invoice = Invoice {
        number: "INV-9".into(),
    };
    assert_eq!(
        pay_invoice(&invoice, &locker, &server).unwrap(),
        [lock_key("attr_naming::Invoice:INV-9")]
    );
    assert!(held(&server).is_empty());
}

// ---- plain first arguments ----

#[redis_lock(locker = locker)]
fn by_integer(id: u64, locker: &Locker, server: &RedisServer) -> Result<Vec<String>, LockError> {
    Ok(held(server))
}

#[redis_lock(locker = locker)]
async fn by_str(
    name: &str,
    locker: &Locker,
    server: &RedisServer,
) -> Result<Vec<String>, LockError> {
    Ok(held(server))
}

#[tokio::test]
async fn integer_and_string_first_arguments() {
    let (server, locker) = setup();
    assert_eq!(by_integer(42, &locker, &server).unwrap(), [lock_key("42")]);
    assert_eq!(
        by_str("job:cleanup", &locker, &server).await.unwrap(),
        [lock_key("job:cleanup")]
    );
}

// ---- no arguments: the function's path ----

static NO_ARGS_LOCKER: OnceLock<Locker> = OnceLock::new();
static NO_ARGS_SERVER: OnceLock<String> = OnceLock::new();

fn keys_now() -> Vec<String> {
    let mut conn = redis::Client::open(NO_ARGS_SERVER.get().unwrap().as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("lockattr:*")
        .query(&mut conn)
        .unwrap();
    keys.retain(|k| !k.ends_with(":fence"));
    keys
}

mod jobs {
    use super::*;

    #[redis_lock(locker = NO_ARGS_LOCKER.get().unwrap())]
    pub fn nightly_cleanup() -> Result<Vec<String>, LockError> {
        Ok(keys_now())
    }

    #[redis_lock(locker = NO_ARGS_LOCKER.get().unwrap())]
    pub async fn hourly_rollup() -> Result<Vec<String>, LockError> {
        Ok(keys_now())
    }

    pub fn module() -> &'static str {
        module_path!()
    }
}

#[tokio::test]
async fn no_arguments_lock_the_function_path() {
    let server = RedisServer::start();
    NO_ARGS_SERVER.set(server.url()).unwrap();
    NO_ARGS_LOCKER
        .set(Locker::new(server.url()).unwrap())
        .unwrap();

    let keys = jobs::nightly_cleanup().unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(
        keys[0].contains(jobs::module()),
        "{keys:?} lacks {}",
        jobs::module()
    );
    assert!(keys[0].contains("nightly_cleanup"), "{keys:?}");
    assert_eq!(
        keys[0],
        lock_key(&format!("{}::nightly_cleanup", jobs::module()))
    );

    let keys = jobs::hourly_rollup().await.unwrap();
    assert_eq!(
        keys,
        [lock_key(&format!("{}::hourly_rollup", jobs::module()))]
    );
    assert!(held(&server).is_empty());
}

// ---- different values, different locks ----

#[redis_lock(name = "slot:{id}", expire = 30, acquire_time = 0, locker = locker)]
async fn in_slot(
    locker: &Locker,
    id: u32,
    both_inside: &tokio::sync::Barrier,
) -> Result<u32, LockError> {
    // Both calls must be inside their bodies at once to get past this.
    both_inside.wait().await;
    Ok(id)
}

#[tokio::test]
async fn different_argument_values_are_different_locks_held_together() {
    let (_server, locker) = setup();
    let barrier = tokio::sync::Barrier::new(2);
    let both = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(in_slot(&locker, 1, &barrier), in_slot(&locker, 2, &barrier))
    })
    .await
    .expect("the two calls did not run at the same time");
    assert_eq!(both.0.unwrap(), 1);
    assert_eq!(both.1.unwrap(), 2);
}

#[redis_lock(name = "seat-row:{row}", expire = 30, acquire_time = 0, locker = locker)]
fn sync_in_row(
    locker: &Locker,
    row: u32,
    barrier: &Barrier,
    server: &RedisServer,
) -> Result<usize, LockError> {
    barrier.wait();
    let n = held(server).len();
    barrier.wait();
    Ok(n)
}

#[test]
fn different_argument_values_are_different_locks_sync_threads() {
    let (server, locker) = setup();
    let barrier = Barrier::new(3);
    std::thread::scope(|s| {
        let a = s.spawn(|| sync_in_row(&locker, 1, &barrier, &server));
        let b = s.spawn(|| sync_in_row(&locker, 2, &barrier, &server));
        let c = s.spawn(|| sync_in_row(&locker, 3, &barrier, &server));
        for t in [a, b, c] {
            assert_eq!(t.join().unwrap().unwrap(), 3, "three locks held together");
        }
    });
}

/// The same value twice is the same lock: a nested call is refused when the
/// lock is not reentrant (reentrant locks are in `attr_reentrant.rs`).
#[redis_lock(name = "nest:{id}", expire = 30, acquire_time = 0, locker = locker, reentrant = false)]
fn nested(locker: &Locker, id: u32, depth: u32) -> Result<Option<LockError>, LockError> {
    if depth == 0 {
        return Ok(None);
    }
    Ok(nested(locker, id, depth - 1).err())
}

#[test]
fn the_same_value_is_the_same_lock() {
    let (_server, locker) = setup();
    match nested(&locker, 1, 1).unwrap() {
        Some(LockError::Timeout { name, .. }) => assert_eq!(name, "nest:1"),
        other => panic!("a nested call on the same lock gave {other:?}"),
    }
}
