//! The Lua scripts, one static [`Script`] each. `Script::invoke_async` sends
//! EVALSHA and loads the script once on NOSCRIPT (first use, or after a Redis
//! restart emptied the script cache).

use std::time::Duration;

use once_cell::sync::Lazy;
use redis::{Script, ScriptInvocation};

use super::millis;
use crate::key::Keys;

/// The next fencing token of a lock, from its counter key.
///
/// A counter that does not exist yet (a new name, or a Redis that restarted
/// without persistence or evicted the key) starts at the server's time in
/// microseconds, not at 1: tokens handed out after the data was lost are
/// then still larger than every token handed out before, as long as the
/// Redis host's clock does not step back and a name is taken less than a
/// million times a second. A microsecond count stays below 2^53, so Lua's
/// doubles hold it exactly.
///
/// Lua statements that set the local `fence`, spliced into the scripts
/// (inline rather than a Lua function, which each call would build anew).
macro_rules! next_fence_lua {
    ($key:literal) => {
        concat!(
            "local fence = redis.call('incr', ",
            $key,
            r")
if fence == 1 then
  local now = redis.call('time')
  fence = tonumber(now[1]) * 1000000 + tonumber(now[2])
  redis.call('set', ",
            $key,
            r", string.format('%d', fence))
end
"
        )
    };
}

/// Takes the lock if it is free, in one round trip; otherwise queues the
/// caller (when it is willing to wait).
///
/// KEYS: lock, fence, queue, waiters. ARGV: token, lease in ms, how long the
/// caller will wait in ms (0: it will not, and leaves the queue if it was in it).
/// Returns `{1, fencing token}` when the token holds the lock, `{0, pttl of
/// the holder}` when not.
///
/// A token that already holds the lock counts as taken: a release handed it
/// the lock (see [`RELEASE_LUA`]), or this is a retry whose first answer was
/// lost. Its lease restarts, so it is never shorter than the caller thinks.
///
/// A free lock goes to whoever asks first, queued or not: it is only free
/// with waiters queued when a holder's lease ran out (a release hands the
/// lock to the oldest waiter instead), and then the first waiter whose timer
/// fires takes it.
pub(crate) static ACQUIRE: Lazy<Script> = Lazy::new(|| {
    // The counter is incremented before the lock is written: if the INCR
    // fails (a foreign value at the fence key), the script stops with
    // nothing locked. Redis does not roll back a failed script's writes.
    Script::new(concat!(
        r"
local holder = redis.call('get', KEYS[1])
if holder == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('get', KEYS[2]) or 0)}
end
if holder == false then
",
        next_fence_lua!("KEYS[2]"),
        r"
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  if redis.call('hdel', KEYS[4], ARGV[1]) == 1 then
    redis.call('lrem', KEYS[3], 0, ARGV[1])
  end
  return {1, fence}
end
local wait = tonumber(ARGV[3])
if wait > 0 then
  if redis.call('hexists', KEYS[4], ARGV[1]) == 0 then
    local now = redis.call('time')
    local deadline = now[1] * 1000 + math.floor(now[2] / 1000) + wait
    redis.call('rpush', KEYS[3], ARGV[1])
    redis.call('hset', KEYS[4], ARGV[1], string.format('%d:%s', deadline, ARGV[2]))
    if redis.call('pttl', KEYS[3]) < wait then
      redis.call('pexpire', KEYS[3], wait)
      redis.call('pexpire', KEYS[4], wait)
    end
  end
elseif redis.call('hdel', KEYS[4], ARGV[1]) == 1 then
  redis.call('lrem', KEYS[3], 0, ARGV[1])
end
return {0, redis.call('pttl', KEYS[1])}
",
    ))
});

/// Releases the lock if the token owns it, handing it straight to the oldest
/// waiter whose deadline has not passed (with a new fencing token and that
/// waiter's lease) and publishing `<waiter's token>:<fencing token>:<lease
/// ms>` on the lock's channel; deletes it when nobody waits. A token that does not own
/// the lock leaves the queue instead (a waiter that gave up).
///
/// KEYS: lock, fence, queue, waiters. ARGV: token, channel, and optionally
/// `1` to publish `-:0:0` on the channel when the lock is deleted (nobody
/// queued): the release notice of a Redlock, whose waiters do not queue.
/// Returns 1 when released, 0 when the token did not own the lock.
pub(crate) const RELEASE_LUA: &str = concat!(
    r"
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  if redis.call('hdel', KEYS[4], ARGV[1]) == 1 then
    redis.call('lrem', KEYS[3], 0, ARGV[1])
  end
  return 0
end
local now = redis.call('time')
now = now[1] * 1000 + math.floor(now[2] / 1000)
while true do
  local waiter = redis.call('lpop', KEYS[3])
  if not waiter then
    break
  end
  local entry = redis.call('hget', KEYS[4], waiter)
  if entry then
    redis.call('hdel', KEYS[4], waiter)
    local sep = string.find(entry, ':', 1, true)
    if sep and tonumber(string.sub(entry, 1, sep - 1)) >= now then
",
    next_fence_lua!("KEYS[2]"),
    r"
      local lease = string.sub(entry, sep + 1)
      redis.call('set', KEYS[1], waiter, 'PX', lease)
      redis.call('publish', ARGV[2], string.format('%s:%d:%s', waiter, fence, lease))
      return 1
    end
  end
end
redis.call('del', KEYS[1])
if ARGV[3] == '1' then
  redis.call('publish', ARGV[2], '-:0:0')
end
return 1
"
);

/// [`RELEASE_LUA`] as a script.
pub(crate) static RELEASE: Lazy<Script> = Lazy::new(|| Script::new(RELEASE_LUA));

/// Changes the lease of a lock the token owns. Returns the lease's new time
/// left in ms, or -1 when the token does not own the lock.
///
/// KEYS: lock key. ARGV: token, ms, mode (`add`: add ms to the time left;
/// `set`: the lease becomes ms).
pub(crate) static EXTEND: Lazy<Script> = Lazy::new(|| {
    Script::new(
        r"
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return -1
end
local ttl = tonumber(ARGV[2])
if ARGV[3] == 'add' then
  local left = redis.call('pttl', KEYS[1])
  if left < 0 then
    return -1
  end
  ttl = ttl + left
end
redis.call('pexpire', KEYS[1], ttl)
return ttl
",
    )
});

/// Renews many leases in one call (the watchdog's batch).
///
/// KEYS: lock keys. ARGV: for each key, its owner's token and the lease in
/// ms. A lease is raised to that many ms if it has less left; it is never
/// shortened (an owner may have extended it further), and 0 only reads it.
/// Returns, per key, the time left in ms, or -1 when the token does not own
/// the lock: a deleted or taken lock is never brought back.
pub(crate) static RENEW: Lazy<Script> = Lazy::new(|| {
    Script::new(
        r"
local left = {}
for i, key in ipairs(KEYS) do
  if redis.call('get', key) == ARGV[2 * i - 1] then
    local ms = tonumber(ARGV[2 * i])
    local ttl = redis.call('pttl', key)
    if ttl < ms then
      redis.call('pexpire', key, ms)
      ttl = ms
    end
    left[i] = ttl
  else
    left[i] = -1
  end
end
return left
",
    )
});

/// Raises a lock's fence counter to a Redlock's fencing token, if the token
/// still owns the lock there (see `Redlock`'s fencing).
///
/// KEYS: lock, fence. ARGV: owner token, fencing token.
/// Returns 1 when the owner token owns the lock (the counter is then at
/// least the fencing token), 0 when not.
pub(crate) static RAISE_FENCE: Lazy<Script> = Lazy::new(|| {
    Script::new(
        r"
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return 0
end
if (tonumber(redis.call('get', KEYS[2])) or 0) < tonumber(ARGV[2]) then
  redis.call('set', KEYS[2], ARGV[2])
end
return 1
",
    )
});

/// An [`ACQUIRE`] call.
pub(crate) fn acquire(
    keys: &Keys,
    token: &str,
    expire: Duration,
    wait: Duration,
) -> ScriptInvocation<'static> {
    let mut invocation = ACQUIRE.prepare_invoke();
    invocation
        .key(&keys.lock)
        .key(&keys.fence)
        .key(&keys.queue)
        .key(&keys.waiters)
        .arg(token)
        .arg(millis(expire))
        .arg(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
    invocation
}

/// A [`RELEASE_LUA`] call sent as EVAL with the source, to give back an
/// acquisition whose answer was not read: it may run after a restart or on
/// a server that never saw the script, where EVALSHA would only say
/// NOSCRIPT long after anyone listened.
pub(crate) fn give_back(keys: &Keys, token: &str) -> redis::Cmd {
    redis::cmd("EVAL")
        .arg(RELEASE_LUA)
        .arg(4)
        .arg(&keys.lock)
        .arg(&keys.fence)
        .arg(&keys.queue)
        .arg(&keys.waiters)
        .arg(token)
        .arg(&keys.channel)
        .to_owned()
}
