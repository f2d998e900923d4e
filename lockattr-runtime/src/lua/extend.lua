-- EXTEND: changes the lease of a hold the token owns.
-- KEYS: holder key, fence counter, index of holders (the holder key again
-- when the kind keeps none).
-- ARGV: token, ms, mode (add, set, raise or hold), max lease ms, retention
-- ms, and for `hold` the channel.
-- Returns the new time left in ms, -1 when not the token's, -2 (nothing
-- changed) beyond the max lease.
local ms = ms_arg('ms', ARGV[2], 1)
local max = ms_arg('max', ARGV[4], 1)
local retention = ms_arg('retention', ARGV[5], 0)
local mode = ARGV[3]
check(mode == 'add' or mode == 'set' or mode == 'raise' or mode == 'hold', 'the mode must be add, set, raise or hold')
check(#KEYS == 3, 'the keys must be the holder, its fence counter and its index')
check(mode ~= 'hold' or ARGV[6], 'the mode hold needs the lock channel')
if refusal then return refusal end
local value = redis.call('get', KEYS[1])
if not owns(value, ARGV[1]) then
  return -1
end
local ttl = ms
if mode == 'add' or mode == 'raise' then
  local left = redis.call('pttl', KEYS[1])
  if left < 0 then
    return -1
  end
  if mode == 'add' then
    ttl = ttl + left
  elseif left >= ttl then
    return left
  end
end
if ttl > max then
  return -2
end
redis.call('pexpire', KEYS[1], ttl)
keep_hold(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ttl, retention)
if mode == 'hold' then
  announce(ARGV[6], string.format('-:0:%d', ttl))
end
return ttl
