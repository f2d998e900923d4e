-- semaphore ACQUIRE: takes a permit, or queues the caller.
-- KEYS: fence, queue, waiters, record, then one key per permit (or, with
-- `every`, the keys of all MAX_PERMITS permits).
-- ARGV: token, `<lease ms>:<retention ms>:<queued 0|1>:<since ms>:<holder>`,
-- wait ms (0: no wait, and leave the queue), permits, channel, every (1:
-- look at every permit; 0 or none: the caller's permits only).
-- Returns {1, fencing token, permit index}, {0, pttl of the permit that
-- ends first or -1}, {-1, the semaphore's number of permits or -1} (in
-- use with another number) or {-2, 0} (ask again looking at every permit).
local lease, retention, wait, queued, since, who = acquire_args(ARGV[2], '^([^:]*):([^:]*):([01]):(%d+):(.*)$',
  '<lease ms>:<retention ms>:<0 or 1>:<since ms>:<holder>')
local every = ARGV[6] == '1'
check(not ARGV[6] or ARGV[6] == '0' or every, 'the sixth argument must be 0 or 1')
local permits = permits_arg(ARGV[4], every)
local channel = channel_arg(ARGV[5])
if refusal then return refusal end
local token = ARGV[1]
local FIVE_LINES = '^([^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*)'
local number = '\n' .. string.format('%d', permits)
local keep = math.max(lease + retention, wait)
local function remember()
  if redis.call('pttl', KEYS[4]) < keep then
    redis.call('set', KEYS[4], string.format('%d', permits), 'PX', keep)
  end
end
local free = {}
local first_end = -1
-- A permit records this number of permits, or another.
local known, other = false, nil
for i = 1, permits do
  local value = redis.call('get', KEYS[4 + i])
  if owns(value, token) then
    -- A hand-over (or a retry whose answer was lost): the token its value
    -- carries stands, so an operator who saw it can still name it.
    local fence = holder_fence(value)
    if fence and permits_of(value) then
      redis.call('pexpire', KEYS[4 + i], lease)
      keep_ttl(KEYS[1], lease + retention)
    else
      fence = fence or next_fence(KEYS[1], lease + retention)
      local fields = permits_of(value) and kind_fields(value) or number
      redis.call('set', KEYS[4 + i], (string.match(value, FIVE_LINES) or value) .. '\n' .. string.format('%d', fence) .. fields, 'PX', lease)
    end
    if queued == '1' then
      unqueue(KEYS[2], KEYS[3], token)
    end
    remember()
    return {1, fence, i - 1}
  end
  if value then
    local n = permits_of(value)
    if n == permits then
      known = true
    elseif n and not other then
      other = n
    end
    local left = redis.call('pttl', KEYS[4 + i])
    if first_end < 0 or left < first_end then
      first_end = left
    end
  else
    free[#free + 1] = i
  end
end
if other then
  return {-1, other}
end
local recorded = redis.call('get', KEYS[4])
if recorded and recorded ~= string.format('%d', permits) then
  return {-1, tonumber(recorded) or -1}
end
-- Holders of a semaphore of more permits may hold only permits beyond
-- this caller's number. Not when the fence counter is gone: every live
-- permit keeps it for its hold plus the retention, so nobody holds one.
if not recorded and not known and permits < MAX_PERMITS and redis.call('pttl', KEYS[1]) ~= -2 then
  if not every then
    return {-2, 0}
  end
  for i = permits + 1, MAX_PERMITS do
    local value = redis.call('get', KEYS[4 + i])
    if value then
      return {-1, permits_of(value) or -1}
    end
  end
end
-- Free permits go to the queued waiters first, oldest first.
local mine
local drained = false
while #free > 0 and not drained do
  local waiter, wlease, wwho, _, more = pop_waiter(KEYS[2], KEYS[3])
  if not waiter then
    drained = true
    if more then
      -- Dead entries left in the queue: the live waiters behind them ask
      -- again.
      announce(channel, '-:0:0')
    end
  elseif waiter == token and not mine then
    mine = table.remove(free, 1)
  else
    hand(KEYS[4 + table.remove(free, 1)], KEYS[1], channel, waiter, wlease, wwho, number, retention)
  end
end
if not mine and #free > 0 then
  mine = free[1]
end
if mine then
  local fence = next_fence(KEYS[1], lease + retention)
  redis.call('set', KEYS[4 + mine], token .. '\n' .. who .. '\n' .. since .. '\n' .. string.format('%d', fence) .. number, 'PX', lease)
  unqueue(KEYS[2], KEYS[3], token)
  remember()
  return {1, fence, mine - 1}
end
if wait > 0 then
  enqueue(KEYS[2], KEYS[3], token, wait, lease, '', who)
  remember()
else
  unqueue(KEYS[2], KEYS[3], token)
end
return {0, first_end}
