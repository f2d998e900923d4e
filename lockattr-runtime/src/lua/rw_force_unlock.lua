-- rwlock FORCE_UNLOCK: frees the writer whoever it is, as its release
-- would: the fence counter expires after the retention, and the waiters
-- that may take the lock now are admitted (a writer, or the readers up to
-- the first writer), each named on the channel. Readers are never freed.
-- KEYS: write, readers, fence, queue, waiters (as the other rwlock scripts).
-- ARGV: retention ms, the fencing token the writer must have (0: any).
-- Returns 0 when no writer holds (or one with another token), or {1,
-- <holder>\n<since>...} of the writer it was taken from.
local bad, retention = ms_args('retention', ARGV[1], 0)
if bad then
  return bad
end
local bad_token, expected = token_arg('the expected fencing token', ARGV[2], 0)
if bad_token then
  return bad_token
end
local bad_keys = rw_keys()
if bad_keys then
  return bad_keys
end
local value = redis.call('get', KEYS[1])
if not value or (expected > 0 and holder_fence(value) ~= expected) then
  return 0
end
local sep = string.find(value, '\n', 1, true)
local forced = sep and string.sub(value, sep + 1) or ''
redis.call('del', KEYS[1])
redis.call('pexpire', KEYS[3], retention)
admit(false, readers(), retention)
return {1, forced}
