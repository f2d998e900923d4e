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

-- Publishes `notice` on `channel` with `publish_command`. A server that
-- refuses SPUBLISH (older than Redis 7, or an ACL) gets PUBLISH, as its
-- waiters, refused SSUBSCRIBE, listen with SUBSCRIBE.
local function announce(channel, notice)
  if publish_command ~= 'publish' and type(redis.pcall(publish_command, channel, notice)) == 'number' then
    return
  end
  redis.call('publish', channel, notice)
end

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

-- Checks a fencing token argument (`what` names it in the error): a whole
-- number from `min` to 2^53 - 1. Returns the number.
local function token_arg(what, arg, min)
  local n = tonumber(arg)
  if not n or n ~= math.floor(n) or n < min or n >= MAX_TOKEN then
    check(false, what .. ' must be a whole number from ' .. min .. ' to 2^53 - 1')
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

-- The owner token of the holder value `value`, and what an operator is
-- shown of its holder (`<host>\n<pid>\n<label>\n<since>...`).
local function split_holder(value)
  local sep = string.find(value, '\n', 1, true)
  if not sep then
    return value, ''
  end
  return string.sub(value, 1, sep - 1), string.sub(value, sep + 1)
end

-- The holder value at `key` and what an operator is shown of its holder,
-- when it carries the fencing token `expected` (0: any holder); nil when
-- nobody (or another holder) holds it. What an operator's forced unlock
-- frees.
local function held_with(key, expected)
  local value = redis.call('get', key)
  if not value or (expected > 0 and holder_fence(value) ~= expected) then
    return nil
  end
  local _, who = split_holder(value)
  return value, who
end

-- The lines of the holder value `value` after its fencing token, with
-- their leading line break (a kind's own fields), or ''. A hand-over copies
-- them into the new holder's value.
local function kind_fields(value)
  return string.match(value, '^[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*(\n.*)$') or ''
end

-- Run when a hold's time left becomes `ttl` ms (renewal, `extend`,
-- `hold_at_least`): the fence counter `fence` lives at least the hold plus
-- `retention`, and the kind's index of holders `index` (a sorted set scored
-- by each holder's end, such as a read-write lock's readers; the holder's
-- own key when the kind has none) records the new end of `token` and lives
-- at least as long. So no key of a kind expires under a hold that is
-- renewed, whatever the kind.
local function keep_hold(holder, fence, index, token, ttl, retention)
  keep_ttl(fence, ttl + retention)
  if index ~= holder then
    redis.call('zadd', index, clock_ms() + ttl, token)
    keep_ttl(index, ttl)
  end
end

-- Whether a release by a token that no longer holds its lock may have been
-- the first try's: it was granted `granted` (0: none) and the counter
-- `fence_key` is at most RECENT_FENCE past it (not a counter started again
-- from the clock because Redis lost the lock).
local function recent_fence(fence_key, granted)
  if granted > 0 then
    local fence = tonumber(redis.call('get', fence_key))
    return fence and fence >= granted and fence - granted <= RECENT_FENCE
  end
  return false
end
