//! Where a Locker connects: server addresses (a URL or a
//! `redis::ConnectionInfo`), TLS material, and the redis clients made of
//! them.

use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use crate::LockError;

/// A Redis server's address: a URL (`&str`, `String`) or a
/// [`redis::ConnectionInfo`] (from redis-rs 1.x, the version this crate
/// re-exports as [`crate::redis`]).
///
/// Every constructor of a [`Locker`](crate::Locker) takes its servers as
/// `RedisAddr`, so a configuration that already holds a
/// `redis::ConnectionInfo` (or a `redis::Client`, whose
/// `get_connection_info()` gives one) needs no reformatting. URLs read:
///
/// - `redis://[[user]:password@]host[:port][/db]`
/// - `rediss://...` for TLS (with a TLS feature: `tls-rustls` or
///   `tls-native-tls`), `rediss://...#insecure` to skip the certificate
///   checks
/// - `unix:///path/to/redis.sock[?db=N]`
///
/// The trait is sealed: it is implemented for `str`, `String`,
/// `redis::ConnectionInfo` and references to them.
///
/// ```
/// # use lockattr_runtime as lockattr; // the doctest builds without the facade
/// # use lockattr::Locker;
/// use lockattr::redis::{Client, IntoConnectionInfo};
///
/// let info = "redis://127.0.0.1:6379/3".into_connection_info().unwrap();
/// let one = Locker::new(info).unwrap();
/// let client = Client::open("redis://10.0.0.1/").unwrap();
/// let two = Locker::new(client.get_connection_info()).unwrap();
/// let three = Locker::redlock([
///     "redis://10.0.0.1/".into_connection_info().unwrap(),
///     "redis://10.0.0.2/".into_connection_info().unwrap(),
///     "redis://10.0.0.3/".into_connection_info().unwrap(),
/// ]);
/// # let _ = (one, two, three);
/// ```
pub trait RedisAddr: sealed::Sealed {}

mod sealed {
    use super::Address;

    pub trait Sealed {
        fn address(&self) -> Address;
    }
}

impl RedisAddr for str {}
impl sealed::Sealed for str {
    fn address(&self) -> Address {
        Address::Url(self.to_owned())
    }
}

impl RedisAddr for String {}
impl sealed::Sealed for String {
    fn address(&self) -> Address {
        Address::Url(self.clone())
    }
}

impl RedisAddr for ConnectionInfo {}
impl sealed::Sealed for ConnectionInfo {
    fn address(&self) -> Address {
        Address::Info(Box::new(self.clone()))
    }
}

impl<T: RedisAddr + ?Sized> RedisAddr for &T {}
impl<T: RedisAddr + ?Sized> sealed::Sealed for &T {
    fn address(&self) -> Address {
        (**self).address()
    }
}

/// A server's address as given, parsed when the Locker is built (public
/// only for the sealed trait's sake: this module is private).
#[derive(Clone)]
pub enum Address {
    Url(String),
    Info(Box<ConnectionInfo>),
}

impl Address {
    pub(crate) fn of(addr: impl RedisAddr) -> Address {
        sealed::Sealed::address(&addr)
    }

    /// The parsed address. The redis crate's parse errors may quote the
    /// URL, password included: the message is ours. `expected` tells the
    /// form wanted (`redis://host[:port]` ...).
    pub(crate) fn info(&self, expected: &str) -> Result<ConnectionInfo, LockError> {
        match self {
            Address::Url(url) => {
                let scheme = url.trim_start().split(':').next().unwrap_or_default();
                if ["rediss", "valkeys"].contains(&scheme.to_ascii_lowercase().as_str()) {
                    no_tls_feature()?;
                }
                url.as_str().into_connection_info().map_err(|e| {
                    let wrong = wrong_part(url).unwrap_or_else(|| e.category().to_string());
                    LockError::invalid("Redis URL", format!("{wrong} (expected {expected})"))
                })
            }
            Address::Info(info) => Ok((**info).clone()),
        }
    }
}

/// The server a Locker names in its errors and events: `host:port/db`, or
/// a Unix socket's path and its database; never a password.
pub(crate) fn server_name(info: &ConnectionInfo) -> String {
    let db = info.redis_settings().db();
    match info.addr() {
        ConnectionAddr::Unix(path) => format!("{} (database {db})", path.display()),
        addr => format!("{addr}/{db}"),
    }
}

/// The part of a URL the redis crate refused, in words: its scheme, host,
/// port or database. Quotes nothing that may hold the password: only a
/// scheme that is a scheme's characters; `None` when no part is seen wrong.
fn wrong_part(url: &str) -> Option<String> {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        return Some(
            "the scheme is missing: start the URL with `redis://`, `rediss://` or `unix://`".into(),
        );
    };
    let lower = scheme.to_ascii_lowercase();
    if lower.contains("unix") {
        return (rest.is_empty() || rest.starts_with(['?', '#']))
            .then(|| "the socket's path is missing".into());
    }
    if !["redis", "rediss", "valkey", "valkeys"].contains(&lower.as_str()) {
        let shown = scheme.len() <= 20
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
        return Some(if shown {
            format!("the scheme `{scheme}` is not `redis`, `rediss` or `unix`")
        } else {
            "the scheme is not `redis`, `rediss` or `unix`".into()
        });
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, after) = rest.split_at(end);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(bracketed) = host_port.strip_prefix('[') {
        match bracketed.split_once(']') {
            Some((host, tail)) => (host, tail.strip_prefix(':')),
            None => return Some("the host's `[` has no `]`".into()),
        }
    } else {
        match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    if host.is_empty() {
        return Some("the host is missing".into());
    }
    if let Some(port) = port
        && !port.is_empty()
        && port.parse::<u16>().is_err()
    {
        return Some("the port is not a number from 0 to 65535".into());
    }
    let db = after
        .strip_prefix('/')
        .map(|p| p.split(['?', '#']).next().unwrap_or_default());
    if let Some(db) = db
        && !db.is_empty()
        && db.parse::<i64>().is_err()
    {
        return Some("the database (after the host's `/`) is not a number".into());
    }
    None
}

/// Refuses TLS when the crate was built without a TLS feature.
fn no_tls_feature() -> Result<(), LockError> {
    if cfg!(any(feature = "tls-rustls", feature = "tls-native-tls")) {
        Ok(())
    } else {
        Err(LockError::invalid(
            "Redis URL",
            "`rediss://` (TLS) needs a TLS feature of lockattr: turn on `tls-rustls` \
             or `tls-native-tls` (for example `lockattr = { version = \"0.1\", features = \
             [\"tls-rustls\"] }`)",
        ))
    }
}

/// Certificates for TLS connections: a private CA to trust, and a client
/// certificate for mutual TLS. Never printed.
#[derive(Clone, Default)]
pub(crate) struct TlsFiles {
    pub(crate) root_ca: Option<Vec<u8>>,
    /// Certificate chain and private key, PEM.
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsFiles")
            .field("root_ca", &self.root_ca.as_ref().map(|_| "<set>"))
            .field("client_auth", &self.client.as_ref().map(|_| "<set>"))
            .finish()
    }
}

impl TlsFiles {
    pub(crate) fn is_empty(&self) -> bool {
        self.root_ca.is_none() && self.client.is_none()
    }

    /// Checks what can be checked before connecting: the PEM blocks are
    /// there (a CA file without a certificate would otherwise trust no
    /// server, and fail only on connect).
    pub(crate) fn check(&self) -> Result<(), LockError> {
        if self.is_empty() {
            return Ok(());
        }
        no_tls_feature().map_err(|_| {
            LockError::invalid(
                "TLS settings",
                "`tls_root_ca` and `tls_client_auth` need a TLS feature of lockattr: turn on \
                 `tls-rustls` or `tls-native-tls`",
            )
        })?;
        if let Some(ca) = &self.root_ca
            && !has_pem_block(ca, "CERTIFICATE")
        {
            return Err(LockError::invalid(
                "TLS root CA",
                "no `-----BEGIN CERTIFICATE-----` block found; pass the CA's certificate in PEM",
            ));
        }
        if let Some((cert, key)) = &self.client {
            if !has_pem_block(cert, "CERTIFICATE") {
                return Err(LockError::invalid(
                    "TLS client certificate",
                    "no `-----BEGIN CERTIFICATE-----` block found; pass the certificate (chain) \
                     in PEM",
                ));
            }
            if !has_pem_block(key, "PRIVATE KEY") {
                return Err(LockError::invalid(
                    "TLS client key",
                    "no `-----BEGIN ... PRIVATE KEY-----` block found; pass the private key in \
                     PEM (PKCS#8, PKCS#1 or SEC1)",
                ));
            }
        }
        Ok(())
    }

    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self
                .client
                .as_ref()
                .map(|(cert, key)| redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
            root_cert: self.root_ca.clone(),
        }
    }

    /// The certificates in the redis crate's form, for the builders that take
    /// them apart from the address (Cluster, Sentinel); `None` when there
    /// are none.
    #[cfg(feature = "tls-rustls")]
    pub(crate) fn redis_certificates(&self) -> Option<redis::TlsCertificates> {
        (!self.is_empty()).then(|| self.certificates())
    }

    /// Refuses certificates where the redis crate takes them only with
    /// rustls (Cluster, Sentinel).
    pub(crate) fn need_rustls(&self, kind: &str) -> Result<(), LockError> {
        if self.is_empty() || cfg!(feature = "tls-rustls") {
            return Ok(());
        }
        Err(LockError::invalid(
            "TLS settings",
            format!(
                "`tls_root_ca` and `tls_client_auth` on a {kind} need the `tls-rustls` feature \
                 (redis-rs takes certificates for a {kind} only with rustls); with \
                 `tls-native-tls`, put the CA in the platform's trust store instead"
            ),
        ))
    }
}

/// Whether `pem` holds a `-----BEGIN <...label>-----` line.
fn has_pem_block(pem: &[u8], label: &str) -> bool {
    String::from_utf8_lossy(pem).lines().any(|line| {
        line.trim()
            .strip_prefix("-----BEGIN ")
            .and_then(|rest| rest.strip_suffix("-----"))
            .is_some_and(|name| name.ends_with(label))
    })
}

/// Whether `info` is a TLS address.
pub(crate) fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
}

/// Checks what the TLS features allow for `info`, and readies rustls.
pub(crate) fn check_tls(info: &ConnectionInfo, files: &TlsFiles) -> Result<(), LockError> {
    let ConnectionAddr::TcpTls { insecure, .. } = info.addr() else {
        if files.is_empty() {
            return Ok(());
        }
        return Err(LockError::invalid(
            "TLS settings",
            "`tls_root_ca` / `tls_client_auth` are set but a server address is not TLS: use \
             `rediss://` URLs",
        ));
    };
    no_tls_feature()?;
    if *insecure
        && cfg!(all(
            feature = "tls-rustls",
            not(feature = "tls-rustls-insecure")
        ))
    {
        return Err(LockError::invalid(
            "Redis URL",
            "`#insecure` (no certificate checks) with rustls needs the `tls-rustls-insecure` \
             feature of lockattr; or trust the server's CA with `tls_root_ca` instead",
        ));
    }
    install_crypto_provider();
    Ok(())
}

/// rustls needs a process-wide crypto provider, which the redis crate does
/// not choose: install ring's unless the application installed one.
fn install_crypto_provider() {
    #[cfg(feature = "tls-rustls")]
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Fails only when another thread installed one meanwhile: fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// A client for the server at `info`, with the TLS certificates when it is a
/// TLS address.
pub(crate) fn client(info: ConnectionInfo, files: &TlsFiles) -> Result<Client, LockError> {
    check_tls(&info, files)?;
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    if is_tls(&info) && !files.is_empty() {
        return Client::build_with_tls(info, files.certificates()).map_err(|e| {
            // The redis crate's message says which part it could not read;
            // its details may quote the PEM: not repeated.
            let part = e.to_string();
            let what = if part.contains("root") {
                "TLS root CA"
            } else if part.contains("key") {
                "TLS client key"
            } else {
                "TLS client certificate"
            };
            LockError::invalid(what, "it could not be read as PEM")
        });
    }
    Client::open(info).map_err(|e| LockError::invalid("Redis address", e.category().to_string()))
}
