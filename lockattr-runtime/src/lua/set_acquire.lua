-- lockset ACQUIRE_SET: takes every name of a group or none; busy, enters the
-- token as a waiter of each name (when it will wait).
-- KEYS: for each name, its lock, fence, queue and waiters keys.
-- ARGV: token, `<lease ms>:<retention ms>:<since ms>:<holder>`, wait ms (0:
-- no wait, and leave the waiters hashes), queue (1: join the FIFO queue of
-- the first busy name), then each name's channel.
-- Returns {1, fencing token of each name...} or {0, longest time left of a
-- busy name in ms}.
local lease, retention, wait, since, who = acquire_args(ARGV[2], '^([^:]*):([^:]*):(%d+):(.*)$',
  '<lease ms>:<retention ms>:<since ms>:<holder>')
check(#KEYS > 0 and #KEYS % 4 == 0 and #ARGV == 4 + #KEYS / 4 and (ARGV[4] == '0' or ARGV[4] == '1'),
  'the keys must be the lock, fence, queue and waiters keys of each name, the arguments end with 0 or 1 and a channel per name')
if refusal then return refusal end
-- Every name's counter is read before anything is written: a foreign value
-- at any of them refuses the whole set, naming its key, as the lock's
-- ACQUIRE refuses it.
local counters = {}
for i = 1, #KEYS, 4 do
  counters[KEYS[i + 1]] = fence_counter(KEYS[i + 1])
end
if refusal then return refusal end
local busy = -1
local first_busy
for i = 1, #KEYS, 4 do
  local value = redis.call('get', KEYS[i])
  if value and not owns(value, ARGV[1]) then
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
  -- Never part of the set while waiting: what the token holds goes back.
  for i = 1, #KEYS, 4 do
    local value = redis.call('get', KEYS[i])
    if owns(value, ARGV[1]) then
      redis.call('del', KEYS[i])
      redis.call('pexpire', KEYS[i + 1], retention)
      if redis.call('pttl', KEYS[i + 2]) ~= -2 or redis.call('pttl', KEYS[i + 3]) ~= -2 then
        announce(ARGV[4 + (i + 3) / 4], '-:0:0')
      end
    end
  end
  if wait > 0 then
    local now_ms = now()
    -- An entry queued in the FIFO queue has its queue time; one that is
    -- not has 0. A queued entry is kept as it is: it holds its place.
    local entry = string.format('%d:%d:0:', now_ms + wait, lease) .. who
    for i = 1, #KEYS, 4 do
      local old = redis.call('hget', KEYS[i + 3], ARGV[1])
      local queued = old and string.match(old, '^%d+:%d+:(%d+):')
      if ARGV[4] == '1' and i == first_busy and (not queued or queued == '0') then
        redis.call('rpush', KEYS[i + 2], ARGV[1])
        keep_ttl(KEYS[i + 2], wait)
        redis.call('hset', KEYS[i + 3], ARGV[1], string.format('%d:%d:%d:', now_ms + wait, lease, now_ms) .. who)
      elseif not queued or queued == '0' then
        redis.call('hset', KEYS[i + 3], ARGV[1], entry)
      end
      keep_ttl(KEYS[i + 3], wait)
      -- The marker: a release that frees the lock pops it and publishes
      -- `-:0:0`. One at the end, shared by every set.
      redis.call('lrem', KEYS[i + 2], 0, '-')
      redis.call('rpush', KEYS[i + 2], '-')
      keep_ttl(KEYS[i + 2], wait)
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
-- All free (or the token's): each name's counter, as read above, is
-- counted on as a single acquisition counts on it (a missing one starts at
-- the server's clock), unless the name already carries the token's; it
-- then lives at least the lease plus the retention (never shorter).
local fences = {1}
for i = 1, #KEYS, 4 do
  local held = redis.call('get', KEYS[i])
  local fence = held and holder_fence(held)
  if fence then
    keep_ttl(KEYS[i + 1], lease + retention)
  else
    local counter = counters[KEYS[i + 1]]
    fence = counter and counter + 1 or clock_us()
    counters[KEYS[i + 1]] = fence
    local ttl = math.max(redis.call('pttl', KEYS[i + 1]), lease + retention)
    redis.call('set', KEYS[i + 1], string.format('%d', fence), 'PX', ttl)
  end
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
