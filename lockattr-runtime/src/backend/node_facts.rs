//! What a Redlock knows of each of its nodes: since when the node has kept
//! its data (so that a node restarted empty does not vote while leases it
//! forgot may still run), and which server it is (so that one server named
//! by two URLs never counts twice).
//!
//! Both are read on every new connection to the node, before the connection
//! is used, from two sources:
//!
//! - `INFO server`: `uptime_in_seconds` and `run_id`, when the server lets
//!   the Locker's user run INFO (it is in `@dangerous`: `+@all -@dangerous`
//!   refuses it, and so does a server that renamed it);
//! - the **marker**: one small key, `<prefix>node`, that the first Locker
//!   to find it missing writes with the server's own clock (`TIME`) and a
//!   random id, and that nobody deletes. A restart without persistence, a
//!   `FLUSHALL` or a `FLUSHDB` removes it with the locks, so its age (by the
//!   server's clock) says how long the node has kept its data. It has no
//!   TTL (nothing evicts it under `volatile-*` policies) and holds about 50
//!   bytes. When the Locker's database is not 0, the id is read from (or
//!   written to) the same key in database 0 as well, so two URLs that differ
//!   only in their database still name one server.
//!
//! A node's start is the later of the two: INFO sees a restart from an old
//! snapshot that kept an old marker, the marker sees a restart when INFO is
//! refused, and a flush. A node for which neither can be read has no known
//! start and no identity: it does not vote.
//!
//! What this cannot see: with INFO refused, a restart from a snapshot that
//! kept the marker (the node looks as old as the marker); and a flush, or
//! an eviction of the marker under an `allkeys-*` policy, while the
//! Locker's connection stays open (it is seen at the next connection).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::future::{join_all, join3};
use redis::RedisError;
use redis::aio::MultiplexedConnection;

use super::scripts;
use crate::sync::lock;

/// Reads the restart marker, writing it first when missing.
///
/// KEYS: the marker key. ARGV: a random id for a new marker, the
/// connection's database number. A marker is `<server time in µs>:<id>`;
/// a value that is not one (written by something else) is replaced, which
/// makes the node look just restarted: safe.
/// Returns `{age of the marker in ms by the server's clock (0 if the clock
/// went back), the server's id}`: the id of the marker in database 0 when
/// it can be reached (`SELECT` inside a script only affects the script), of
/// this database's marker otherwise.
const MARKER_LUA: &str = scripts::script!("marker.lua").text;

/// What the latest connections to a node told.
#[derive(Debug, Default, Clone)]
struct Known {
    /// When the node last started or lost its data, on this process's
    /// clock: never later than the truth. `None`: not known.
    started: Option<Instant>,
    /// Why `started` is not known, once a connection could not tell.
    unknown: Option<String>,
    /// INFO's `run_id`.
    run_id: Option<String>,
    /// The marker's id.
    marker_id: Option<String>,
}

/// The restart time and identity of one Redlock node.
#[derive(Debug)]
pub(crate) struct NodeFacts {
    marker_key: String,
    /// The database of the node's URL.
    db: i64,
    known: Mutex<Known>,
}

/// A node's identity, to compare with another node's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    run_id: Option<String>,
    marker_id: Option<String>,
}

impl Identity {
    /// Whether both name the same server: the same run id, or the same
    /// marker id.
    pub(crate) fn same_server(&self, other: &Identity) -> bool {
        let same = |a: &Option<String>, b: &Option<String>| a.is_some() && a == b;
        same(&self.run_id, &other.run_id) || same(&self.marker_id, &other.marker_id)
    }

    /// What told the two apart as one, for messages.
    pub(crate) fn how_same(&self, other: &Identity) -> &'static str {
        if self.run_id.is_some() && self.run_id == other.run_id {
            "the same INFO run_id"
        } else {
            "the same restart marker"
        }
    }
}

impl NodeFacts {
    /// The facts of a node whose URL names database `db`, for a Locker
    /// whose keys start with `prefix`.
    pub(crate) fn new(prefix: &str, db: i64) -> NodeFacts {
        NodeFacts {
            marker_key: marker_key(prefix),
            db,
            known: Mutex::default(),
        }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        lock(&self.known)
    }

    /// How long the node has kept its data, as of its latest connections;
    /// `Err` with the reason when that is not known.
    pub(crate) fn age(&self) -> Result<Duration, String> {
        let known = self.known();
        match (known.started, &known.unknown) {
            (Some(started), _) => Ok(started.elapsed()),
            (None, Some(why)) => Err(why.clone()),
            (None, None) => Err("no connection to it has been opened yet".into()),
        }
    }

    /// Which server the node is; `None` when no connection could tell.
    pub(crate) fn identity(&self) -> Option<Identity> {
        let known = self.known();
        (known.run_id.is_some() || known.marker_id.is_some()).then(|| Identity {
            run_id: known.run_id.clone(),
            marker_id: known.marker_id.clone(),
        })
    }

    /// Reads INFO and the marker on a new connection, and loads the scripts
    /// a Redlock uses and the Functions library (so that no lock request
    /// pays for a NOSCRIPT or a missing function round trip within its node
    /// timeout, whichever way the node takes scripts). All are sent at once:
    /// one round trip.
    ///
    /// `Err` when the connection failed meanwhile (then it is not used). A
    /// refusal (an ACL, a renamed command) is not an error: it is recorded,
    /// and the node does not vote while its start is not known.
    pub(crate) async fn observe(
        &self,
        server: &str,
        connection: &mut MultiplexedConnection,
    ) -> Result<(), RedisError> {
        // The owner-token generator's 128 random bits. Without randomness
        // the marker is written without an id: this node then has no marker
        // identity (never a false duplicate of another node).
        let id = crate::layout::new_token().unwrap_or_default();
        let (mut c1, mut c2) = (connection.clone(), connection.clone());
        let info = async move {
            redis::cmd("INFO")
                .arg("server")
                .query_async::<String>(&mut c1)
                .await
        };
        // EVAL with the source: no NOSCRIPT round trip on a new connection.
        let marker = async move {
            redis::cmd("EVAL")
                .arg(MARKER_LUA)
                .arg(1)
                .arg(&self.marker_key)
                .arg(&id)
                .arg(self.db)
                .query_async::<(u64, String)>(&mut c2)
                .await
        };
        let load = join_all(
            [
                &scripts::ACQUIRE,
                &scripts::RELEASE,
                &scripts::RAISE_FENCE,
                &scripts::EXTEND,
                &scripts::RENEW,
            ]
            .map(|script| {
                let mut connection = connection.clone();
                async move { script.load_async(&mut connection).await }
            }),
        );
        let mut c3 = connection.clone();
        let library = async move { scripts::load_library(&mut c3).await };
        let (info, marker, (loaded, library)) =
            join3(info, marker, futures_util::future::join(load, library)).await;
        // A refused SCRIPT LOAD leaves EVALSHA to load on NOSCRIPT, and a
        // refused FUNCTION LOAD leaves the first FCALL to find that the
        // node takes EVALSHA.
        if let Some(e) = loaded.into_iter().filter_map(Result::err).find(transport) {
            return Err(e);
        }
        if let Err(Some(e)) = library {
            return Err(e);
        }
        let now = Instant::now();
        let mut reasons = Vec::new();
        let mut starts = Vec::new();
        let mut seen = Known::default();
        match info {
            Ok(info) => {
                let field = |name: &str| {
                    info.lines()
                        .find_map(|line| line.strip_prefix(name))
                        .map(str::trim)
                };
                match field("uptime_in_seconds:").and_then(|s| s.parse::<u64>().ok()) {
                    // Redis counts whole seconds of its clock since start,
                    // so `secs` may be up to a second more than the time
                    // up: one second less is a safe lower bound.
                    Some(secs) => starts.push(
                        now.checked_sub(Duration::from_secs(secs.saturating_sub(1)))
                            .unwrap_or(now),
                    ),
                    None => reasons.push("INFO server has no uptime_in_seconds".to_owned()),
                }
                seen.run_id = field("run_id:")
                    .filter(|id| !id.is_empty())
                    .map(str::to_owned);
            }
            Err(e) if transport(&e) => return Err(e),
            Err(e) => reasons.push(format!("INFO server is refused ({})", short(&e))),
        }
        match marker {
            Ok((age_ms, id)) => {
                starts.push(
                    now.checked_sub(Duration::from_millis(age_ms))
                        .unwrap_or(now),
                );
                seen.marker_id = Some(id).filter(|id| !id.is_empty());
            }
            Err(e) if transport(&e) => return Err(e),
            Err(e) => reasons.push(format!(
                "the marker key `{}` cannot be read and written with EVAL ({})",
                self.marker_key,
                short(&e)
            )),
        }
        seen.started = starts.into_iter().max();
        if seen.started.is_none() {
            let why = reasons.join("; ");
            tracing::warn!(target: "lockattr",
                server,
                reason = %why,
                "cannot tell when a Redlock node last restarted: it does not vote"
            );
            seen.unknown = Some(why);
        }
        let mut known = self.known();
        // Connections of several runtimes: the latest start wins, and a
        // connection that cannot tell makes the start unknown.
        if let (Some(before), Some(now)) = (known.started, seen.started) {
            seen.started = Some(before.max(now));
        }
        *known = seen;
        Ok(())
    }
}

/// The marker key of a Locker whose keys start with `prefix`.
pub(crate) fn marker_key(prefix: &str) -> String {
    format!("{prefix}node")
}

/// A failure of the connection, as opposed to a refusal by the server.
fn transport(e: &RedisError) -> bool {
    e.is_connection_dropped() || e.is_io_error() || e.is_timeout() || e.is_unrecoverable_error()
}

/// A server's refusal, without anything that could hold a secret.
fn short(e: &RedisError) -> String {
    e.code().unwrap_or("error").to_owned()
}
