-- rw-renew.lua: extend each read or write lease if, and only if, its owner still holds it; many
-- holds in one call (the renewals that came due together, as Redisson 4.7's LockTask batches).
--
-- KEYS[2i-1]  the i-th lock hash (see rw-read-acquire.lua)
-- KEYS[2i]    its owner's timeout prefix {<name>}:<owner>:rwlock_timeout (unused for a write)
-- ARGV[3i-2]  its new lease in milliseconds
-- ARGV[3i-1]  its field: <owner> for a read, <owner>:write for a write
-- ARGV[3i]    "read" or "write"
--
-- Returns  a table with one entry per hold, in order:
--            1  renewed
--            0  stolen: the lock exists but this hold is not in it
--           -1  expired: there is no lock, or the reader's every timeout key had expired (the
--               reader is then dropped from the hash)
--
-- Unlike Redisson's renewal, which extends every reader's timeout keys whenever one reader renews,
-- a reader extends only its own: a reader that stops renewing loses its lease on its own. The
-- hash's lease is raised to the new lease (never lowered: it covers every hold in it).
for i = 1, #KEYS / 2 do
  local lease = ARGV[3 * i - 2]
  if lease == nil or not string.match(lease, '^[1-9][0-9]*$') or tonumber(lease) > 2147483647 then
    return redis.error_reply('ERR effect-lock: lease ' .. i .. ' must be a whole number of milliseconds in [1, 2147483647], got ' .. tostring(lease))
  end
end
local result = {}
for i = 1, #KEYS / 2 do
  local lock = KEYS[2 * i - 1]
  local lease = tonumber(ARGV[3 * i - 2])
  local field = ARGV[3 * i - 1]
  local mode = redis.pcall('hget', lock, 'mode')
  if type(mode) == 'table' then
    result[i] = 0
  elseif mode == false then
    result[i] = redis.call('exists', lock) == 1 and 0 or -1
  else
    local count = tonumber(redis.call('hget', lock, field))
    if count == nil then
      result[i] = 0
    elseif ARGV[3 * i] == 'write' then
      redis.call('pexpire', lock, math.max(redis.call('pttl', lock), lease))
      result[i] = 1
    else
      local alive = false
      for n = count, 1, -1 do
        if redis.call('pexpire', KEYS[2 * i] .. ':' .. n, lease) == 1 then alive = true end
      end
      if alive then
        redis.call('pexpire', lock, math.max(redis.call('pttl', lock), lease))
        result[i] = 1
      else
        redis.call('hdel', lock, field)
        result[i] = -1
      end
    end
  end
end
return result
