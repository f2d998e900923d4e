-- semaphore INSPECT: what an operator sees of a semaphore.
-- KEYS: fence, queue, waiters, record, then one key per permit known.
-- Returns {recorded permits or -1, waiters queued, per permit 0 (free) or
-- {<holder>\n<since>, pttl, fencing token or -1, sha1 of the owner token,
-- permits recorded or -1}, the first 100 waiters as <holder>\n<queued at>}.
local recorded = tonumber(redis.call('get', KEYS[4])) or -1
local held = {}
for i = 5, #KEYS do
  local value = redis.call('get', KEYS[i])
  if value then
    local token = string.match(value, '^[^\n]*')
    local who = string.match(value, '^[^\n]*\n([^\n]*\n[^\n]*\n[^\n]*\n[^\n]*)') or ''
    local fence = holder_fence(value)
    held[#held + 1] = {who, redis.call('pttl', KEYS[i]), fence and string.format('%d', fence) or '-1', redis.sha1hex(token), permits_of(value) or -1}
  else
    held[#held + 1] = 0
  end
end
local oldest = {}
for _, waiter in ipairs(redis.call('lrange', KEYS[2], 0, 99)) do
  local entry = redis.call('hget', KEYS[3], waiter)
  local queued_at, who
  if entry then
    queued_at, who = string.match(entry, '^%d+:%d+:(%d+):(.*)$')
  end
  if who then
    oldest[#oldest + 1] = who .. '\n' .. queued_at
  end
end
return {recorded, redis.call('hlen', KEYS[3]), held, oldest}
