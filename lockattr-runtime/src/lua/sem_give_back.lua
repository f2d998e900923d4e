-- semaphore GIVE_BACK: the permit the token holds goes to the oldest waiter
-- (or is deleted), or the token leaves the queue. Safe to repeat.
-- KEYS: fence, queue, waiters, record, then one key per permit.
-- ARGV: token, retention ms, permits, channel.
-- Returns 1 when a permit was given back, 0 when the token held none.
local bad, retention = ms_args('retention', ARGV[2], 0)
if bad then
  return bad
end
local bad_permits, permits = permits_arg(ARGV[3])
if bad_permits then
  return bad_permits
end
local channel = ARGV[4]
if not channel then
  return redis.error_reply('ERR lockattr: the channel is missing')
end
local token = ARGV[1]
for i = 1, permits do
  local value = redis.call('get', KEYS[4 + i])
  if owns(value, token) then
    free_permit(i, value, channel, retention)
    return 1
  end
end
unqueue(KEYS[2], KEYS[3], token)
return 0
