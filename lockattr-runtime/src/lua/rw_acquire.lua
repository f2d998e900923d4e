-- rwlock ACQUIRE: takes one side of a read-write lock, or queues the caller.
-- KEYS: write, readers, fence, queue, waiters.
-- ARGV: token, `<r|w>:<lease ms>:<retention ms>:<queued 0|1>:<since
-- ms>:<holder>`, wait ms (0: no wait, and leave the queue).
-- Returns {1, fencing token} when the token holds its side, {0, pttl of
-- the holder whose lease ends first, or -1} when not.
local side, packed = string.match(ARGV[2], '^([rw]):(.*)$')
local lease, retention, wait, queued, since, who = acquire_args(packed, '^([^:]*):([^:]*):([01]):(%d+):(.*)$',
  '<r or w>:<lease ms>:<retention ms>:<0 or 1>:<since ms>:<holder>')
rw_keys()
if refusal then return refusal end
local token = ARGV[1]
local mine_key = KEYS[1]
if side == 'r' then
  mine_key = read_key(token)
end
-- Whether the token holds its side (a hand-over, or a retry whose answer
-- was lost): its lease restarts.
local function held()
  local value = redis.call('get', mine_key)
  if not owns(value, token) then
    return nil
  end
  redis.call('pexpire', mine_key, lease)
  unqueue(KEYS[4], KEYS[5], token)
  local fence = holder_fence(value)
  if side == 'r' then
    redis.call('zadd', KEYS[2], now() + lease, token)
    keep_ttl(KEYS[2], lease)
    return {1, fence or read_fence(lease, retention)}
  end
  if fence then
    keep_ttl(KEYS[3], lease + retention)
  else
    fence = next_fence(KEYS[3], lease + retention)
  end
  return {1, fence}
end
local reply = held()
if reply then
  return reply
end
local nreaders = readers()
local writer_held = redis.call('exists', KEYS[1]) == 1
local handed
handed, writer_held, nreaders = admit(writer_held, nreaders, retention)
if handed then
  -- Perhaps to this very token (queued by an earlier call).
  reply = held()
  if reply then
    return reply
  end
end
if not writer_held and (side == 'r' or nreaders == 0)
    and redis.call('hexists', KEYS[5], token) == 0 and not head() then
  local value = token .. '\n' .. who .. '\n' .. since .. '\n'
  if side == 'r' then
    local fence = read_fence(lease, retention)
    add_reader(token, value .. string.format('%d', fence), lease)
    return {1, fence}
  end
  local fence = next_fence(KEYS[3], lease + retention)
  redis.call('set', mine_key, value .. string.format('%d', fence), 'PX', lease)
  return {1, fence}
end
if wait > 0 then
  enqueue(KEYS[4], KEYS[5], token, wait, lease, side .. ':', who)
else
  unqueue(KEYS[4], KEYS[5], token)
end
local first_end = redis.call('pttl', KEYS[1])
if first_end < 0 then
  first_end = -1
end
local _, readers_end = readers(true)
if readers_end >= 0 and (first_end < 0 or readers_end < first_end) then
  first_end = readers_end
end
return {0, first_end}
