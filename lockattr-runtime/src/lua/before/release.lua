-- RELEASE: releases the lock if the token owns it, handing it to the oldest
-- live waiter (see `hand_over`); a token that does not own it leaves the
-- queue instead.
-- KEYS: lock, fence, queue, waiters.
-- ARGV: token, channel, notify (1: publish `-:0:0` when the lock is
-- deleted), retention ms, the fencing token granted (0: none), barging
-- window ms, shared (1: the counter serves other live holders), and,
-- optionally, a successor: the token of a waiter of the releasing process
-- and `<its lease ms>:<its wait ms>:<its holder>`. The successor takes the
-- lock at once when nobody is queued; otherwise it is queued last and the
-- oldest waiter is served, as always. A token that does not own the lock
-- leaves its successor untouched.
-- Returns 1 (deleted), the notice (handed over), 0 (not the token's), or 2
-- (not the token's, but the counter is near the granted token).
local retention = ms_arg('retention', ARGV[4], 0)
local barge = ms_arg('barge', ARGV[6], 0)
local granted = token_arg('the fencing token', ARGV[5], 0)
local successor = ARGV[8]
local lease, wait, who
if successor then
  local l, w, h = string.match(ARGV[9] or '', '^([^:]*):([^:]*):(.*)$')
  check(l and successor ~= '' and not string.find(successor, ':', 1, true),
    'a successor needs a token without a colon and <lease ms>:<wait ms>:<holder>')
  lease, wait, who = ms_arg('lease', l, 1), ms_arg('wait', w, 1), h
end
if refusal then return refusal end
if successor then
  local value = redis.call('get', KEYS[1])
  if owns(value, ARGV[1]) then
    if redis.call('exists', KEYS[3]) == 0 then
      return hand(KEYS[1], KEYS[2], ARGV[2], successor, lease, who, kind_fields(value), retention)
    end
    enqueue(KEYS[3], KEYS[4], successor, wait, lease, '', who)
  end
end
return release_name(1, ARGV[1], ARGV[2], ARGV[3], barge, ARGV[7] == '1', retention, granted)
