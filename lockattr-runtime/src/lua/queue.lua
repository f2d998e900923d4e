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
-- marker `-`, for as long as a live waiter keeps the hash. At most
-- MAX_DROPPED in a call (with those `pop_waiter` dropped): the rest go with
-- the next call that pops a marker, or when the hash expires. Without
-- HGETALL they stay until the hash expires.
local function drop_dead(waiters)
  local entries = waiter_entries(waiters) or {}
  for i = 1, #entries, 2 do
    if dropped >= MAX_DROPPED then
      return
    end
    if dead_entry(entries[i + 1]) then
      redis.call('hdel', waiters, entries[i])
      dropped = dropped + 1
    end
  end
end

-- How many entries of the waiters hash `waiters` have not passed their
-- deadline: the waiters an operator is shown. Every entry (HLEN) where the
-- server refuses HGETALL.
local function live_waiters(waiters)
  local entries = waiter_entries(waiters)
  if not entries then
    return redis.call('hlen', waiters)
  end
  local live = 0
  for i = 2, #entries, 2 do
    if not dead_entry(entries[i]) then
      live = live + 1
    end
  end
  return live
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
