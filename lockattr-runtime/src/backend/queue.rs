//! The deployments whose locks queue their waiters in Redis (one server,
//! and one master per lock on a Redis Cluster), and what every waiting loop
//! needs to know of their errors. The loop itself is `crate::wait`.

use std::time::{Duration, Instant};

use redis::FromRedisValue;

use super::cluster::ClusterNodes;
use super::deployment::Backend;
use super::scripts::Invocation;
use super::shared::{Attempt, Backoff, Owner};
use super::single::SingleNode;
use super::wake::Wakeups;
use crate::LockError;

pub(crate) use super::shared::RECHECK;

/// The longest pause between tries of a give-back in the background.
const GIVE_BACK_RETRY_MAX: Duration = Duration::from_secs(1);

/// How long a give-back in the background is tried at most (and never
/// longer than the lease it would free).
pub(crate) const GIVE_BACK_FOR: Duration = Duration::from_secs(60);

/// Runs `give_back` (in the background: a token nobody waits for any more)
/// until it is done, fails for a reason other than Redis being out of
/// reach, or `until` has passed; then the lease or the wait it would have
/// ended ends it.
pub(crate) async fn give_back_until<F, Fut>(until: Instant, mut give_back: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), LockError>>,
{
    let mut retry = Backoff::new(GIVE_BACK_RETRY_MAX);
    loop {
        match give_back().await {
            Ok(()) => return,
            Err(e) if retryable(&e) && Instant::now() < until => {
                tokio::time::sleep(retry.next()).await;
            }
            Err(e) => {
                tracing::debug!(target: "lockattr", error = %e, "cannot give back an abandoned attempt; it expires with its lease or wait");
                return;
            }
        }
    }
}

/// A deployment whose locks queue their waiters (one server, or one master
/// per lock on a cluster).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Queued<'a> {
    /// One server.
    Single(&'a SingleNode),
    /// A cluster.
    Cluster(&'a ClusterNodes),
}

impl<'a> Queued<'a> {
    /// The deployment of `backend`, unless it is a Redlock.
    pub(crate) fn of(backend: &'a Backend) -> Option<Queued<'a>> {
        match backend {
            Backend::Single(node) => Some(Queued::Single(node)),
            Backend::Cluster(nodes) => Some(Queued::Cluster(nodes)),
            Backend::Redlock(_) => None,
        }
    }

    /// Tries once to take the lock for `token`. When the lock is held and
    /// `wait` is not zero, queues `token` for `wait` (see
    /// [`super::scripts::ACQUIRE`]); a zero `wait` leaves the queue.
    /// `queued`: an earlier attempt may have queued `token`.
    pub(crate) async fn attempt(
        self,
        owner: Owner<'_>,
        expire: Duration,
        waiting: (Duration, bool),
    ) -> Result<Attempt, LockError> {
        match self {
            Queued::Single(node) => node.attempt(owner, expire, waiting).await,
            Queued::Cluster(nodes) => nodes.attempt(owner, expire, waiting).await,
        }
    }

    /// Gives back whatever `token` holds: releases the lock if it owns it
    /// (handing it to the next waiter), or takes it out of the queue.
    pub(crate) async fn give_back(self, owner: Owner<'_>) -> Result<(), LockError> {
        match self {
            Queued::Single(node) => node.release(owner, 0, false).await.map(drop),
            Queued::Cluster(nodes) => nodes.release(owner, 0).await.map(drop),
        }
    }

    /// Runs an attempt (safe to repeat) of a read-write lock, a semaphore
    /// or a set; when its answer will not be read (it timed out, or the
    /// caller dropped this future), `give_back()` is sent on the same
    /// connection, so that it runs after the attempt.
    pub(crate) async fn run_or_give_back(
        self,
        invocation: &Invocation,
        give_back: &(dyn Fn() -> redis::Cmd + Sync),
    ) -> Result<Vec<i64>, LockError> {
        match self {
            Queued::Single(node) => node.run_script_or_give_back(invocation, give_back).await,
            Queued::Cluster(nodes) => nodes.run_script_or_give_back(invocation, give_back).await,
        }
    }

    /// Runs a script that is safe to repeat (a give-back).
    pub(crate) async fn run<T: FromRedisValue>(
        self,
        invocation: &Invocation,
    ) -> Result<T, LockError> {
        match self {
            Queued::Single(node) => node.run_script(invocation).await,
            Queued::Cluster(nodes) => nodes.run_script(invocation).await,
        }
    }

    /// Whether a grant counts only once replicas acknowledged it: then a
    /// hand-over heard on the lock's channel is confirmed by one more
    /// attempt (a write, and `WAIT`) before it counts.
    pub(crate) fn waits_for_replicas(self) -> bool {
        match self {
            Queued::Single(node) => node.replicas().wanted(),
            Queued::Cluster(nodes) => nodes.replicas().wanted(),
        }
    }

    /// The server (or the Cluster's nodes), for errors.
    pub(crate) fn server(self) -> &'a str {
        match self {
            Queued::Single(node) => node.server(),
            Queued::Cluster(nodes) => nodes.server(),
        }
    }

    /// Where waiters hear that a release handed them the lock.
    pub(crate) fn wakeups(self) -> &'a Wakeups {
        match self {
            Queued::Single(node) => node.wakeups(),
            Queued::Cluster(nodes) => nodes.wakeups(),
        }
    }
}

/// Refuses a kind that queues its waiters in Redis (`what`, and its
/// plural) on a Redlock, saying what a Redlock would have to do.
pub(crate) fn queued_only(
    backend: &Backend,
    (what, plural): (&'static str, &str),
    would_have_to: &str,
) -> Result<(), LockError> {
    match backend {
        Backend::Redlock(_) => Err(LockError::invalid(
            what,
            format!(
                "{plural} need one server or a Redis Cluster: a Redlock Locker would have to \
                 {would_have_to}, which is not supported; use a Locker on one server (or \
                 Sentinel) or a Cluster for {plural}"
            ),
        )),
        Backend::Single(_) | Backend::Cluster(_) => Ok(()),
    }
}

/// Redis reads at most ten words of a request from a client that has not
/// authenticated, and a semaphore's requests are longer (a key per
/// permit): a URL without the password is then answered with a protocol
/// error instead of NOAUTH. Says what it means.
pub(crate) fn unauthenticated(e: LockError) -> LockError {
    match e {
        LockError::Redis { server, source } if source.to_string().contains("unauthenticated") => {
            LockError::Redis {
                server,
                source: Box::new(NoAuth(source.to_string())),
            }
        }
        e => e,
    }
}

/// A semaphore or read-write lock request refused for want of
/// authentication.
#[derive(Debug)]
struct NoAuth(String);

impl std::fmt::Display for NoAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NOAUTH: the server requires authentication (it answered a semaphore or read-write \
             lock request sent before authenticating with `{}`); put the user and password in \
             the URL: redis://user:password@host:port/",
            self.0
        )
    }
}

impl std::error::Error for NoAuth {}

pub(crate) fn stopped_waiting() -> LockError {
    LockError::Runtime {
        reason: "the caller stopped waiting".into(),
    }
}

/// Errors worth trying again while the acquire time lasts: Redis could not
/// be reached or did not answer in time, said it cannot serve the request
/// yet (loading its data, a cluster reconfiguring), or too few replicas
/// acknowledged a grant (which is given back first).
pub(crate) fn retryable(e: &LockError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    match e {
        LockError::Connection { .. } => !e.is_tls_refusal(),
        LockError::Replicas { .. } => true,
        LockError::Redis { source, .. } => {
            source.downcast_ref::<redis::RedisError>().is_some_and(|e| {
                matches!(
                    e.kind(),
                    ErrorKind::Server(
                        ServerErrorKind::BusyLoading
                            | ServerErrorKind::TryAgain
                            | ServerErrorKind::ClusterDown
                            | ServerErrorKind::MasterDown
                    ) | ErrorKind::ClusterConnectionNotFound
                )
            })
        }
        _ => false,
    }
}

/// False only when the error shows the request never left (the connection
/// was refused); otherwise it may have run and must be given back.
pub(crate) fn may_have_run(e: &LockError) -> bool {
    let LockError::Connection { source, .. } = e else {
        return true;
    };
    !source
        .downcast_ref::<redis::RedisError>()
        .is_some_and(redis::RedisError::is_connection_refusal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_retried() {
        let refused =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let refused = LockError::from_redis("x", refused);
        assert!(retryable(&refused));
        assert!(!may_have_run(&refused));
        let reset = LockError::from_redis(
            "x",
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        );
        assert!(retryable(&reset) && may_have_run(&reset));
        assert!(!retryable(&LockError::NotConfigured));
        assert!(!retryable(&LockError::Timeout {
            name: "x".into(),
            waited: Duration::ZERO
        }));
    }
}
