-- rw-read-acquire.lua: one attempt at the read side of a read-write lock, in Redisson 4.7's
-- RedissonReadLock layout (tryLockInnerAsync), with per-reader leases and writers first.
--
-- KEYS[1]  the lock hash: field "mode" ("read" or "write"), field <owner> = a reader's hold count,
--          field <owner>:write = the writer's hold count; PEXPIRE at least the longest lease in it
-- KEYS[2]  this reader's timeout prefix {<name>}:<owner>:rwlock_timeout; hold n of the reader is
--          the key <prefix>:<n>, with the reader's lease (Redisson's per-reader timeout keys)
-- KEYS[3]  the fencing counter redisson_lock_token:{<name>} (shared with the plain lock)
-- KEYS[4]  the waiting-writer mark {<name>}:rwlock_writer (ours): a writer field, PX one wait window
-- KEYS[5]  the timeout base {<name>} (or <name> when it holds a "{"): reader r's hold n is
--          <base>:<r>:rwlock_timeout:<n>
-- ARGV[1]  the lease in milliseconds
-- ARGV[2]  the owner id (the reader's field; its write field is <owner>:write)
-- ARGV[3]  "1" to draw a fencing token on a fresh acquisition, "0" not to
--
-- Errors   a bad lease; a name holding another type, or a plain (or fair) lock: a hash without
--          "mode". None writes anything.
--
-- Returns  {1, token}  acquired (token a decimal string; "0" without fencing; a reentry returns the
--                      current counter, a fresh read, including a downgrade, draws a new one)
--          {0, wait}   busy: the lock's remaining lease, or, when a writer waits, its mark's (ms;
--                      -1 when there is no expiry)
--
-- As in Redisson: a read is granted when the hash is free, in read mode, or in write mode to the
-- writer itself (a downgrade). Beyond Redisson: readers whose every timeout key expired are dropped
-- first (each reader's lease is its own), and while a writer's mark is alive no new reader enters
-- (a reader already in the hash may reenter): a stream of readers cannot starve a waiting writer.
-- No client clock: every time is a PTTL/PEXPIRE on the server.
if not string.match(ARGV[1], '^[1-9][0-9]*$') or tonumber(ARGV[1]) > 2147483647 then
  return redis.error_reply('ERR effect-lock: the lease must be a whole number of milliseconds in [1, 2147483647], got ' .. ARGV[1])
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
          if redis.call('pttl', KEYS[5] .. ':' .. field .. ':rwlock_timeout:' .. n) ~= -2 then alive = true end
        end
        if alive then left = left + 1 else redis.call('hdel', KEYS[1], field) end
      end
    end
  end
  if left == 0 then redis.call('del', KEYS[1]) end
end

local function token(fresh)
  if ARGV[3] ~= '1' then return '0' end
  if fresh then redis.call('incr', KEYS[3]) end
  return redis.call('get', KEYS[3]) or '0'
end

local function grant(fresh)
  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('set', KEYS[2] .. ':' .. n, 1, 'px', ARGV[1])
  redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1])))
  return {1, token(fresh)}
end

if mode then
  prune()
  mode = redis.call('hget', KEYS[1], 'mode')
end
local mark = redis.call('get', KEYS[4])
local writerWaits = mark ~= false and mark ~= ARGV[2] .. ':write'
if mode == false then
  if writerWaits then return {0, math.max(redis.call('pttl', KEYS[4]), 0)} end
  redis.call('hset', KEYS[1], 'mode', 'read')
  return grant(true)
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  return grant(false)
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2] .. ':write') == 1 then
  return grant(true)
end
if mode == 'read' and not writerWaits then
  return grant(true)
end
if mode == 'read' then return {0, math.max(redis.call('pttl', KEYS[4]), 0)} end
return {0, redis.call('pttl', KEYS[1])}
