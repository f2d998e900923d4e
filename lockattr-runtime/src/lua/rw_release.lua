-- rwlock RELEASE: releases one side if the token holds it, then admits the
-- waiters that may take the lock now; a token that holds nothing leaves
-- the queue instead. Safe to repeat.
-- KEYS: write, readers, fence, queue, waiters, the key the token holds.
-- ARGV: token, channel (unused), notify (unused), retention ms, the fencing
-- token granted, barge (unused).
-- Returns the first notice published, 1 (released), 0 (not the token's),
-- or 2 (not the token's, but it may have just released it).
local retention = ms_arg('retention', ARGV[4], 0)
local granted = token_arg('the fencing token', ARGV[5], 0)
if not rw_keys() then return refusal end
local token = ARGV[1]
local key = KEYS[6]
local writing = key == KEYS[1]
check(writing or key == read_key(token), 'the sixth key must be the write key or the reader key of the token')
if refusal then return refusal end
local value = redis.call('get', key)
if not owns(value, token) then
  unqueue(KEYS[4], KEYS[5], token)
  if not writing then
    redis.call('zrem', KEYS[2], token)
    redis.call('srem', legacy, token)
    return 2
  end
  if recent_fence(KEYS[3], granted) then
    return 2
  end
  return 0
end
redis.call('del', key)
if writing then
  redis.call('pexpire', KEYS[3], retention)
else
  redis.call('zrem', KEYS[2], token)
  redis.call('srem', legacy, token)
end
local nreaders = readers()
local first = admit(redis.call('exists', KEYS[1]) == 1, nreaders, retention)
if first then
  return first
end
return 1
