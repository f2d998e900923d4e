-- The lock's RELEASE as it was, helpers joined, before its fast path (kept
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

-- The lines of the holder value `value` after its fencing token, with
-- their leading line break (a kind's own fields), or ''. A hand-over copies
-- them into the new holder's value.
local function kind_fields(value)
  return string.match(value, '^[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*(\n.*)$') or ''
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

-- Takes the oldest waiter whose deadline has not passed out of the queue
-- (the dead or malformed entries before it are dropped, up to
-- MAX_DROPPED in a call). Returns its token, lease and holder (nil when
-- none is left), whether the marker `-` (never a token; see the lock's
-- release) was popped on the way, and whether the call stopped at
-- MAX_DROPPED with entries left (live waiters may be behind them). An
-- entry may lack the queue time and the holder (`<deadline>:<lease>`,
-- written by an older version).
local function pop_waiter(queue, waiters)
  local marker = false
  while true do
    if dropped >= MAX_DROPPED and redis.call('llen', queue) > 0 then
      return nil, nil, nil, marker, true
    end
    local waiter = redis.call('lpop', queue)
    if not waiter then
      return nil, nil, nil, marker
    end
    marker = marker or waiter == '-'
    local entry = redis.call('hget', waiters, waiter)
    if entry then
      local at = now()
      redis.call('hdel', waiters, waiter)
      local sep = string.find(entry, ':', 1, true)
      local sep2 = sep and string.find(entry, ':', sep + 1, true)
      local deadline = sep and tonumber(string.sub(entry, 1, sep - 1))
      local lease = sep and tonumber(string.sub(entry, sep + 1, (sep2 or 0) - 1))
      local who = sep2 and string.sub(entry, sep2 + 1) or ''
      local sep3 = sep2 and string.find(entry, ':', sep2 + 1, true)
      if sep3 and string.match(string.sub(entry, sep2 + 1, sep3 - 1), '^%d+$') then
        who = string.sub(entry, sep3 + 1)
      end
      if deadline and deadline >= at and lease and lease == math.floor(lease)
          and lease >= 1 and lease <= MAX_MS then
        return waiter, lease, who, marker
      end
    end
    dropped = dropped + 1
  end
end

-- The entries of the waiters hash `waiters`, as `{token, entry, ...}`; nil
-- where the server refuses HGETALL (an ACL user given the rules of an
-- earlier version).
local function waiter_entries(waiters)
  local entries = redis.pcall('hgetall', waiters)
  if type(entries) == 'table' and not entries.err then
    return entries
  end
end

-- Whether the waiter entry `entry` (`<deadline>:...`) is past its deadline.
local function dead_entry(entry)
  local deadline = tonumber(string.match(entry, '^(%d+):'))
  return deadline ~= nil and deadline < now()
end

-- Drops the entries of the waiters hash `waiters` whose deadline has
-- passed. A queued waiter's dead entry goes when a release pops its token,
-- but a set waiter outside the queue is never popped: a waiter that died
-- without giving back (a killed process) would keep its entry, and the
-- marker `-`, for as long as a live waiter keeps the hash. Without HGETALL
-- they stay until the hash expires.
local function drop_dead(waiters)
  local entries = waiter_entries(waiters) or {}
  for i = 1, #entries, 2 do
    if dead_entry(entries[i + 1]) then
      redis.call('hdel', waiters, entries[i])
    end
  end
end

-- Gives the holder key `key` to `waiter` for `lease` ms with a new fencing
-- token from `fence_key`, its value a holder's followed by `fields` (a
-- kind's own), and tells it on `channel`. Returns the notice published,
-- `<waiter's token>:<fencing token>:<lease ms>`.
local function hand(key, fence_key, channel, waiter, lease, who, fields, retention)
  local fence = next_fence(fence_key, lease + retention)
  redis.call('set', key, waiter .. '\n' .. who .. '\n' .. string.format('%d', now()) .. '\n' .. string.format('%d', fence) .. fields, 'PX', lease)
  local notice = string.format('%s:%d:%d', waiter, fence, lease)
  announce(channel, notice)
  return notice
end

-- Ends the release of the lock KEYS[k] (fence KEYS[k + 1], queue
-- KEYS[k + 2], waiters KEYS[k + 3]), whose holder value was `value`: hands
-- it to the oldest waiter whose deadline has not passed, or deletes it.
--
-- Within the barging window (`barge` ms after the oldest waiter queued) the
-- lock is deleted instead and the oldest waiter named with `<token>:0:0`,
-- to race for it. A release that pops the marker `-` first drops the dead
-- entries of the waiters hash (`drop_dead`: those of set waiters are in no
-- queue). A hand-over copies the kind's fields of `value`; one that popped
-- the marker puts it back at the end while an entry is left in the waiters
-- hash (with that hash's time to live when the pop emptied the queue). A
-- deletion publishes `-:0:0` when `notify` is '1', the marker was popped,
-- or the pop stopped at MAX_DROPPED (the live waiters left ask again),
-- and lets the counter expire after `retention`; when `shared` (a
-- semaphore's permits share the counter) it only raises the counter's time
-- to live, never lowers it under the other holders.
-- Returns the notice published for the waiter handed the lock, or 1 when
-- it was deleted.
local function hand_over(k, channel, notify, barge, shared, retention, value)
  if barge > 0 then
    local oldest = redis.call('lindex', KEYS[k + 2], 0)
    local entry = oldest and redis.call('hget', KEYS[k + 3], oldest)
    if entry then
      local deadline, queued_at = string.match(entry, '^(%d+):%d+:(%d+):')
      if queued_at and tonumber(deadline) >= now() and tonumber(queued_at) + barge > now() then
        redis.call('del', KEYS[k])
        redis.call('pexpire', KEYS[k + 1], retention)
        local notice = oldest .. ':0:0'
        announce(channel, notice)
        return notice
      end
    end
  end
  local waiter, lease, who, marker, more = pop_waiter(KEYS[k + 2], KEYS[k + 3])
  if marker then
    drop_dead(KEYS[k + 3])
  end
  if waiter then
    local notice = hand(KEYS[k], KEYS[k + 1], channel, waiter, lease, who, value and kind_fields(value) or '', retention)
    if marker then
      local wait_ttl = redis.call('pttl', KEYS[k + 3])
      if wait_ttl > 0 then
        redis.call('rpush', KEYS[k + 2], '-')
        if redis.call('pttl', KEYS[k + 2]) < 0 then
          redis.call('pexpire', KEYS[k + 2], wait_ttl)
        end
      end
    end
    return notice
  end
  redis.call('del', KEYS[k])
  if shared then
    keep_ttl(KEYS[k + 1], retention)
  else
    redis.call('pexpire', KEYS[k + 1], retention)
  end
  if notify == '1' or marker or more then
    announce(channel, '-:0:0')
  end
  return 1
end

-- Releases the lock KEYS[k] (with the three keys after it, as `hand_over`)
-- if `token` owns it, handing it to the oldest live waiter; a token that
-- does not own it leaves the queue instead. `granted` is the fencing token
-- the token was granted (0: none). Returns 1 (deleted), the notice (handed
-- over), 0 (not the token's), or 2 (not the token's, but the counter is
-- near the granted token).
local function release_name(k, token, channel, notify, barge, shared, retention, granted)
  local value = redis.call('get', KEYS[k])
  if not owns(value, token) then
    unqueue(KEYS[k + 2], KEYS[k + 3], token)
    if recent_fence(KEYS[k + 1], granted) then
      return 2
    end
    return 0
  end
  return hand_over(k, channel, notify, barge, shared, retention, value)
end
-- Helpers of the read-write lock's scripts. KEYS: write, readers (the
-- index), fence, queue, waiters. `rw_keys` must be called first.

local base, channel, legacy
-- Helpers of the semaphore's scripts. KEYS: fence, queue, waiters, record
-- (the number of permits callers asked for), then one key per permit.

-- The most permits a semaphore may have (`MAX_PERMITS` in Rust).
local MAX_PERMITS = 256
-- RELEASE: releases the lock if the token owns it, handing it to the oldest
-- live waiter (see `hand_over`); a token that does not own it leaves the
-- queue instead.
-- KEYS: lock, fence, queue, waiters.
-- ARGV: token, channel, notify (1: publish `-:0:0` when the lock is
-- deleted), retention ms, the fencing token granted (0: none), barging
-- window ms, shared (1: the counter serves other live holders), and,
-- optionally, a successor: the token of a waiter of the releasing process
-- and `<its lease ms>:<its wait ms>:<its holder>`. The successor takes the
-- lock at once when nobody is queued; otherwise it is queued last and the
-- oldest waiter is served, as always. A token that does not own the lock
-- leaves its successor untouched.
-- Returns 1 (deleted), the notice (handed over), 0 (not the token's), or 2
-- (not the token's, but the counter is near the granted token).
local retention = ms_arg('retention', ARGV[4], 0)
local barge = ms_arg('barge', ARGV[6], 0)
local granted = token_arg('the fencing token', ARGV[5], 0)
local successor = ARGV[8]
local lease, wait, who
if successor then
  local l, w, h = string.match(ARGV[9] or '', '^([^:]*):([^:]*):(.*)$')
  check(l and successor ~= '' and not string.find(successor, ':', 1, true),
    'a successor needs a token without a colon and <lease ms>:<wait ms>:<holder>')
  lease, wait, who = ms_arg('lease', l, 1), ms_arg('wait', w, 1), h
end
if refusal then return refusal end
if successor then
  local value = redis.call('get', KEYS[1])
  if owns(value, ARGV[1]) then
    if redis.call('exists', KEYS[3]) == 0 then
      return hand(KEYS[1], KEYS[2], ARGV[2], successor, lease, who, kind_fields(value), retention)
    end
    enqueue(KEYS[3], KEYS[4], successor, wait, lease, '', who)
  end
end
return release_name(1, ARGV[1], ARGV[2], ARGV[3], barge, ARGV[7] == '1', retention, granted)
