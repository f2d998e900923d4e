-- RAISE_FENCE: raises a lock's fence counter to a Redlock's fencing token,
-- if the owner token still owns the lock there. Safe to repeat.
-- KEYS: lock, fence.
-- ARGV: owner token, fencing token, retention ms.
-- Returns 1 when the owner token owns the lock, 0 when not.
local token = token_arg('the fencing token', ARGV[2], 1)
local retention = ms_arg('retention', ARGV[3], 0)
if refusal then return refusal end
local value = redis.call('get', KEYS[1])
if not owns(value, ARGV[1]) then
  return 0
end
local left = math.max(redis.call('pttl', KEYS[1]), 1)
if (tonumber(redis.call('get', KEYS[2])) or 0) < token then
  redis.call('set', KEYS[2], string.format('%d', token), 'PX', left + retention)
end
local head, rest = string.match(value, '^([^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*)\n%d+(.*)$')
if head then
  redis.call('set', KEYS[1], head .. string.format('\n%d', token) .. rest, 'PX', left)
end
return 1
