-- acquire.lua: one attempt to take a Redisson-compatible RLock.
--
-- KEYS[1]  the lock: a hash whose field <owner> holds the hold count, with a PEXPIRE lease
-- KEYS[2]  the fencing counter redisson_lock_token:{<lock>} (INCR, never expires)
-- ARGV[1]  the lease in milliseconds
-- ARGV[2]  the owner id (the hash field)
-- ARGV[3]  "1" to draw a fencing token on a fresh acquisition, "0" not to
--
-- Errors   a lease that is not a whole number of milliseconds in [1, 2^31 - 1]; a key that holds
--          data of another type (WRONGTYPE, naming the key and its type); a read-write lock (a hash
--          with a "mode" field: Redisson's read-write lock and its plain lock do not exclude each
--          other, so one name must keep one kind). None writes anything.
--
-- Returns  {1, token}  acquired; token is the counter as a decimal string (GET, not the Lua
--                      number INCR returns, so that 64-bit values survive), "0" without fencing
--          {0, pttl}   busy; pttl is the holder's remaining lease in ms, -1 when it has none
--
-- The first two branches are Redisson's tryLockInnerAsync: a free lock is created with a hold
-- count of 1, and an owner already in the hash gets its count incremented and its lease reset.
-- A re-entry returns the current token rather than drawing a new one.
--
-- The lease is checked before the first write: Redis does not roll a script back, and a lock hash
-- written before a failing PEXPIRE would never expire.
if not string.match(ARGV[1], '^[1-9][0-9]*$') or tonumber(ARGV[1]) > 2147483647 then
  return redis.error_reply('ERR effect-lock: the lease must be a whole number of milliseconds in [1, 2147483647], got ' .. ARGV[1])
end
if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  if ARGV[3] == '1' then
    redis.call('incr', KEYS[2])
    return {1, redis.call('get', KEYS[2])}
  end
  return {1, '0'}
end
local held = redis.pcall('hexists', KEYS[1], ARGV[2])
if type(held) == 'table' and held.err then
  -- The name is taken by data of another type: lock names share Redis' key space with everything.
  return redis.error_reply('WRONGTYPE effect-lock: "' .. KEYS[1] .. '" holds a ' .. redis.call('type', KEYS[1]).ok ..
    ', not a lock: lock names share the key space with data (give the backend a prefix)')
end
if redis.call('hexists', KEYS[1], 'mode') == 1 then
  return redis.error_reply('WRONGTYPE effect-lock: "' .. KEYS[1] .. '" is a read-write lock, not a lock: one name must keep one lock kind')
end
if held == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  local token = '0'
  if ARGV[3] == '1' then
    token = redis.call('get', KEYS[2]) or '0'
  end
  return {1, token}
end
return {0, redis.call('pttl', KEYS[1])}
