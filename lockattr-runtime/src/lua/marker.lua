-- MARKER: reads a Redlock node's restart marker, writing it first when
-- missing. A marker is `<server time in us>:<id>`; a value that is not one
-- is replaced (the node then looks just restarted: safe).
-- KEYS: the marker key.
-- ARGV: a random id for a new marker, the connection's database number.
-- Returns {age of the marker in ms (0 if the clock went back), the server's
-- id}: of the marker in database 0 when it can be reached, of this
-- database's otherwise.
local now_us = clock_us()
local function marker()
  local value = redis.call('get', KEYS[1])
  local sep = value and string.find(value, ':', 1, true)
  local since = sep and tonumber(string.sub(value, 1, sep - 1))
  if not since then
    since = now_us
    value = string.format('%d:%s', now_us, ARGV[1])
    redis.call('set', KEYS[1], value)
    sep = string.find(value, ':', 1, true)
  end
  return since, string.sub(value, sep + 1)
end
local since, id = marker()
if ARGV[2] ~= '0' then
  -- `SELECT` inside a script only affects the script.
  local selected = redis.pcall('select', 0)
  if type(selected) == 'table' and selected.ok then
    local _, shared = marker()
    id = shared
  end
end
return {math.max(0, math.floor((now_us - since) / 1000)), id}
