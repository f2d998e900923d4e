//! One Redis server, reached through one multiplexed connection.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, FromRedisValue, RedisError, ScriptInvocation};

use super::{Attempt, Extend, Wakeups, millis, scripts};
use crate::LockError;
use crate::key::Keys;

/// How long to wait for Redis.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// Opening a connection, handshake included.
    pub(crate) connect: Duration,
    /// One command's answer.
    pub(crate) response: Duration,
}

/// A connection and its generation, so that a failure on an old connection
/// never discards a newer one.
struct Current {
    generation: u64,
    connection: MultiplexedConnection,
}

/// One Redis server.
///
/// Every operation of every lock shares one multiplexed connection, opened on
/// first use and opened again after it broke (a dropped connection, a Redis
/// restart, an answer that timed out). Opening is serialized: while one
/// caller connects, the others wait for that attempt and share its outcome,
/// so a thousand callers against a dead server make one attempt, not a
/// thousand, and none waits longer than about two connect timeouts.
pub(crate) struct SingleNode {
    client: Client,
    config: AsyncConnectionConfig,
    server: String,
    current: Mutex<Option<Current>>,
    /// Held while connecting; holds the last failure to connect.
    connecting: tokio::sync::Mutex<Option<RedisError>>,
    /// Finished attempts to connect (successful or not).
    attempts: AtomicU64,
    /// The subscriber side: where waiters hear that they got the lock.
    wakeups: Wakeups,
}

impl std::fmt::Debug for SingleNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SingleNode")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl SingleNode {
    /// Parses `url`; does not connect.
    pub(crate) fn new(url: &str, timeouts: Timeouts) -> Result<SingleNode, LockError> {
        // The redis crate's parse errors may quote the URL, password included:
        // report our own message instead.
        let client = Client::open(url).map_err(|e| {
            LockError::invalid(
                "Redis URL",
                format!(
                    "{} (expected redis://[:password@]host[:port][/db] or unix:///path/to/redis.sock)",
                    e.category()
                ),
            )
        })?;
        let info = client.get_connection_info();
        let server = format!("{}/{}", info.addr(), info.redis_settings().db());
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeouts.connect))
            .set_response_timeout(Some(timeouts.response));
        Ok(SingleNode {
            wakeups: Wakeups::new(client.clone(), timeouts),
            client,
            config,
            server,
            current: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(None),
            attempts: AtomicU64::new(0),
        })
    }

    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    pub(crate) fn wakeups(&self) -> &Wakeups {
        &self.wakeups
    }

    fn cached(&self) -> Option<(u64, MultiplexedConnection)> {
        let current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        current
            .as_ref()
            .map(|c| (c.generation, c.connection.clone()))
    }

    fn discard(&self, generation: u64) {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if current.as_ref().is_some_and(|c| c.generation == generation) {
            *current = None;
        }
    }

    fn error(&self, e: RedisError) -> LockError {
        LockError::from_redis(&self.server, e)
    }

    /// The shared connection, opened if needed.
    async fn connection(&self) -> Result<(u64, MultiplexedConnection), LockError> {
        if let Some(c) = self.cached() {
            return Ok(c);
        }
        let seen = self.attempts.load(Ordering::Acquire);
        let mut last_error = self.connecting.lock().await;
        if let Some(c) = self.cached() {
            return Ok(c);
        }
        if self.attempts.load(Ordering::Acquire) != seen
            && let Some(e) = last_error.as_ref()
        {
            // Someone tried while we waited, and failed: share that outcome.
            return Err(self.error(e.clone()));
        }
        let result = self
            .client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await;
        let generation = self.attempts.fetch_add(1, Ordering::AcqRel) + 1;
        match result {
            Ok(connection) => {
                *last_error = None;
                *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(Current {
                    generation,
                    connection: connection.clone(),
                });
                Ok((generation, connection))
            }
            Err(e) => {
                *last_error = Some(e.clone());
                Err(self.error(e))
            }
        }
    }

    /// Sends a request. A connection that broke while idle (Redis
    /// restarted) fails on first use; then the request is sent once more on
    /// a new one. Every request here is safe to repeat.
    ///
    /// When an answer times out, `on_timeout` gets the connection the
    /// request was sent on, before that connection is discarded.
    async fn send<T: FromRedisValue>(
        &self,
        request: Request<'_>,
        on_timeout: impl FnOnce(MultiplexedConnection),
    ) -> Result<T, LockError> {
        let (generation, mut connection) = self.connection().await?;
        let e = match request.send(&mut connection).await {
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        if e.is_timeout() {
            on_timeout(connection);
        }
        if !broken(&e) {
            return Err(self.error(e));
        }
        self.discard(generation);
        if !e.is_connection_dropped() {
            return Err(self.error(e));
        }
        let (generation, mut connection) = self.connection().await?;
        request.send(&mut connection).await.map_err(|e| {
            if broken(&e) {
                self.discard(generation);
            }
            self.error(e)
        })
    }

    pub(crate) async fn try_acquire(
        &self,
        keys: &Keys,
        token: &str,
        expire: Duration,
        wait: Duration,
    ) -> Result<Attempt, LockError> {
        let mut invocation = scripts::ACQUIRE.prepare_invoke();
        invocation
            .key(&keys.lock)
            .key(&keys.fence)
            .key(&keys.queue)
            .key(&keys.waiters)
            .arg(token)
            .arg(millis(expire))
            .arg(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
        // An acquisition whose answer timed out may still run, later, when a
        // frozen or overloaded server catches up. Redis runs one client's
        // commands in order, so a release sent on the same connection runs
        // after it and gives the lock back; on any other connection it could
        // run first and miss.
        // Sent as EVAL with the source: it may run after a restart or on a
        // server that never saw the script, where EVALSHA would only say
        // NOSCRIPT long after this side stopped listening.
        let give_back = |mut connection: MultiplexedConnection| {
            let release = redis::cmd("EVAL")
                .arg(scripts::RELEASE_LUA)
                .arg(4)
                .arg(&keys.lock)
                .arg(&keys.fence)
                .arg(&keys.queue)
                .arg(&keys.waiters)
                .arg(token)
                .arg(&keys.channel)
                .to_owned();
            tokio::spawn(async move {
                let released: redis::RedisResult<i64> = release.query_async(&mut connection).await;
                drop(released);
            });
        };
        let (taken, value): (i64, i64) = self.send(Request::Script(&invocation), give_back).await?;
        Ok(if taken == 1 {
            Attempt::Acquired {
                fencing_token: u64::try_from(value).unwrap_or(0),
            }
        } else {
            Attempt::Held {
                expires_in: u64::try_from(value).ok().map(Duration::from_millis),
            }
        })
    }

    pub(crate) async fn release(&self, keys: &Keys, token: &str) -> Result<bool, LockError> {
        let deleted: i64 = self
            .send(
                Request::Script(
                    scripts::RELEASE
                        .key(&keys.lock)
                        .key(&keys.fence)
                        .key(&keys.queue)
                        .key(&keys.waiters)
                        .arg(token)
                        .arg(&keys.channel),
                ),
                drop,
            )
            .await?;
        Ok(deleted == 1)
    }

    pub(crate) async fn extend(
        &self,
        keys: &Keys,
        token: &str,
        by: Duration,
        how: Extend,
    ) -> Result<bool, LockError> {
        let mode = match how {
            Extend::Add => "add",
            Extend::Set => "set",
        };
        let done: i64 = self
            .send(
                Request::Script(
                    scripts::EXTEND
                        .key(&keys.lock)
                        .arg(token)
                        .arg(millis(by))
                        .arg(mode),
                ),
                drop,
            )
            .await?;
        Ok(done == 1)
    }

    pub(crate) async fn ping(&self) -> Result<(), LockError> {
        self.send(Request::Command(&redis::cmd("PING")), drop).await
    }
}

/// What [`SingleNode::send`] sends.
#[derive(Clone, Copy)]
enum Request<'a> {
    /// A Lua script: EVALSHA, loaded on NOSCRIPT.
    Script(&'a ScriptInvocation<'a>),
    /// A plain command.
    Command(&'a redis::Cmd),
}

impl Request<'_> {
    async fn send<T: FromRedisValue>(
        self,
        connection: &mut MultiplexedConnection,
    ) -> redis::RedisResult<T> {
        match self {
            Request::Script(invocation) => invocation.invoke_async(connection).await,
            Request::Command(command) => command.query_async(connection).await,
        }
    }
}

/// The connection is unusable (dropped, reset, or an answer timed out on a
/// connection that may be half-open): open a new one next time.
fn broken(e: &RedisError) -> bool {
    e.is_connection_dropped() || e.is_io_error() || e.is_timeout() || e.is_unrecoverable_error()
}
