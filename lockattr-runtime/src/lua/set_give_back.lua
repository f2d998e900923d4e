-- lockset GIVE_BACK_SET: gives back what a set token holds or waits for,
-- name by name (no hand-over: this undoes an attempt). Safe to repeat.
-- KEYS: for each name, its lock, fence, queue and waiters keys.
-- ARGV: token, retention ms, then each name's channel.
-- Returns how many locks it deleted.
local bad, retention = ms_args('retention', ARGV[2], 0)
if bad then
  return bad
end
if #KEYS == 0 or #KEYS % 4 ~= 0 or #ARGV ~= 2 + #KEYS / 4 then
  return redis.error_reply('ERR lockattr: the keys must be the lock, fence, queue and waiters keys of each name, and a channel per name')
end
local deleted = 0
for i = 1, #KEYS, 4 do
  unqueue(KEYS[i + 2], KEYS[i + 3], ARGV[1])
  local value = redis.call('get', KEYS[i])
  if owns(value, ARGV[1]) then
    redis.call('del', KEYS[i])
    redis.call('pexpire', KEYS[i + 1], retention)
    deleted = deleted + 1
    if redis.call('pttl', KEYS[i + 2]) ~= -2 or redis.call('pttl', KEYS[i + 3]) ~= -2 then
      redis.call('publish', ARGV[2 + (i + 3) / 4], '-:0:0')
    end
  end
end
return deleted
