//! The subscriber connection ([`Link`]): the kinds a subscriber side
//! opens and the commands it sends on them, how their sockets are kept
//! alive, and what their errors mean.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::aio::PubSubSink;
use redis::cluster_async::ClusterConnection;
use redis::{Client, RedisError, RedisResult};

/// TCP keepalive of the subscriber connection: the first probe after this
/// long without traffic.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(15);

/// TCP keepalive of the subscriber connection: the pause between probes.
#[cfg(any(target_os = "linux", target_os = "macos", target_os = "windows"))]
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);

/// The subscriber connection: how a channel is subscribed on it.
#[derive(Clone)]
pub(super) enum Link {
    /// One server's pub/sub connection: SUBSCRIBE.
    Published(PubSubSink),
    /// A Redis Cluster connection on RESP3: SSUBSCRIBE, which it sends to
    /// the shard that serves the channel's slot (and again after a
    /// reconnection or a move of the slot).
    Sharded(ClusterConnection),
    /// One server's multiplexed connection on RESP3, opened on the runtime
    /// where its waiters wait: SUBSCRIBE. A notice arrives as a push, which
    /// the connection's own task hands to the waiter as it reads it (see
    /// [`Shared::pushed`]): no subscriber thread and no other task between
    /// the release and the waiter.
    ///
    /// [`Shared::pushed`]: super::Shared::pushed
    Pushed(MultiplexedConnection),
}

impl Link {
    pub(super) async fn subscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Link::Published(sink) => sink.subscribe(channel).await,
            Link::Sharded(connection) => connection.ssubscribe(channel).await,
            Link::Pushed(connection) => connection.subscribe(channel).await,
        }
    }

    pub(super) async fn unsubscribe(&mut self, channel: &str) -> RedisResult<()> {
        match self {
            Link::Published(sink) => sink.unsubscribe(channel).await,
            Link::Sharded(connection) => connection.sunsubscribe(channel).await,
            Link::Pushed(connection) => connection.unsubscribe(channel).await,
        }
    }

    pub(super) async fn ping(&mut self) -> RedisResult<()> {
        match self {
            Link::Published(sink) => sink.ping::<redis::Value>().await.map(drop),
            Link::Sharded(connection) => redis::cmd("PING").query_async(connection).await,
            Link::Pushed(connection) => redis::cmd("PING").query_async(connection).await,
        }
    }

    pub(super) fn is_sharded(&self) -> bool {
        matches!(self, Link::Sharded(_))
    }
}

/// `client` with TCP keepalive and without Nagle's delay on its sockets
/// (`client` itself when its settings cannot be changed).
pub(super) fn with_keepalive(client: Client) -> Client {
    use redis::io::tcp::socket2::TcpKeepalive;
    let info = client.get_connection_info().clone();
    let keepalive = TcpKeepalive::new().with_time(KEEPALIVE_IDLE);
    #[cfg(any(target_os = "linux", target_os = "macos", target_os = "windows"))]
    let keepalive = keepalive.with_interval(KEEPALIVE_INTERVAL);
    let tcp = info
        .tcp_settings()
        .clone()
        .set_nodelay(true)
        .set_keepalive(keepalive);
    Client::open(info.set_tcp_settings(tcp)).unwrap_or(client)
}

/// `fut`, or a timeout error after `limit`.
pub(super) async fn within<T>(
    limit: Duration,
    fut: impl Future<Output = Result<T, RedisError>>,
) -> Result<T, RedisError> {
    tokio::time::timeout(limit, fut)
        .await
        .unwrap_or_else(|_| Err(timed_out()))
}

pub(super) fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "Redis did not answer in time on the subscriber connection",
    ))
}

/// Redis does not take the command: unknown to it (an older server, a
/// renamed command) or refused to this user by an ACL. Not a passing
/// state of the cluster (`CLUSTERDOWN`, `TRYAGAIN`, a failover), after
/// which shard channels work again.
pub(super) fn unsupported(e: &RedisError) -> bool {
    match e.kind() {
        redis::ErrorKind::Server(redis::ServerErrorKind::NoPerm) => true,
        redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) => e
            .detail()
            .is_some_and(|d| d.to_ascii_lowercase().starts_with("unknown command")),
        _ => false,
    }
}

/// The connection itself failed (dropped, reset, timed out), as opposed to
/// Redis answering with an error.
pub(super) fn broken(e: &RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_unrecoverable_error()
}
