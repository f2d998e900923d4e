-- ACQUIRE: takes the lock if it is free, or queues the caller.
-- KEYS: lock, fence, queue, waiters.
-- ARGV: token, `<lease ms>:<retention ms>:<queued 0|1>:<since ms>:<holder>`,
-- wait ms (0: no wait, and leave the queue).
-- Returns {1, fencing token} when the token holds the lock, {0, pttl of
-- the holder} when not.
local lease, retention, wait, queued, since, who = acquire_args(ARGV[2], '^([^:]*):([^:]*):([01]):(%d+):(.*)$',
  '<lease ms>:<retention ms>:<0 or 1>:<since ms>:<holder>')
if refusal then return refusal end
local token = ARGV[1]
-- The free lock first: an uncontended acquisition costs GET, SET NX and
-- SET of the counter. The counter is written after the lock, and a
-- foreign value at the fence key is refused before anything is written.
local fence = fence_counter(KEYS[2])
if refusal then return refusal end
fence = fence and fence + 1 or clock_us()
if redis.call('set', KEYS[1], token .. '\n' .. who .. '\n' .. since .. '\n' .. string.format('%d', fence), 'NX', 'PX', lease) then
  redis.call('set', KEYS[2], string.format('%d', fence), 'PX', lease + retention)
  if queued == '1' then
    unqueue(KEYS[3], KEYS[4], token)
  end
  return {1, fence}
end
-- Already the token's (a hand-over, or a retry whose answer was lost): its
-- lease restarts, and the token its value carries stands.
local holder = redis.call('get', KEYS[1])
if owns(holder, token) then
  redis.call('pexpire', KEYS[1], lease)
  fence = holder_fence(holder)
  if fence then
    keep_ttl(KEYS[2], lease + retention)
  else
    fence = tonumber(redis.call('get', KEYS[2]))
    if fence then
      keep_ttl(KEYS[2], lease + retention)
    else
      fence = next_fence(KEYS[2], lease + retention)
    end
    redis.call('set', KEYS[1], holder .. string.format('\n%d', fence), 'PX', lease)
  end
  return {1, fence}
end
if wait > 0 then
  enqueue(KEYS[3], KEYS[4], token, wait, lease, '', who)
else
  unqueue(KEYS[3], KEYS[4], token)
end
return {0, redis.call('pttl', KEYS[1])}
