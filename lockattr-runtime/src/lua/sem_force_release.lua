-- semaphore FORCE_RELEASE: frees the permit held with a fencing token,
-- whoever holds it, as a release does.
-- KEYS: fence, queue, waiters, record, then one key per permit.
-- ARGV: fencing token, retention ms, permits, channel.
-- Returns {1, <holder>\n<since>} of the holder it was taken from, or 0.
local retention = ms_arg('retention', ARGV[2], 0)
local permits = permits_arg(ARGV[3])
local expected = token_arg('the fencing token', ARGV[1], 1)
local channel = channel_arg(ARGV[4])
if refusal then return refusal end
for i = 1, permits do
  local value = redis.call('get', KEYS[4 + i])
  if value and holder_fence(value) == expected then
    local who = string.match(value, '^[^\n]*\n([^\n]*\n[^\n]*\n[^\n]*\n[^\n]*)') or ''
    free_permit(i, value, channel, retention)
    return {1, who}
  end
end
return 0
