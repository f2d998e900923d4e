-- rwlock FORCE_UNLOCK: frees the writer whoever it is, as its release
-- would: the fence counter expires after the retention, and the waiters
-- that may take the lock now are admitted (a writer, or the readers up to
-- the first writer), each named on the channel. Readers are never freed.
-- KEYS: write, readers, fence, queue, waiters (as the other rwlock scripts).
-- ARGV: retention ms, the fencing token the writer must have (0: any).
-- Returns 0 when no writer holds (or one with another token), or {1,
-- <holder>\n<since>...} of the writer it was taken from.
local retention = ms_arg('retention', ARGV[1], 0)
local expected = token_arg('the expected fencing token', ARGV[2], 0)
rw_keys()
if refusal then return refusal end
local value, forced = held_with(KEYS[1], expected)
if not value then
  return 0
end
redis.call('del', KEYS[1])
redis.call('pexpire', KEYS[3], retention)
admit(false, readers(), retention)
return {1, forced}
