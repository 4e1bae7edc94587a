-- force-unlock.lua: `effect-lock unlock --force`: delete the lock whoever holds it and wake its
-- waiters, as Redisson's forceUnlockAsync does, but only if the key is a lock (a hash): data
-- stored under the name by mistake is never deleted.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the release channel redisson_lock__channel:{<lock>}
-- KEYS[3]  a read-write lock's channel redisson_rwlock:{<lock>}
-- KEYS[4]  a fair lock's queue redisson_lock_queue:{<lock>}
-- ARGV[1]  the message to publish ("0")
-- ARGV[2]  the publish command: publish, or spublish on a Redis Cluster (sharded subscribers,
--          effect-lock's and Redisson's, hear only SPUBLISH; every channel below is in the lock's
--          slot, so all go to its shard)
--
-- Returns  {1, receivers}  deleted, and ARGV[1] published to that many subscribers
--          {0, 0}          there was no lock: nothing deleted, nothing published
--          {-1, type}      the key holds a <type>, not a lock: left alone
--
-- Waiters are woken where they listen: the plain lock's channel always; a read-write lock's
-- channel when the hash has a "mode" field; and the first owner in a fair lock's queue on its own
-- channel (<release channel>:<owner>), as a fair release tells exactly the next owner in line.
-- The fair lock's queue and deadlines, and a read-write lock's per-reader timeout keys, are left
-- to the scripts of those kinds, which drop what has expired.
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR effect-lock: the publish command must be publish or spublish, got ' .. tostring(ARGV[2]))
end
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
  return {0, 0}
end
if kind ~= 'hash' then
  return {-1, kind}
end
local readWrite = redis.call('hexists', KEYS[1], 'mode') == 1
redis.call('del', KEYS[1])
local receivers = redis.call(ARGV[2], KEYS[2], ARGV[1])
if readWrite then
  receivers = receivers + redis.call(ARGV[2], KEYS[3], ARGV[1])
end
if redis.call('type', KEYS[4])['ok'] == 'list' then
  local first = redis.call('lindex', KEYS[4], 0)
  if first then
    receivers = receivers + redis.call(ARGV[2], KEYS[2] .. ':' .. first, ARGV[1])
  end
end
return {1, receivers}
