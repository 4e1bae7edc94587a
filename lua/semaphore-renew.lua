-- semaphore-renew.lua: extend the lease of each acquisition of permits if, and only if, its permits
-- are still held; many acquisitions in one call (the renewals that came due together).
--
-- KEYS[i]      the i-th acquisition's timeout set {<name>}:timeout
-- ARGV[3i-2]   its new lease in milliseconds
-- ARGV[3i-1]   its owner id (members <owner>:1 .. <owner>:<n>)
-- ARGV[3i]     its number of permits n
--
-- Returns  a table with one entry per key, in order:
--            1  renewed: every member's score is now + lease (server time)
--            0  the key holds data of another type
--           -1  gone: the permits were given back (released, force-released, or their lease ended;
--               an ended one is left for the next acquire to give back, never extended)
--
-- Every argument is checked before the first write (Redis does not roll a script back).
for i = 1, #KEYS do
  local lease, permits = ARGV[3 * i - 2], ARGV[3 * i]
  if lease == nil or not string.match(lease, '^[1-9][0-9]*$') or tonumber(lease) > 2147483647 then
    return redis.error_reply('ERR effect-lock: lease ' .. i .. ' must be a whole number of milliseconds in [1, 2147483647], got ' .. tostring(lease))
  end
  if permits == nil or not string.match(permits, '^[1-9][0-9]*$') then
    return redis.error_reply('ERR effect-lock: permits ' .. i .. ' must be a whole number, got ' .. tostring(permits))
  end
end
if redis.replicate_commands ~= nil then redis.replicate_commands() end
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local result = {}
for i = 1, #KEYS do
  local owner = ARGV[3 * i - 1]
  local score = redis.pcall('zscore', KEYS[i], owner .. ':1')
  if type(score) == 'table' then
    result[i] = 0
  elseif score == false or tonumber(score) <= now then
    result[i] = -1
  else
    local ends = now + tonumber(ARGV[3 * i - 2])
    for j = 1, tonumber(ARGV[3 * i]) do
      redis.call('zadd', KEYS[i], 'XX', ends, owner .. ':' .. j)
    end
    result[i] = 1
  end
end
return result
