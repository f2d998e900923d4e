-- RENEW: renews many leases in one call (the watchdog's batch); a lease is
-- raised, never shortened, and a lease of 0 only reads the time left.
-- KEYS: for each hold, its holder key, fence counter and index.
-- ARGV: retention ms, then for each hold its token and lease ms.
-- Returns, per hold, the time left in ms or -1 when not the token's.
local retention = ms_arg('retention', ARGV[1], 0)
if not check(#KEYS % 3 == 0 and #ARGV == 1 + 2 * #KEYS / 3, 'three keys (holder, fence counter, index) and a token and a lease for each hold') then
  return refusal
end
local lease = {}
for i = 1, #KEYS / 3 do
  lease[i] = ms_arg('each lease', ARGV[2 * i + 1], 0)
end
if refusal then return refusal end
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
