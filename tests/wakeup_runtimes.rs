//! Release notices reach a waiter on a connection of its own runtime: each
//! tokio runtime where a Locker's waiters wait subscribes on a RESP3
//! multiplexed connection of its own, whose task hands the notice to the
//! waiter as it reads it (no subscriber thread in between). These tests
//! check where the subscriptions are (one RESP3 connection per runtime,
//! `block_on`'s root future included), that a runtime's subscriber
//! connection goes when the runtime shuts down while another runtime's
//! waiter is still handed its lock, and that a server without RESP3 (`HELLO`
//! renamed away) still wakes waiters, with SUBSCRIBE on RESP2.

use crate::support;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use lockattr::{LockGuard, Locker};
use support::{RedisServer, current_thread, eventually};

/// A lease long enough that expiry never rescues a waiter in these tests.
const LONG: Duration = Duration::from_secs(30);
/// An acquire timeout long enough that only a wake-up ends the wait.
const PATIENT: Duration = Duration::from_secs(20);

/// The connections subscribed to a channel: their `resp` (2 or 3), from
/// `CLIENT LIST`.
fn subscribers(server: &RedisServer) -> Vec<u8> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.client())
        .expect("CLIENT LIST");
    list.lines()
        .filter(|line| field(line, "sub").is_some_and(|n| n != "0"))
        .map(|line| {
            field(line, "resp")
                .and_then(|r| r.parse().ok())
                .expect("CLIENT LIST has resp=")
        })
        .collect()
}

/// The value of `name=` in a line of `CLIENT LIST`.
fn field<'l>(line: &'l str, name: &str) -> Option<&'l str> {
    line.split(' ')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

/// Waits for `name` with `locker` as the root future of `block_on` on a
/// current-thread runtime of a thread of its own (the way `main` and
/// `#[tokio::test]` run), then holds the lock until told to release it.
/// Sends the fencing token and when it got the lock, and the thread ends
/// (its runtime shuts down) once the lock is released.
struct Waiter {
    got: mpsc::Receiver<(u64, Instant)>,
    release: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Waiter {
    fn start(locker: &Locker, name: &str) -> Waiter {
        let (locker, name) = (locker.clone(), name.to_owned());
        let (got_tx, got) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = current_thread();
            let guard: LockGuard = runtime
                .block_on(
                    locker
                        .lock(&name)
                        .expire(LONG)
                        .acquire_timeout(PATIENT)
                        .acquire(),
                )
                .expect("the waiter gets the lock");
            got_tx
                .send((guard.fencing_token(), Instant::now()))
                .unwrap();
            let _ = release_rx.recv();
            runtime.block_on(guard.release()).unwrap();
        });
        Waiter {
            got,
            release,
            thread,
        }
    }

    /// The waiter's fencing token and when it got the lock.
    fn got(&self) -> (u64, Instant) {
        self.got
            .recv_timeout(PATIENT)
            .expect("the waiter got the lock")
    }

    /// Releases the waiter's lock and lets its runtime shut down.
    fn finish(self) {
        self.release.send(()).unwrap();
        self.thread.join().unwrap();
    }
}

/// Two waiters of one Locker, each in the `block_on` of a runtime of its
/// own: each runtime subscribes on a RESP3 connection of its own (two
/// subscriber connections, both `resp=3`; before, one RESP2 pub/sub
/// connection on the library's I/O thread served both). Each is handed its
/// lock by the holder's release (another Locker's) with a larger fencing
/// token, the release being the only script run meanwhile. When the first
/// waiter's runtime shuts down, its subscriber connection goes with it, and
/// the other runtime's waiter is still handed its lock.
#[test]
fn each_runtime_hears_its_notices_on_a_resp3_connection_of_its_own() {
    let server = RedisServer::start();
    let (holders, waiters) = (
        Locker::new(server.url()).unwrap(),
        Locker::new(server.url()).unwrap(),
    );
    let setup = current_thread();
    let held: Vec<LockGuard> = ["first", "second"]
        .iter()
        .map(|name| {
            setup
                .block_on(holders.lock(name).expire(LONG).acquire())
                .unwrap()
        })
        .collect();
    let first = Waiter::start(&waiters, "first");
    let second = Waiter::start(&waiters, "second");
    assert!(
        eventually(Duration::from_secs(5), || subscribers(&server).len() == 2).is_some(),
        "expected one subscriber connection per runtime, found {:?}",
        subscribers(&server)
    );
    assert_eq!(subscribers(&server), [3, 3], "subscribed on RESP3");
    // The waiters have subscribed and asked Redis once more since.
    std::thread::sleep(Duration::from_millis(300));

    let mut held = held.into_iter();
    for (waiter, guard) in [
        (&first, held.next().unwrap()),
        (&second, held.next().unwrap()),
    ] {
        let before = server.scripts_run();
        let holders_token = guard.fencing_token();
        let released_at = Instant::now();
        setup.block_on(guard.release()).unwrap();
        let (token, got_at) = waiter.got();
        assert!(token > holders_token, "handed over with a larger token");
        assert!(
            got_at.duration_since(released_at) < Duration::from_secs(1),
            "woken by the notice, not by a later check"
        );
        assert_eq!(
            server.scripts_run() - before,
            1,
            "the release was the only script"
        );
    }
    assert_eq!(subscribers(&server).len(), 2, "both still subscribed");
    first.finish();
    assert!(
        eventually(Duration::from_secs(5), || subscribers(&server).len() == 1).is_some(),
        "the ended runtime's subscriber connection is still open: {:?}",
        subscribers(&server)
    );
    second.finish();
}

/// A server that does not take `HELLO 3` (renamed away here, as on a
/// server before Redis 6): a waiter subscribes with SUBSCRIBE on RESP2
/// instead, and is still handed the lock by the release, the release being
/// the only script run meanwhile.
#[test]
fn a_server_without_resp3_still_wakes_its_waiters() {
    let server = RedisServer::start_with(&["--rename-command", "HELLO", ""]);
    let (holders, waiters) = (
        Locker::new(server.url()).unwrap(),
        Locker::new(server.url()).unwrap(),
    );
    let setup = current_thread();
    let guard = setup
        .block_on(holders.lock("no resp3").expire(LONG).acquire())
        .unwrap();
    let waiter = Waiter::start(&waiters, "no resp3");
    assert!(
        eventually(Duration::from_secs(5), || subscribers(&server) == [2]).is_some(),
        "expected one RESP2 subscriber, found {:?}",
        subscribers(&server)
    );
    std::thread::sleep(Duration::from_millis(300));
    let before = server.scripts_run();
    let holders_token = guard.fencing_token();
    let released_at = Instant::now();
    setup.block_on(guard.release()).unwrap();
    let (token, got_at) = waiter.got();
    assert!(token > holders_token);
    assert!(got_at.duration_since(released_at) < Duration::from_secs(1));
    assert_eq!(
        server.scripts_run() - before,
        1,
        "the release was the only script"
    );
    waiter.finish();
}
