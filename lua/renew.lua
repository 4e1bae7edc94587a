-- renew.lua: extend each lease if, and only if, its owner still holds the lock; many locks in one
-- call (the renewals that came due together), as Redisson 4.7's LockTask renews up to 100 locks in
-- one script.
--
-- KEYS[i]      the i-th lock hash
-- ARGV[2i-1]   its new lease in milliseconds
-- ARGV[2i]     its owner id (the hash field)
--
-- Returns  a table with one entry per key, in order:
--            1  renewed
--            0  stolen: the lock exists but the owner is not in it
--           -1  expired: there is no lock at all
--
-- Every lease is checked before the first write (Redis does not roll a script back).
for i = 1, #KEYS do
  local lease = ARGV[2 * i - 1]
  if lease == nil or not string.match(lease, '^[1-9][0-9]*$') or tonumber(lease) > 2147483647 then
    return redis.error_reply('ERR effect-lock: lease ' .. i .. ' must be a whole number of milliseconds in [1, 2147483647], got ' .. tostring(lease))
  end
end
-- A key that holds data of another type (written over a lock) is answered for itself, as a lock
-- another owner has taken (0), without failing the other renewals of the call.
local result = {}
for i = 1, #KEYS do
  local held = redis.pcall('hexists', KEYS[i], ARGV[2 * i])
  if type(held) == 'table' then
    result[i] = 0
  elseif held == 1 then
    redis.call('pexpire', KEYS[i], ARGV[2 * i - 1])
    result[i] = 1
  elseif redis.call('exists', KEYS[i]) == 1 then
    result[i] = 0
  else
    result[i] = -1
  end
end
return result
