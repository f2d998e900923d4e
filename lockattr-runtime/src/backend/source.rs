//! Where a server's connections go: a fixed address, or the master that
//! Redis Sentinel names at the time (asked again for every new connection,
//! so a Locker follows a failover).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{Client, ConnectionInfo, ErrorKind, RedisError, TlsMode};

use crate::LockError;
use crate::address::{self, TlsFiles};

/// Where to connect.
#[derive(Clone)]
pub(crate) enum Source {
    /// One server.
    Fixed(Box<Client>),
    /// The current master of a Sentinel-monitored group.
    Sentinel(Arc<Sentinels>),
}

impl Source {
    /// A client for the server to connect to now (for Sentinel: after
    /// asking the sentinels, within `limit`).
    pub(crate) async fn client(&self, limit: Duration) -> Result<Client, RedisError> {
        match self {
            Source::Fixed(client) => Ok((**client).clone()),
            Source::Sentinel(sentinels) => sentinels.master(limit).await,
        }
    }

    /// Whether connections go through TLS.
    pub(crate) fn is_tls(&self) -> bool {
        match self {
            Source::Fixed(client) => address::is_tls(client.get_connection_info()),
            Source::Sentinel(sentinels) => sentinels.tls,
        }
    }
}

/// The master the sentinels name: each sentinel is asked in parallel, and
/// the first answer whose master confirms its role (redis-rs checks `ROLE`
/// on it) wins. A sentinel that is down or slow costs nothing while another
/// one answers.
pub(crate) struct Sentinels {
    /// One client per sentinel (each keeps its connection to its sentinel).
    clients: Vec<tokio::sync::Mutex<SentinelClient>>,
    /// `sentinel[<master name>]`, for errors.
    name: String,
    /// Whether the sentinels (and so the master) are reached through TLS.
    tls: bool,
}

/// How a Sentinel Locker reaches the master, besides its address.
#[derive(Clone, Default)]
pub(crate) struct MasterSettings {
    pub(crate) user: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: Option<i64>,
}

impl std::fmt::Debug for MasterSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterSettings")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<set>"))
            .field("db", &self.db)
            .finish()
    }
}

impl Sentinels {
    /// Clients for the sentinels at `sentinels` (parsed), for the master
    /// group `master_name`; connects to nothing yet.
    pub(crate) fn new(
        master_name: &str,
        sentinels: Vec<ConnectionInfo>,
        master: &MasterSettings,
        tls: &TlsFiles,
    ) -> Result<Sentinels, LockError> {
        if master_name.is_empty() {
            return Err(LockError::invalid(
                "Sentinel master name",
                "it is empty; pass the name the sentinels monitor (`sentinel monitor <name> ...`)",
            ));
        }
        if sentinels.is_empty() {
            return Err(LockError::invalid(
                "Sentinel URLs",
                "none given; pass the URL of at least one sentinel",
            ));
        }
        tls.need_rustls("Sentinel")?;
        if master.db.is_some_and(|db| db < 0) {
            return Err(LockError::invalid(
                "Sentinel master database",
                "it must be 0 or more",
            ));
        }
        let uses_tls = sentinels.iter().any(address::is_tls);
        let clients = sentinels
            .into_iter()
            .map(|info| {
                address::check_tls(&info, tls)?;
                if info.redis_settings().db() != 0 {
                    return Err(LockError::invalid(
                        "Sentinel URL",
                        "a sentinel has no databases: leave the database out of its URL and \
                         set the master's with `master_db`",
                    ));
                }
                sentinel_client(master_name, info, master, tls)
                    .map(tokio::sync::Mutex::new)
                    .map_err(|e| {
                        LockError::invalid("Sentinel URL", format!("{} (check it)", e.category()))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Sentinels {
            clients,
            name: format!("sentinel[{master_name}]"),
            tls: uses_tls,
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// A client for the current master.
    async fn master(&self, limit: Duration) -> Result<Client, RedisError> {
        let mut asks: FuturesUnordered<_> = self
            .clients
            .iter()
            .map(|client| async move {
                // One question at a time per sentinel (its client keeps
                // one connection); the whole search is bounded by `limit`.
                client.lock().await.async_get_client().await
            })
            .collect();
        let mut last = None;
        let ask = async {
            while let Some(answer) = asks.next().await {
                match answer {
                    Ok(client) => return Ok(client),
                    Err(e) => last = Some(e),
                }
            }
            Err(())
        };
        match tokio::time::timeout(limit, ask).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(())) => Err(last
                .map(|e| explain(&self.name, e))
                .unwrap_or_else(|| RedisError::from((ErrorKind::Io, "no sentinel answered")))),
            Err(_) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no sentinel named a reachable master within {limit:?}"),
            ))),
        }
    }
}

/// Makes a "no master" answer say what to check; other errors are kept.
fn explain(name: &str, e: RedisError) -> RedisError {
    if e.kind() == ErrorKind::MasterNameNotFoundBySentinel {
        return RedisError::from((
            ErrorKind::MasterNameNotFoundBySentinel,
            "no sentinel knows a healthy master by this name",
            format!("check the master name of {name}, or wait for the failover to end"),
        ));
    }
    e
}

/// A client of one sentinel, for the master `master_name`, with the
/// sentinel's own credentials (from its URL) and the master's.
fn sentinel_client(
    master_name: &str,
    info: ConnectionInfo,
    master: &MasterSettings,
    tls: &TlsFiles,
) -> Result<SentinelClient, RedisError> {
    let settings = info.redis_settings().clone();
    let tls_mode = match info.addr() {
        redis::ConnectionAddr::TcpTls { insecure, .. } => Some(if *insecure {
            TlsMode::Insecure
        } else {
            TlsMode::Secure
        }),
        _ => None,
    };
    let mut builder = SentinelClientBuilder::new(
        [info.addr().clone()],
        master_name,
        SentinelServerType::Master,
    )?;
    if let Some(user) = settings.username() {
        builder = builder.set_client_to_sentinel_username(user);
    }
    if let Some(password) = settings.password() {
        builder = builder.set_client_to_sentinel_password(password);
    }
    // The master is reached the way the sentinels are: TLS or not.
    if let Some(mode) = tls_mode {
        builder = builder.set_client_to_redis_tls_mode(mode);
    }
    #[cfg(feature = "tls-rustls")]
    if let Some(certificates) = tls.redis_certificates() {
        builder = builder
            .set_client_to_sentinel_certificates(certificates.clone())
            .set_client_to_redis_certificates(certificates);
    }
    #[cfg(not(feature = "tls-rustls"))]
    let _ = tls;
    if let Some(user) = &master.user {
        builder = builder.set_client_to_redis_username(user);
    }
    if let Some(password) = &master.password {
        builder = builder.set_client_to_redis_password(password);
    }
    if let Some(db) = master.db {
        builder = builder.set_client_to_redis_db(db);
    }
    builder.build()
}
