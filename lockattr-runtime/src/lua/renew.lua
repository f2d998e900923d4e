-- RENEW: renews many leases in one call (the watchdog's batch); a lease is
-- raised, never shortened, and a lease of 0 only reads the time left.
-- KEYS: for each hold, its holder key, fence counter and index.
-- ARGV: retention ms, then for each hold its token and lease ms.
-- Returns, per hold, the time left in ms or -1 when not the token's.
local bad, retention = ms_args('retention', ARGV[1], 0)
if bad then
  return bad
end
if #KEYS % 3 ~= 0 or #ARGV ~= 1 + 2 * #KEYS / 3 then
  return redis.error_reply('ERR lockattr: three keys (holder, fence counter, index) and a token and a lease for each hold')
end
local lease = {}
for i = 1, #KEYS / 3 do
  local ms = tonumber(ARGV[2 * i + 1])
  if not ms or ms ~= math.floor(ms) or ms < 0 or ms > MAX_MS then
    return redis.error_reply('ERR lockattr: each lease must be a whole number of milliseconds from 0 to ' .. MAX_MS)
  end
  lease[i] = ms
end
local left = {}
for i = 1, #KEYS / 3 do
  local key, token = KEYS[3 * i - 2], ARGV[2 * i]
  local value = redis.call('get', key)
  if owns(value, token) then
    local ms = lease[i]
    local ttl = redis.call('pttl', key)
    if ttl < ms then
      redis.call('pexpire', key, ms)
      ttl = ms
      keep_hold(key, KEYS[3 * i - 1], KEYS[3 * i], token, ttl, retention)
    end
    left[i] = ttl
  else
    left[i] = -1
  end
end
return left
