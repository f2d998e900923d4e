//! Redlock under faults, against real redis-servers of our own: nodes
//! restarted empty under a lease longer than the newcomer's, nodes whose
//! INFO is refused, one server named several ways, a majority down for a
//! moment while a waiter waits, INFO's rounding of a restarted node's
//! uptime, and slow or just-too-slow links (through `support::proxy`).

use crate::support;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use lockattr::{LockError, Locker};
use support::deployments::{
    hold_for, no_delay_redlock, spawn_try_lock, start_nodes as start, take_set, try_lock, user_url,
};
use support::lockers::{owners, urls};
use support::proxy::Proxy;
use support::takes::{take, take_now, try_take};
use support::{RedisServer, eventually, lock_key};

/// A Locker's user that may run every command but the `@dangerous` ones
/// (INFO among them on Redis 7), on every key and channel.
const NO_INFO_USER: &[&str] = &[
    "--user",
    "locker",
    "on",
    ">secret",
    "~*",
    "&*",
    "+@all",
    "-@dangerous",
];

/// As [`NO_INFO_USER`], but only on the lock keys (`lockattr:{...}`): the
/// restart marker `lockattr:node` is out of reach too.
const LOCK_KEYS_ONLY_USER: &[&str] = &[
    "--user",
    "locker",
    "on",
    ">secret",
    "~lockattr:{*",
    "&*",
    "+@all",
    "-@dangerous",
];

/// The marker a Redlock Locker keeps on each node (default prefix).
const MARKER: &str = "lockattr:node";

fn start_with(n: usize, extra: &[&str]) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start_with(extra)).collect()
}

/// URLs of the `locker` user of [`NO_INFO_USER`] or [`LOCK_KEYS_ONLY_USER`].
fn user_urls(nodes: &[RedisServer]) -> Vec<String> {
    nodes
        .iter()
        .map(|n| user_url(n, "locker", "secret"))
        .collect()
}

/// A Locker that trusts fresh nodes (holders in these tests: what is
/// tested is what the other Lockers let in).
fn trusting(urls: Vec<String>, max_lease: Duration) -> Locker {
    no_delay_redlock(urls).max_lease(max_lease).build().unwrap()
}

/// A Locker with the restarted-node delay on (the default) and a short
/// `max_lease`, so that tests stay quick.
fn careful(urls: Vec<String>, max_lease: Duration) -> Locker {
    Locker::redlock_builder(urls)
        .max_lease(max_lease)
        .build()
        .unwrap()
}

/// The drift allowance of a Redlock lease: 1% plus 2 ms.
fn drift(expire: Duration) -> Duration {
    expire / 100 + Duration::from_millis(2)
}

/// Fails the test with a clear message when a contender got the lock while
/// the holder's lease still ran.
fn assert_kept_out(
    result: Result<lockattr::LockGuard, LockError>,
    what: &str,
    nodes: &[RedisServer],
    name: &str,
) {
    match result {
        Ok(g) => panic!(
            "{what}: a second owner (fencing token {}) got the lock while the first owner's \
             lease still ran; owners per node: {:?}",
            g.fencing_token(),
            owners(nodes, name)
        ),
        Err(e) => assert!(e.is_timeout() || e.is_no_quorum(), "{what}: {e:?}"),
    }
}

/// Two of three nodes restart empty under a lease as long as the Locker's
/// `max_lease`. A newcomer asking for a much shorter lease must stay out
/// until the nodes have been up for `max_lease`, not for its own lease: the
/// first owner's lease is longer than the newcomer's. (Before, the delay
/// was the newcomer's lease, and it got in after about a second.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_nodes_stay_out_for_max_lease_not_for_the_newcomers_lease() {
    let max_lease = Duration::from_secs(4);
    let mut nodes = start(3);
    let holder = trusting(urls(&nodes), max_lease);
    let asked = Instant::now();
    let guard = hold_for(&holder, "long", max_lease).await;
    let token = nodes[0].owner(&lock_key("long")).expect("held on node 0");
    nodes[1].restart();
    nodes[2].restart();
    let newcomer = careful(urls(&nodes), max_lease);
    let result = try_take(
        &newcomer,
        "long",
        Duration::from_millis(500),
        Duration::from_millis(2500),
    )
    .await;
    let at = asked.elapsed();
    assert!(
        at < max_lease - drift(max_lease),
        "setup: the newcomer ran past the holder's lease ({at:?}); slow machine?"
    );
    assert_kept_out(result, "newcomer with a 500 ms lease", &nodes, "long");
    assert!(!guard.is_lost());
    assert_eq!(nodes[0].owner(&lock_key("long")), Some(token));
}

/// Restarted nodes that refuse INFO: a Locker must not take them for old.
/// Their restart is seen through the marker key, which the restart emptied;
/// once the marker is `max_lease` old they vote again.
async fn restarted_nodes_without_info_stay_out(mut nodes: Vec<RedisServer>, urls: Vec<String>) {
    let max_lease = Duration::from_secs(3);
    let mut client = redis::Client::open(urls[0].as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let info: redis::RedisResult<String> = redis::cmd("INFO").arg("server").query(&mut client);
    assert!(info.is_err(), "setup: INFO must be refused");
    let holder = trusting(urls.clone(), max_lease);
    let asked = Instant::now();
    let guard = hold_for(&holder, "no-info", max_lease).await;
    nodes[1].restart();
    nodes[2].restart();
    let contender = careful(urls, max_lease);
    let result = try_take(
        &contender,
        "no-info",
        max_lease,
        Duration::from_millis(1500),
    )
    .await;
    let at = asked.elapsed();
    assert!(
        at < max_lease - drift(max_lease),
        "setup: ran past the holder's lease ({at:?}); slow machine?"
    );
    assert_kept_out(result, "contender that cannot read INFO", &nodes, "no-info");
    assert!(!guard.is_lost());
    // The holder's lease ends; once the markers written after the restart
    // are max_lease old, the restarted nodes vote again.
    let got = try_take(&contender, "no-info", max_lease, Duration::from_secs(6))
        .await
        .expect("the restarted nodes vote once their markers are max_lease old");
    got.release().await.unwrap();
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_nodes_that_refuse_info_to_the_lockers_acl_user_do_not_vote_early() {
    let nodes = start_with(3, NO_INFO_USER);
    let urls = user_urls(&nodes);
    restarted_nodes_without_info_stay_out(nodes, urls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_nodes_with_info_renamed_away_do_not_vote_early() {
    let nodes = start_with(3, &["--rename-command", "INFO", ""]);
    let urls = urls(&nodes);
    restarted_nodes_without_info_stay_out(nodes, urls).await;
}

/// Nodes whose restart time cannot be established at all (INFO refused, the
/// marker key out of the user's reach) never vote, whatever the settings,
/// and the error says what to allow. (Before, they counted as old.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_whose_restart_time_cannot_be_read_do_not_vote_and_the_error_says_why() {
    let nodes = start_with(3, LOCK_KEYS_ONLY_USER);
    for locker in [
        careful(user_urls(&nodes), Duration::from_secs(2)),
        trusting(user_urls(&nodes), Duration::from_secs(2)),
    ] {
        let err = try_take(&locker, "unknown", Duration::from_secs(1), Duration::ZERO)
            .await
            .map(|g| g.fencing_token())
            .expect_err("nodes of unknown restart time voted");
        assert!(err.is_no_quorum(), "{err:?}");
        let msg = err.to_string();
        assert!(
            msg.contains("INFO") && msg.contains(MARKER) && !msg.contains("secret"),
            "{msg}"
        );
        // A waiter gets the same error at its deadline, not a timeout.
        let err = try_take(
            &locker,
            "unknown",
            Duration::from_secs(1),
            Duration::from_millis(300),
        )
        .await
        .map(|g| g.fencing_token())
        .unwrap_err();
        assert!(
            err.is_no_quorum() && err.to_string().contains(MARKER),
            "{err:?}"
        );
        for node in &nodes {
            assert_eq!(node.get(&lock_key("unknown")), None, "given back");
        }
    }
}

/// The URLs of one server named three ways (`localhost:P`, `127.0.0.1:P`,
/// `127.0.0.1:P/1`) at positions 1, 3 and 5, with two other servers.
fn one_server_three_ways(server: &RedisServer, others: &[RedisServer], auth: &str) -> Vec<String> {
    let p = server.port;
    vec![
        format!("redis://{auth}localhost:{p}/"),
        format!("redis://{auth}127.0.0.1:{}/", others[0].port),
        format!("redis://{auth}127.0.0.1:{p}/"),
        format!("redis://{auth}127.0.0.1:{}/", others[1].port),
        format!("redis://{auth}127.0.0.1:{p}/1"),
    ]
}

async fn one_server_named_three_ways_is_refused(extra: &[&str], auth: &str) {
    let server = RedisServer::start_with(extra);
    let mut others = start_with(2, extra);
    let urls = one_server_three_ways(&server, &others, auth);
    // Only connecting can tell: the builder accepts the list.
    let locker = no_delay_redlock(urls).build().unwrap();
    for round in ["all up", "the two other servers down"] {
        let err = try_lock(&locker, "dup", Duration::ZERO)
            .await
            .map(|g| g.fencing_token())
            .expect_err(&format!("{round}: one server counted as three nodes"));
        assert!(
            matches!(err, LockError::InvalidInput { .. }),
            "{round}: {err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains("nodes 1 and 3"), "{round}: {msg}");
        for secret in ["localhost", "127.0.0.1", &server.port.to_string(), "secret"] {
            assert!(!msg.contains(secret), "{round}: {msg}");
        }
        assert_eq!(server.get(&lock_key("dup")), None, "{round}");
        others[0].kill();
        others[1].kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_named_three_ways_is_refused_by_its_run_id() {
    one_server_named_three_ways_is_refused(&[], "").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_named_three_ways_is_refused_by_its_marker_when_info_is_refused() {
    one_server_named_three_ways_is_refused(NO_INFO_USER, "locker:secret@").await;
}

/// A waiter rides out a majority that is down for a moment: it retries
/// within its acquire time. A caller that asked for one attempt learns of
/// the outage at once, and a short waiter gets the quorum error at its
/// deadline. (Before, every caller failed at once.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_rides_out_a_short_outage_of_a_majority() {
    let mut nodes = start(3);
    let lockers: Vec<Locker> = (0..3)
        .map(|_| trusting(urls(&nodes), Duration::from_secs(60)))
        .collect();
    let lease = Duration::from_millis(800);
    let taken = Instant::now();
    let guard = hold_for(&lockers[0], "outage", lease).await;
    let waiter = spawn_try_lock(&lockers[1], "outage", Duration::from_secs(5));
    tokio::time::sleep(Duration::from_millis(200)).await;
    nodes[1].kill();
    nodes[2].kill();
    let once = Instant::now();
    let err = try_lock(&lockers[2], "outage", Duration::ZERO)
        .await
        .map(|g| g.fencing_token())
        .unwrap_err();
    assert!(err.is_no_quorum(), "{err:?}");
    assert!(
        once.elapsed() < Duration::from_secs(1),
        "{:?}",
        once.elapsed()
    );
    let short = Instant::now();
    let err = try_lock(&lockers[2], "outage", Duration::from_millis(300))
        .await
        .map(|g| g.fencing_token())
        .unwrap_err();
    assert!(err.is_no_quorum(), "{err:?}");
    assert!(
        short.elapsed() >= Duration::from_millis(300),
        "a waiter gave up before its deadline: {:?}",
        short.elapsed()
    );
    // Back after the holder's lease ended (restarted empty).
    tokio::time::sleep_until((taken + lease + Duration::from_millis(100)).into()).await;
    let back = Instant::now();
    nodes[1].restart();
    nodes[2].restart();
    let (outcome, got_at) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter returns")
        .unwrap();
    let got = outcome.expect("the waiter gets the lock once the nodes are back");
    assert!(got_at >= back);
    got.release().await.unwrap();
    drop(guard);
}

/// The wall clock, as a duration since the Unix epoch.
fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
}

/// Sleeps until the wall clock's fraction of a second is `at` (0..1).
async fn until_fraction(at: f64) {
    let frac = f64::from(unix_now().subsec_nanos()) / 1e9;
    let wait = if frac < at {
        at - frac
    } else {
        1.0 - frac + at
    };
    tokio::time::sleep(Duration::from_secs_f64(wait)).await;
}

/// `uptime_in_seconds` from the server's INFO.
fn info_uptime(server: &RedisServer) -> u64 {
    let info = server.raw("INFO server").unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("uptime_in_seconds in INFO")
}

/// INFO's uptime is a difference of whole seconds of the server's clock: a
/// server started at x.70 s says 1 at (x+1).02 s, up for 0.32 s. Nodes 1
/// and 2 restart late in a wall-clock second from a snapshot that kept
/// their old restart markers (so only INFO can tell they restarted), under
/// a lease of `max_lease` held on all three; the contender reads their INFO
/// just after the next second begins. Until the holder's lease ends it must
/// not get the lock: this fails when a Locker trusts INFO's whole seconds
/// (without the second it takes off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_nodes_do_not_vote_early_when_info_rounds_their_uptime_up() {
    let max_lease = Duration::from_secs(2);
    let valid = max_lease - drift(max_lease);
    let mut nodes = start(3);
    let contender = careful(urls(&nodes), max_lease);
    contender.ping().await.unwrap();
    let marked = Instant::now();
    for node in &nodes[1..] {
        assert!(node.exists(MARKER), "the Locker marks each node it sees");
        let _: () = redis::cmd("SAVE").query(&mut node.client()).unwrap();
    }
    // The markers (in the snapshots) grow older than max_lease.
    tokio::time::sleep_until((marked + max_lease + Duration::from_millis(200)).into()).await;
    until_fraction(0.7).await;
    let second = unix_now().as_secs();
    let holder = trusting(urls(&nodes), max_lease);
    let asked = Instant::now();
    let held = take_now(&holder, "rounded", max_lease).await;
    let holder_token = nodes[0].owner(&lock_key("rounded")).unwrap();
    let restarted = Instant::now();
    std::thread::scope(|s| {
        for node in &mut nodes[1..] {
            s.spawn(move || node.restart());
        }
    });
    assert_eq!(
        unix_now().as_secs(),
        second,
        "setup: the restarts ran past the second boundary (slow machine?)"
    );
    for node in &nodes[1..] {
        assert!(node.exists(MARKER), "setup: the snapshot kept the marker");
        assert_eq!(node.get(&lock_key("rounded")), None, "setup: lost the lock");
    }
    // Just after the boundary, the contender reconnects and reads INFO.
    until_fraction(0.02).await;
    contender.ping().await.unwrap();
    for (i, node) in nodes.iter().enumerate().skip(1) {
        let reported = info_uptime(node);
        assert!(
            reported >= 1 && restarted.elapsed() < Duration::from_secs(1),
            "setup: node {i} reports {reported} s up, {:?} after its restart",
            restarted.elapsed()
        );
    }
    let wait = valid
        .saturating_sub(asked.elapsed())
        .saturating_sub(Duration::from_millis(150));
    let result = try_take(&contender, "rounded", max_lease, wait).await;
    let at = asked.elapsed();
    assert!(
        at < valid,
        "setup: ran past the holder's lease ({at:?}); slow machine?"
    );
    assert_kept_out(result, "contender", &nodes, "rounded");
    assert_eq!(
        nodes[0].owner(&lock_key("rounded")),
        Some(holder_token),
        "the holder still holds node 0"
    );
    drop(held);
}

/// `n` servers, each behind a proxy that adds `delay` each way.
fn behind_proxies(n: usize, delay: Duration) -> (Vec<RedisServer>, Vec<Proxy>) {
    let nodes = start(n);
    let proxies: Vec<Proxy> = nodes
        .iter()
        .map(|node| {
            let proxy = Proxy::start(node.port);
            proxy.set_delay(delay);
            proxy
        })
        .collect();
    (nodes, proxies)
}

/// Five nodes 25 ms away (a 50 ms round trip): a brand-new Locker with the
/// default settings (its node timeout is 100 ms for the default 10 s
/// lease) takes the lock on its first call. (Before, opening a connection,
/// reading INFO and loading the script all had to fit in the node timeout;
/// a cut-off connection was thrown away, so every call failed with
/// NoQuorum.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_locker_takes_the_lock_on_its_first_call_over_slow_links() {
    let (nodes, proxies) = behind_proxies(5, Duration::from_millis(25));
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    // Fresh nodes: their age is not what this is about.
    let locker = no_delay_redlock(&urls).build().unwrap();
    let guard = locker
        .lock("far")
        .acquire()
        .await
        .expect("the first call on a new Locker over 50 ms round trips");
    let token = nodes[0].owner(&lock_key("far"));
    assert!(token.is_some());
    assert!(
        owners(&nodes, "far")
            .iter()
            .filter(|o| **o == token)
            .count()
            >= 3,
        "{:?}",
        owners(&nodes, "far")
    );
    guard.release().await.unwrap();
    // And again, on the connections it keeps.
    try_lock(&locker, "far", Duration::ZERO)
        .await
        .expect("the second call")
        .release()
        .await
        .unwrap();
    // Done at a majority: the last releases finish in the background.
    assert!(
        eventually(Duration::from_secs(3), || nodes
            .iter()
            .all(|n| n.get(&lock_key("far")).is_none()))
        .is_some(),
        "{:?}",
        owners(&nodes, "far")
    );
}

/// Links whose one-way latency changes every few milliseconds, at random,
/// among 0, 1 and 4 ms: with a node timeout of 3 ms, many requests are cut
/// off by it and still run on the server afterwards. Stops when dropped.
struct Jitter {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Jitter {
    fn start(proxies: Arc<Vec<Proxy>>) -> Jitter {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                // xorshift: no dependency for a few random choices.
                let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ u64::from(unix_now().subsec_nanos());
                while !stop.load(Ordering::SeqCst) {
                    for proxy in proxies.iter() {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        proxy.set_delay(Duration::from_millis([0, 1, 4][(x % 3) as usize]));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                for proxy in proxies.iter() {
                    proxy.set_delay(Duration::ZERO);
                }
            })
        };
        Jitter {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Jitter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A Locker whose node timeout (3 ms) the jittery links often exceed.
fn hurried(proxies: &[Proxy]) -> Locker {
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    no_delay_redlock(&urls)
        .node_timeout(Duration::from_millis(3))
        .build()
        .unwrap()
}

/// Over links that keep exceeding the node timeout, an acquisition never
/// finds its own cut-off requests in its way (it would wait for its own
/// lease to end), and none stays behind once the lock is released. Each
/// attempt is another owner, and the give-back of a cut-off request runs
/// before any later request on its connection. (Before, a cut-off
/// connection was thrown away, and a release whose connection had to be
/// opened again was never sent: the next call waited for the Locker's own
/// previous lease.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_cut_off_by_the_node_timeout_never_stand_in_the_lockers_own_way() {
    let (nodes, proxies) = behind_proxies(5, Duration::ZERO);
    let locker = hurried(&proxies);
    locker.ping().await.unwrap();
    let proxies = Arc::new(proxies);
    let jitter = Jitter::start(proxies.clone());
    let lease = Duration::from_secs(5);
    for round in 0..20 {
        let guard = try_take(&locker, "cut", lease, Duration::from_secs(3))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "round {round}: nobody else holds the lock, yet: {e}; owners per node: {:?}",
                    owners(&nodes, "cut")
                )
            });
        // The guard's owner holds a majority. An earlier attempt of this
        // acquisition may still show on a slow node: the nodes that
        // answered first decided it, and that attempt's give-back is queued
        // on the slow link, ahead of this attempt's request. It lands
        // within the links' delay, far within the attempt's 5 s lease: only
        // a give-back that was never sent would leave it there.
        let settled = eventually(Duration::from_secs(1), || {
            let held = owners(&nodes, "cut");
            let mut distinct: Vec<&String> = held.iter().flatten().collect();
            distinct.sort();
            distinct.dedup();
            distinct.len() == 1 && held.iter().flatten().count() >= 3
        });
        assert!(
            settled.is_some(),
            "round {round}: not one owner on a majority: {:?}",
            owners(&nodes, "cut")
        );
        // A release cut off by the node timeout still runs, in order.
        let _ = guard.release().await;
        assert!(
            eventually(Duration::from_secs(1), || nodes
                .iter()
                .all(|n| n.get(&lock_key("cut")).is_none()))
            .is_some(),
            "round {round}: an acquisition of this Locker stayed behind (its lease is {lease:?}): \
             {:?}",
            owners(&nodes, "cut")
        );
    }
    drop(jitter);
}

/// The same links, two Lockers contending: never two holders at once.
/// (Releases cut off by the node timeout may report an error; their
/// requests still run, in order.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_over_links_that_keep_timing_out_never_overlap() {
    contend_over_jittery_links(|_| None).await;
}

/// The same with sets: `{x, y}` against `{y, x}`. Each node takes the whole
/// set or none; a set cut off on some nodes is given back there, after
/// its request. Never two holders of a name, and no deadlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crossed_sets_over_links_that_keep_timing_out_never_overlap() {
    contend_over_jittery_links(|t| {
        Some(if t < 2 {
            ["cut-x", "cut-y"]
        } else {
            ["cut-y", "cut-x"]
        })
    })
    .await;
}

/// Four tasks of two hurried Lockers over jittery links take, five times
/// each, the lock `cut-contended`, or the set `set_of(task)` when there is
/// one, and count who is inside.
async fn contend_over_jittery_links(set_of: fn(usize) -> Option<[&'static str; 2]>) {
    let (_nodes, proxies) = behind_proxies(5, Duration::ZERO);
    let lockers = [hurried(&proxies), hurried(&proxies)];
    for locker in &lockers {
        locker.ping().await.unwrap();
    }
    let jitter = Jitter::start(Arc::new(proxies));
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let locker = lockers[t % 2].clone();
            let (inside, overlaps) = (inside.clone(), overlaps.clone());
            tokio::spawn(async move {
                for _ in 0..5 {
                    let (expire, wait) = (Duration::from_secs(2), Duration::from_secs(20));
                    let release: Pin<Box<dyn Future<Output = ()> + Send>> = match set_of(t) {
                        None => {
                            let guard = take(&locker, "cut-contended", expire, wait).await;
                            Box::pin(async move {
                                let _ = guard.release().await;
                            })
                        }
                        Some(names) => {
                            let guard = take_set(&locker, &names, expire, wait).await;
                            Box::pin(async move {
                                let _ = guard.release().await;
                            })
                        }
                    };
                    if inside.fetch_add(1, Ordering::SeqCst) > 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    release.await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a contender failed");
    }
    drop(jitter);
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders at once");
}
