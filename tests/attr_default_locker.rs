//! `#[redis_lock]` without `locker = ...` uses the process-wide default:
//! `LockError::NotConfigured` (body not run, through the function's own
//! error type too) before `lockattr::init`, the configured server after it,
//! `AlreadyConfigured` on a second `init`/`set_default`; an explicit
//! `locker = ...` still wins. The default is global to the process, so one
//! test walks through the states in order; `set_default` with a custom
//! prefix is checked in a child process of its own (`child_set_default`).

mod support;

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lockattr::{LockError, Locker, redis_lock};
use support::{RedisServer, child_test, lock_key, wait_child};

#[derive(Debug)]
enum AppError {
    Lock(LockError),
}

impl From<LockError> for AppError {
    fn from(e: LockError) -> Self {
        AppError::Lock(e)
    }
}

static RUNS: AtomicU32 = AtomicU32::new(0);
/// The default server's URL, for bodies that inspect it.
static DEFAULT_URL: OnceLock<String> = OnceLock::new();

#[redis_lock(name = "default:{id}", expire = 30, acquire_time = 0)]
fn sync_default(id: u32, server: Option<&RedisServer>) -> Result<bool, LockError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(server.is_some_and(|s| s.exists(&lock_key(&format!("default:{id}")))))
}

#[redis_lock(name = "default:{id}", expire = 30, acquire_time = 0)]
async fn async_default(id: u32, server: Option<&RedisServer>) -> Result<bool, AppError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(server.is_some_and(|s| s.exists(&lock_key(&format!("default:{id}")))))
}

/// No arguments and no `locker`: the function's path, on the default Locker.
#[redis_lock]
fn no_args_default() -> Result<Vec<String>, LockError> {
    let url = DEFAULT_URL.get().expect("set before the call");
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("lockattr:*")
        .query(&mut conn)
        .unwrap();
    Ok(keys
        .into_iter()
        .filter(|k| !k.ends_with(":fence"))
        .collect())
}

#[redis_lock(name = "default:{id}", expire = 30, acquire_time = 0, locker = locker)]
fn explicit(locker: &Locker, id: u32, servers: [&RedisServer; 2]) -> Result<[bool; 2], LockError> {
    let key = lock_key(&format!("default:{id}"));
    Ok(servers.map(|s| s.exists(&key)))
}

#[test]
fn default_locker_through_the_attribute() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();

    // 1. Nothing configured.
    match sync_default(1, None) {
        Err(LockError::NotConfigured) => {}
        other => panic!("expected NotConfigured before init, got {other:?}"),
    }
    match rt.block_on(async_default(1, None)) {
        Err(AppError::Lock(LockError::NotConfigured)) => {}
        other => panic!("expected AppError::Lock(NotConfigured) before init, got {other:?}"),
    }
    assert!(matches!(no_args_default(), Err(LockError::NotConfigured)));
    assert_eq!(
        RUNS.load(Ordering::SeqCst),
        0,
        "a body ran without a Locker"
    );

    // 2. init: the annotated functions lock on that server.
    let server = RedisServer::start();
    DEFAULT_URL.set(server.url()).unwrap();
    lockattr::init(server.url()).unwrap();
    assert!(
        sync_default(1, Some(&server)).unwrap(),
        "not held on the default server"
    );
    assert!(rt.block_on(async_default(2, Some(&server))).unwrap());
    assert_eq!(RUNS.load(Ordering::SeqCst), 2);
    let keys = no_args_default().unwrap();
    assert_eq!(
        keys,
        [lock_key(&format!("{}::no_args_default", module_path!()))]
    );
    assert!(server.held_locks().is_empty());

    // Busy on the default server: the attribute sees it.
    let guard = lockattr::default_locker()
        .unwrap()
        .lock("default:3")
        .acquire_blocking()
        .unwrap();
    assert!(sync_default(3, Some(&server)).unwrap_err().is_timeout());
    drop(guard);
    assert!(sync_default(3, Some(&server)).unwrap());

    // 3. The default is set once.
    assert!(matches!(
        lockattr::init(server.url()),
        Err(LockError::AlreadyConfigured)
    ));
    let elsewhere = RedisServer::start();
    assert!(matches!(
        lockattr::set_default(Locker::new(elsewhere.url()).unwrap()),
        Err(LockError::AlreadyConfigured)
    ));
    assert!(
        sync_default(4, Some(&server)).unwrap(),
        "the default changed"
    );

    // 4. An explicit `locker = ...` is used instead of the default.
    let own = Locker::new(elsewhere.url()).unwrap();
    assert_eq!(
        explicit(&own, 5, [&server, &elsewhere]).unwrap(),
        [false, true]
    );

    // 5. `set_default` (custom prefix), in a fresh process.
    let output = wait_child(
        child_test("child_set_default", &[(CHILD_URL, &elsewhere.url())])
            .spawn()
            .expect("spawn child test process"),
        Duration::from_secs(60),
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains(DONE),
        "child_set_default failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
}

const CHILD_URL: &str = "LOCKATTR_CHILD_URL";
const DONE: &str = "LOCKATTR_CHILD_SET_DEFAULT_DONE";

#[redis_lock(name = "custom:{id}", expire = 30, acquire_time = 0)]
fn with_custom_default(id: u32, url: &str) -> Result<Vec<String>, LockError> {
    let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("myapp:*").query(&mut conn).unwrap();
    Ok(keys
        .into_iter()
        .filter(|k| !k.ends_with(":fence"))
        .collect())
}

/// Runs only as a child of `default_locker_through_the_attribute`.
#[test]
fn child_set_default() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    assert!(matches!(
        with_custom_default(1, &url),
        Err(LockError::NotConfigured)
    ));
    let locker = Locker::builder(url.as_str())
        .prefix("myapp:locks:")
        .build()
        .unwrap();
    lockattr::set_default(locker).unwrap();
    assert_eq!(
        with_custom_default(7, &url).unwrap(),
        ["myapp:locks:{custom:7}"]
    );
    assert!(matches!(
        lockattr::init(&url),
        Err(LockError::AlreadyConfigured)
    ));
    println!("{DONE}");
}
