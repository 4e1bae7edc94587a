-- inspect.lua: read a lock without changing it.
--
-- KEYS[1]  the lock hash
--
-- Returns  nil                              no lock
--          {pttl, owner1, count1, ...}      pttl in ms (-1 when the lock has no expiry), then the
--                                           hash as HGETALL returns it (owner, hold count pairs)
local pttl = redis.call('pttl', KEYS[1])
if pttl == -2 then
  return nil
end
local reply = redis.call('hgetall', KEYS[1])
table.insert(reply, 1, pttl)
return reply
