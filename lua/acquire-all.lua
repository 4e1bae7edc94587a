-- acquire-all.lua: one all-or-nothing attempt at several Redisson-compatible RLocks (MultiLock,
-- when every key is on one server or in one cluster slot).
--
-- KEYS     per lock, two keys: the lock hash, then its fencing counter redisson_lock_token:{<lock>}
-- ARGV[1]  the lease in milliseconds (every lock gets the same)
-- ARGV[2]  "1" to draw a fencing token on each fresh acquisition, "0" not to
-- ARGV[3…] the owner id of each lock, in the order of KEYS
--
-- Errors   as acquire.lua (a bad lease, a key of another type, a read-write lock), raised before
--          anything is written.
--
-- Returns  {1, token, …}   every lock taken: one token per lock, in order ("0" without fencing)
--          {0, index, pttl} none taken: lock number `index` (1-based) is held by another owner;
--                           pttl is its remaining lease in ms, -1 when it has none
--
-- Every lock is checked before the first write, so a busy lock (or an error) leaves nothing
-- behind; then each is taken exactly as acquire.lua takes one (a fresh lock gets a hold count of
-- 1 and a new token; an owner already in it gets its count incremented and the current token).
if not string.match(ARGV[1], '^[1-9][0-9]*$') or tonumber(ARGV[1]) > 2147483647 then
  return redis.error_reply('ERR effect-lock: the lease must be a whole number of milliseconds in [1, 2147483647], got ' .. ARGV[1])
end
local locks = #KEYS / 2
if locks < 1 or #KEYS % 2 ~= 0 or #ARGV ~= locks + 2 then
  return redis.error_reply('ERR effect-lock: acquire-all takes a lock and a counter key per lock and one owner per lock')
end
local fresh = {}
for i = 1, locks do
  local lock = KEYS[2 * i - 1]
  local owner = ARGV[2 + i]
  if redis.call('exists', lock) == 0 then
    fresh[i] = true
  else
    local held = redis.pcall('hexists', lock, owner)
    if type(held) == 'table' and held.err then
      return redis.error_reply('WRONGTYPE effect-lock: "' .. lock .. '" holds a ' .. redis.call('type', lock).ok ..
        ', not a lock: lock names share the key space with data (give the backend a prefix)')
    end
    if redis.call('hexists', lock, 'mode') == 1 then
      return redis.error_reply('WRONGTYPE effect-lock: "' .. lock .. '" is a read-write lock, not a lock: one name must keep one lock kind')
    end
    if held ~= 1 then
      return {0, i, redis.call('pttl', lock)}
    end
    fresh[i] = false
  end
end
local reply = {1}
for i = 1, locks do
  local lock = KEYS[2 * i - 1]
  local counter = KEYS[2 * i]
  redis.call('hincrby', lock, ARGV[2 + i], 1)
  redis.call('pexpire', lock, ARGV[1])
  local token = '0'
  if ARGV[2] == '1' then
    if fresh[i] then
      redis.call('incr', counter)
    end
    token = redis.call('get', counter) or '0'
  end
  reply[i + 1] = token
end
return reply
