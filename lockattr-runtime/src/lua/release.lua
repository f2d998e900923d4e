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
local token, channel, notify, shared = ARGV[1], ARGV[2], ARGV[3], ARGV[7] == '1'
local retention, granted, barge = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local successor = ARGV[8]
local value
-- The release of a lock that nobody waits for first, without a helper
-- but `owns`: with no successor and the numbers in bounds, the owner's
-- release deletes the lock and lets the counter expire after the
-- retention, as `hand_over` does when the queue is empty (then no waiter
-- to serve, no barging window to open, no marker popped). Any other
-- arguments go through the full checks below, which answer the error of
-- the first bad one.
if not successor and retention and retention == math.floor(retention) and retention >= 0 and retention <= MAX_MS
    and barge and barge == math.floor(barge) and barge >= 0 and barge <= MAX_MS
    and granted and granted == math.floor(granted) and granted >= 0 and granted < MAX_TOKEN then
  value = redis.call('get', KEYS[1])
  if owns(value, token) and redis.call('exists', KEYS[3]) == 0 then
    redis.call('del', KEYS[1])
    if shared then
      keep_ttl(KEYS[2], retention)
    else
      redis.call('pexpire', KEYS[2], retention)
    end
    if notify == '1' then
      announce(channel, '-:0:0')
    end
    return 1
  end
else
  retention = ms_arg('retention', ARGV[4], 0)
  barge = ms_arg('barge', ARGV[6], 0)
  granted = token_arg('the fencing token', ARGV[5], 0)
  local lease, wait, who
  if successor then
    local l, w, h = string.match(ARGV[9] or '', '^([^:]*):([^:]*):(.*)$')
    check(l and successor ~= '' and not string.find(successor, ':', 1, true),
      'a successor needs a token without a colon and <lease ms>:<wait ms>:<holder>')
    lease, wait, who = ms_arg('lease', l, 1), ms_arg('wait', w, 1), h
  end
  if refusal then return refusal end
  value = redis.call('get', KEYS[1])
  if successor and owns(value, token) then
    if redis.call('exists', KEYS[3]) == 0 then
      return hand(KEYS[1], KEYS[2], channel, successor, lease, who, kind_fields(value), retention)
    end
    enqueue(KEYS[3], KEYS[4], successor, wait, lease, '', who)
  end
end
-- As `release_name`, with the holder value read above.
if not owns(value, token) then
  unqueue(KEYS[3], KEYS[4], token)
  if recent_fence(KEYS[2], granted) then
    return 2
  end
  return 0
end
return hand_over(1, channel, notify, barge, shared, retention, value)
