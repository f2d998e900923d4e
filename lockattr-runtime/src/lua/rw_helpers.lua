-- Helpers of the read-write lock's scripts. KEYS: write, readers (the
-- index), fence, queue, waiters. `rw_keys` must be called first.

local base, channel, legacy
-- Checks the first two keys and names the others from the write key.
-- `legacy` is the set of readers an older version kept (no time to live, a
-- scan per call): read while a rolling deploy runs both versions, never
-- written. Returns whether the keys are right (see `check`).
local function rw_keys()
  if not check(string.sub(KEYS[1], -6) == ':write', 'the first key must be the write key') then
    return false
  end
  base = string.sub(KEYS[1], 1, -7)
  channel, legacy = base .. ':wake', base .. ':readers'
  return check(KEYS[2] ~= legacy, 'the second key must be the readers index')
end

local function read_key(t)
  return base .. ':read:' .. t
end

-- The last write's token (0: none known), kept for a reader's lease.
local function read_fence(lease, retention)
  local fence = tonumber(redis.call('get', KEYS[3]))
  if not fence then
    return 0
  end
  keep_ttl(KEYS[3], lease + retention)
  return fence
end

-- Writes the reader `t`'s key and enters it in the index of readers,
-- scored by the end of its lease (never before the key's own end), which
-- lives as long as its longest reader.
local function add_reader(t, value, lease)
  redis.call('set', read_key(t), value, 'PX', lease)
  redis.call('zadd', KEYS[2], now() + lease, t)
  keep_ttl(KEYS[2], lease)
end

-- The live readers: how many, and with `want_first` the shortest time
-- left (-1: none). The index drops the readers whose lease ended, so a
-- call costs the same whatever their number.
local function readers(want_first)
  redis.call('zremrangebyscore', KEYS[2], '-inf', '(' .. now())
  local n, first = redis.call('zcard', KEYS[2]), -1
  if n > 0 and want_first then
    first = tonumber(redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')[2]) - now()
  end
  if redis.call('exists', legacy) == 1 then
    for _, t in ipairs(redis.call('smembers', legacy)) do
      local left = redis.call('pttl', read_key(t))
      if left == -2 then
        redis.call('srem', legacy, t)
      else
        n = n + 1
        if left >= 0 and (first < 0 or left < first) then
          first = left
        end
      end
    end
  end
  return n, first
end

-- The oldest live waiter (dead entries before it dropped, up to
-- MAX_DROPPED in a call): token, r or w, lease, holder. None when the
-- queue is empty, or when the call stopped at MAX_DROPPED: the waiters are
-- then told to ask again, and the next call drops more.
local function head()
  while true do
    local waiter = redis.call('lindex', KEYS[4], 0)
    if not waiter then
      return nil
    end
    if dropped >= MAX_DROPPED then
      announce(channel, '-:0:0')
      return nil
    end
    local entry = redis.call('hget', KEYS[5], waiter)
    local deadline, lease, side, who
    if entry then
      deadline, lease, side, who = string.match(entry, '^(%d+):(%d+):%d+:([rw]):(.*)$')
      deadline, lease = tonumber(deadline), tonumber(lease)
    end
    if deadline and deadline >= now() and lease and lease >= 1 and lease <= MAX_MS then
      return waiter, side, lease, who
    end
    redis.call('lpop', KEYS[4])
    if entry then
      redis.call('hdel', KEYS[5], waiter)
    end
    dropped = dropped + 1
  end
end

-- Hands the lock to the waiters at the head that may take it now: a writer
-- when nobody holds, each reader up to the first writer while no writer
-- holds. Returns the first notice (or nil), whether a writer holds, and
-- the number of readers.
local function admit(writer_held, nreaders, retention)
  local first
  while not writer_held do
    local waiter, side, lease, who = head()
    if not waiter or (side == 'w' and nreaders > 0) then
      break
    end
    redis.call('lpop', KEYS[4])
    redis.call('hdel', KEYS[5], waiter)
    local notice
    if side == 'w' then
      notice = hand(KEYS[1], KEYS[3], channel, waiter, lease, who, '', retention)
      writer_held = true
    else
      local fence = read_fence(lease, retention)
      add_reader(waiter, waiter .. '\n' .. who .. '\n' .. string.format('%d', now()) .. string.format('\n%d', fence), lease)
      nreaders = nreaders + 1
      notice = string.format('%s:%d:%d', waiter, fence, lease)
      announce(channel, notice)
    end
    first = first or notice
  end
  return first, writer_held, nreaders
end
