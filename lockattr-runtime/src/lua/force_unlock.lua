-- FORCE_UNLOCK: frees a lock whoever holds it, as its owner's release would.
-- KEYS: lock, fence, queue, waiters.
-- ARGV: channel, notify, retention ms, the fencing token the holder must
-- have (0: any holder).
-- Returns 0 when the lock was free (or held under another token), or
-- {1, <holder>\n<since>...} of the holder it was taken from.
local retention = ms_arg('retention', ARGV[3], 0)
local expected = token_arg('the expected fencing token', ARGV[4], 0)
if refusal then return refusal end
local value = redis.call('get', KEYS[1])
if not value or (expected > 0 and holder_fence(value) ~= expected) then
  return 0
end
local sep = string.find(value, '\n', 1, true)
local forced = sep and string.sub(value, sep + 1) or ''
hand_over(ARGV[1], ARGV[2], 0, false, retention, value)
return {1, forced}
