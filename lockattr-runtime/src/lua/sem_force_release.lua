-- semaphore FORCE_RELEASE: frees the permit held with a fencing token,
-- whoever holds it, as a release does.
-- KEYS: fence, queue, waiters, record, then one key per permit.
-- ARGV: fencing token, retention ms, permits, channel.
-- Returns {1, <holder>\n<since>} of the holder it was taken from, or 0.
local bad, retention = ms_args('retention', ARGV[2], 0)
if bad then
  return bad
end
local bad_permits, permits = permits_arg(ARGV[3])
if bad_permits then
  return bad_permits
end
local bad_token, expected = token_arg('the fencing token', ARGV[1], 1)
if bad_token then
  return bad_token
end
local channel = ARGV[4]
if not channel then
  return redis.error_reply('ERR lockattr: the channel is missing')
end
for i = 1, permits do
  local value = redis.call('get', KEYS[4 + i])
  if value and holder_fence(value) == expected then
    local who = string.match(value, '^[^\n]*\n([^\n]*\n[^\n]*\n[^\n]*\n[^\n]*)') or ''
    free_permit(i, value, channel, retention)
    return {1, who}
  end
end
return 0
