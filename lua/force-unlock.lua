-- force-unlock.lua: `effect-lock unlock --force`: delete the lock whoever holds it and wake its
-- waiters, as Redisson's forceUnlockAsync does, but only if the key is a lock (a hash): data
-- stored under the name by mistake is never deleted.
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the release channel redisson_lock__channel:{<lock>}
-- ARGV[1]  the message to publish ("0")
--
-- Returns  {1, receivers}  deleted, and ARGV[1] published to that many subscribers
--          {0, 0}          there was no lock: nothing deleted, nothing published
--          {-1, type}      the key holds a <type>, not a lock: left alone
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
  return {0, 0}
end
if kind ~= 'hash' then
  return {-1, kind}
end
redis.call('del', KEYS[1])
return {1, redis.call('publish', KEYS[2], ARGV[1])}
