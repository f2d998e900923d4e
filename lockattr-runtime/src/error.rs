//! The one error type of the crate.

use std::time::{Duration, SystemTime};

/// Why a lock operation failed.
///
/// Every variant's message says what happened and what to do about it. No
/// message and no `Debug` output ever contains a password from a Redis URL:
/// servers are named by `host:port/db` only.
///
/// ```
/// # use lockattr_runtime as lockattr; // the doctest builds without the facade
/// use lockattr::LockError;
/// use std::time::Duration;
///
/// let err = LockError::Timeout { name: "order:7".into(), waited: Duration::from_secs(5) };
/// assert!(err.to_string().contains("order:7"));
/// assert!(err.is_timeout());
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock is held by someone else and was not freed within the
    /// acquire time. The body did not run.
    #[error("{}", timeout_message(name, waited))]
    Timeout {
        /// The lock's name (not the Redis key).
        name: String,
        /// How long the caller waited: the configured acquire time.
        waited: Duration,
    },

    /// The guard no longer owns the lock: its lease expired, or another owner
    /// has taken it since. Nothing was deleted or extended.
    #[error(
        "lock `{}` is no longer owned by this guard (its lease expired or another owner took it); \
         nothing was changed. Use a longer `expire` or extend the lock while working",
        Shown(name)
    )]
    NotOwned {
        /// The lock's name (not the Redis key).
        name: String,
    },

    /// The guard held the lock, then lost it while the work was running:
    /// its lease ran out, renewals could not reach Redis, or Redis found the
    /// lock deleted or taken. Unlike [`Timeout`](Self::Timeout), the body
    /// ran (at least partly) and another owner may have run at the same time.
    ///
    /// An annotated function returns it when its lock was lost before its
    /// body ended (unless it says `on_lost = "ignore"`); `ran_on` then says
    /// how long the body went on without the lock.
    ///
    /// ```
    /// # use lockattr_runtime::{LockError, LostReason};
    /// # use std::time::Duration;
    /// let err = LockError::Lost {
    ///     name: "order:7".into(),
    ///     reason: LostReason::Expired,
    ///     lost_after: Some(Duration::from_secs(5)),
    ///     ran_on: Some(Duration::from_secs(10)),
    /// };
    /// let message = err.to_string();
    /// assert!(message.contains("lost 5s after it was taken"), "{message}");
    /// assert!(message.contains("ran on for 10s without it"), "{message}");
    /// ```
    #[error(
        "lock `{}` was lost while held{}: {reason}.{} Another owner may have run at the same time; \
         make writes conditional on the fencing token",
        Shown(name),
        lost_after.map(|d| format!(" (lost {d:?} after it was taken)")).unwrap_or_default(),
        ran_on.map(ran_on_message).unwrap_or_default()
    )]
    Lost {
        /// The lock's name (not the Redis key).
        name: String,
        /// How the loss was found.
        reason: LostReason,
        /// How long after the lock was taken it counts as lost, in whole
        /// milliseconds: when the lease it could vouch for ended, when
        /// Redis said the lock was not its own, or, for a loss first found
        /// by the release after an annotated function's body, that release
        /// (the lock was lost at some time before). `None` when not known.
        lost_after: Option<Duration>,
        /// For an annotated function whose body ran to its end: how long
        /// the body ran on after `lost_after`, in whole milliseconds; zero
        /// when the loss was first found by the release after the body.
        /// `None` otherwise (a body stopped by `on_lost = "abort"`, a guard
        /// used by hand).
        ran_on: Option<Duration>,
    },

    /// Redis could not be reached, or did not answer in time. The message
    /// suggests raising the Locker's timeouts only when one ran out.
    #[error("{}", connection_message(server, source.as_ref()))]
    Connection {
        /// The server, as `host:port/db` (never with credentials).
        server: String,
        /// The underlying failure.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },

    /// Redis answered with an error (wrong password, wrong type at the key,
    /// scripting disabled, read-only replica, ...).
    #[error("Redis at {server} refused the request: {source}")]
    Redis {
        /// The server, as `host:port/db` (never with credentials).
        server: String,
        /// The error Redis returned.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },

    /// A Locker over several Redis nodes (Redlock) could not get answers
    /// from a majority of them, or a majority of those that answered had
    /// restarted too recently to vote (see
    /// [`delay_restarted_nodes`](crate::LockerBuilder::delay_restarted_nodes)).
    /// Nothing is held.
    #[error(
        "lock `{}`: no majority of the Redis nodes could vote ({needed} of {nodes} needed): {detail}",
        Shown(name)
    )]
    NoQuorum {
        /// The lock's name (not the Redis key).
        name: String,
        /// How many nodes must agree: a majority.
        needed: usize,
        /// How many nodes the Locker has.
        nodes: usize,
        /// What the nodes said: how many answered, the first failure.
        detail: String,
    },

    /// No Locker was given and no process-wide default is set.
    #[error(
        "no Redis locker is configured: call `lockattr::init(\"redis://host:6379/\")` once at start-up, \
         or `lockattr::set_default(locker)`, or pass `locker = ...` to #[redis_lock]"
    )]
    NotConfigured,

    /// A process-wide default Locker was already set.
    #[error("a default Redis locker is already set; `init`/`set_default` may be called only once")]
    AlreadyConfigured,

    /// An argument or setting was refused; the message says which and why.
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// What was refused: `lock name`, `expire`, `Redis URL`, ...
        what: &'static str,
        /// Why it was refused and what would be accepted.
        reason: String,
    },

    /// Redis answered with a reply of a shape this version does not expect:
    /// another version's script loaded under the same name, or something
    /// between the client and Redis that rewrites replies.
    ///
    /// ```
    /// # use lockattr_runtime::LockError;
    /// let err = LockError::UnexpectedReply {
    ///     server: "127.0.0.1:6379/0".into(),
    ///     reply: "an attempt of order:1 with [1]".into(),
    /// };
    /// assert!(err.to_string().contains("127.0.0.1:6379/0"));
    /// ```
    #[error(
        "Redis at {server} answered {reply}, which this version of lockattr does not expect; \
         check that every client of these locks runs the same lockattr version and that \
         nothing between them and Redis rewrites replies"
    )]
    UnexpectedReply {
        /// The server that answered (`host:port/db`, or a Cluster's nodes),
        /// never with a password.
        server: String,
        /// What was asked, and what came back.
        reply: String,
    },

    /// The library's I/O thread could not be started or has stopped.
    #[error("the lockattr I/O thread is unavailable: {reason}")]
    Runtime {
        /// What went wrong.
        reason: String,
    },

    /// Fewer replicas than [`min_replicas`](crate::LockerBuilder::min_replicas)
    /// acknowledged a grant (an acquisition, a hand-over, an extension) within
    /// the [`replica_timeout`](crate::LockerBuilder::replica_timeout). An
    /// acquisition that gets this is given back and tried again while its
    /// acquire time lasts; this is the last try's outcome. The grant the
    /// master made is given back before this error is returned, so a
    /// process that exits right after it leaves nothing held; when that
    /// give-back could not be confirmed, `held_until` says until when the
    /// grant may stay held on the master (its lease's end), and the
    /// give-back goes on in the background.
    ///
    /// An acquisition that got a grant the replicas did not acknowledge,
    /// and finds the name held when its acquire time ends (another
    /// contender's grant), also fails with this error, not with
    /// [`Timeout`](Self::Timeout): what refused it was the replicas. So
    /// does one refused while the replicas did not acknowledge the writes
    /// before its answer (the name held by a grant they did not
    /// acknowledge either).
    ///
    /// ```
    /// # use lockattr_runtime::LockError;
    /// # use std::time::Duration;
    /// let err = LockError::Replicas {
    ///     server: "10.0.0.1:6379/0".into(),
    ///     acknowledged: 0,
    ///     wanted: 1,
    ///     waited: Duration::from_millis(100),
    ///     held_until: None,
    /// };
    /// assert!(err.is_replicas());
    /// assert!(err.to_string().contains("0 of the 1 replica"));
    /// assert!(err.to_string().contains("given back"));
    /// ```
    #[error(
        "{acknowledged} of the {wanted} replica(s) that `min_replicas` asks for acknowledged the \
         grant on {server} within {waited:?}; {}. Check that the master has at least \
         {wanted} replica(s) connected and in sync (`ROLE` or `INFO replication` on the master), \
         or raise `replica_timeout` above their lag",
        replicas_held(held_until)
    )]
    Replicas {
        /// The master, as `host:port/db`; on a Redis Cluster, the cluster
        /// as its seeds name it (the master is the one serving the lock's
        /// slot). Never with credentials.
        server: String,
        /// How many replicas acknowledged the grant in time.
        acknowledged: u32,
        /// How many the Locker asks for (`min_replicas`).
        wanted: u32,
        /// How long the master waited for them (`replica_timeout`).
        waited: Duration,
        /// `None`: nothing of the grant is held (it was given back before
        /// this error was returned, or it was not counted). Otherwise the
        /// give-back could not be confirmed in time (the master did not
        /// answer it): the grant may stay held on the master until then,
        /// when its lease ends, unless the give-back that goes on in the
        /// background frees it first.
        held_until: Option<SystemTime>,
    },

    /// A semaphore was asked for with another number of permits than the
    /// one it is in use with (see [`Locker::semaphore`](crate::Locker::semaphore)).
    /// Nothing was taken, and the caller did not wait.
    ///
    /// A semaphore is in use with a number while any of its permits is
    /// held (every held permit records the number it was taken with, kept
    /// through renewal, `extend` and hand-overs to waiters), while callers
    /// wait for a permit, and for a short while after the last permit was
    /// taken (a record of the number expires the longer of that permit's
    /// lease plus the Locker's `fence_retention`, and that caller's wait,
    /// after it was taken). A caller asking for fewer permits than the
    /// semaphore has is refused as well when the only permits held are
    /// beyond its number.
    ///
    /// ```
    /// # use lockattr_runtime::LockError;
    /// let err = LockError::PermitsMismatch { name: "gpu".into(), permits: 4, recorded: 3 };
    /// assert!(err.to_string().contains("3 permits"));
    /// let unknown = LockError::PermitsMismatch { name: "gpu".into(), permits: 2, recorded: -1 };
    /// assert!(unknown.to_string().contains("another number of permits"));
    /// ```
    #[error(
        "semaphore `{}` is in use with {}, and this caller asked for {permits}; give every caller \
         of one name the same `permits`, or use another name for the new count (the number holds \
         while any permit is held or waited for, and a lease plus `fence_retention` after the last \
         permit was taken)",
        Shown(name),
        if *recorded > 0 {
            format!("{recorded} permits")
        } else {
            "another number of permits".to_owned()
        }
    )]
    PermitsMismatch {
        /// The semaphore's name (not the Redis key).
        name: String,
        /// The number of permits this caller asked for.
        permits: u32,
        /// The number the semaphore is in use with, as a held permit or
        /// the record in Redis says; -1 when that is not known (a permit
        /// beyond this caller's number held by an older version of
        /// lockattr, or a record that is not a number).
        recorded: i64,
    },
}

impl LockError {
    /// True for [`LockError::Timeout`]: the lock was busy for the whole acquire time.
    ///
    /// ```
    /// # use lockattr_runtime::LockError;
    /// assert!(!LockError::NotConfigured.is_timeout());
    /// ```
    pub fn is_timeout(&self) -> bool {
        matches!(self, LockError::Timeout { .. })
    }

    /// True for [`LockError::NotOwned`]: the guard had lost the lock.
    ///
    /// ```
    /// # use lockattr_runtime::LockError;
    /// assert!(LockError::NotOwned { name: "x".into() }.is_not_owned());
    /// ```
    pub fn is_not_owned(&self) -> bool {
        matches!(self, LockError::NotOwned { .. })
    }

    /// True for [`LockError::Lost`]: the lock was held, then lost mid-work.
    ///
    /// ```
    /// # use lockattr_runtime::{LockError, LostReason};
    /// let err = LockError::Lost {
    ///     name: "x".into(), reason: LostReason::Taken, lost_after: None, ran_on: None,
    /// };
    /// assert!(err.is_lost() && !err.is_timeout());
    /// ```
    pub fn is_lost(&self) -> bool {
        matches!(self, LockError::Lost { .. })
    }

    /// True for [`LockError::Connection`] (Redis was down, unreachable or
    /// too slow) and for [`LockError::NoQuorum`] (too many of a Redlock's
    /// nodes were).
    ///
    /// ```
    /// # use lockattr_runtime::LockError;
    /// assert!(!LockError::NotConfigured.is_connection());
    /// ```
    pub fn is_connection(&self) -> bool {
        matches!(
            self,
            LockError::Connection { .. } | LockError::NoQuorum { .. }
        )
    }

    /// True for [`LockError::NoQuorum`]: a Redlock could not reach a
    /// majority of its nodes.
    ///
    /// ```
    /// # use lockattr_runtime::LockError;
    /// let err = LockError::NoQuorum {
    ///     name: "x".into(), needed: 3, nodes: 5, detail: "2 answered".into(),
    /// };
    /// assert!(err.is_no_quorum() && err.is_connection());
    /// assert!(err.to_string().contains("3 of 5"));
    /// ```
    pub fn is_no_quorum(&self) -> bool {
        matches!(self, LockError::NoQuorum { .. })
    }

    /// True for [`LockError::Replicas`]: too few replicas acknowledged a
    /// grant in time.
    ///
    /// ```
    /// # use lockattr_runtime::LockError;
    /// assert!(!LockError::NotConfigured.is_replicas());
    /// ```
    pub fn is_replicas(&self) -> bool {
        matches!(self, LockError::Replicas { .. })
    }

    /// A TLS handshake refused on a certificate (see [`TlsRefused`]).
    pub(crate) fn is_tls_refusal(&self) -> bool {
        matches!(self, LockError::Connection { source, .. } if source.is::<TlsRefused>())
    }

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        LockError::InvalidInput {
            what,
            reason: reason.into(),
        }
    }

    /// Classifies an error of the redis crate.
    /// From a failure to open a connection; `tls`: to a TLS address.
    pub(crate) fn from_connect(server: &str, err: redis::RedisError, tls: bool) -> Self {
        if tls && handshake_failed(&err) {
            return LockError::Connection {
                server: server.to_owned(),
                source: Box::new(TlsRefused(err)),
            };
        }
        LockError::from_redis(server, err)
    }

    pub(crate) fn from_redis(server: &str, err: redis::RedisError) -> Self {
        let server = server.to_owned();
        // Only failures to talk to the server; an answer such as a wrong
        // password is the server's word, not a connection problem.
        if err.is_io_error()
            || err.is_timeout()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
            || switching_master(&err)
        {
            LockError::Connection {
                server,
                source: Box::new(err),
            }
        } else {
            LockError::Redis {
                server,
                source: Box::new(err),
            }
        }
    }
}

/// A TLS handshake that failed on a certificate (the server's, untrusted
/// or for another name; or ours, refused): trying again does not help.
#[derive(Debug, thiserror::Error)]
#[error(
    "the TLS handshake failed: {0}. Check the CA (`tls_root_ca`), that the host name in the URL \
     is one the server's certificate names, and the client certificate (`tls_client_auth`)"
)]
pub(crate) struct TlsRefused(redis::RedisError);

/// Whether a failure to open a TLS connection is the TLS handshake's (a
/// certificate refused by either side), not the network's: an error of the
/// TLS library (rustls, native-tls), or one it reported through an I/O
/// error (rustls as `InvalidData`, OpenSSL as `Other`, both carrying their
/// own error; a network fault is the system's error, carrying none).
fn handshake_failed(err: &redis::RedisError) -> bool {
    use std::error::Error;
    use std::sync::Arc;
    let Some(inner) = err
        .source()
        .and_then(|s| s.downcast_ref::<Arc<dyn Error + Send + Sync>>())
    else {
        return false;
    };
    let inner: &(dyn Error + Send + Sync + 'static) = &**inner;
    #[cfg(feature = "tls-rustls")]
    if inner.is::<rustls::Error>() {
        return true;
    }
    #[cfg(feature = "tls-native-tls")]
    if inner.is::<native_tls::Error>() {
        return true;
    }
    inner.downcast_ref::<std::io::Error>().is_some_and(|io| {
        matches!(
            io.kind(),
            std::io::ErrorKind::InvalidData | std::io::ErrorKind::Other
        ) && io.get_ref().is_some()
    })
}

/// A Sentinel group between masters: the old one answers as a replica, or
/// no sentinel names a healthy master yet. Passes when the failover ends.
fn switching_master(err: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    matches!(
        err.kind(),
        ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
            | ErrorKind::MasterNameNotFoundBySentinel
    ) || err.code() == Some("READONLY")
        // A `WAIT` sent to a master that a failover demoted.
        || err.detail().is_some_and(|d| d.contains(WAIT_ON_A_REPLICA))
}

/// What a replica answers to `WAIT` (a group commit's, which writes nothing
/// a replica refuses before it).
pub(crate) const WAIT_ON_A_REPLICA: &str = "cannot be used with replica instances";

/// The message of [`LockError::Connection`]: the advice fits the cause.
fn connection_message(
    server: &str,
    source: &(dyn std::error::Error + Send + Sync + 'static),
) -> String {
    let timed_out = source
        .downcast_ref::<redis::RedisError>()
        .is_some_and(redis::RedisError::is_timeout)
        || source
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::TimedOut)
        || source.to_string().contains("no answer within");
    let advice = if timed_out {
        "check that the server is up and reachable, or raise the connect/response timeouts \
         of the Locker"
    } else if source.is::<TlsRefused>() {
        // Its own message says what to check.
        return format!("could not reach Redis at {server}: {source}");
    } else {
        "check that the server is up and listens at that address, and that it is reachable \
         from here"
    };
    format!("could not reach Redis at {server}: {source}; {advice}")
}

/// What [`LockError::Lost`] says about a body that ran on without its lock.
fn ran_on_message(ran_on: Duration) -> String {
    if ran_on.is_zero() {
        " The body ran to its end without knowing; its result was not returned.".to_owned()
    } else {
        format!(
            " The body ran on for {ran_on:?} without it, to its end; its result was not returned."
        )
    }
}

fn timeout_message(name: &str, waited: &Duration) -> String {
    if waited.is_zero() {
        format!(
            "lock `{}` is held by another owner (one attempt was made: the acquire time is zero); \
             retry later or allow some `acquire_time`",
            Shown(name)
        )
    } else {
        format!(
            "lock `{}` is held by another owner and was not freed within {waited:?}; \
             retry later or raise `acquire_time`",
            Shown(name)
        )
    }
}

/// What a [`LockError::Replicas`] says is left of its grant on the master.
fn replicas_held(held_until: &Option<SystemTime>) -> String {
    let Some(until) = held_until else {
        return "the grant was given back: nothing is held".to_owned();
    };
    let left = until.duration_since(SystemTime::now()).unwrap_or_default();
    let at = until
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "the grant could not be given back (the master did not answer in time) and may stay \
         held on the master until {}.{:03} s after the Unix epoch (about {left:.1?} after this \
         message was made), when its lease ends; it is given back in the background meanwhile",
        at.as_secs(),
        at.subsec_millis()
    )
}

/// Displays a lock name, cut to a readable length (names may be kilobytes long).
struct Shown<'a>(&'a str);

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        const MAX: usize = 120;
        if self.0.len() <= MAX {
            return f.write_str(&self.0.escape_debug().to_string());
        }
        let mut end = MAX;
        while !self.0.is_char_boundary(end) {
            end -= 1;
        }
        write!(
            f,
            "{}... ({} bytes)",
            self.0[..end].escape_debug(),
            self.0.len()
        )
    }
}

/// Why a guard lost its lock; carried by [`LockError::Lost`](crate::LockError::Lost).
///
/// ```
/// # use lockattr_runtime as lockattr; // the doctest builds without the facade
/// use lockattr::LostReason;
/// assert!(LostReason::Expired.to_string().contains("lease"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The lease ran out: the lock was neither released nor extended in
    /// time, and renewal was off.
    Expired,
    /// Renewal was on, but no renewal reached Redis for a whole lease (Redis
    /// down, unreachable or frozen), so the lease may have run out.
    Unrenewed,
    /// Redis found the lock deleted, or held under another owner's token.
    Taken,
    /// Renewal stopped because its cap ([`renew_for`](crate::LockBuilder::renew_for))
    /// had passed since the lock was taken, and the lease then ran out.
    RenewFor,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostReason::Expired => {
                "its lease ran out before the work was done; raise `expire`, extend the lock, \
                 or turn on `renew`"
            }
            LostReason::Unrenewed => {
                "no renewal reached Redis for a whole lease, so the lease may have run out; \
                 check that Redis is up and reachable"
            }
            LostReason::Taken => {
                "Redis found the lock deleted or held by another owner (deleted from outside, \
                 expired after a pause, or lost with a Redis restart)"
            }
            LostReason::RenewFor => {
                "renewal stopped when its `renew_for` cap had passed since the lock was taken, \
                 and the lease then ran out; raise `renew_for` if the work may take that long"
            }
        })
    }
}

impl LostReason {
    /// A short name, for the `reason` of the loss event and metric.
    pub(crate) fn code(self) -> &'static str {
        match self {
            LostReason::Expired => "expired",
            LostReason::Unrenewed => "unrenewed",
            LostReason::Taken => "taken",
            LostReason::RenewFor => "renew_for",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut_in_messages() {
        let err = LockError::NotOwned {
            name: "x".repeat(10_000),
        };
        let msg = err.to_string();
        assert!(msg.len() < 400, "{msg}");
        assert!(msg.contains("10000 bytes"));
    }

    #[test]
    fn control_characters_are_escaped() {
        let err = LockError::NotOwned {
            name: "a\nb".into(),
        };
        assert!(err.to_string().contains("a\\nb"));
    }

    #[test]
    fn a_replicas_error_says_whether_its_grant_may_still_be_held() {
        let err = |held_until| LockError::Replicas {
            server: "m:6379/0".into(),
            acknowledged: 0,
            wanted: 1,
            waited: Duration::from_millis(100),
            held_until,
        };
        let given_back = err(None).to_string();
        assert!(
            given_back.contains("given back: nothing is held"),
            "{given_back}"
        );
        let until = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_250);
        let held = err(Some(until)).to_string();
        assert!(held.contains("could not be given back"), "{held}");
        assert!(held.contains("until 1700000000.250 s"), "{held}");
        assert!(!held.contains("nothing is held"), "{held}");
    }
}
