-- semaphore-acquire.lua: one attempt to take permits of a Redisson-compatible permit-expirable
-- semaphore (RedissonPermitExpirableSemaphore's layout), with time from the server.
--
-- KEYS[1]  the semaphore: a string holding the number of free permits (may be negative after a shrink)
-- KEYS[2]  its timeout set {<name>}:timeout: one member per held permit, scored by its lease's end (ms)
-- KEYS[3]  its channel redisson_sc:{<name>}: the free count is published when permits come back
-- KEYS[4]  the fencing counter effect_lock_permit_token:{<name>} (INCR, never expires)
-- ARGV[1]  how many permits: a whole number, at least 1
-- ARGV[2]  the lease in milliseconds
-- ARGV[3]  the owner id: the permits are the members <owner>:1 .. <owner>:<n>
-- ARGV[4]  "1" to draw a fencing token, "0" not to
-- ARGV[5]  the total to create the semaphore with when it does not exist, or "" to leave it at 0
-- ARGV[6]  the publish command: "publish", or "spublish" on a Redis Cluster (Redisson's
--          getPublishCommand()); anything else is an error before any write
--
-- Errors   bad arguments; data of another type at a key. Neither writes anything.
--
-- Returns  {1, token}            acquired; token as a decimal string ("0" without fencing)
--          {0, available, ttl}   too few free; ttl: ms until the soonest held lease ends, -1 if none
--
-- As Redisson's tryAcquireAsync: permits whose lease ended are given back first (and the free
-- count published), then n are taken when n are free. Time is the server's (TIME), never a client's.
local function whole(value, min)
  return value ~= nil and string.match(value, '^[0-9]+$') ~= nil and tonumber(value) >= min and tonumber(value) <= 2147483647
end
if ARGV[6] ~= 'publish' and ARGV[6] ~= 'spublish' then
  return redis.error_reply('ERR effect-lock: the publish command must be publish or spublish, got ' .. tostring(ARGV[6]))
end
if not whole(ARGV[1], 1) then
  return redis.error_reply('ERR effect-lock: permits must be a whole number in [1, 2147483647], got ' .. tostring(ARGV[1]))
end
if not whole(ARGV[2], 1) then
  return redis.error_reply('ERR effect-lock: the lease must be a whole number of milliseconds in [1, 2147483647], got ' .. tostring(ARGV[2]))
end
if ARGV[5] ~= '' and not whole(ARGV[5], 1) then
  return redis.error_reply('ERR effect-lock: the total must be a whole number in [1, 2147483647], got ' .. tostring(ARGV[5]))
end
for i = 1, 2 do
  local kind = redis.call('type', KEYS[i]).ok
  local expected = i == 1 and 'string' or 'zset'
  if kind ~= 'none' and kind ~= expected then
    return redis.error_reply('WRONGTYPE effect-lock: "' .. KEYS[i] .. '" holds a ' .. kind .. ', not a semaphore ' .. expected)
  end
end
if redis.replicate_commands ~= nil then redis.replicate_commands() end
local time = redis.call('time')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local expired = redis.call('zrangebyscore', KEYS[2], 0, now)
if #expired > 0 then
  for i = 1, #expired, 1000 do
    redis.call('zrem', KEYS[2], unpack(expired, i, math.min(i + 999, #expired)))
  end
  local value = redis.call('incrby', KEYS[1], #expired)
  if value > 0 then
    redis.call(ARGV[6], KEYS[3], value)
  end
end
if ARGV[5] ~= '' and redis.call('exists', KEYS[1]) == 0 then
  redis.call('set', KEYS[1], tonumber(ARGV[5]) - redis.call('zcard', KEYS[2]))
end

local n = tonumber(ARGV[1])
local available = tonumber(redis.call('get', KEYS[1]) or '0')
if available >= n and redis.call('zscore', KEYS[2], ARGV[3] .. ':1') == false then
  redis.call('decrby', KEYS[1], n)
  local ends = now + tonumber(ARGV[2])
  for i = 1, n do
    redis.call('zadd', KEYS[2], ends, ARGV[3] .. ':' .. i)
  end
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then
    redis.call('pexpire', KEYS[2], ttl)
  end
  if ARGV[4] == '1' then
    redis.call('incr', KEYS[4])
    return {1, redis.call('get', KEYS[4])}
  end
  return {1, '0'}
end
local soonest = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')
local ttl = -1
if soonest[2] ~= nil then
  ttl = math.max(0, tonumber(soonest[2]) - now)
  -- Redisson's permits without a lease are scored 922337203685477: they never end.
  if ttl > 2147483647 then ttl = -1 end
end
return {0, available, ttl}
