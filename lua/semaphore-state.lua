-- semaphore-state.lua: free and held permits (Redisson's availablePermitsAsync and
-- acquiredPermitsAsync in one call), after giving back the permits whose lease ended.
--
-- KEYS[1]  the semaphore (free count)
-- KEYS[2]  its timeout set {<name>}:timeout
-- KEYS[3]  its channel redisson_sc:{<name>}
-- ARGV[1]  the publish command: "publish", or "spublish" on a Redis Cluster (Redisson's
--          getPublishCommand()); anything else is an error before any write
--
-- Returns  {available, acquired}; {0, 0} for a semaphore nobody created. Available may be negative.
if ARGV[1] ~= 'publish' and ARGV[1] ~= 'spublish' then
  return redis.error_reply('ERR effect-lock: the publish command must be publish or spublish, got ' .. tostring(ARGV[1]))
end
for i = 1, 2 do
  local kind = redis.call('type', KEYS[i]).ok
  local expected = i == 1 and 'string' or 'zset'
  if kind ~= 'none' and kind ~= expected then
    return redis.error_reply('WRONGTYPE effect-lock: "' .. KEYS[i] .. '" holds a ' .. kind .. ', not a semaphore ' .. expected)
  end
end
if redis.replicate_commands ~= nil then redis.replicate_commands() end
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local expired = redis.call('zrangebyscore', KEYS[2], 0, now)
if #expired > 0 then
  for i = 1, #expired, 1000 do
    redis.call('zrem', KEYS[2], unpack(expired, i, math.min(i + 999, #expired)))
  end
  local value = redis.call('incrby', KEYS[1], #expired)
  if value > 0 then
    redis.call(ARGV[1], KEYS[3], value)
  end
end
return {tonumber(redis.call('get', KEYS[1]) or '0'), redis.call('zcard', KEYS[2])}
