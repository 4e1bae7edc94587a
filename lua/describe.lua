-- describe.lua: everything `effect-lock inspect` shows of one lock, read in one step (a snapshot:
-- no holder can change between the fields). Changes nothing.
--
-- KEYS[1]  the lock (a hash: owner -> hold count; Redisson's read-write lock adds field "mode")
-- KEYS[2]  the fencing counter redisson_lock_token:{<lock>}
-- KEYS[3]  Redisson's fair-lock queue redisson_lock_queue:{<lock>}
--
-- Returns  {type, pttl, token, queued, field1, value1, ...}
--          type    the lock key's type ("none" when there is no lock, "hash" for a lock)
--          pttl    ms left (-1: no expiry, -2: no key)
--          token   the counter's value, "" when there is none
--          queued  the fair-lock queue's length (0 without a queue)
--          then, for a hash, its fields and values as HGETALL returns them
local kind = redis.call('type', KEYS[1])['ok']
local pttl = redis.call('pttl', KEYS[1])
local token = ''
if redis.call('type', KEYS[2])['ok'] == 'string' then
  token = redis.call('get', KEYS[2])
end
local queued = 0
if redis.call('type', KEYS[3])['ok'] == 'list' then
  queued = redis.call('llen', KEYS[3])
end
local reply = {kind, pttl, token, queued}
if kind == 'hash' then
  for _, v in ipairs(redis.call('hgetall', KEYS[1])) do
    table.insert(reply, v)
  end
end
return reply
