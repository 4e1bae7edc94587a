-- semaphore-set-permits.lua: make the semaphore's total ARGV[1] (Redisson's setPermitsAsync), after
-- giving back the permits whose lease ended. The free count becomes total - held: it goes negative
-- when the total shrinks below what is held, so held permits are never revoked, and permits that
-- come back fill that gap first.
--
-- KEYS[1]  the semaphore (free count)
-- KEYS[2]  its timeout set {<name>}:timeout
-- KEYS[3]  its channel redisson_sc:{<name>}
-- ARGV[1]  the total: a whole number in [0, 2147483647]
-- ARGV[2]  the publish command: "publish", or "spublish" on a Redis Cluster (Redisson's
--          getPublishCommand()); anything else is an error before any write
--
-- Returns  the free count now. The total is published (as Redisson does), which wakes waiters.
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR effect-lock: the publish command must be publish or spublish, got ' .. tostring(ARGV[2]))
end
if not string.match(ARGV[1], '^[0-9]+$') or tonumber(ARGV[1]) > 2147483647 then
  return redis.error_reply('ERR effect-lock: the total must be a whole number in [0, 2147483647], got ' .. tostring(ARGV[1]))
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
for i = 1, #expired, 1000 do
  redis.call('zrem', KEYS[2], unpack(expired, i, math.min(i + 999, #expired)))
end
local available = tonumber(ARGV[1]) - redis.call('zcard', KEYS[2])
redis.call('set', KEYS[1], available)
redis.call(ARGV[2], KEYS[3], ARGV[1])
return available
