-- release-all.lua: the owner-checked release of several locks, each as release.lua releases one;
-- undoes an acquire-all.lua whose reply was lost (or that no replica confirmed).
--
-- KEYS     per lock, two keys: the lock hash, then its notification channel
-- ARGV[1]  the unlock message
-- ARGV[2]  the publish command: "publish", or "spublish" on a cluster
-- ARGV[3…] the owner id of each lock, in the order of KEYS
--
-- Returns  the number of locks that this call released (deleted) or decremented, or -1 when the
--          owners held none of them
if ARGV[2] ~= 'publish' and ARGV[2] ~= 'spublish' then
  return redis.error_reply('ERR effect-lock: the publish command must be publish or spublish, got ' .. tostring(ARGV[2]))
end
local touched = 0
for i = 1, #KEYS / 2 do
  local lock = KEYS[2 * i - 1]
  local owner = ARGV[2 + i]
  if redis.pcall('hexists', lock, owner) == 1 then
    touched = touched + 1
    if redis.call('hincrby', lock, owner, -1) <= 0 then
      redis.call('del', lock)
      redis.call(ARGV[2], KEYS[2 * i], ARGV[1])
    end
  end
end
if touched == 0 then
  return -1
end
return touched
