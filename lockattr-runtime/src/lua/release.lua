-- RELEASE: releases the lock if the token owns it, handing it to the oldest
-- live waiter (see `hand_over`); a token that does not own it leaves the
-- queue instead.
-- KEYS: lock, fence, queue, waiters.
-- ARGV: token, channel, notify (1: publish `-:0:0` when the lock is
-- deleted), retention ms, the fencing token granted (0: none), barging
-- window ms, shared (1: the counter serves other live holders).
-- Returns 1 (deleted), the notice (handed over), 0 (not the token's), or 2
-- (not the token's, but the counter is near the granted token).
local retention = ms_arg('retention', ARGV[4], 0)
local barge = ms_arg('barge', ARGV[6], 0)
local granted = token_arg('the fencing token', ARGV[5], 0)
if refusal then return refusal end
return release_name(1, ARGV[1], ARGV[2], ARGV[3], barge, ARGV[7] == '1', retention, granted)
