//! What an operator asks of Redis: who holds a lock ([`scripts::INSPECT`])
//! or a read-write lock ([`RW_INSPECT`]), which are held (`SCAN`, never
//! `KEYS`), and a forced unlock ([`scripts::FORCE_UNLOCK`], [`RW_FORCE_UNLOCK`]
//! for a writer), on every kind of backend.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use redis::{FromRedisValue, Value};

use super::cluster::ClusterNodes;
use super::deployment::Backend;
use super::redlock::Redlock;
use super::scripts::{self, Invocation, Lua, script};
use super::shared::{Forced, OrNone};
use super::single::SingleNode;
use crate::LockError;
use crate::layout::{Keys, KindKeys};

/// One server's view of one held lock.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// `<host>\n<pid>\n<label>\n<since ms>`, then `\n<fencing token>`
    /// (empty: not recorded).
    pub(crate) who: String,
    /// Time left of the lease.
    pub(crate) ttl: Duration,
    /// The holder's fencing token, as its own value carries it (`None`:
    /// written by an older version, which did not store it).
    pub(crate) fence: Option<u64>,
    /// Callers waiting for it (their deadline not passed).
    pub(crate) waiters: usize,
    /// A hash of the owner token: tells owners apart, reveals nothing.
    pub(crate) owner: String,
}

impl FromRedisValue for Seen {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let (who, ttl, fence, waiters, owner): (String, i64, String, i64, String) =
            FromRedisValue::from_redis_value(v)?;
        Ok(Seen::new((who, ttl, fence, owner), waiters))
    }
}

impl Seen {
    /// One hold of a read-write lock as [`RW_INSPECT`] tells it: `{<holder>,
    /// pttl, fencing token or -1, sha1 of the owner token}`.
    fn hold(v: Value) -> Result<Seen, redis::ParsingError> {
        Ok(Seen::new(FromRedisValue::from_redis_value(v)?, 0))
    }

    /// From a script's `who, pttl, fencing token or -1, owner`, and the
    /// waiters.
    fn new((who, ttl, fence, owner): (String, i64, String, String), waiters: i64) -> Seen {
        Seen {
            who,
            ttl: Duration::from_millis(u64::try_from(ttl).unwrap_or(0)),
            fence: fence.parse::<u64>().ok(),
            waiters: usize::try_from(waiters).unwrap_or(0),
            owner,
        }
    }
}

/// What an operator reads of a read-write lock, a server's view (its
/// [`Seen`]s carry no waiters: the lock's are `waiters`).
#[derive(Debug, Clone)]
pub(crate) struct RwSeen {
    /// The writer, when one holds.
    pub(crate) writer: Option<Seen>,
    /// Callers queued for either side.
    pub(crate) waiters: usize,
    /// The readers (at most 1000).
    pub(crate) readers: Vec<Seen>,
}

impl FromRedisValue for RwSeen {
    fn from_redis_value(v: Value) -> Result<Self, redis::ParsingError> {
        let (writer, waiters, readers): (Value, i64, Vec<Value>) =
            FromRedisValue::from_redis_value(v)?;
        Ok(RwSeen {
            writer: match writer {
                Value::Int(0) => None,
                v => Some(Seen::hold(v)?),
            },
            waiters: usize::try_from(waiters).unwrap_or(0),
            readers: readers
                .into_iter()
                .map(Seen::hold)
                .collect::<Result<_, _>>()?,
        })
    }
}

/// What a read-write lock shows on one server, read only: its writer, its
/// waiters, its readers (at most 1000).
///
/// KEYS: write, readers, fence, queue, waiters (as the read-write lock's
/// other scripts). Returns 0 when neither a writer nor a reader holds it,
/// else `{writer or 0, waiters queued, {reader...}}`, each hold as
/// `{<holder>\n<since>\n<fencing token>, pttl, the fencing token its value
/// carries or -1, sha1 of the owner token}`. A free read-write lock costs
/// `GET` and `PTTL` alone (an operator's user needs no more for a name that
/// is not a read-write lock); its readers are read with `ZRANGE` (and
/// `SMEMBERS` while an older version's set of readers exists), as the
/// read-write lock's own scripts read them.
pub(crate) static RW_INSPECT: Lua = Lua::new(script!("rw_inspect.lua"));

/// Frees a read-write lock's writer whoever it is (an operator's forced
/// unlock), as its release (`scripts::RW_RELEASE`) would: the fence counter
/// expires after the retention, and the waiters that may take the lock now
/// are admitted and named on its channel. Readers are never freed.
///
/// KEYS: write, readers, fence, queue, waiters. ARGV: how long the fence
/// counter outlives a lease in ms, the fencing token the writer must have
/// (0: any writer), as its own value carries it. Returns 0 when no writer
/// holds (or one under another token), or `{1, <holder>\n<since>...}` of
/// the writer it was taken from.
pub(crate) static RW_FORCE_UNLOCK: Lua = Lua::new(script!("rw_force_unlock.lua"));

/// The keys of [`RW_INSPECT`] and [`RW_FORCE_UNLOCK`], from the keys
/// [`Keys::read_write`] made.
fn rw_call(script: &'static Lua, keys: &Keys) -> Invocation {
    match &keys.kind {
        KindKeys::Rw(rw) => script.with_keys(rw.keys(keys)),
        KindKeys::Lock | KindKeys::Permit(_) => {
            script.with_keys([keys.fence.as_str(), &keys.queue, &keys.waiters])
        }
    }
}

fn inspect_call(keys: &Keys) -> Invocation {
    scripts::INSPECT.with_keys([keys.lock.as_str(), &keys.fence, &keys.waiters])
}

fn force_call(keys: &Keys, notify: bool, expected: u64) -> Invocation {
    let mut invocation = scripts::FORCE_UNLOCK.with_keys(keys.queued());
    invocation
        .arg(&keys.channel)
        .arg(if notify { "1" } else { "0" })
        .arg(u64::try_from(keys.fence_retention.as_millis()).unwrap_or(u64::MAX))
        .arg(expected);
    invocation
}

/// What a scan keeps of a key (a name...), `None` to skip it.
pub(crate) type Keep<'a, T> = dyn Fn(&str) -> Option<T> + Send + Sync + 'a;

/// What a scan found: what `keep` made of the keys, and the keys it would
/// have kept but could not read (a name that is not UTF-8: lockattr never
/// writes one), each once.
pub(crate) struct Scanned<T> {
    /// What `keep` made of the keys.
    pub(crate) found: BTreeSet<T>,
    /// The keys skipped.
    pub(crate) unreadable: BTreeSet<Vec<u8>>,
}

/// `SCAN` with `MATCH pattern` until done or `limit` keys, on one server;
/// the keys that are lock keys (not the fence, queue... of a lock).
async fn scan_one<T: Ord + Send>(
    node: &SingleNode,
    (pattern, keep): (&str, &Keep<'_, T>),
    limit: usize,
    out: &mut Scanned<T>,
) -> Result<(), LockError> {
    let mut cursor: u64 = 0;
    loop {
        let mut command = redis::cmd("SCAN");
        command
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000);
        let (next, keys): (u64, Vec<Vec<u8>>) = node.run_command(&command).await?;
        for key in keys {
            let key = match String::from_utf8(key) {
                Ok(key) => key,
                Err(e) => {
                    // Counted when it would be kept, read as best it can be.
                    let key = e.into_bytes();
                    if keep(&String::from_utf8_lossy(&key)).is_some() {
                        out.unreadable.insert(key);
                    }
                    continue;
                }
            };
            let Some(item) = keep(&key) else { continue };
            if out.found.len() >= limit && !out.found.contains(&item) {
                return Ok(());
            }
            out.found.insert(item);
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
}

impl Backend {
    /// The lock's holder as the backend sees it; `None` when it is free.
    pub(crate) async fn inspect(&self, keys: &Keys) -> Result<Option<Seen>, LockError> {
        let call = inspect_call(keys);
        match self {
            Backend::Single(node) => Ok(node.run_script::<OrNone<Seen>>(&call).await?.0),
            Backend::Cluster(nodes) => Ok(nodes.run_script::<OrNone<Seen>>(&call).await?.0),
            Backend::Redlock(nodes) => nodes.inspect(&call).await,
        }
    }

    /// Frees the lock whoever holds it (with the fencing token `expected`,
    /// unless 0); the holder it was taken from
    /// (`<host>\n<pid>\n<label>\n<since>`), `None` when it was free. Not
    /// sent twice: a second run would free the next holder's lock.
    pub(crate) async fn force_unlock(
        &self,
        keys: &Keys,
        expected: u64,
    ) -> Result<Option<String>, LockError> {
        let call = force_call(keys, matches!(self, Backend::Redlock(_)), expected);
        match self {
            Backend::Single(node) => Ok(node.run_once::<Forced>(&call).await?.0),
            Backend::Cluster(nodes) => Ok(nodes.run_script::<Forced>(&call).await?.0),
            Backend::Redlock(nodes) => nodes.force_unlock(&call).await,
        }
    }

    /// The read-write lock at `keys` (made by [`Keys::read_write`]): its
    /// writer and readers; `None` when nobody holds it, and always on a
    /// Redlock (which has no read-write locks).
    pub(crate) async fn inspect_rw(&self, keys: &Keys) -> Result<Option<RwSeen>, LockError> {
        let call = rw_call(&RW_INSPECT, keys);
        match self {
            Backend::Single(node) => Ok(node.run_script::<OrNone<RwSeen>>(&call).await?.0),
            Backend::Cluster(nodes) => Ok(nodes.run_script::<OrNone<RwSeen>>(&call).await?.0),
            Backend::Redlock(_) => Ok(None),
        }
    }

    /// Frees the writer of the read-write lock at `keys` (made by
    /// [`Keys::read_write`]) whoever it is (with the fencing token
    /// `expected`, unless 0), as [`force_unlock`](Self::force_unlock) frees
    /// a lock; `None` when no writer held it (always on a Redlock). Not
    /// sent twice.
    pub(crate) async fn force_unlock_writer(
        &self,
        keys: &Keys,
        expected: u64,
    ) -> Result<Option<String>, LockError> {
        let mut call = rw_call(&RW_FORCE_UNLOCK, keys);
        call.arg(u64::try_from(keys.fence_retention.as_millis()).unwrap_or(u64::MAX))
            .arg(expected);
        match self {
            Backend::Single(node) => Ok(node.run_once::<Forced>(&call).await?.0),
            Backend::Cluster(nodes) => Ok(nodes.run_script::<Forced>(&call).await?.0),
            Backend::Redlock(_) => Ok(None),
        }
    }

    /// What `keep` makes of the keys matching `pattern` (a `SCAN MATCH`
    /// glob over keys; a key it makes nothing of is skipped), each once, at
    /// most `limit` of them, from every master; and the keys it would keep
    /// that are not UTF-8.
    pub(crate) async fn scan<T: Ord + Send>(
        &self,
        pattern: &str,
        limit: usize,
        keep: &Keep<'_, T>,
    ) -> Result<Scanned<T>, LockError> {
        let pattern = (pattern, keep);
        let mut out = Scanned {
            found: BTreeSet::new(),
            unreadable: BTreeSet::new(),
        };
        match self {
            Backend::Single(node) => scan_one(node, pattern, limit, &mut out).await?,
            Backend::Cluster(nodes) => {
                for node in nodes.masters().await? {
                    scan_one(&node, pattern, limit, &mut out).await?;
                }
            }
            Backend::Redlock(nodes) => {
                // A lock held by a majority is on every majority: the keys
                // of any majority of nodes name every held lock.
                let mut reached = 0;
                let mut first_error = None;
                for node in nodes.nodes() {
                    match scan_one(node, pattern, limit, &mut out).await {
                        Ok(()) => reached += 1,
                        Err(e) => {
                            first_error.get_or_insert(e);
                        }
                    }
                }
                if reached < nodes.quorum()
                    && let Some(e) = first_error
                {
                    return Err(e);
                }
            }
        }
        Ok(out)
    }
}

impl Redlock {
    /// The majority's view: the owner that a majority of nodes name, with
    /// the time a majority still holds it and its fencing token (see
    /// [`holders_fence`]).
    async fn inspect(&self, call: &Invocation) -> Result<Option<Seen>, LockError> {
        let answers = self
            .on_every_node(|node| node.run_script::<OrNone<Seen>>(call))
            .await;
        let mut answered = 0;
        let mut first_error = None;
        let mut by_owner: HashMap<String, Vec<Seen>> = HashMap::new();
        for answer in answers {
            match answer {
                Ok(OrNone(Some(seen))) => {
                    answered += 1;
                    by_owner.entry(seen.owner.clone()).or_default().push(seen);
                }
                Ok(OrNone(None)) => answered += 1,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if answered < self.quorum() {
            return Err(self.no_majority("(inspect)", answered, first_error));
        }
        let Some(mut views) = by_owner
            .into_values()
            .find(|views| views.len() >= self.quorum())
        else {
            return Ok(None);
        };
        views.sort_by_key(|seen| std::cmp::Reverse(seen.ttl));
        let ttl = views[self.quorum() - 1].ttl;
        let fence = holders_fence(views.iter().filter_map(|seen| seen.fence));
        let mut seen = views.swap_remove(0);
        seen.ttl = ttl;
        seen.fence = fence;
        Ok(Some(seen))
    }

    /// Frees the lock on every node that answers.
    async fn force_unlock(&self, call: &Invocation) -> Result<Option<String>, LockError> {
        let answers = self
            .on_every_node(|node| node.run_once::<Forced>(call))
            .await;
        let mut answered = 0;
        let mut first_error = None;
        let mut forced = None;
        for answer in answers {
            match answer {
                Ok(Forced(who)) => {
                    answered += 1;
                    forced = forced.or(who);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if answered == 0
            && let Some(e) = first_error
        {
            return Err(e);
        }
        Ok(forced)
    }
}

impl ClusterNodes {
    /// The masters, each as a server of its own (for `SCAN`).
    async fn masters(&self) -> Result<Vec<SingleNode>, LockError> {
        let nodes: String = self.run_command(redis::cmd("CLUSTER").arg("NODES")).await?;
        let mut masters = Vec::new();
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split(' ').collect();
            let (Some(address), Some(flags)) = (fields.get(1), fields.get(2)) else {
                continue;
            };
            if !flags.split(',').any(|f| f == "master") || flags.contains("fail") {
                continue;
            }
            // `ip:port@cport[,hostname]`
            let address = address.split(['@', ',']).next().unwrap_or_default();
            let Some((host, port)) = address.rsplit_once(':') else {
                continue;
            };
            let Ok(port) = port.parse::<u16>() else {
                continue;
            };
            masters.push(self.node_at(host, port)?);
        }
        Ok(masters)
    }
}

/// The holder's fencing token among the tokens that the nodes holding its
/// lock carry in their values: the one most of them have, the larger on a
/// tie. Its acquisition wrote its token to every node that had answered
/// it; a node that granted it after the acquisition was done may show
/// another token for a moment (it is then raised to the token, or gives
/// the lock back).
fn holders_fence(counters: impl Iterator<Item = u64>) -> Option<u64> {
    let mut counters: Vec<u64> = counters.collect();
    counters.sort_unstable();
    counters
        .chunk_by(|a, b| a == b)
        .max_by_key(|run| (run.len(), run[0]))
        .map(|run| run[0])
}

#[cfg(test)]
mod tests {
    use super::holders_fence;

    #[test]
    fn the_holders_fence_is_the_most_common_counter() {
        assert_eq!(holders_fence([].into_iter()), None);
        assert_eq!(holders_fence([7].into_iter()), Some(7));
        assert_eq!(holders_fence([9, 5, 5, 12].into_iter()), Some(5));
        assert_eq!(holders_fence([5, 5, 3, 3].into_iter()), Some(5));
        assert_eq!(holders_fence([4, 6].into_iter()), Some(6));
    }
}
