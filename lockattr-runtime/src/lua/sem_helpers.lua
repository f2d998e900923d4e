-- Helpers of the semaphore's scripts. KEYS: fence, queue, waiters, record
-- (the number of permits callers asked for), then one key per permit.

-- The most permits a semaphore may have (`MAX_PERMITS` in Rust).
local MAX_PERMITS = 256

-- Checks the number of permits in `arg`: a whole number from 1 to
-- MAX_PERMITS, with one key per permit after the four others (every one of
-- the MAX_PERMITS with `every`). Returns the number.
local function permits_arg(arg, every)
  local permits = tonumber(arg)
  if not permits or permits ~= math.floor(permits) or permits < 1 or permits > MAX_PERMITS
      or #KEYS ~= (every and 4 + MAX_PERMITS or 4 + permits) then
    check(false, 'permits must be a whole number from 1 to ' .. MAX_PERMITS .. ', with one key per permit')
  end
  return permits
end

-- Checks that the channel `arg` is given. Returns it.
local function channel_arg(arg)
  check(arg, 'the channel is missing')
  return arg
end

-- The number of permits a permit's value records (its line after the
-- fencing token), or nil when it records none (written by an older
-- version).
local function permits_of(value)
  local line = string.match(value, '^[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n[^\n]*\n([^\n]*)')
  if line and string.match(line, '^%d+$') then
    return tonumber(line)
  end
  return nil
end

-- Frees permit `i`, whose value is `value`, as a release does: to the
-- oldest waiter (keeping the value's number of permits), or deleted (and
-- the waiters told to ask again when dead entries were left in the queue).
local function free_permit(i, value, channel, retention)
  local waiter, lease, who, _, more = pop_waiter(KEYS[2], KEYS[3])
  if waiter then
    hand(KEYS[4 + i], KEYS[1], channel, waiter, lease, who, kind_fields(value), retention)
  else
    redis.call('del', KEYS[4 + i])
    if more then
      announce(channel, '-:0:0')
    end
  end
end
