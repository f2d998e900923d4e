-- lockset RELEASE_SET: releases every name of a set taken under one token,
-- each as the lock's release does (handed to its oldest live waiter, or
-- deleted), in one call.
-- KEYS: for each name, its lock, fence, queue and waiters keys.
-- ARGV: token, notify (1: publish `-:0:0` when a lock is deleted),
-- retention ms, barging window ms, then for each name its channel and the
-- fencing token it was granted (0: none).
-- Returns, for each name in order, what the lock's release returns: 1
-- (deleted), the notice (handed over), 0 (not the token's), or 2 (not the
-- token's, but the counter is near the granted token).
local retention = ms_arg('retention', ARGV[3], 0)
local barge = ms_arg('barge', ARGV[4], 0)
check(#KEYS > 0 and #KEYS % 4 == 0 and #ARGV == 4 + #KEYS / 2 and (ARGV[2] == '0' or ARGV[2] == '1'),
  'the keys must be the lock, fence, queue and waiters keys of each name, and the arguments end with a channel and a fencing token per name')
local granted = {}
for i = 6, #ARGV, 2 do
  granted[#granted + 1] = token_arg('the fencing token', ARGV[i], 0)
end
if refusal then return refusal end
local released = {}
for i = 1, #KEYS, 4 do
  local n = (i + 3) / 4
  released[n] = release_name(i, ARGV[1], ARGV[4 + 2 * n - 1], ARGV[2], barge, false, retention, granted[n])
end
return released
