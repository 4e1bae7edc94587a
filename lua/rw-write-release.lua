-- rw-write-release.lua: owner-checked release of one write hold (Redisson 4.7's RedissonWriteLock
-- unlockInnerAsync, without the unlock latch and the lease reset).
--
-- KEYS[1]  the lock hash (see rw-read-acquire.lua)
-- KEYS[2]  the channel redisson_rwlock:{<name>}
-- KEYS[3]  the timeout base {<name>} (or <name> when it holds a "{")
-- ARGV[1]  the writer's field: <owner>:write
-- ARGV[2]  the message to publish ("1", Redisson's READ_UNLOCK_MESSAGE, as its write lock sends)
-- ARGV[3]  the publish command: "publish", or "spublish" on a Redis Cluster; anything else is an
--          error before any write
--
-- Returns   1  released: the write hold count reached 0; the lock was deleted, or, when the
--              writer still reads (a downgrade), turned into a read lock; ARGV[2] published
--           0  the writer still holds it (its count was above 1 and was decremented)
--          -1  the owner held no write lock here: nothing changed
--
-- Beyond Redisson: a write lock that turns into a read lock publishes too (waiting readers may
-- now share it), and its lease becomes the longest remaining reader lease.
if ARGV[3] ~= 'publish' and ARGV[3] ~= 'spublish' then
  return redis.error_reply('ERR effect-lock: the publish command must be publish or spublish, got ' .. tostring(ARGV[3]))
end
local mode = redis.pcall('hget', KEYS[1], 'mode')
if mode ~= 'write' or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return -1
end
if redis.call('hincrby', KEYS[1], ARGV[1], -1) > 0 then
  return 0
end
redis.call('hdel', KEYS[1], ARGV[1])

local fields = redis.call('hgetall', KEYS[1])
local left = 0
local longest = 0
for i = 1, #fields, 2 do
  local field = fields[i]
  local count = tonumber(fields[i + 1])
  if field ~= 'mode' and count ~= nil then
    local alive = false
    for n = count, 1, -1 do
      local ttl = redis.call('pttl', KEYS[3] .. ':' .. field .. ':rwlock_timeout:' .. n)
      if ttl ~= -2 then
        alive = true
        longest = math.max(longest, ttl)
      end
    end
    if alive then left = left + 1 else redis.call('hdel', KEYS[1], field) end
  end
end
if left == 0 then
  redis.call('del', KEYS[1])
else
  redis.call('hset', KEYS[1], 'mode', 'read')
  if longest > 0 then redis.call('pexpire', KEYS[1], longest) end
end
redis.call(ARGV[3], KEYS[2], ARGV[2])
return 1
