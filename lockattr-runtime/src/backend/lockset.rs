//! Several names at once: the scripts and the acquisition loop of
//! [`Locker::lock_all`](crate::Locker::lock_all).
//!
//! # All or nothing
//!
//! One script call takes every name of a group or none ([`ACQUIRE_SET`]):
//! it first reads every lock, and writes only when all are free (or
//! already this token's, for a request sent again). So a caller never holds
//! some names while it waits for the others, and two callers locking
//! `{a, b}` and `{b, a}` cannot deadlock: whichever script runs first gets
//! both, the other gets neither.
//!
//! On one server the whole set is one group. On a Redis Cluster a script may
//! only touch keys of one slot, so the names are grouped by slot and the
//! groups are taken one after another, in a fixed order (by slot, then by
//! key); when a group is busy, the groups already taken are given back in
//! the same attempt before it waits. Nothing is held while waiting, so this
//! stays deadlock-free too. (Every key of a name carries the whole name as
//! its hash tag, so two names share a slot only by chance, unless the
//! Locker's prefix carries a hash tag: then all its names share that slot
//! and a set is one group.)
//!
//! On a Redlock each node takes the whole set in one [`ACQUIRE_SET`] call,
//! and a majority of nodes holds it: see `redlock::set`. The waiting
//! described below is for one server and a Cluster.
//!
//! # Waiting
//!
//! A set waiter enters its token in the waiters hash of each name
//! (`<prefix>{<name>}:waiters`, with the same expiry as a queued waiter's
//! entry), and puts the marker `-` at the end of each name's queue (one
//! marker shared by all sets; never a token). A release that frees the
//! lock pops the marker and publishes `-:0:0` on the lock's channel (see
//! [`RELEASE_LUA`](super::scripts::RELEASE_LUA)); a release that hands the
//! lock to a queued waiter puts it back at the end. The set waiter,
//! subscribed to the channel of every name of the set, tries again at
//! once. A release with nobody waiting runs no extra command. It also tries again when the longest lease it saw ends, once a
//! second ([`RECHECK`]), and at its deadline, like a queued waiter.
//!
//! A release that hands a name to a queued single-name waiter does not
//! free it, so a name handed from waiter to waiter without a pause would
//! keep a set out for good. A set that has waited [`JOIN_QUEUE_AFTER`]
//! therefore also joins the FIFO queue of the first busy name (same token,
//! same waiters entry): when its turn comes, a release hands that name to
//! it, and it tries the whole set at once. If another name is busy then,
//! the script gives the name back at once (deleted, with a notice, so the
//! queued waiters try) and queues the set again at the end: it never holds
//! part of the set while it waits, and it gets a chance at every turn of
//! that queue. See the README's "Several names at once".

use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use super::queue::{RECHECK, retryable};
use super::redlock::{self, set::SetOnNodes};
use super::scripts::{Call, lua};
use super::{
    Backend, Backoff, ClusterNodes, FALLBACK_PAUSE, RETRY_MAX, SingleNode, Wake, Wakeups, millis,
    soon_after,
};
use crate::inner::Inner;
use crate::key::Keys;
use crate::{LockError, io};

use once_cell::sync::Lazy;
use redis::{Script, ScriptInvocation};

/// Takes every name of a group or none, in one script call; or, busy,
/// enters the token as a waiter of each name (when it will wait).
///
/// KEYS: for each name, its lock, fence, queue and waiters keys (four per
/// name, at least one name). ARGV: token, `<lease ms>:<retention
/// ms>:<since ms>:<holder>` (as [`ACQUIRE`](super::scripts::ACQUIRE)'s),
/// how long the caller will still wait in ms (0: it will not, and leaves
/// the waiters hashes), `1` when the caller has waited long enough to join
/// the FIFO queue of the first busy name (`0` otherwise), then each name's
/// channel.
///
/// Returns `{1, fencing token of each name...}` when the token now holds
/// every name (each lock's value is `<token>\n<holder>\n<since>`, with the
/// lease; each name's counter incremented as a single acquisition does), or
/// `{0, longest time left of a busy name in ms}`.
///
/// A name already held under this token counts as taken, with its counter
/// as it is: a request sent again after its answer was lost takes nothing
/// twice, and a name a release handed to the token (it was queued) is
/// part of the set now. When another name is busy, a name the token holds
/// is given back at once (deleted, `-:0:0` published on its channel when
/// anyone waits), so the caller never holds part of the set while it
/// waits; with the queue flag it then queues again at the end.
pub(crate) static ACQUIRE_SET: Lazy<Script> =
    Lazy::new(|| Script::new(lua!("helpers.lua", "set_acquire.lua")));

/// Gives back what a set token holds or waits for, name by name: deletes
/// each lock the token owns (publishing `-:0:0` on its channel when anyone
/// waits for it, so the waiters try at once) and takes the token out of
/// each waiters hash and queue. No hand-over: this undoes an attempt
/// (abandoned, cancelled, or a Cluster group taken before a busy one), it
/// is not the release of a held set (each name's own release does that,
/// with hand-over). Safe to repeat.
///
/// KEYS: for each name, its lock, fence, queue and waiters keys. ARGV:
/// token, how long a fence counter outlives a lease in ms, then each
/// name's channel. Returns how many locks it deleted.
pub(crate) const GIVE_BACK_SET_LUA: &str = lua!("helpers.lua", "queue.lua", "set_give_back.lua");

/// [`GIVE_BACK_SET_LUA`], loaded on first use.
pub(crate) static GIVE_BACK_SET: Lazy<Script> = Lazy::new(|| Script::new(GIVE_BACK_SET_LUA));

/// An [`ACQUIRE_SET`] call for the names of `group`.
pub(crate) fn acquire_call(
    group: &[&Keys],
    token: &str,
    expire: Duration,
    wait: Duration,
    queue: bool,
) -> ScriptInvocation<'static> {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut invocation = ACQUIRE_SET.prepare_invoke();
    for keys in group {
        invocation
            .key(&keys.lock)
            .key(&keys.fence)
            .key(&keys.queue)
            .key(&keys.waiters);
    }
    let (retention, holder) = group
        .first()
        .map_or((Duration::ZERO, ""), |k| (k.fence_retention, &*k.holder));
    invocation
        .arg(token)
        .arg(format!(
            "{}:{}:{since}:{holder}",
            millis(expire),
            whole_millis(retention)
        ))
        .arg(whole_millis(wait))
        .arg(if queue { "1" } else { "0" });
    for keys in group {
        invocation.arg(&keys.channel);
    }
    invocation
}

/// A [`GIVE_BACK_SET`] call for the names of `group`.
fn give_back_set(group: &[&Keys], token: &str) -> Call {
    let mut call = Call::new(GIVE_BACK_SET_LUA, &GIVE_BACK_SET);
    for keys in group {
        call.key(&keys.lock)
            .key(&keys.fence)
            .key(&keys.queue)
            .key(&keys.waiters);
    }
    let retention = group.first().map_or(Duration::ZERO, |k| k.fence_retention);
    call.arg(token).arg(whole_millis(retention));
    for keys in group {
        call.arg(&keys.channel);
    }
    call
}

/// A [`GIVE_BACK_SET`] call for the names of `group`.
pub(crate) fn give_back_call(group: &[&Keys], token: &str) -> ScriptInvocation<'static> {
    give_back_set(group, token).invocation()
}

/// [`give_back_call`] as an EVAL with the source (see
/// `scripts::give_back`): it may run on a server that never saw the script.
pub(crate) fn give_back_eval(group: &[&Keys], token: &str) -> redis::Cmd {
    give_back_set(group, token).eval()
}

/// Whole milliseconds, rounded down, saturating.
fn whole_millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The Redis Cluster slot of `key` (CRC16 of its hash tag, modulo 16384).
pub(crate) fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let mut tagged = bytes;
    if let Some(open) = bytes.iter().position(|&b| b == b'{')
        && let Some(len) = bytes[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        tagged = &bytes[open + 1..open + 1 + len];
    }
    let mut crc: u16 = 0;
    for &b in tagged {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// How long a set waits before it joins the FIFO queue of a busy name.
const JOIN_QUEUE_AFTER: Duration = RECHECK;

/// The deployments a set can be taken on.
#[derive(Clone, Copy)]
enum Target<'a> {
    Single(&'a SingleNode),
    Cluster(&'a ClusterNodes),
}

impl<'a> Target<'a> {
    fn of(backend: &'a Backend) -> Result<Target<'a>, LockError> {
        match backend {
            Backend::Single(node) => Ok(Target::Single(node)),
            Backend::Cluster(nodes) => Ok(Target::Cluster(nodes)),
            Backend::Redlock(_) => Err(LockError::Runtime {
                reason: "a lock set on a Redlock is taken by `redlock::set`".into(),
            }),
        }
    }

    fn wakeups(self) -> &'a Wakeups {
        match self {
            Target::Single(node) => node.wakeups(),
            Target::Cluster(nodes) => nodes.wakeups(),
        }
    }

    /// One try at a group; a request whose answer is not read is given
    /// back (on the same connection on one server).
    async fn take(
        self,
        group: &[&Keys],
        token: &str,
        expire: Duration,
        wait: Duration,
        queue: bool,
    ) -> Result<Vec<i64>, LockError> {
        let invocation = acquire_call(group, token, expire, wait, queue);
        match self {
            Target::Single(node) => {
                node.run_script_or_give_back(&invocation, give_back_eval(group, token))
                    .await
            }
            Target::Cluster(nodes) => nodes.run_script(&invocation).await,
        }
    }

    async fn give_back(self, group: &[&Keys], token: &str) -> Result<(), LockError> {
        let invocation = give_back_call(group, token);
        let _: i64 = match self {
            Target::Single(node) => node.run_script(&invocation).await?,
            Target::Cluster(nodes) => nodes.run_script(&invocation).await?,
        };
        Ok(())
    }
}

/// A set to take.
pub(crate) struct SetRequest {
    pub(crate) locker: Arc<Inner>,
    /// The names, in the order of `keys`, for errors.
    pub(crate) names: Vec<String>,
    pub(crate) keys: Vec<Keys>,
    pub(crate) token: String,
    pub(crate) expire: Duration,
    pub(crate) wait: Duration,
}

/// A set taken.
pub(crate) struct SetGrant {
    /// Each name's fencing token, in the order of the request's keys.
    pub(crate) fencing_tokens: Vec<u64>,
    /// When the attempt that took the set started: every name's lease
    /// began after it.
    pub(crate) sent: Instant,
    pub(crate) token: String,
}

/// What one attempt at the whole set (or a group of it) found.
pub(crate) enum Tried {
    Taken(Vec<u64>),
    /// Busy, with the longest time left seen.
    Busy(Duration),
}

/// The groups of a set: one on a single server, one per slot on a
/// Cluster, in slot order (the keys are sorted by slot, then by key).
fn groups(target: Target<'_>, keys: &[Keys]) -> Vec<Vec<usize>> {
    match target {
        Target::Single(_) => vec![(0..keys.len()).collect()],
        Target::Cluster(_) => {
            let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
            for (i, k) in keys.iter().enumerate() {
                let s = slot(&k.lock);
                match groups.last_mut() {
                    Some((last, members)) if *last == s => members.push(i),
                    _ => groups.push((s, vec![i])),
                }
            }
            groups.into_iter().map(|(_, members)| members).collect()
        }
    }
}

/// One attempt at every group in order, giving back the groups taken when
/// a later one is busy.
async fn attempt(
    target: Target<'_>,
    groups: &[Vec<&Keys>],
    token: &str,
    expire: Duration,
    wait: Duration,
    queue: bool,
) -> Result<Tried, LockError> {
    let mut fences = Vec::new();
    for (taken, group) in groups.iter().enumerate() {
        let reply = target.take(group, token, expire, wait, queue).await?;
        match Tried::from_reply(&reply, group.len())? {
            Tried::Taken(group_fences) => fences.extend(group_fences),
            busy @ Tried::Busy(_) => {
                for group in &groups[..taken] {
                    target.give_back(group, token).await?;
                }
                return Ok(busy);
            }
        }
    }
    Ok(Tried::Taken(fences))
}

impl Tried {
    /// The answer of [`ACQUIRE_SET`] for a group of `names` names.
    pub(crate) fn from_reply(reply: &[i64], names: usize) -> Result<Tried, LockError> {
        match reply.first() {
            Some(1) if reply.len() == names + 1 => Ok(Tried::Taken(
                reply[1..]
                    .iter()
                    .map(|&f| u64::try_from(f).unwrap_or(0))
                    .collect(),
            )),
            Some(0) if reply.len() == 2 => Ok(Tried::Busy(Duration::from_millis(
                u64::try_from(reply[1]).unwrap_or(0),
            ))),
            _ => Err(LockError::Runtime {
                reason: format!(
                    "Redis answered a lock set attempt with {} values for {names} names",
                    reply.len()
                ),
            }),
        }
    }
}

/// Tokens owed a give-back: dropped with any left (a cancelled or failed
/// acquisition), it gives them back in the background.
struct Owed {
    locker: Arc<Inner>,
    keys: Vec<Keys>,
    expire: Duration,
    tokens: Vec<String>,
}

impl Drop for Owed {
    fn drop(&mut self) {
        let tokens = std::mem::take(&mut self.tokens);
        if tokens.is_empty() {
            return;
        }
        let locker = self.locker.clone();
        let keys = std::mem::take(&mut self.keys);
        let expire = self.expire;
        let spawned = io::spawn(async move {
            if let Backend::Redlock(nodes) = &locker.backend {
                for token in tokens {
                    nodes
                        .give_back_set(&keys, &token, expire, &nodes.every_node())
                        .await;
                }
                return;
            }
            let Ok(target) = Target::of(&locker.backend) else {
                return;
            };
            let by_group = groups(target, &keys);
            let mut retry = Backoff::new(RETRY_MAX);
            let until = Instant::now() + Duration::from_secs(10);
            for token in tokens {
                for members in &by_group {
                    let group: Vec<&Keys> = members.iter().map(|&i| &keys[i]).collect();
                    loop {
                        match target.give_back(&group, &token).await {
                            Ok(()) => break,
                            Err(e) if retryable(&e) && Instant::now() < until => {
                                tokio::time::sleep(retry.next()).await;
                            }
                            Err(e) => {
                                tracing::debug!(target: "lockattr", error = %e, "cannot give back a lock set attempt; its leases and waiter entries expire");
                                break;
                            }
                        }
                    }
                }
            }
        });
        if let Err(e) = spawned {
            tracing::debug!(target: "lockattr", error = %e, "cannot give back a lock set attempt; its leases and waiter entries expire");
        }
    }
}

/// Takes every name of the set, or none, waiting up to `wait`: see the
/// module docs. On the caller's runtime or on the I/O thread.
pub(crate) async fn acquire(
    request: SetRequest,
    mut gone: io::CallerGone,
) -> Result<SetGrant, LockError> {
    let SetRequest {
        locker,
        names,
        keys,
        mut token,
        expire,
        wait,
    } = request;
    let mut owed = Owed {
        locker: locker.clone(),
        keys: keys.clone(),
        expire,
        tokens: Vec::new(),
    };
    if let Backend::Redlock(nodes) = &locker.backend {
        let set = SetOnNodes {
            keys: &keys,
            name: &names.join(", "),
            token,
            expire,
            wait,
        };
        return redlock::set::acquire(nodes, set, &mut owed.tokens, gone).await;
    }
    let target = Target::of(&locker.backend)?;
    let by_group: Vec<Vec<&Keys>> = groups(target, &keys)
        .into_iter()
        .map(|members| members.into_iter().map(|i| &keys[i]).collect())
        .collect();
    let now = Instant::now();
    let deadline = now
        .checked_add(wait)
        .unwrap_or(now + crate::locker::MAX_EXPIRE);
    let wakeups = target.wakeups();
    let mut stale: Vec<String> = Vec::new();
    let mut waiters: Vec<super::wake::Waiter> = Vec::new();
    let mut retry = Backoff::new(RETRY_MAX);
    let mut polling_until: Option<Instant> = None;
    // Since when the set has found a name busy.
    let mut busy_since: Option<Instant> = None;
    loop {
        // Attempts whose answer was lost are given back first.
        if let Some(old) = stale.last() {
            let mut failed = None;
            for group in &by_group {
                if let Err(e) = target.give_back(group, old).await {
                    failed = Some(e);
                    break;
                }
            }
            match failed {
                Some(e) if retryable(&e) => {
                    retry.pause(e, deadline, &mut gone).await?;
                    continue;
                }
                _ => {
                    if let Some(old) = stale.pop() {
                        owed.tokens.retain(|t| *t != old);
                    }
                    continue;
                }
            }
        }
        let sent = Instant::now();
        let left = deadline.saturating_duration_since(sent);
        // Owed until it is known to hold everything: a cancelled attempt,
        // or one that ends in an error or a timeout, is given back.
        if !owed.tokens.contains(&token) {
            owed.tokens.push(token.clone());
        }
        // Waited long enough: join the FIFO queue of a busy name (see the
        // module docs).
        let queue = busy_since.is_some_and(|since| since.elapsed() >= JOIN_QUEUE_AFTER);
        let longest = match attempt(target, &by_group, &token, expire, left, queue).await {
            Ok(Tried::Taken(fencing_tokens)) => {
                owed.tokens.retain(|t| *t != token);
                return Ok(SetGrant {
                    fencing_tokens,
                    sent,
                    token,
                });
            }
            Ok(Tried::Busy(longest)) => {
                busy_since.get_or_insert(sent);
                longest
            }
            Err(e) if retryable(&e) => {
                // Still owed (until given back below, or by `owed`).
                stale.push(token);
                token = crate::locker::new_token()?;
                waiters.clear();
                retry.pause(e, deadline, &mut gone).await?;
                continue;
            }
            Err(e) => return Err(e),
        };
        retry.reset();
        if left.is_zero() {
            return Err(LockError::Timeout {
                name: names.join(", "),
                waited: wait,
            });
        }
        let now = Instant::now();
        if polling_until.is_some_and(|until| now >= until) {
            polling_until = None;
        }
        if waiters.is_empty() && polling_until.is_none() {
            waiters = keys
                .iter()
                .map(|k| wakeups.watch(&k.channel, &token))
                .collect();
        }
        let mut wake_at = deadline.min(now + RECHECK).min(soon_after(longest));
        if polling_until.is_some() {
            wake_at = wake_at.min(soon_after(FALLBACK_PAUSE));
        }
        loop {
            let woken = std::future::poll_fn(|cx| {
                for waiter in &mut waiters {
                    if let Poll::Ready(wake) = waiter.poll_wait(cx) {
                        return Poll::Ready(Some(wake));
                    }
                }
                Poll::Pending
            });
            let event = tokio::select! {
                wake = woken => wake,
                () = tokio::time::sleep_until(wake_at.into()) => None,
                () = gone.wait() => {
                    return Err(LockError::Runtime {
                        reason: "the caller stopped waiting".into(),
                    });
                }
            };
            match event {
                Some(Wake::Rearm { lease }) => {
                    wake_at = wake_at.min(soon_after(lease));
                }
                Some(Wake::Refused) => {
                    waiters.clear();
                    polling_until = Some(Instant::now() + Duration::from_secs(1));
                    wake_at = wake_at.min(soon_after(FALLBACK_PAUSE));
                }
                // A subscription broke (ask Redis, then register again), or
                // a release handed this set a name it queued for (it is no
                // longer registered there): try the whole set now.
                Some(Wake::Recheck | Wake::Handed { .. }) => {
                    waiters.clear();
                    break;
                }
                // Subscribed (a notice may have come before), told to try,
                // or the timer: ask Redis.
                Some(Wake::Subscribed | Wake::TryNow) | None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // CLUSTER KEYSLOT values.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("bar"), 5061);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("{}x"), slot("{}x"));
        assert_eq!(slot("lockattr:{a}"), slot("a"));
    }
}
