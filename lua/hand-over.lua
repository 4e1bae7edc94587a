-- hand-over.lua: release one owner's hold and, when nobody else waits, hand the lock to a waiter
-- of the same process in the same step: one round trip instead of release, notification and the
-- waiter's own acquire.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the release channel redisson_lock__channel:{<lock>}
-- KEYS[3]  the fencing counter redisson_lock_token:{<lock>} (INCR, never expires)
-- ARGV[1]  the releasing owner id (the hash field)
-- ARGV[2]  the message to publish ("0", Redisson's UNLOCK_MESSAGE)
-- ARGV[3]  the receiving owner id
-- ARGV[4]  the receiver's lease in milliseconds
-- ARGV[5]  "1" to draw a fencing token for the receiver, "0" not to
-- ARGV[6]  how many of the channel's subscribers are the releasing process's own: "1" when its
--          subscription is known to be live, "0" when it is not (being made, refused, reconnecting)
-- ARGV[7]  the publish command: "publish", or "spublish" on a Redis Cluster
-- ARGV[8]  the PUBSUB subcommand that counts the channel's subscribers: "numsub", or
--          "shardnumsub" on a Redis Cluster (sharded subscribers of this shard)
--
-- Returns  {-1}        the releasing owner did not hold it: nothing changed
--          {0}         the releasing owner still holds it (its hold count was above 1)
--          {1}         released: deleted and ARGV[2] published, because another client (another
--                      process, a Redisson client) is subscribed to the channel, i.e. waits too
--          {2, token}  handed over: the receiver holds it with a hold count of 1 and its lease;
--                      token as in acquire.lua
--
-- The release part is release.lua. The hand-over happens only when the channel has no subscriber
-- but the releasing process's own (PUBSUB NUMSUB, or SHARDNUMSUB, at most ARGV[6]), so that a waiter elsewhere is
-- never passed over without being told: it gets the notification and its chance, as after a
-- plain release. PUBSUB makes the script non-deterministic, which Redis accepts (effects
-- replication) from 5.0 on. Like acquire.lua it checks the receiver's lease before any write.
if not string.match(ARGV[4], '^[1-9][0-9]*$') or tonumber(ARGV[4]) > 2147483647 then
  return redis.error_reply("ERR effect-lock: the receiver's lease must be a whole number of milliseconds in [1, 2147483647], got " .. ARGV[4])
end
if not ((ARGV[7] == 'publish' and ARGV[8] == 'numsub') or (ARGV[7] == 'spublish' and ARGV[8] == 'shardnumsub')) then
  return redis.error_reply('ERR effect-lock: publish with publish and numsub, or spublish and shardnumsub, got ' ..
    tostring(ARGV[7]) .. ' and ' .. tostring(ARGV[8]))
end
-- Data of another type written over the lock: not the releasing owner's lock any more.
if redis.pcall('hexists', KEYS[1], ARGV[1]) ~= 1 then
  return {-1}
end
-- Before any write: a server that refuses PUBSUB (ACL) aborts the script with nothing changed.
local othersWait = redis.call('pubsub', ARGV[8], KEYS[2])[2] > tonumber(ARGV[6])
if redis.call('hincrby', KEYS[1], ARGV[1], -1) > 0 then
  return {0}
end
redis.call('del', KEYS[1])
if othersWait then
  redis.call(ARGV[7], KEYS[2], ARGV[2])
  return {1}
end
redis.call('hincrby', KEYS[1], ARGV[3], 1)
redis.call('pexpire', KEYS[1], ARGV[4])
if ARGV[5] == '1' then
  redis.call('incr', KEYS[3])
  return {2, redis.call('get', KEYS[3])}
end
return {2, '0'}
