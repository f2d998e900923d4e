-- RELEASE: releases the lock if the token owns it, handing it to the oldest
-- live waiter (see `hand_over`); a token that does not own it leaves the
-- queue instead.
-- KEYS: lock, fence, queue, waiters.
-- ARGV: token, `<notify>:<retention ms>:<fencing token>:<barge ms>:<shared>:<channel>`
-- (notify 1: publish `-:0:0` when the lock is deleted; the fencing token
-- granted, 0: none; the barging window; shared 1: the counter serves other
-- live holders), and, optionally, a successor: the token of a waiter of
-- the releasing process and `<its lease ms>:<its wait ms>:<its holder>`.
-- The successor takes the lock at once when nobody is queued; otherwise it
-- is queued last and the oldest waiter is served, as always. A token that
-- does not own the lock leaves its successor untouched.
-- Returns 1 (deleted), the notice (handed over), 0 (not the token's), or 2
-- (not the token's, but the counter is near the granted token).
local token, successor = ARGV[1], ARGV[3]
-- The second argument, read once, its numbers in plain digits as this
-- library writes them (any other shape is read again by the full checks).
local notify, retention, granted, barge, shared, channel = string.match(ARGV[2] or '', '^([^:]*):(%d+):(%d+):(%d+):([^:]*):(.*)$')
retention, granted, barge = tonumber(retention), tonumber(granted), tonumber(barge)
local value
-- The release of a lock that nobody waits for first, without a helper but
-- `owns`: with no successor and the numbers in bounds, the owner's release
-- deletes the lock and lets the counter expire after the retention, as
-- `hand_over` does when the queue is empty (then no waiter to serve, no
-- barging window to open, no marker popped). PTTL tells that the queue is
-- gone (-2): the documented ACL rules grant it, not EXISTS. Any other
-- arguments go through the full checks below, which answer the error of
-- the first bad one.
if channel and not successor and retention <= MAX_MS and barge <= MAX_MS and granted < MAX_TOKEN then
  value = redis.call('get', KEYS[1])
  if owns(value, token) and redis.call('pttl', KEYS[3]) == -2 then
    redis.call('del', KEYS[1])
    if shared == '1' then
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
  notify, retention, granted, barge, shared, channel = string.match(ARGV[2] or '', '^([^:]*):([^:]*):([^:]*):([^:]*):([^:]*):(.*)$')
  check(channel, 'the second argument must be <notify 0|1>:<retention ms>:<fencing token>:<barge ms>:<shared 0|1>:<channel>')
  retention = ms_arg('retention', retention, 0)
  barge = ms_arg('barge', barge, 0)
  granted = token_arg('the fencing token', granted, 0)
  local lease, wait, who
  if successor then
    local l, w, h = string.match(ARGV[4] or '', '^([^:]*):([^:]*):(.*)$')
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
return hand_over(1, channel, notify, barge, shared == '1', retention, value)
