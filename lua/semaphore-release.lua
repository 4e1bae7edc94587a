-- semaphore-release.lua: give back an acquisition's permits (Redisson's tryReleaseAsync for a list
-- of ids), owner-checked and idempotent.
--
-- KEYS[1]  the semaphore (free count)
-- KEYS[2]  its timeout set {<name>}:timeout
-- KEYS[3]  its channel redisson_sc:{<name>}
-- ARGV[1]  the owner id (members <owner>:1 .. <owner>:<n>)
-- ARGV[2]  n, the acquisition's number of permits
-- ARGV[3]  the publish command: "publish", or "spublish" on a Redis Cluster (Redisson's
--          getPublishCommand()); anything else is an error before any write
--
-- Returns  how many permits were given back (0: none was held, nothing changed). When the free
--          count is then positive it is published, which wakes waiters (Redisson's included).
if ARGV[3] ~= 'publish' and ARGV[3] ~= 'spublish' then
  return redis.error_reply('ERR effect-lock: the publish command must be publish or spublish, got ' .. tostring(ARGV[3]))
end
if not string.match(ARGV[2], '^[1-9][0-9]*$') then
  return redis.error_reply('ERR effect-lock: permits must be a whole number, got ' .. tostring(ARGV[2]))
end
if redis.call('type', KEYS[2]).ok ~= 'zset' then
  return 0
end
local removed = 0
local n = tonumber(ARGV[2])
for i = 1, n, 1000 do
  local ids = {}
  for j = i, math.min(i + 999, n) do
    ids[#ids + 1] = ARGV[1] .. ':' .. j
  end
  removed = removed + redis.call('zrem', KEYS[2], unpack(ids))
end
if removed == 0 then
  return 0
end
local value = redis.pcall('incrby', KEYS[1], removed)
if type(value) == 'number' and value > 0 then
  redis.call(ARGV[3], KEYS[3], value)
end
return removed
