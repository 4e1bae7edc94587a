-- fenced-set.lua: write a value only if the writer's fencing token is not older than the newest
-- token this resource has accepted (the fencing helper, see docs/fencing.md).
--
-- KEYS[1]  the data key to write
-- KEYS[2]  the fence key: the highest fencing token accepted so far (never expires)
-- ARGV[1]  the writer's fencing token, as a canonical decimal string (no sign, no leading zeros)
-- ARGV[2]  the value to SET at KEYS[1]
--
-- Returns {1, token} when written, {0, highest} when refused because a newer holder has written.
-- Tokens are compared as decimal strings (length, then lexically), so the full int64 range of the
-- lock's INCR counter compares exactly; Lua numbers would lose precision above 2^53.
local highest = redis.call('GET', KEYS[2])
local token = ARGV[1]
if highest and (#highest > #token or (#highest == #token and highest > token)) then
  return {0, highest}
end
redis.call('SET', KEYS[2], token)
redis.call('SET', KEYS[1], ARGV[2])
return {1, token}
