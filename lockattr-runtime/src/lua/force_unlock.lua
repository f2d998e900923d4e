-- FORCE_UNLOCK: frees a lock whoever holds it, as its owner's release would.
-- KEYS: lock, fence, queue, waiters.
-- ARGV: channel, notify, retention ms, the fencing token the holder must
-- have (0: any holder).
-- Returns 0 when the lock was free (or held under another token), or
-- {1, <holder>\n<since>...} of the holder it was taken from.
local retention = ms_arg('retention', ARGV[3], 0)
local expected = token_arg('the expected fencing token', ARGV[4], 0)
if refusal then return refusal end
local value, forced = held_with(KEYS[1], expected)
if not value then
  return 0
end
hand_over(1, ARGV[1], ARGV[2], 0, false, retention, value)
return {1, forced}
