//! TLS (`rediss://`) against TLS-only redis-servers of our own, with
//! certificates made for the test (see `support/tls.rs`):
//!
//! - a private CA given with `tls_root_ca` is trusted, by host name and by
//!   IP address: locks are taken and released, and a waiter of another
//!   Locker, subscribed over TLS, is handed the lock at the release;
//! - `#insecure` connects without checking the certificate;
//! - a server the Locker must not trust is refused with a connection error
//!   within the connect timeout, never a hang, and no error text shows key
//!   material: the platform's roots do not include the private CA, an
//!   unrelated CA does not vouch for the server, and a certificate for
//!   another host name is not accepted;
//! - mutual TLS: a server that asks for a client certificate refuses a
//!   Locker without one, or with one from an unrelated CA, and accepts one
//!   set with `tls_client_auth`;
//! - the `#[redis_lock]` attribute (async and sync) through a TLS Locker;
//! - a Redlock over three mutual-TLS servers, and a Redis Cluster over TLS
//!   whose other nodes are found through the seed;
//! - settings refused at `build()` (`InvalidInput`): TLS settings on a
//!   `redis://` URL, bytes that are not a PEM certificate, and `#insecure`
//!   without `tls-rustls-insecure` on rustls;
//! - `Debug` of a builder and a Locker shows no certificate or key.

#![cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]

#[path = "support/deployments.rs"]
mod deployments;
#[path = "support/tls.rs"]
mod tls;

use std::time::{Duration, Instant};

use deployments::{cycle, lock_error, release_now, spawn_try_lock};
use lockattr::{LockError, Locker, LockerBuilder, redis_lock};
use tls::{TlsOptions, TlsServer, free_port, pki};

/// The connect timeout of the Lockers that must be refused.
const CONNECT: Duration = Duration::from_millis(500);
/// A refusal comes back within this: the connect timeout plus a wide margin.
const REFUSED_WITHIN: Duration = Duration::from_secs(3);
/// A call still running after this has hung: the test fails instead.
const HANG: Duration = Duration::from_secs(15);

/// `lockattr:{name}`, the Redis key of the lock `name`.
fn lock_key(name: &str) -> String {
    format!("lockattr:{{{name}}}")
}

/// A builder for `url` that trusts the private CA.
fn trusting(url: &str) -> LockerBuilder {
    Locker::builder(url)
        .tls_root_ca(pki().ca.cert.clone())
        .connect_timeout(CONNECT)
}

/// A builder for `url` that trusts the private CA and presents the client
/// certificate.
fn mutual(url: &str) -> LockerBuilder {
    trusting(url).tls_client_auth(pki().client.cert.clone(), pki().client.key.clone())
}

/// Asserts that `locker` cannot reach its server: PING and an acquisition
/// that does not wait fail with a connection error, each within
/// [`REFUSED_WITHIN`], and neither error's text shows key material.
/// Returns the acquisition's error.
async fn assert_refused(locker: &Locker, what: &str) -> LockError {
    let start = Instant::now();
    let ping = tokio::time::timeout(HANG, locker.ping())
        .await
        .unwrap_or_else(|_| panic!("{what}: ping hung"));
    let elapsed = start.elapsed();
    let err = match ping {
        Ok(rtt) => panic!("{what}: ping answered in {rtt:?}; expected a refusal"),
        Err(err) => err,
    };
    assert_connection_error(&err, elapsed, &format!("{what}: ping"));

    let start = Instant::now();
    let acquired = tokio::time::timeout(
        HANG,
        locker
            .lock("tls:refused")
            .acquire_timeout(Duration::ZERO)
            .acquire(),
    )
    .await
    .unwrap_or_else(|_| panic!("{what}: acquire hung"));
    let elapsed = start.elapsed();
    let err = match acquired {
        Ok(guard) => panic!("{what}: acquired {guard:?}; expected a refusal"),
        Err(err) => err,
    };
    assert_connection_error(&err, elapsed, &format!("{what}: acquire"));
    err
}

fn assert_connection_error(err: &LockError, elapsed: Duration, what: &str) {
    assert!(
        err.is_connection(),
        "{what}: expected a connection error, got {err:?}"
    );
    assert!(
        elapsed < REFUSED_WITHIN,
        "{what}: refused after {elapsed:?} (connect timeout {CONNECT:?})"
    );
    // Nothing of a PEM at all: no marker, no base64 of a key or certificate.
    for text in [err.to_string(), format!("{err:?}")] {
        if let Some(found) = pki().pem_in(&text) {
            panic!("{what}: the error shows {found}: {text}");
        }
    }
}

/// Asserts that the server's certificate was refused, and the error says so
/// as the TLS library put it (rustls, or OpenSSL through native-tls).
fn assert_certificate_refused(err: &LockError, what: &str) {
    let text = err.to_string();
    assert!(
        text.contains("invalid peer certificate") || text.contains("certificate verify failed"),
        "{what}: the error does not say that the certificate was refused: {text}"
    );
}

/// Asserts that `locker` cannot reach its server ([`assert_refused`]) and
/// that the error says the server's certificate was refused.
async fn assert_refused_certificate(locker: &Locker, what: &str) {
    let err = assert_refused(locker, what).await;
    assert_certificate_refused(&err, what);
}

/// A Locker that trusts the private CA pings `server`: it answers.
async fn trusted_answers(server: &TlsServer) {
    trusting(&server.url())
        .build()
        .unwrap()
        .ping()
        .await
        .unwrap();
}

/// The guard `waiter` was handed, which must have come within 2 s of
/// `released_at` (at the release, not at a deadline or a lease's end).
async fn handed_promptly(
    waiter: tokio::task::JoinHandle<(deployments::Outcome, Instant)>,
    released_at: Instant,
) -> lockattr::LockGuard {
    let (handed, handed_at) = waiter.await.unwrap();
    let handed = handed.unwrap();
    let after = handed_at.duration_since(released_at);
    assert!(
        after < Duration::from_secs(2),
        "handed {after:?} after the release"
    );
    handed
}

/// Subscribers of the wake-up channel of lock `name`, as the server counts them.
fn wake_subscribers(server: &TlsServer, name: &str) -> u64 {
    let out = server.cli(&["PUBSUB", "NUMSUB", &format!("{}:wake", lock_key(name))]);
    out.lines()
        .last()
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("PUBSUB NUMSUB: {out}"))
}

/// Clients connected to `server`, the `redis-cli` that asks included.
fn connected_clients(server: &TlsServer) -> u64 {
    let info = server.cli(&["INFO", "clients"]);
    info.lines()
        .find_map(|line| line.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("INFO clients: {info}"))
}

/// Polls `cond` every 20 ms until it holds or `within` has passed.
fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if start.elapsed() >= within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_ca_is_trusted_and_a_waiter_is_handed_the_lock_over_tls() {
    let server = TlsServer::start();
    let name = "tls:order";
    let holder = trusting(&server.url()).build().unwrap();
    let other = trusting(&server.url()).build().unwrap();

    let guard = holder.lock(name).acquire().await.unwrap();
    assert!(guard.fencing_token() > 0);
    assert!(server.exists(&lock_key(name)));

    let waiter = spawn_try_lock(&other, name, Duration::from_secs(20));
    // The waiter's Locker subscribes to the lock's release notices; the
    // server has no plain-text port, so that link is TLS too.
    assert!(
        eventually(Duration::from_secs(5), || wake_subscribers(&server, name)
            == 1),
        "the waiter did not subscribe to the lock's channel over TLS"
    );
    assert!(!waiter.is_finished(), "the waiter got a held lock");

    let first_token = guard.fencing_token();
    let released_at = release_now(guard).await;
    // Handed over at the release, not at the 20 s deadline or the end of
    // the 10 s lease.
    let handed = handed_promptly(waiter, released_at).await;
    assert!(handed.fencing_token() > first_token);
    handed.release().await.unwrap();
    assert!(!server.exists(&lock_key(name)));

    // The certificate also names 127.0.0.1: an IP address URL is verified too.
    let by_ip = trusting(&server.ip_url()).build().unwrap();
    let guard = by_ip.lock(name).acquire().await.unwrap();
    assert!(server.exists(&lock_key(name)));
    guard.release().await.unwrap();
}

#[cfg(any(feature = "tls-rustls-insecure", feature = "tls-native-tls"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_insecure_fragment_skips_certificate_checks() {
    // No `tls_root_ca`: the private CA is known to no trust store.
    let server = TlsServer::start();
    let locker = Locker::new(format!("{}#insecure", server.ip_url())).unwrap();
    let guard = locker.lock("tls:insecure").acquire().await.unwrap();
    assert!(server.exists(&lock_key("tls:insecure")));
    guard.release().await.unwrap();
    assert!(!server.exists(&lock_key("tls:insecure")));

    // Nor is the host name checked.
    let wrong = TlsServer::start_wrong_name();
    let locker = Locker::new(format!("{}#insecure", wrong.url())).unwrap();
    let guard = locker.lock("tls:insecure").acquire().await.unwrap();
    assert!(wrong.exists(&lock_key("tls:insecure")));
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_roots_do_not_trust_a_private_ca() {
    let server = TlsServer::start();
    // The same server, trusted through its CA, answers.
    trusted_answers(&server).await;

    let locker = Locker::builder(server.url())
        .connect_timeout(CONNECT)
        .build()
        .unwrap();
    assert_refused_certificate(&locker, "default roots").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrelated_ca_does_not_vouch_for_the_server() {
    let server = TlsServer::start();
    trusted_answers(&server).await;

    let locker = Locker::builder(server.url())
        .tls_root_ca(pki().other_ca.cert.clone())
        .connect_timeout(CONNECT)
        .build()
        .unwrap();
    assert_refused_certificate(&locker, "unrelated CA").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_host_name_is_refused() {
    // Signed by the trusted CA, but for `wrong.example`.
    let server = TlsServer::start_wrong_name();
    for url in [server.url(), server.ip_url()] {
        let locker = trusting(&url).build().unwrap();
        assert_refused_certificate(&locker, &format!("wrong name, {url}")).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_needs_a_client_certificate_the_server_trusts() {
    let server = TlsServer::start_mutual();

    let without = trusting(&server.url()).build().unwrap();
    assert_refused(&without, "no client certificate").await;

    let stranger = trusting(&server.url())
        .tls_client_auth(pki().stranger.cert.clone(), pki().stranger.key.clone())
        .build()
        .unwrap();
    assert_refused(&stranger, "client certificate of an unrelated CA").await;

    let locker = mutual(&server.url()).build().unwrap();
    let guard = locker.lock("tls:mutual").acquire().await.unwrap();
    assert!(server.exists(&lock_key("tls:mutual")));
    guard.release().await.unwrap();
    assert!(!server.exists(&lock_key("tls:mutual")));
}

/// A service whose methods lock through its own TLS Locker.
struct Billing {
    locks: Locker,
    server: TlsServer,
}

impl Billing {
    #[redis_lock(name = "tls:invoice:{n}", locker = &self.locks, guard = held)]
    async fn charge(&self, n: u32) -> Result<(bool, u64), LockError> {
        let key = lock_key(&format!("tls:invoice:{n}"));
        Ok((self.server.exists(&key), held.fencing_token()))
    }

    #[redis_lock(name = "tls:invoice:{n}", locker = &self.locks, guard = held)]
    fn charge_blocking(&self, n: u32) -> Result<(bool, u64), LockError> {
        let key = lock_key(&format!("tls:invoice:{n}"));
        Ok((self.server.exists(&key), held.fencing_token()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attribute_locks_through_a_tls_locker() {
    let server = TlsServer::start_mutual();
    let billing = Billing {
        locks: mutual(&server.url()).build().unwrap(),
        server,
    };
    let (held, token) = billing.charge(1).await.unwrap();
    assert!(held, "the lock was not in Redis while the body ran");
    assert!(token > 0);
    assert!(!billing.server.exists(&lock_key("tls:invoice:1")));

    // The sync path goes through the library's I/O thread.
    let (held, next) = tokio::task::block_in_place(|| billing.charge_blocking(1)).unwrap();
    assert!(held, "the lock was not in Redis while the sync body ran");
    assert!(next > token);
    assert!(!billing.server.exists(&lock_key("tls:invoice:1")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_over_three_mutual_tls_servers() {
    let nodes: Vec<TlsServer> = (0..3).map(|_| TlsServer::start_mutual()).collect();
    let urls: Vec<String> = nodes.iter().map(TlsServer::url).collect();
    let redlock = || {
        Locker::redlock_builder(&urls)
            .tls_root_ca(pki().ca.cert.clone())
            .tls_client_auth(pki().client.cert.clone(), pki().client.key.clone())
            .connect_timeout(CONNECT)
            // A node slower than this is left out once a majority answered:
            // generous, so that every node takes part on a loaded machine.
            .node_timeout(Duration::from_secs(1))
            .delay_restarted_nodes(false)
    };
    let (a, b) = (redlock().build().unwrap(), redlock().build().unwrap());
    let name = "tls:redlock";
    let holders = || nodes.iter().filter(|n| n.exists(&lock_key(name))).count();

    // A first acquisition opens the connections; one that is not open when
    // a majority has answered goes on opening in the background. Every
    // node must then have the Locker in, over mutual TLS.
    cycle(&a, "tls:warm-up").await;
    assert!(
        eventually(Duration::from_secs(5), || nodes
            .iter()
            .all(|n| connected_clients(n) >= 2)),
        "a node never had the Locker connected"
    );
    let guard = a.lock(name).acquire().await.unwrap();
    // Done at a majority; every node runs the acquisition over mutual TLS
    // (each then has the name's fence counter). The last node need not keep
    // the lock: one that answers after the majority decided, with a counter
    // past the fencing token, gives it back. On fresh nodes a name's first
    // counters are the nodes' clocks in microseconds, and two can agree.
    assert!(holders() >= 2);
    let fence = format!("{}:fence", lock_key(name));
    assert!(
        eventually(Duration::from_secs(2), || nodes
            .iter()
            .all(|n| n.exists(&fence))),
        "a node never ran the acquisition"
    );
    let busy = lock_error(&b, name, Duration::from_millis(300)).await;
    assert!(busy.is_timeout(), "{busy:?}");

    let waiter = spawn_try_lock(&b, name, Duration::from_secs(20));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = release_now(guard).await;
    let handed = handed_promptly(waiter, released_at).await;
    handed.release().await.unwrap();
    assert!(
        eventually(Duration::from_secs(2), || holders() == 0),
        "not freed on every node: {}",
        holders()
    );

    // Without the client certificate no node lets the Locker in.
    let refused = Locker::redlock_builder(&urls)
        .tls_root_ca(pki().ca.cert.clone())
        .connect_timeout(CONNECT)
        .delay_restarted_nodes(false)
        .build()
        .unwrap();
    let start = Instant::now();
    let err = tokio::time::timeout(
        HANG,
        refused.lock(name).acquire_timeout(Duration::ZERO).acquire(),
    )
    .await
    .expect("the Redlock acquisition hung")
    .unwrap_err();
    assert!(err.is_no_quorum(), "{err:?}");
    assert_connection_error(
        &err,
        start.elapsed(),
        "Redlock without a client certificate",
    );
}

/// True when `key` is on cluster node `node`; false when it is not, or the
/// node answers that another node serves its slot.
fn on_node(node: &TlsServer, key: &str) -> bool {
    match node.cli(&["EXISTS", key]).as_str() {
        "1" => true,
        "0" => false,
        moved if moved.starts_with("MOVED ") => false,
        other => panic!("EXISTS {key}: {other}"),
    }
}

/// Three TLS-only masters joined into a Redis Cluster whose nodes talk TLS
/// to each other, and announce their TLS ports.
fn tls_cluster() -> Vec<TlsServer> {
    let nodes: Vec<TlsServer> = (0..3)
        .map(|_| {
            let bus = free_port().to_string();
            TlsServer::start_with(TlsOptions {
                cert: &pki().server,
                auth_clients: false,
                extra: &[
                    "--tls-cluster",
                    "yes",
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                    "--cluster-port",
                    &bus,
                ],
            })
        })
        .collect();
    let addrs: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let mut create = vec!["--cluster", "create"];
    create.extend(addrs.iter().map(String::as_str));
    create.extend(["--cluster-replicas", "0", "--cluster-yes"]);
    nodes[0].cli_within(&create, Duration::from_secs(60));
    let ok = eventually(Duration::from_secs(20), || {
        nodes
            .iter()
            .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
    });
    assert!(ok, "the TLS cluster was not ok within 20 s");
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_over_tls_reaches_the_nodes_it_discovers() {
    let nodes = tls_cluster();
    // One seed: the other masters are found through it, and reached with
    // the same TLS settings.
    let locker = || {
        Locker::cluster_builder([nodes[0].url()])
            .tls_root_ca(pki().ca.cert.clone())
            .connect_timeout(CONNECT)
            .build()
            .unwrap()
    };
    let (a, b) = (locker(), locker());
    let names: Vec<String> = (0..12).map(|i| format!("tls:cluster:{i}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(a.lock(name).acquire().await.unwrap());
    }
    let mut used = [false; 3];
    for name in &names {
        let on: Vec<usize> = (0..3)
            .filter(|&i| on_node(&nodes[i], &lock_key(name)))
            .collect();
        assert_eq!(on.len(), 1, "{name} is on nodes {on:?}");
        used[on[0]] = true;
    }
    assert!(
        used[1] || used[2],
        "every lock landed on the seed; the test shows nothing about discovered nodes"
    );
    let busy = lock_error(&b, &names[0], Duration::from_millis(300)).await;
    assert!(busy.is_timeout(), "{busy:?}");
    for guard in guards {
        guard.release().await.unwrap();
    }
    for name in &names {
        assert!(nodes.iter().all(|n| !on_node(n, &lock_key(name))), "{name}");
    }
}

fn assert_invalid(result: Result<Locker, LockError>, what: &str) -> String {
    match result {
        Err(err @ LockError::InvalidInput { .. }) => {
            // The message may quote a PEM marker as advice, never a key.
            for text in [err.to_string(), format!("{err:?}")] {
                if let Some(found) = pki().key_material_in(&text) {
                    panic!("{what}: the error shows {found}: {text}");
                }
            }
            err.to_string()
        }
        Err(err) => panic!("{what}: expected InvalidInput, got {err:?}"),
        Ok(locker) => panic!("{what}: built {locker:?}"),
    }
}

#[test]
fn tls_settings_on_a_plain_url_are_refused() {
    // Nothing listens there: `build()` does not connect.
    let plain = "redis://127.0.0.1:6390/";
    let ca = || pki().ca.cert.clone();
    let client = || (pki().client.cert.clone(), pki().client.key.clone());
    let builders = [
        ("single, root CA", Locker::builder(plain).tls_root_ca(ca())),
        ("single, client auth", {
            let (cert, key) = client();
            Locker::builder(plain).tls_client_auth(cert, key)
        }),
        (
            "redlock, root CA",
            Locker::redlock_builder([
                "redis://127.0.0.1:6390/",
                "redis://127.0.0.1:6391/",
                "redis://127.0.0.1:6392/",
            ])
            .tls_root_ca(ca()),
        ),
        (
            "cluster, root CA",
            Locker::cluster_builder([plain]).tls_root_ca(ca()),
        ),
    ];
    for (what, builder) in builders {
        let message = assert_invalid(builder.build(), what);
        assert!(message.contains("rediss://"), "{what}: {message}");
    }
}

#[test]
fn a_root_ca_that_is_not_a_pem_certificate_is_refused_at_build() {
    let url = "rediss://localhost:6390/";
    let truncated = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    let cases: [(&str, Vec<u8>); 4] = [
        ("text", b"not a certificate".to_vec()),
        ("empty", Vec::new()),
        (
            "a PEM block that is no certificate",
            truncated.as_bytes().to_vec(),
        ),
        // A private key in place of the certificate: refused, and its
        // error does not show it.
        ("a private key", pki().client.key.clone()),
    ];
    for (what, pem) in cases {
        assert_invalid(Locker::builder(url).tls_root_ca(pem).build(), what);
    }
}

#[cfg(all(
    feature = "tls-rustls",
    not(feature = "tls-rustls-insecure"),
    not(feature = "tls-native-tls")
))]
#[test]
fn the_insecure_fragment_needs_its_feature_with_rustls() {
    let message = assert_invalid(
        Locker::new("rediss://127.0.0.1:6390/#insecure"),
        "#insecure without tls-rustls-insecure",
    );
    assert!(message.contains("tls-rustls-insecure"), "{message}");
}

#[test]
fn debug_output_shows_no_certificate_or_key() {
    let builder = mutual("rediss://localhost:6390/");
    let text = format!("{builder:?}");
    assert!(pki().pem_in(&text).is_none(), "{text}");
    let locker = builder.build().unwrap();
    let text = format!("{locker:?}");
    assert!(pki().pem_in(&text).is_none(), "{text}");

    let redlock = Locker::redlock_builder([
        "rediss://localhost:6390/",
        "rediss://localhost:6391/",
        "rediss://localhost:6392/",
    ])
    .tls_root_ca(pki().ca.cert.clone())
    .tls_client_auth(pki().client.cert.clone(), pki().client.key.clone());
    let text = format!("{redlock:?}");
    assert!(pki().pem_in(&text).is_none(), "{text}");
    let text = format!("{:?}", redlock.build().unwrap());
    assert!(pki().pem_in(&text).is_none(), "{text}");
}
