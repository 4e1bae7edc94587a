-- describe.lua: everything `effect-lock inspect` shows of one lock, read in one step (a snapshot:
-- no holder can change between the fields). Changes nothing.
--
-- KEYS[1]  the lock (a hash: owner -> hold count; Redisson's read-write lock adds field "mode")
-- KEYS[2]  the fencing counter redisson_lock_token:{<lock>}
-- KEYS[3]  Redisson's fair-lock queue redisson_lock_queue:{<lock>}
-- KEYS[4]  the release channel redisson_lock__channel:{<lock>} (a key so that, on a cluster, the
--          script runs on the master of the lock's slot, where its sharded subscribers are)
--
-- Returns  {type, pttl, token, queued, subscribers, field1, value1, ...}
--          type    the lock key's type ("none" when there is no lock, "hash" for a lock)
--          pttl    ms left (-1: no expiry, -2: no key)
--          token   the counter's value, "" when there is none
--          queued  the fair-lock queue's length (0 without a queue)
--          subscribers  connections subscribed to the release channel: plain (PUBSUB NUMSUB) and
--                  sharded (PUBSUB SHARDNUMSUB, Redis 7+; counted as 0 where it is unknown)
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
local subscribers = redis.call('pubsub', 'numsub', KEYS[4])[2]
local sharded = redis.pcall('pubsub', 'shardnumsub', KEYS[4])
if type(sharded) == 'table' and type(sharded[2]) == 'number' then
  subscribers = subscribers + sharded[2]
end
local reply = {kind, pttl, token, queued, subscribers}
if kind == 'hash' then
  for _, v in ipairs(redis.call('hgetall', KEYS[1])) do
    table.insert(reply, v)
  end
end
return reply
