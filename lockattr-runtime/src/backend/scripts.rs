//! The Lua scripts, one static [`Script`] each. `Script::invoke_async` sends
//! EVALSHA and loads the script once on NOSCRIPT (first use, or after a Redis
//! restart emptied the script cache).

use once_cell::sync::Lazy;
use redis::Script;

/// Takes the lock if it is free, in one round trip.
///
/// KEYS: lock key, fence key. ARGV: token, expire in ms.
/// Returns `{1, fencing token}` when taken, `{0, pttl of the holder}` when not.
/// A repeated call with the token that already holds the lock (a retry whose
/// first answer was lost) counts as taken and restarts the lease.
pub(crate) static ACQUIRE: Lazy<Script> = Lazy::new(|| {
    // The counter is incremented before the lock is written: if the INCR
    // fails (a foreign value at the fence key), the script stops with
    // nothing locked. Redis does not roll back a failed script's writes.
    Script::new(
        r"
local holder = redis.call('get', KEYS[1])
if holder == false or holder == ARGV[1] then
  local fence = redis.call('incr', KEYS[2])
  redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, fence}
end
return {0, redis.call('pttl', KEYS[1])}
",
    )
});

/// Deletes the lock only if the token still owns it. Returns 1, or 0 when not owned.
///
/// KEYS: lock key. ARGV: token.
pub(crate) const RELEASE_LUA: &str = r"
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0
";

/// [`RELEASE_LUA`] as a script.
pub(crate) static RELEASE: Lazy<Script> = Lazy::new(|| Script::new(RELEASE_LUA));

/// Changes the lease of a lock the token owns. Returns 1, or 0 when not owned.
///
/// KEYS: lock key. ARGV: token, ms, mode (`add`: add ms to the time left;
/// `set`: the lease becomes ms).
pub(crate) static EXTEND: Lazy<Script> = Lazy::new(|| {
    Script::new(
        r"
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return 0
end
local ttl = tonumber(ARGV[2])
if ARGV[3] == 'add' then
  local left = redis.call('pttl', KEYS[1])
  if left < 0 then
    return 0
  end
  ttl = ttl + left
end
return redis.call('pexpire', KEYS[1], ttl)
",
    )
});
