-- raise-token.lua: raise a fencing counter to at least a given value (Redlock: after a grant, every
-- node's counter is raised to the token granted, so that the next grant, whose quorum shares a
-- node with this one, draws a larger token).
--
-- KEYS[1]  the fencing counter redisson_lock_token:{<lock>} (never expires)
-- ARGV[1]  the token granted, a decimal string of digits
--
-- Returns  1  the counter was lower (or missing) and is now ARGV[1]
--          0  the counter was already at least ARGV[1]: nothing changed
--
-- Compared as decimal strings (length, then digits), so that 64-bit values survive: Lua numbers
-- are doubles. A counter holding something else than digits is left alone (0).
if not string.match(ARGV[1], '^[0-9]+$') then
  return redis.error_reply('ERR effect-lock: the token must be a decimal string, got ' .. ARGV[1])
end
local current = redis.call('get', KEYS[1])
if current ~= false then
  if not string.match(current, '^[0-9]+$') then
    return 0
  end
  current = string.gsub(current, '^0+(%d)', '%1')
end
local wanted = string.gsub(ARGV[1], '^0+(%d)', '%1')
if current == false or #current < #wanted or (#current == #wanted and current < wanted) then
  redis.call('set', KEYS[1], wanted)
  return 1
end
return 0
