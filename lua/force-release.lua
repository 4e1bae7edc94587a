-- force-release.lua: delete the lock whoever holds it and wake the waiters (Redisson's
-- forceUnlockAsync).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the release channel redisson_lock__channel:{<lock>}
-- ARGV[1]  the message to publish ("0")
-- ARGV[2]  the publish command: "publish", or "spublish" on a Redis Cluster (Redisson's
--          getPublishCommand()); anything else is an error before any write
--
-- Returns  1  the lock existed: deleted and ARGV[1] published
--          0  there was no lock: nothing published
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR effect-lock: the publish command must be publish or spublish, got ' .. tostring(ARGV[2]))
end
if redis.call('del', KEYS[1]) == 1 then
  redis.call(ARGV[2], KEYS[2], ARGV[1])
  return 1
end
return 0
