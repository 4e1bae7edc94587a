-- renew.lua: extend the lease if, and only if, the owner still holds the lock.
--
-- KEYS[1]  the lock hash
-- ARGV[1]  the new lease in milliseconds
-- ARGV[2]  the owner id (the hash field)
--
-- Returns   1  renewed
--           0  stolen: the lock exists but the owner is not in it
--          -1  expired: there is no lock at all
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[1])
  return 1
end
if redis.call('exists', KEYS[1]) == 1 then
  return 0
end
return -1
