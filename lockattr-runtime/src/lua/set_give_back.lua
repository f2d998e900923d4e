-- lockset GIVE_BACK_SET: gives back what a set token holds or waits for,
-- name by name (no hand-over: this undoes an attempt). Safe to repeat.
-- KEYS: for each name, its lock, fence, queue and waiters keys.
-- ARGV: token, retention ms, then each name's channel.
-- Returns how many locks it deleted.
local retention = ms_arg('retention', ARGV[2], 0)
check(#KEYS > 0 and #KEYS % 4 == 0 and #ARGV == 2 + #KEYS / 4,
  'the keys must be the lock, fence, queue and waiters keys of each name, and a channel per name')
if refusal then return refusal end
local deleted = 0
for i = 1, #KEYS, 4 do
  unqueue(KEYS[i + 2], KEYS[i + 3], ARGV[1])
  local value = redis.call('get', KEYS[i])
  if owns(value, ARGV[1]) then
    redis.call('del', KEYS[i])
    redis.call('pexpire', KEYS[i + 1], retention)
    deleted = deleted + 1
    if redis.call('pttl', KEYS[i + 2]) ~= -2 or redis.call('pttl', KEYS[i + 3]) ~= -2 then
      announce(ARGV[2 + (i + 3) / 4], '-:0:0')
    end
  end
end
return deleted
