//! Several names at once: the scripts and the attempts of
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
//! keep a set out for good. A set that has waited a while (`crate::wait`)
//! therefore also joins the FIFO queue of the first busy name (same token,
//! same waiters entry): when its turn comes, a release hands that name to
//! it, and it tries the whole set at once. If another name is busy then,
//! the script gives the name back at once (deleted, with a notice, so the
//! queued waiters try) and queues the set again at the end: it never holds
//! part of the set while it waits, and it gets a chance at every turn of
//! that queue. See docs/kinds.md, "Several names at once".

use std::time::{Duration, Instant};

use super::deployment::Backend;
use super::queue::Queued;
use super::scripts::{holder_fence_lua, keep_fence_lua, max_ms, ms_arg_lua, owns_lua};
use super::shared::millis;
use crate::LockError;
use crate::layout::Keys;

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
pub(crate) static ACQUIRE_SET: Lazy<Script> = Lazy::new(|| {
    Script::new(concat!(
        r"
local lease_arg, retention_arg, since, who = string.match(ARGV[2], '^([^:]*):([^:]*):(%d+):(.*)$')
if not who then
  return redis.error_reply('ERR lockattr: the second argument must be <lease ms>:<retention ms>:<since ms>:<holder>')
end
",
        ms_arg_lua!("lease", "lease_arg", "1"),
        ms_arg_lua!("retention", "retention_arg", "0"),
        ms_arg_lua!("wait", "ARGV[3]", "0"),
        r"
if #KEYS == 0 or #KEYS % 4 ~= 0 or #ARGV ~= 4 + #KEYS / 4 or (ARGV[4] ~= '0' and ARGV[4] ~= '1') then
  return redis.error_reply('ERR lockattr: the keys must be the lock, fence, queue and waiters keys of each name, the arguments end with 0 or 1 and a channel per name')
end
local busy = -1
local first_busy
for i = 1, #KEYS, 4 do
  local value = redis.call('get', KEYS[i])
  if value and not ",
        owns_lua!("value", "ARGV[1]"),
        r" then
    local ttl = redis.call('pttl', KEYS[i])
    if ttl < 0 then
      ttl = 0
    end
    if ttl > busy then
      busy = ttl
    end
    first_busy = first_busy or i
  end
end
if busy >= 0 then
  for i = 1, #KEYS, 4 do
    local value = redis.call('get', KEYS[i])
    if ",
        owns_lua!("value", "ARGV[1]"),
        r" then
      redis.call('del', KEYS[i])
      redis.call('pexpire', KEYS[i + 1], retention)
      if redis.call('pttl', KEYS[i + 2]) ~= -2 or redis.call('pttl', KEYS[i + 3]) ~= -2 then
        redis.call('publish', ARGV[4 + (i + 3) / 4], '-:0:0')
      end
    end
  end
  if wait > 0 then
    local now = redis.call('time')
    local now_ms = now[1] * 1000 + math.floor(now[2] / 1000)
    -- An entry queued in the FIFO queue has its queue time; one that is
    -- not has 0. A queued entry is kept as it is: it holds its place.
    local entry = string.format('%d:%d:0:', now_ms + wait, lease) .. who
    for i = 1, #KEYS, 4 do
      local old = redis.call('hget', KEYS[i + 3], ARGV[1])
      local queued = old and string.match(old, '^%d+:%d+:(%d+):')
      if ARGV[4] == '1' and i == first_busy and (not queued or queued == '0') then
        redis.call('rpush', KEYS[i + 2], ARGV[1])
        if redis.call('pttl', KEYS[i + 2]) < wait then
          redis.call('pexpire', KEYS[i + 2], wait)
        end
        redis.call('hset', KEYS[i + 3], ARGV[1], string.format('%d:%d:%d:', now_ms + wait, lease, now_ms) .. who)
      elseif not queued or queued == '0' then
        redis.call('hset', KEYS[i + 3], ARGV[1], entry)
      end
      if redis.call('pttl', KEYS[i + 3]) < wait then
        redis.call('pexpire', KEYS[i + 3], wait)
      end
      -- The marker: a release that frees the lock pops it and publishes
      -- `-:0:0` (see RELEASE_LUA). One at the end, shared by every set.
      redis.call('lrem', KEYS[i + 2], 0, '-')
      redis.call('rpush', KEYS[i + 2], '-')
      if redis.call('pttl', KEYS[i + 2]) < wait then
        redis.call('pexpire', KEYS[i + 2], wait)
      end
    end
  else
    for i = 1, #KEYS, 4 do
      if redis.call('hdel', KEYS[i + 3], ARGV[1]) == 1 and ARGV[4] == '1' then
        redis.call('lrem', KEYS[i + 2], 0, ARGV[1])
      end
    end
  end
  return {0, busy}
end
local fences = {1}
for i = 1, #KEYS, 4 do
  local held = redis.call('get', KEYS[i])
  local fence = held and ",
        holder_fence_lua!("held"),
        r"
  if not fence then
    local ok = redis.pcall('incr', KEYS[i + 1])
    if type(ok) == 'table' and ok.err then
      return ok
    end
    fence = ok
    if fence == 1 then
      local now = redis.call('time')
      fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
      redis.call('set', KEYS[i + 1], string.format('%d', fence), 'PX', lease + retention)
    end
  end
",
        keep_fence_lua!("KEYS[i + 1]", "lease + retention"),
        r"
  fences[#fences + 1] = fence
end
local value = ARGV[1] .. '\n' .. who .. '\n' .. since .. '\n'
for i = 1, #KEYS, 4 do
  redis.call('set', KEYS[i], value .. string.format('%d', fences[(i + 3) / 4 + 1]), 'PX', lease)
  if redis.call('hdel', KEYS[i + 3], ARGV[1]) == 1 and ARGV[4] == '1' then
    redis.call('lrem', KEYS[i + 2], 0, ARGV[1])
  end
end
return fences
",
    ))
});

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
pub(crate) const GIVE_BACK_SET_LUA: &str = concat!(
    ms_arg_lua!("retention", "ARGV[2]", "0"),
    r"
if #KEYS == 0 or #KEYS % 4 ~= 0 or #ARGV ~= 2 + #KEYS / 4 then
  return redis.error_reply('ERR lockattr: the keys must be the lock, fence, queue and waiters keys of each name, and a channel per name')
end
local deleted = 0
for i = 1, #KEYS, 4 do
  if redis.call('hdel', KEYS[i + 3], ARGV[1]) == 1 then
    redis.call('lrem', KEYS[i + 2], 0, ARGV[1])
  end
  local value = redis.call('get', KEYS[i])
  if ",
    owns_lua!("value", "ARGV[1]"),
    r" then
    redis.call('del', KEYS[i])
    redis.call('pexpire', KEYS[i + 1], retention)
    deleted = deleted + 1
    if redis.call('pttl', KEYS[i + 2]) ~= -2 or redis.call('pttl', KEYS[i + 3]) ~= -2 then
      redis.call('publish', ARGV[2 + (i + 3) / 4], '-:0:0')
    end
  end
end
return deleted
",
);

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
pub(crate) fn give_back_call(group: &[&Keys], token: &str) -> ScriptInvocation<'static> {
    let mut invocation = GIVE_BACK_SET.prepare_invoke();
    for keys in group {
        invocation
            .key(&keys.lock)
            .key(&keys.fence)
            .key(&keys.queue)
            .key(&keys.waiters);
    }
    let retention = group.first().map_or(Duration::ZERO, |k| k.fence_retention);
    invocation.arg(token).arg(whole_millis(retention));
    for keys in group {
        invocation.arg(&keys.channel);
    }
    invocation
}

/// [`give_back_call`] as an EVAL with the source (see
/// `scripts::give_back`): it may run on a server that never saw the script.
pub(crate) fn give_back_eval(group: &[&Keys], token: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(GIVE_BACK_SET_LUA).arg(group.len() * 4);
    for keys in group {
        cmd.arg(&keys.lock)
            .arg(&keys.fence)
            .arg(&keys.queue)
            .arg(&keys.waiters);
    }
    let retention = group.first().map_or(Duration::ZERO, |k| k.fence_retention);
    cmd.arg(token).arg(whole_millis(retention));
    for keys in group {
        cmd.arg(&keys.channel);
    }
    cmd
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

impl Queued<'_> {
    /// One try at a group; a request whose answer is not read is given
    /// back (on the same connection on one server).
    async fn take_set(
        self,
        group: &[&Keys],
        token: &str,
        expire: Duration,
        wait: Duration,
        queue: bool,
    ) -> Result<Vec<i64>, LockError> {
        let invocation = acquire_call(group, token, expire, wait, queue);
        match self {
            Queued::Single(node) => {
                node.run_script_or_give_back(&invocation, give_back_eval(group, token))
                    .await
            }
            Queued::Cluster(nodes) => nodes.run_script(&invocation).await,
        }
    }
}

/// Gives back whatever `token` holds or queued of the names of `group`.
pub(crate) async fn give_back(
    on: Queued<'_>,
    group: &[&Keys],
    token: &str,
) -> Result<(), LockError> {
    let invocation = give_back_call(group, token);
    let _: i64 = match on {
        Queued::Single(node) => node.run_script(&invocation).await?,
        Queued::Cluster(nodes) => nodes.run_script(&invocation).await?,
    };
    Ok(())
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
pub(crate) fn groups(backend: &Backend, keys: &[Keys]) -> Vec<Vec<usize>> {
    match backend {
        Backend::Single(_) | Backend::Redlock(_) => vec![(0..keys.len()).collect()],
        Backend::Cluster(_) => {
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
pub(crate) async fn attempt(
    on: Queued<'_>,
    groups: &[Vec<&Keys>],
    token: &str,
    expire: Duration,
    wait: Duration,
    queue: bool,
) -> Result<Tried, LockError> {
    let mut fences = Vec::new();
    for (taken, group) in groups.iter().enumerate() {
        let reply = on.take_set(group, token, expire, wait, queue).await?;
        match Tried::from_reply(&reply, group.len())? {
            Tried::Taken(group_fences) => fences.extend(group_fences),
            busy @ Tried::Busy(_) => {
                for group in &groups[..taken] {
                    give_back(on, group, token).await?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::test_server::Server;

    #[test]
    fn slots_match_redis_cluster() {
        // CLUSTER KEYSLOT values.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("bar"), 5061);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("{}x"), slot("{}x"));
        assert_eq!(slot("lockattr:{a}"), slot("a"));
    }

    fn keys_of(con: &mut redis::Connection) -> Vec<String> {
        let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).unwrap();
        keys.sort();
        keys
    }

    #[test]
    fn the_set_scripts_check_their_arguments_before_writing() {
        let server = Server::start();
        let mut con = server.connect();
        let keys = [
            "t:{a}",
            "t:{a}:fence",
            "t:{a}:queue",
            "t:{a}:waiters",
            "t:{b}",
            "t:{b}:fence",
            "t:{b}:queue",
            "t:{b}:waiters",
        ];
        let bad_second = [
            "0:0:1:h",
            "x:0:1:h",
            "1.5:0:1:h",
            "-1:0:1:h",
            "2592000001:0:1:h",
            "100:-1:1:h",
            "100:0:h",
            "",
        ];
        for second in bad_second {
            let reply: redis::RedisResult<redis::Value> = ACQUIRE_SET
                .key(&keys[..])
                .arg("tok")
                .arg(second)
                .arg(100)
                .arg("0")
                .arg("c1")
                .arg("c2")
                .invoke(&mut con);
            assert!(reply.is_err(), "{second:?}: {reply:?}");
            assert!(keys_of(&mut con).is_empty(), "{second:?} wrote something");
        }
        for wait in ["-1", "x", "0.5", "2592000001"] {
            let reply: redis::RedisResult<redis::Value> = ACQUIRE_SET
                .key(&keys[..])
                .arg("tok")
                .arg("100:0:1:h")
                .arg(wait)
                .arg("0")
                .arg("c1")
                .arg("c2")
                .invoke(&mut con);
            assert!(reply.is_err(), "wait {wait:?}: {reply:?}");
            assert!(
                keys_of(&mut con).is_empty(),
                "wait {wait:?} wrote something"
            );
        }
        let reply: redis::RedisResult<redis::Value> = ACQUIRE_SET
            .key(&keys[..6])
            .arg("tok")
            .arg("100:0:1:h")
            .arg(0)
            .arg("0")
            .arg("c1")
            .arg("c2")
            .invoke(&mut con);
        assert!(reply.is_err(), "six keys: {reply:?}");
        assert!(keys_of(&mut con).is_empty());

        for flag in ["2", "", "yes"] {
            let reply: redis::RedisResult<redis::Value> = ACQUIRE_SET
                .key(&keys[..])
                .arg("tok")
                .arg("100:0:1:h")
                .arg(100)
                .arg(flag)
                .arg("c1")
                .arg("c2")
                .invoke(&mut con);
            assert!(reply.is_err(), "flag {flag:?}: {reply:?}");
            assert!(keys_of(&mut con).is_empty());
        }

        // Taken, then a give-back with a bad retention changes nothing.
        let taken: Vec<i64> = ACQUIRE_SET
            .key(&keys[..])
            .arg("tok")
            .arg("10000:1000:1:h\n1\nl")
            .arg(0)
            .arg("0")
            .arg("c1")
            .arg("c2")
            .invoke(&mut con)
            .unwrap();
        assert_eq!(taken.len(), 3);
        assert_eq!(taken[0], 1);
        let before = keys_of(&mut con);
        for retention in ["-1", "x", "2592000001"] {
            let reply: redis::RedisResult<i64> = GIVE_BACK_SET
                .key(&keys[..])
                .arg("tok")
                .arg(retention)
                .arg("c1")
                .arg("c2")
                .invoke(&mut con);
            assert!(reply.is_err(), "retention {retention:?}: {reply:?}");
            assert_eq!(keys_of(&mut con), before);
        }
        // Sent twice: the second run takes nothing again (same counters).
        let again: Vec<i64> = ACQUIRE_SET
            .key(&keys[..])
            .arg("tok")
            .arg("10000:1000:1:h\n1\nl")
            .arg(0)
            .arg("0")
            .arg("c1")
            .arg("c2")
            .invoke(&mut con)
            .unwrap();
        assert_eq!(again, taken);
        let deleted: i64 = GIVE_BACK_SET
            .key(&keys[..])
            .arg("tok")
            .arg(1000)
            .arg("c1")
            .arg("c2")
            .invoke(&mut con)
            .unwrap();
        assert_eq!(deleted, 2);
        // Only the counters are left, each with a time to live.
        for key in keys_of(&mut con) {
            assert!(key.ends_with(":fence"), "{key}");
            let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
            assert!(ttl > 0, "{key} has no expiry");
        }
    }
}
