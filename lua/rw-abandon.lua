-- rw-abandon.lua: a writer stops waiting without the lock (it timed out or was interrupted): its
-- mark no longer holds readers back, and they are told.
--
-- KEYS[1]  the waiting-writer mark {<name>}:rwlock_writer
-- KEYS[2]  the channel redisson_rwlock:{<name>}
-- ARGV[1]  the writer's field: <owner>:write
-- ARGV[2]  the message to publish ("0")
-- ARGV[3]  the publish command: "publish", or "spublish" on a Redis Cluster
--
-- Returns  1  the mark was this writer's: deleted and ARGV[2] published
--          0  it was not (another writer's, or gone): nothing changed
if ARGV[3] ~= 'publish' and ARGV[3] ~= 'spublish' then
  return redis.error_reply('ERR effect-lock: the publish command must be publish or spublish, got ' .. tostring(ARGV[3]))
end
if redis.call('get', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[2])
return 1
