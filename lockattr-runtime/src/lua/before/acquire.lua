-- The lock's ACQUIRE as it was, helpers joined, before its fast path (kept
-- only for the comparison in `tests.rs`: every case answers and writes
-- what this answered and wrote).

-- Helpers joined in front of the scripts that call them (see `build.rs`:
-- a script gets only the functions it reaches, and every other top-level
-- declaration of the shared files, which must each be one line).
--
-- Every script checks its numeric arguments before it writes anything: a
-- check answers an error reply and the script returns it, leaving Redis as
-- it was (Redis does not roll back the writes of a script that fails
-- halfway). Each number is then passed on to Redis as the checked Lua
-- number, never as the caller's text.

-- The most milliseconds any script accepts as a duration: 30 days,
-- `MAX_EXPIRE` (a lease, an extension, a wait, a retention). Far below
-- where Lua's numbers stop printing as integers.
local MAX_MS = 2592000000
-- How far past a guard's fencing token the counter may be for a re-sent
-- release that finds the lock gone to count the lock as released by the
-- first try: a thousand acquisitions, which take far longer than the round
-- trip of a re-send, while a counter started again from the server's clock
-- in microseconds (after Redis lost the lock) is a thousand past any token
-- handed out a millisecond before.
local RECENT_FENCE = 1000
-- 2^53: fencing tokens stay below it, where Lua's doubles are exact.
local MAX_TOKEN = 9007199254740992

-- The error reply of the first bad argument, or nil. A script runs all its
-- checks, then returns `refusal` if one failed: only the first refusal
-- stands, so the checks answer in the order the script runs them.
local refusal

-- How the scripts tell waiters: PUBLISH, which a Redis Cluster carries to
-- every node, or, in the copy of each script that a Cluster runs
-- (`backend::scripts`, `Lua::sharded`, swaps this line), SPUBLISH, which only the
-- shard serving the channel's slot carries.
local publish_command = 'publish'

-- Refuses the call with `message` unless `ok`. Returns `ok`.
local function check(ok, message)
  if not ok and not refusal then
    refusal = redis.error_reply('ERR lockattr: ' .. message)
  end
  return ok
end

-- Checks a duration named `name`: a whole number of milliseconds from `min`
-- to MAX_MS (text, fractions, negatives, NaN and infinities are refused).
-- Returns the number.
local function ms_arg(name, arg, min)
  local n = tonumber(arg)
  if not n or n ~= math.floor(n) or n < min or n > MAX_MS then
    check(false, name .. ' must be a whole number of milliseconds from ' .. min .. ' to ' .. MAX_MS)
  end
  return n
end

-- The fencing counter at `key` (nil when there is none). A value that no
-- script writes there (not a whole number from 0 to 2^53 - 1) is refused,
-- naming the key: a script reads every counter it will count on before it
-- writes anything.
local function fence_counter(key)
  local counter = redis.call('get', key)
  local fence = tonumber(counter)
  if counter and not check(fence and fence == math.floor(fence) and fence >= 0 and fence < MAX_TOKEN,
      'the fence counter ' .. key .. ' holds a foreign value') then
    return nil
  end
  return fence
end

-- Checks an acquisition's arguments: `packed` (ARGV[2], less a read-write
-- lock's side) must match `pattern`, whose first two captures are the lease
-- and the retention in ms (the error names the fields as `shape`), then the
-- wait ARGV[3]. Returns the lease, the retention and the wait in ms, then
-- the pattern's other captures.
local function acquire_args(packed, pattern, shape)
  local lease, retention, a, b, c = string.match(packed or '', pattern)
  if not lease then
    check(false, 'the second argument must be ' .. shape)
    return
  end
  return ms_arg('lease', lease, 1), ms_arg('retention', retention, 0), ms_arg('wait', ARGV[3], 0), a, b, c
end

-- The server's clock in microseconds (below 2^53, exact in a double).
local function clock_us()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- The server's clock in ms, read anew.
local function clock_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The server's clock in ms, read once per call of the script.
local now_ms
local function now()
  now_ms = now_ms or clock_ms()
  return now_ms
end

-- Makes `key` live at least `ms` more (never shorter). A key that is gone
-- stays gone. Whatever grants or extends a hold keeps the fence counter for
-- the hold plus the retention, so a holder's token can never be handed out
-- again while it holds.
local function keep_ttl(key, ms)
  if redis.call('pttl', key) < ms then
    redis.call('pexpire', key, ms)
  end
end

-- The next fencing token of a lock, from its counter key `key`.
--
-- A counter that does not exist yet (a new name, a counter that expired
-- after its retention, or a Redis that restarted without persistence or
-- evicted the key) starts at the server's time in microseconds, not at 1:
-- tokens handed out after the counter was lost are then still larger than
-- every token handed out before, as long as the Redis host's clock does
-- not step back and a name is taken less than a million times a second.
--
-- The counter then lives at least `ttl` ms more (the lease it is taken
-- for plus the retention): a new one is written with it, an existing one
-- whose time to live is shorter is raised to it, never lowered (a
-- semaphore's counter serves longer leases of other permits). Renewal,
-- `extend` and `hold_at_least` raise it the same way, so a counter never
-- expires while a hold it counted is alive, and never lives longer than
-- the retention after the last one ended.
local function next_fence(key, ttl)
  local fence = redis.call('incr', key)
  if fence == 1 then
    fence = clock_us()
    redis.call('set', key, string.format('%d', fence), 'PX', ttl)
  else
    keep_ttl(key, ttl)
  end
  return fence
end

-- Whether the holder value `value` (false when there is none) belongs to
-- the owner token `token`. Every holder's value is
-- `<token>\n<host>\n<pid>\n<label>\n<since ms>\n<fencing token>`, written
-- whole by whoever grants the hold (an acquisition or a hand-over), then a
-- kind's own fields (a permit's number of permits).
local function owns(value, token)
  return value == token or (value and string.sub(value, 1, #token + 1) == token .. '\n')
end

-- The fencing token the holder value `value` carries, or nil when it
-- carries none (written by an older version). Operator calls read a
-- holder's token here, never from the counter.
local function holder_fence(value)
  return tonumber(string.match(value, '^[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n(%d+)'))
end
-- The waiting queue shared by locks, semaphores and read-write locks: the
-- list `queue` of waiting tokens, oldest first, and the hash `waiters` of
-- their entries, `<deadline>:<lease>:<queued at>:<kind's tag><holder>`
-- (all times in ms; the tag is a read-write lock's `r:` or `w:`, empty
-- otherwise). Both expire with the longest wait.

-- Takes `token` out of the queue, if it is in it.
local function unqueue(queue, waiters, token)
  if redis.call('hdel', waiters, token) == 1 then
    redis.call('lrem', queue, 0, token)
  end
end

-- Queues `token` at the end (unless it is queued already) to wait `wait`
-- ms for a lease of `lease` ms.
local function enqueue(queue, waiters, token, wait, lease, tag, who)
  if redis.call('hexists', waiters, token) == 0 then
    local queued_at = now()
    redis.call('rpush', queue, token)
    redis.call('hset', waiters, token, string.format('%d:%d:%d:', queued_at + wait, lease, queued_at) .. tag .. who)
    keep_ttl(queue, wait)
    keep_ttl(waiters, wait)
  end
end

-- The most dead or malformed queue entries one call drops on its way to
-- a live waiter. The rest are left to the next call (every attempt and
-- release drops as many) or to the queue's expiry, so that no call blocks
-- Redis for long however many waiters died without leaving.
local MAX_DROPPED = 100
-- The entries this call has dropped so far.
local dropped = 0
-- Helpers of the read-write lock's scripts. KEYS: write, readers (the
-- index), fence, queue, waiters. `rw_keys` must be called first.

local base, channel, legacy
-- Helpers of the semaphore's scripts. KEYS: fence, queue, waiters, record
-- (the number of permits callers asked for), then one key per permit.

-- The most permits a semaphore may have (`MAX_PERMITS` in Rust).
local MAX_PERMITS = 256
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
