-- fair-release.lua: owner-checked release of a fair lock (Redisson 4.7's RedissonFairLock
-- unlockInnerAsync, without the unlock latch and the lease reset), with time from the server.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the queue redisson_lock_queue:{<lock>}
-- KEYS[3]  the deadlines redisson_lock_timeout:{<lock>}
-- KEYS[4]  the channel prefix redisson_lock__channel:{<lock>}; the next owner is told on
--          <prefix>:<owner>, the channel Redisson's fair lock waiters listen on
-- ARGV[1]  the owner id
-- ARGV[2]  the message to publish ("0", Redisson's UNLOCK_MESSAGE)
-- ARGV[3]  the wait window in milliseconds
-- ARGV[4]  the publish command: "publish", or "spublish" on a Redis Cluster (Redisson's
--          getPublishCommand()); anything else is an error before any write
--
-- Returns   1  released: the hold count reached 0, the lock was deleted and the first in line told
--           0  the owner still holds it (its count was above 1 and was decremented)
--          -1  the owner did not hold it: nothing changed
--
-- Beyond Redisson: the first in line gets one window from now to take the lock (its deadline is
-- lowered to now + window), so a waiter that died is passed over one window after the release.
if ARGV[4] ~= 'publish' and ARGV[4] ~= 'spublish' then
  return redis.error_reply('ERR effect-lock: the publish command must be publish or spublish, got ' .. tostring(ARGV[4]))
end
if not string.match(ARGV[3], '^[1-9][0-9]*$') then
  return redis.error_reply('ERR effect-lock: the wait window must be a positive whole number of milliseconds, got ' .. ARGV[3])
end
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
while true do
  local first = redis.call('lindex', KEYS[2], 0)
  if first == false then break end
  local timeout = redis.call('zscore', KEYS[3], first)
  if timeout ~= false and tonumber(timeout) <= now then
    redis.call('zrem', KEYS[3], first)
    redis.call('lpop', KEYS[2])
  else
    break
  end
end
local held = redis.pcall('hexists', KEYS[1], ARGV[1])
if held ~= 1 then
  return -1
end
if redis.call('hincrby', KEYS[1], ARGV[1], -1) > 0 then
  return 0
end
redis.call('del', KEYS[1])
local next = redis.call('lindex', KEYS[2], 0)
if next ~= false then
  local timeout = redis.call('zscore', KEYS[3], next)
  if timeout == false or tonumber(timeout) > now + tonumber(ARGV[3]) then
    redis.call('zadd', KEYS[3], now + tonumber(ARGV[3]), next)
  end
  redis.call(ARGV[4], KEYS[4] .. ':' .. next, ARGV[2])
end
return 1
