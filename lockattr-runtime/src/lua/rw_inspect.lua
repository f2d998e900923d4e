-- rwlock INSPECT: what an operator sees of a read-write lock; writes nothing.
-- KEYS: write, readers, fence, queue, waiters (as the other rwlock scripts).
-- Returns 0 when neither a writer nor a reader holds it, else {the writer
-- (0: none) or {<holder>\n<since>..., pttl, fencing token or -1, sha1 of
-- the owner token}, waiters queued, {the readers (at most 1000), each as
-- the writer}}. A free lock costs `get` and `pttl` alone: the readers'
-- index is read (`zrange`) only when it exists.
rw_keys()
if refusal then return refusal end
local function seen(key)
  local value = redis.call('get', key)
  if not value then
    return nil
  end
  local token, who = split_holder(value)
  return {who, redis.call('pttl', key), string.format('%d', holder_fence(value) or -1), redis.sha1hex(token)}
end
local writer = seen(KEYS[1]) or 0
local tokens = {}
if redis.call('pttl', KEYS[2]) ~= -2 then
  tokens = redis.call('zrange', KEYS[2], 0, 999)
end
if redis.call('pttl', legacy) ~= -2 then
  for _, t in ipairs(redis.call('smembers', legacy)) do
    tokens[#tokens + 1] = t
  end
end
local held = {}
for _, t in ipairs(tokens) do
  local reader = #held < 1000 and seen(read_key(t))
  if reader then
    held[#held + 1] = reader
  end
end
if writer == 0 and #held == 0 then
  return 0
end
return {writer, redis.call('hlen', KEYS[5]), held}
