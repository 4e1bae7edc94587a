-- force-release.lua: delete the lock whoever holds it and wake the waiters (Redisson's
-- forceUnlockAsync).
--
-- KEYS[1]  the lock hash
-- KEYS[2]  the release channel redisson_lock__channel:{<lock>}
-- ARGV[1]  the message to publish ("0")
--
-- Returns  1  the lock existed: deleted and ARGV[1] published
--          0  there was no lock: nothing published
if redis.call('del', KEYS[1]) == 1 then
  redis.call('publish', KEYS[2], ARGV[1])
  return 1
end
return 0
