-- semaphore GIVE_BACK: the permit the token holds goes to the oldest waiter
-- (or is deleted), or the token leaves the queue. Safe to repeat.
-- KEYS: fence, queue, waiters, record, then one key per permit.
-- ARGV: token, retention ms, permits, channel.
-- Returns 1 when a permit was given back, 0 when the token held none.
local retention = ms_arg('retention', ARGV[2], 0)
local permits = permits_arg(ARGV[3])
local channel = channel_arg(ARGV[4])
if refusal then return refusal end
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
