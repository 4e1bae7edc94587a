-- rw-write-acquire.lua: one attempt at the write side of a read-write lock, in Redisson 4.7's
-- RedissonWriteLock layout (tryLockInnerAsync), with per-reader leases and writers first.
--
-- KEYS[1]  the lock hash (see rw-read-acquire.lua)
-- KEYS[2]  the fencing counter redisson_lock_token:{<name>} (shared with the plain lock)
-- KEYS[3]  the waiting-writer mark {<name>}:rwlock_writer (ours)
-- KEYS[4]  the timeout base {<name>} (or <name> when it holds a "{")
-- ARGV[1]  the lease in milliseconds
-- ARGV[2]  the writer's field: <owner>:write
-- ARGV[3]  "1" to draw a fencing token on a fresh acquisition, "0" not to
-- ARGV[4]  "1" when the caller waits (a busy attempt sets the mark that holds new readers back),
--          "0" for one attempt
-- ARGV[5]  the wait window in milliseconds: the mark's life; a waiting writer comes back sooner
--
-- Errors   a bad lease or window; a name holding another type, or a plain (or fair) lock: a hash
--          without "mode". None writes anything.
--
-- Returns  {1, token}  acquired (token as in rw-read-acquire.lua)
--          {0, pttl}   busy: the lock's remaining lease (-1 when it has none)
--
-- As in Redisson: the write lock is granted when the hash is free, and reentered by its writer.
-- Beyond Redisson: readers whose every timeout key expired are dropped first, and a waiting
-- attempt writes this writer into the mark (PX one window), which new readers respect until the
-- writer gets in (its mark is then deleted), gives up (rw-abandon.lua) or stops coming back.
if not string.match(ARGV[1], '^[1-9][0-9]*$') or tonumber(ARGV[1]) > 2147483647 then
  return redis.error_reply('ERR effect-lock: the lease must be a whole number of milliseconds in [1, 2147483647], got ' .. ARGV[1])
end
if not string.match(ARGV[5], '^[1-9][0-9]*$') or tonumber(ARGV[5]) > 2147483647 then
  return redis.error_reply('ERR effect-lock: the wait window must be a positive whole number of milliseconds, got ' .. ARGV[5])
end
local mode = redis.pcall('hget', KEYS[1], 'mode')
if type(mode) == 'table' and mode.err then
  return redis.error_reply('WRONGTYPE effect-lock: "' .. KEYS[1] .. '" holds a ' .. redis.call('type', KEYS[1]).ok ..
    ', not a lock: lock names share the key space with data (give the backend a prefix)')
end
if mode == false and redis.call('exists', KEYS[1]) == 1 then
  return redis.error_reply('WRONGTYPE effect-lock: "' .. KEYS[1] .. '" is a lock, not a read-write lock: one name must keep one lock kind')
end

-- Drop readers whose every timeout key has expired; delete the hash when nobody is left.
local function prune()
  local fields = redis.call('hgetall', KEYS[1])
  local left = 0
  for i = 1, #fields, 2 do
    local field = fields[i]
    local count = tonumber(fields[i + 1])
    if field ~= 'mode' and count ~= nil then
      if string.sub(field, -6) == ':write' then
        left = left + 1
      else
        local alive = false
        for n = count, 1, -1 do
          if redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. n) ~= -2 then alive = true end
        end
        if alive then left = left + 1 else redis.call('hdel', KEYS[1], field) end
      end
    end
  end
  if left == 0 then redis.call('del', KEYS[1]) end
end

local function token(fresh)
  if ARGV[3] ~= '1' then return '0' end
  if fresh then redis.call('incr', KEYS[2]) end
  return redis.call('get', KEYS[2]) or '0'
end

if mode then
  prune()
  mode = redis.call('hget', KEYS[1], 'mode')
end
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'write')
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  if redis.call('get', KEYS[3]) == ARGV[2] then redis.call('del', KEYS[3]) end
  return {1, token(true)}
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1])))
  return {1, token(false)}
end
if ARGV[4] == '1' then
  redis.call('set', KEYS[3], ARGV[2], 'px', ARGV[5])
end
return {0, redis.call('pttl', KEYS[1])}
