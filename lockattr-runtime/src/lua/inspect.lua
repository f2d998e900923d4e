-- INSPECT: what one lock shows on one server.
-- KEYS: lock, fence, waiters.
-- Returns 0 when free, else {<holder>\n<since>..., pttl, fencing token or
-- -1, waiters whose deadline has not passed, sha1 of the owner token}.
local value = redis.call('get', KEYS[1])
if not value then
  return 0
end
local token, who = split_holder(value)
local fence = holder_fence(value) or -1
return {who, redis.call('pttl', KEYS[1]), string.format('%d', fence), live_waiters(KEYS[3]), redis.sha1hex(token)}
