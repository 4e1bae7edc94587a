-- rw-force-release.lua: delete a read-write lock in the given mode whoever holds it, and wake the
-- waiters (Redisson's RedissonReadLock/RedissonWriteLock forceUnlockAsync).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the channel redisson_rwlock:{<name>}
-- ARGV[1]  the mode: "read" or "write"
-- ARGV[2]  the message to publish ("0" for read, "1" for write, as Redisson sends)
-- ARGV[3]  the publish command: "publish", or "spublish" on a Redis Cluster
--
-- Returns  1  the lock was in that mode: deleted and ARGV[2] published
--          0  it was not: nothing changed
if ARGV[3] ~= 'publish' and ARGV[3] ~= 'spublish' then
  return redis.error_reply('ERR effect-lock: the publish command must be publish or spublish, got ' .. tostring(ARGV[3]))
end
if redis.pcall('hget', KEYS[1], 'mode') ~= ARGV[1] then
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[2])
return 1
