-- release.lua: owner-checked release, Redisson's unlockInnerAsync without the lease reset.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the release channel redisson_lock__channel:{<lock>}
-- ARGV[1]  the owner id (the hash field)
-- ARGV[2]  the message to publish ("0", Redisson's UNLOCK_MESSAGE)
-- ARGV[3]  the publish command: "publish", or "spublish" on a Redis Cluster (sharded pub/sub, as
--          Redisson publishes in cluster mode); anything else is an error before any write
--
-- Returns   1  released: the hold count reached 0, the lock was deleted and ARGV[2] published
--           0  the owner still holds it (its hold count was above 1 and was decremented)
--          -1  the owner did not hold it: nothing changed (so a repeated release is harmless)
--
-- Decrementing rather than deleting keeps every successful acquire matched by exactly one
-- release, so a compensating release for an acquire whose reply was lost can never remove a
-- hold that the same owner took afterwards.
-- A key that holds data of another type is not this owner's lock any more (data was written over
-- it): nothing to release.
if ARGV[3] ~= 'publish' and ARGV[3] ~= 'spublish' then
  return redis.error_reply('ERR effect-lock: the publish command must be publish or spublish, got ' .. tostring(ARGV[3]))
end
local held = redis.pcall('hexists', KEYS[1], ARGV[1])
if held ~= 1 then
  return -1
end
if redis.call('hincrby', KEYS[1], ARGV[1], -1) > 0 then
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[3], KEYS[2], ARGV[2])
return 1
