-- EXTEND: changes the lease of a hold the token owns.
-- KEYS: holder key, fence counter, index of holders (the holder key again
-- when the kind keeps none).
-- ARGV: token, ms, mode (add, set, raise or hold), max lease ms, retention
-- ms, and for `hold` the channel.
-- Returns the new time left in ms, -1 when not the token's, -2 (nothing
-- changed) beyond the max lease.
local bad, ms, max, retention = ms_args('ms', ARGV[2], 1, 'max', ARGV[4], 1, 'retention', ARGV[5], 0)
if bad then
  return bad
end
local mode = ARGV[3]
if mode ~= 'add' and mode ~= 'set' and mode ~= 'raise' and mode ~= 'hold' then
  return redis.error_reply('ERR lockattr: the mode must be add, set, raise or hold')
end
if #KEYS ~= 3 then
  return redis.error_reply('ERR lockattr: the keys must be the holder, its fence counter and its index')
end
if mode == 'hold' and not ARGV[6] then
  return redis.error_reply('ERR lockattr: the mode hold needs the lock channel')
end
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
  redis.call('publish', ARGV[6], string.format('-:0:%d', ttl))
end
return ttl
