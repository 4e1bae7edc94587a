-- rw-read-release.lua: owner-checked release of one read hold (Redisson 4.7's RedissonReadLock
-- unlockInnerAsync, without the unlock latch).
--
-- KEYS[1]  the lock hash (see rw-read-acquire.lua)
-- KEYS[2]  the channel redisson_rwlock:{<name>}
-- KEYS[3]  this reader's timeout prefix {<name>}:<owner>:rwlock_timeout
-- KEYS[4]  the timeout base {<name>} (or <name> when it holds a "{")
-- ARGV[1]  the owner id (the reader's field)
-- ARGV[2]  the message to publish ("0", Redisson's UNLOCK_MESSAGE)
-- ARGV[3]  the publish command: "publish", or "spublish" on a Redis Cluster (Redisson's
--          getPublishCommand()); anything else is an error before any write
--
-- Returns   1  released: the reader's hold count reached 0 (when it was the last one inside, the
--              lock was deleted and ARGV[2] published)
--           0  the reader still holds it (its count was above 1 and was decremented)
--          -1  the owner held no read lock here: nothing changed
--
-- As in Redisson: hold n's timeout key goes with it, and the hash's lease becomes the longest
-- remaining reader lease (in read mode; a writer's lease is left alone). Readers whose every
-- timeout key expired are dropped on the way.
if ARGV[3] ~= 'publish' and ARGV[3] ~= 'spublish' then
  return redis.error_reply('ERR effect-lock: the publish command must be publish or spublish, got ' .. tostring(ARGV[3]))
end
local mode = redis.pcall('hget', KEYS[1], 'mode')
if type(mode) ~= 'string' or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local counter = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if counter == 0 then redis.call('hdel', KEYS[1], ARGV[1]) end
redis.call('del', KEYS[3] .. ':' .. (counter + 1))

local fields = redis.call('hgetall', KEYS[1])
local left = 0
local longest = 0
for i = 1, #fields, 2 do
  local field = fields[i]
  local count = tonumber(fields[i + 1])
  if field ~= 'mode' and count ~= nil then
    if string.sub(field, -6) == ':write' then
      left = left + 1
    else
      local alive = false
      for n = count, 1, -1 do
        local ttl = redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. n)
        if ttl ~= -2 then
          alive = true
          longest = math.max(longest, ttl)
        end
      end
      if alive then left = left + 1 else redis.call('hdel', KEYS[1], field) end
    end
  end
end
if left == 0 then
  redis.call('del', KEYS[1])
  redis.call(ARGV[3], KEYS[2], ARGV[2])
  return 1
end
if mode == 'read' and longest > 0 then
  redis.call('pexpire', KEYS[1], longest)
end
if counter > 0 and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  return 0
end
return 1
