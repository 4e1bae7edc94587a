-- check-permissions.lua: ask Redis whether the current ACL user may run each of a list of commands
-- (redis.acl_check_cmd, Redis 7.0+), without running any of them. The backend runs it once when
-- it starts, on probe names under its prefix, so that a missing permission is named at startup
-- instead of failing a lock later (Redis does not name it inside a script) or, worse, failing a
-- script halfway (Redis does not roll back).
--
-- KEYS     none (the probe names are only arguments: nothing is read or written)
-- ARGV     groups: a count n, then n words, the command and its arguments
--
-- Returns  -1 when this Redis has no redis.acl_check_cmd (before 7.0): nothing was checked
--          otherwise a table with one entry per group, in order: 1 allowed, 0 refused,
--          -1 could not be checked (the check itself raised an error)
if not redis.acl_check_cmd then
  return -1
end
local result = {}
local i = 1
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local ok, allowed = pcall(redis.acl_check_cmd, unpack(ARGV, i + 1, i + n))
  if not ok then
    result[#result + 1] = -1
  elseif allowed then
    result[#result + 1] = 1
  else
    result[#result + 1] = 0
  end
  i = i + n + 1
end
return result
