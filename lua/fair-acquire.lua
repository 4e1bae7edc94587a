-- fair-acquire.lua: one attempt at a fair lock, in Redisson 4.7's RedissonFairLock layout
-- (tryLockInnerAsync), with time from the server.
--
-- KEYS[1]  the lock hash (the same hash as the plain lock: field <owner> = hold count, PEXPIRE lease)
-- KEYS[2]  the queue redisson_lock_queue:{<lock>}: owners waiting in line, first at index 0
-- KEYS[3]  the deadlines redisson_lock_timeout:{<lock>}: a zset, owner -> deadline (ms, server time)
-- KEYS[4]  the fencing counter redisson_lock_token:{<lock>}
-- ARGV[1]  the lease in milliseconds
-- ARGV[2]  the owner id
-- ARGV[3]  "1" to draw a fencing token on a fresh acquisition, "0" not to
-- ARGV[4]  "1" when the caller waits (a busy attempt joins or keeps its place in line), "0" for one attempt
-- ARGV[5]  the wait window in milliseconds (Redisson's fairLockWaitTimeout, 5000 by default)
--
-- Errors   a bad lease or window; a name holding another type, or a read-write lock (field "mode").
--          None writes anything.
--
-- Returns  {1, token}  acquired (token a decimal string, "0" without fencing; a reentry returns the
--                      current counter)
--          {0, wait}   busy; wait is the holder's remaining lease in ms, or, when the lock is free
--                      but another owner is first in line, that owner's remaining deadline; -1 when
--                      the lock has no expiry
--
-- As in Redisson: stale owners at the head of the line (deadline passed) are dropped first; the lock
-- goes to the first in line, or to anybody when nobody waits; when the first in line takes it, the
-- other deadlines move one window closer; a newcomer's deadline is its predecessor's (or the lock's
-- expiry) plus one window. Beyond Redisson: the time is the server's (TIME), not the caller's, and
-- each waiting attempt keeps its owner alive, its deadline at least now + (position + 1) windows.
if not string.match(ARGV[1], '^[1-9][0-9]*$') or tonumber(ARGV[1]) > 2147483647 then
  return redis.error_reply('ERR effect-lock: the lease must be a whole number of milliseconds in [1, 2147483647], got ' .. ARGV[1])
end
if not string.match(ARGV[5], '^[1-9][0-9]*$') then
  return redis.error_reply('ERR effect-lock: the wait window must be a positive whole number of milliseconds, got ' .. ARGV[5])
end
local mode = redis.pcall('hget', KEYS[1], 'mode')
if type(mode) == 'table' and mode.err then
  return redis.error_reply('WRONGTYPE effect-lock: "' .. KEYS[1] .. '" holds a ' .. redis.call('type', KEYS[1]).ok ..
    ', not a lock: lock names share the key space with data (give the backend a prefix)')
end
if mode then
  return redis.error_reply('WRONGTYPE effect-lock: "' .. KEYS[1] .. '" is a read-write lock, not a fair lock: one name must keep one lock kind')
end
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local window = tonumber(ARGV[5])
local owner = ARGV[2]

while true do
  local first = redis.call('lindex', KEYS[2], 0)
  if first == false then break end
  local timeout = redis.call('zscore', KEYS[3], first)
  if timeout ~= false and tonumber(timeout) <= now then
    redis.call('zrem', KEYS[3], first)
    redis.call('lpop', KEYS[2])
  else
    break
  end
end

local function token(fresh)
  if ARGV[3] ~= '1' then return '0' end
  if fresh then redis.call('incr', KEYS[4]) end
  return redis.call('get', KEYS[4]) or '0'
end

if redis.call('exists', KEYS[1]) == 0
  and (redis.call('exists', KEYS[2]) == 0 or redis.call('lindex', KEYS[2], 0) == owner) then
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], owner)
  local waiting = redis.call('zrange', KEYS[3], 0, -1)
  for i = 1, #waiting do
    redis.call('zincrby', KEYS[3], -window, waiting[i])
  end
  redis.call('hset', KEYS[1], owner, 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, token(true)}
end

if redis.call('hexists', KEYS[1], owner) == 1 then
  redis.call('hincrby', KEYS[1], owner, 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, token(false)}
end

local ttl = redis.call('pttl', KEYS[1])
if ARGV[4] == '1' then
  local timeout = redis.call('zscore', KEYS[3], owner)
  local position = redis.call('lpos', KEYS[2], owner)
  if timeout ~= false and position then
    redis.call('zadd', KEYS[3], math.max(tonumber(timeout), now + (position + 1) * window), owner)
  else
    local last = redis.call('lindex', KEYS[2], -1)
    local ahead
    if last ~= false and last ~= owner and redis.call('zscore', KEYS[3], last) ~= false then
      ahead = tonumber(redis.call('zscore', KEYS[3], last)) - now
    else
      ahead = math.max(ttl, 0)
    end
    if redis.call('zadd', KEYS[3], now + ahead + window, owner) == 1 or not position then
      redis.call('lrem', KEYS[2], 0, owner)
      redis.call('rpush', KEYS[2], owner)
    end
  end
end
if ttl == -2 then
  -- Free, but somebody else is first in line: wait for it, at most until its deadline.
  local first = redis.call('lindex', KEYS[2], 0)
  local timeout = first and redis.call('zscore', KEYS[3], first)
  ttl = timeout and math.max(0, tonumber(timeout) - now) or 0
end
return {0, ttl}
