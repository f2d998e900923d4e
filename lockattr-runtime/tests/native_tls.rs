//! TLS through native-tls (OpenSSL on Linux), against TLS-only
//! redis-servers of our own and the certificates of
//! `tests/support/tls.rs`. The root package's TLS tests (`tests/tls.rs`)
//! cannot run on native-tls alone: a dev-dependency of the root package
//! turns on redis's rustls there. Here, in the runtime crate, it is off
//! (`cargo tree -p lockattr-runtime --features tls-native-tls -e features
//! -i redis` shows no rustls), so these tests show that:
//!
//! - a private CA given with `tls_root_ca` is trusted, by host name and by
//!   IP address, and a waiter of another Locker is handed the lock at the
//!   release;
//! - `#insecure` connects without checking the certificate;
//! - the platform's roots, an unrelated CA and a certificate for another
//!   host name are refused with a connection error within the connect
//!   timeout, with no key material in the error;
//! - mutual TLS: a server that asks for a client certificate refuses a
//!   Locker without one and accepts one set with `tls_client_auth`.
//!
//! Run with `cargo test -p lockattr-runtime --features tls-native-tls --test native_tls`.

#![cfg(feature = "tls-native-tls")]

#[path = "../../tests/support/tls.rs"]
mod tls;

use std::time::{Duration, Instant};

use lockattr_runtime::{LockError, Locker, LockerBuilder};
use tls::{TlsServer, pki};

/// The connect timeout of the Lockers that must be refused.
const CONNECT: Duration = Duration::from_millis(500);
/// A refusal comes back within this: the connect timeout plus a wide margin.
const REFUSED_WITHIN: Duration = Duration::from_secs(3);
/// A call still running after this has hung: the test fails instead.
const HANG: Duration = Duration::from_secs(15);

fn lock_key(name: &str) -> String {
    format!("lockattr:{{{name}}}")
}

fn trusting(url: &str) -> LockerBuilder {
    Locker::builder(url)
        .tls_root_ca(pki().ca.cert.clone())
        .connect_timeout(CONNECT)
}

/// PING and an acquisition that does not wait both fail with a connection
/// error within [`REFUSED_WITHIN`], without key material in their text.
async fn assert_refused(locker: &Locker, what: &str) -> LockError {
    let start = Instant::now();
    let ping = tokio::time::timeout(HANG, locker.ping())
        .await
        .unwrap_or_else(|_| panic!("{what}: ping hung"));
    let err = match ping {
        Ok(rtt) => panic!("{what}: ping answered in {rtt:?}; expected a refusal"),
        Err(err) => err,
    };
    assert_connection_error(&err, start.elapsed(), &format!("{what}: ping"));

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
    let err = match acquired {
        Ok(guard) => panic!("{what}: acquired {guard:?}; expected a refusal"),
        Err(err) => err,
    };
    assert_connection_error(&err, start.elapsed(), &format!("{what}: acquire"));
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
    for text in [err.to_string(), format!("{err:?}")] {
        if let Some(found) = pki().pem_in(&text) {
            panic!("{what}: the error shows {found}: {text}");
        }
    }
}

/// Asserts that the server's certificate was refused, and the error says so
/// as OpenSSL put it.
fn assert_certificate_refused(err: &LockError, what: &str) {
    let text = err.to_string();
    assert!(
        text.contains("certificate verify failed"),
        "{what}: the error does not say that the certificate was refused: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_ca_is_trusted_and_a_waiter_is_handed_the_lock() {
    let server = TlsServer::start();
    let name = "tls:order";
    let holder = trusting(&server.url()).build().unwrap();
    let other = trusting(&server.url()).build().unwrap();

    let guard = holder.lock(name).acquire().await.unwrap();
    assert!(server.exists(&lock_key(name)));
    let waiter = tokio::spawn(async move {
        let guard = other
            .lock(name)
            .acquire_timeout(Duration::from_secs(20))
            .acquire()
            .await;
        (guard, Instant::now())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    let first_token = guard.fencing_token();
    let released_at = Instant::now();
    guard.release().await.unwrap();
    let (handed, handed_at) = waiter.await.unwrap();
    let handed = handed.unwrap();
    let after = handed_at.duration_since(released_at);
    assert!(
        after < Duration::from_secs(2),
        "handed {after:?} after the release"
    );
    assert!(handed.fencing_token() > first_token);
    handed.release().await.unwrap();
    assert!(!server.exists(&lock_key(name)));

    let by_ip = trusting(&server.ip_url()).build().unwrap();
    let guard = by_ip.lock(name).acquire().await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_insecure_fragment_skips_certificate_checks() {
    let server = TlsServer::start();
    let locker = Locker::new(format!("{}#insecure", server.ip_url())).unwrap();
    let guard = locker.lock("tls:insecure").acquire().await.unwrap();
    assert!(server.exists(&lock_key("tls:insecure")));
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untrusted_servers_are_refused() {
    let server = TlsServer::start();
    trusting(&server.url())
        .build()
        .unwrap()
        .ping()
        .await
        .unwrap();

    let default_roots = Locker::builder(server.url())
        .connect_timeout(CONNECT)
        .build()
        .unwrap();
    let err = assert_refused(&default_roots, "default roots").await;
    assert_certificate_refused(&err, "default roots");

    let unrelated = Locker::builder(server.url())
        .tls_root_ca(pki().other_ca.cert.clone())
        .connect_timeout(CONNECT)
        .build()
        .unwrap();
    let err = assert_refused(&unrelated, "unrelated CA").await;
    assert_certificate_refused(&err, "unrelated CA");

    let wrong = TlsServer::start_wrong_name();
    let wrong_name = trusting(&wrong.url()).build().unwrap();
    let err = assert_refused(&wrong_name, "wrong host name").await;
    assert_certificate_refused(&err, "wrong host name");
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

    let locker = trusting(&server.url())
        .tls_client_auth(pki().client.cert.clone(), pki().client.key.clone())
        .build()
        .unwrap();
    let guard = locker.lock("tls:mutual").acquire().await.unwrap();
    assert!(server.exists(&lock_key("tls:mutual")));
    guard.release().await.unwrap();
    assert!(!server.exists(&lock_key("tls:mutual")));
}
