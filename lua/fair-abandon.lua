-- fair-abandon.lua: a waiter leaves the line of a fair lock (Redisson 4.7's RedissonFairLock
-- acquireFailedAsync), and, when it was first in line and the lock is free, the next one is told.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue redisson_lock_queue:{<lock>}
-- KEYS[3]  the deadlines redisson_lock_timeout:{<lock>}
-- KEYS[4]  the channel prefix redisson_lock__channel:{<lock>}
-- ARGV[1]  the owner id
-- ARGV[2]  the wait window in milliseconds
-- ARGV[3]  the message to publish ("0")
-- ARGV[4]  the publish command: "publish", or "spublish" on a Redis Cluster (Redisson's
--          getPublishCommand()); anything else is an error before any write
--
-- Returns  1 when the owner was in line, 0 when it was not (nothing changed)
if ARGV[4] ~= 'publish' and ARGV[4] ~= 'spublish' then
  return redis.error_reply('ERR effect-lock: the publish command must be publish or spublish, got ' .. tostring(ARGV[4]))
end
if not string.match(ARGV[2], '^[1-9][0-9]*$') then
  return redis.error_reply('ERR effect-lock: the wait window must be a positive whole number of milliseconds, got ' .. ARGV[2])
end
local queue = redis.call('lrange', KEYS[2], 0, -1)
local i = 1
while i <= #queue and queue[i] ~= ARGV[1] do
  i = i + 1
end
local found = i <= #queue
local wasFirst = i == 1
i = i + 1
while i <= #queue do
  redis.call('zincrby', KEYS[3], -tonumber(ARGV[2]), queue[i])
  i = i + 1
end
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('lrem', KEYS[2], 0, ARGV[1])
if found and wasFirst and redis.call('exists', KEYS[1]) == 0 then
  local next = redis.call('lindex', KEYS[2], 0)
  if next ~= false then
    redis.call(ARGV[4], KEYS[4] .. ':' .. next, ARGV[3])
  end
end
if found then return 1 end
return 0
