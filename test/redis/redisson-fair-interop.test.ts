/**
 * effect-lock's FairLock and Redisson 4.7's RedissonFairLock wait in one line on the same name.
 * The test plays a Redisson client by running Redisson's own fair-lock scripts, copied verbatim
 * from RedissonFairLock.java (redisson/redisson 4.7: tryLockInnerAsync with EVAL_LONG,
 * unlockInnerAsync with the unlock latch and the publish command as an argument), with Redisson's
 * lock-name field `<client uuid>:<thread id>`, its client clock and its 5 s fairLockWaitTimeout.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Option, Schedule } from "effect"
import type { Redis } from "ioredis"
import { randomUUID } from "node:crypto"
import { FairLock } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import type { RedisServer } from "../support/redisServer.js"
import { skipRedis, startRedisServer } from "../support/redisServer.js"
import { admin, cmd, eventually, listen } from "./helpers.js"

/** RedissonFairLock.tryLockInnerAsync (EVAL_LONG): KEYS lock, queue, timeouts; ARGV lease, lock name, wait, now. */
const redissonTryLock = "while true do " +
  "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);" +
  "if firstThreadId2 == false then " +
  "break;" +
  "end;" +
  "local timeout = redis.call('zscore', KEYS[3], firstThreadId2);" +
  "if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then " +
  "redis.call('zrem', KEYS[3], firstThreadId2);" +
  "redis.call('lpop', KEYS[2]);" +
  "else " +
  "break;" +
  "end;" +
  "end;" +
  "if (redis.call('exists', KEYS[1]) == 0) " +
  "and ((redis.call('exists', KEYS[2]) == 0) " +
  "or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then " +
  "redis.call('lpop', KEYS[2]);" +
  "redis.call('zrem', KEYS[3], ARGV[2]);" +
  "local keys = redis.call('zrange', KEYS[3], 0, -1);" +
  "for i = 1, #keys, 1 do " +
  "redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]);" +
  "end;" +
  "redis.call('hset', KEYS[1], ARGV[2], 1);" +
  "redis.call('pexpire', KEYS[1], ARGV[1]);" +
  "return nil;" +
  "end;" +
  "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then " +
  "redis.call('hincrby', KEYS[1], ARGV[2],1);" +
  "redis.call('pexpire', KEYS[1], ARGV[1]);" +
  "return nil;" +
  "end;" +
  "local timeout = redis.call('zscore', KEYS[3], ARGV[2]);" +
  "if timeout ~= false then " +
  "local ttl = redis.call('pttl', KEYS[1]);" +
  "return math.max(0, ttl); " +
  "end;" +
  "local lastThreadId = redis.call('lindex', KEYS[2], -1);" +
  "local ttl;" +
  "if lastThreadId ~= false and lastThreadId ~= ARGV[2] and redis.call('zscore', KEYS[3], lastThreadId) ~= false then " +
  "ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]);" +
  "else " +
  "ttl = redis.call('pttl', KEYS[1]);" +
  "end;" +
  "local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);" +
  "if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then " +
  "redis.call('rpush', KEYS[2], ARGV[2]);" +
  "end;" +
  "return ttl;"

/**
 * RedissonFairLock.unlockInnerAsync: KEYS lock, queue, timeouts, channel, unlock latch; ARGV unlock
 * message, lease, lock name, now, publish command, latch timeout.
 */
const redissonUnlock = "local val = redis.call('get', KEYS[5]); " +
  "if val ~= false then " +
  "return tonumber(val);" +
  "end; " +
  "while true do " +
  "local firstThreadId2 = redis.call('lindex', KEYS[2], 0);" +
  "if firstThreadId2 == false then " +
  "break;" +
  "end; " +
  "local timeout = redis.call('zscore', KEYS[3], firstThreadId2);" +
  "if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then " +
  "redis.call('zrem', KEYS[3], firstThreadId2); " +
  "redis.call('lpop', KEYS[2]); " +
  "else " +
  "break;" +
  "end; " +
  "end;" +
  "if (redis.call('exists', KEYS[1]) == 0) then " +
  "local nextThreadId = redis.call('lindex', KEYS[2], 0); " +
  "if nextThreadId ~= false then " +
  "redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); " +
  "end; " +
  "redis.call('set', KEYS[5], 1, 'px', ARGV[6]); " +
  "return 1; " +
  "end;" +
  "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then " +
  "return nil;" +
  "end; " +
  "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); " +
  "if (counter > 0) then " +
  "redis.call('pexpire', KEYS[1], ARGV[2]); " +
  "redis.call('set', KEYS[5], 0, 'px', ARGV[6]); " +
  "return 0; " +
  "end; " +
  "redis.call('del', KEYS[1]); " +
  "redis.call('set', KEYS[5], 1, 'px', ARGV[6]); " +
  "local nextThreadId = redis.call('lindex', KEYS[2], 0); " +
  "if nextThreadId ~= false then " +
  "redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]); " +
  "end; " +
  "return 1; "

const prefixName = (kind: string, name: string) => name.includes("{") ? `${kind}:${name}` : `${kind}:{${name}}`
const redissonLease = 30_000
const fairLockWaitTimeout = 5_000

/** A Redisson client (one JVM, thread 1) on fair lock `name`. */
const redisson = (redis: Redis, name: string) => {
  const lockName = `${randomUUID()}:1`
  const keys = [name, prefixName("redisson_lock_queue", name), prefixName("redisson_lock_timeout", name)]
  return {
    lockName,
    channel: `${prefixName("redisson_lock__channel", name)}:${lockName}`,
    tryLock: Effect.suspend(() =>
      cmd<number | null>(
        redis,
        "EVAL",
        redissonTryLock,
        3,
        ...keys,
        redissonLease,
        lockName,
        fairLockWaitTimeout,
        Date.now()
      )
    ),
    unlock: Effect.suspend(() =>
      cmd<number | null>(
        redis,
        "EVAL",
        redissonUnlock,
        5,
        ...keys,
        prefixName("redisson_lock__channel", name),
        `redisson_unlock_latch:{${name}}:${randomUUID()}`,
        0,
        redissonLease,
        lockName,
        Date.now(),
        "publish",
        10_000
      )
    )
  }
}

let seq = 0
const freshKey = () => `fair-interop:${process.pid}:${++seq}`

describe.skipIf(skipRedis())("Redisson fair lock interop", () => {
  let server: RedisServer
  beforeAll(async () => {
    server = await startRedisServer()
  })
  afterAll(() => server?.stop())

  const provide = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    Effect.provide(effect, RedisBackend.layer({ url: server.url }))

  it.scopedLive("behind a Redisson holder, our waiter is in Redisson's line and Redisson's unlock wakes exactly it", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const redis = yield* admin(server.url)
      const java = redisson(redis, key)
      assert.isNull(yield* java.tryLock)
      const waiter = yield* Effect.fork(
        FairLock.withLock(key, (lease) => Effect.succeed(lease.owner), { retry: Schedule.spaced("60 seconds") })
      )
      yield* eventually(
        Effect.map(
          cmd<Array<string>>(redis, "LRANGE", prefixName("redisson_lock_queue", key), 0, -1),
          (q) => q.length === 1
        ),
        5_000,
        "our waiter in Redisson's queue"
      )
      const [queued] = yield* cmd<Array<string>>(redis, "LRANGE", prefixName("redisson_lock_queue", key), 0, -1)
      const told = yield* listen(server.url, `${prefixName("redisson_lock__channel", key)}:${queued}`)
      assert.isTrue(Option.isNone(yield* Fiber.poll(waiter)))
      assert.strictEqual(yield* java.unlock, 1)
      const owner = yield* Fiber.join(waiter)
      assert.strictEqual(owner, queued)
      assert.deepStrictEqual(told, ["0"])
    }).pipe(provide))

  it.scopedLive("a Redisson waiter keeps its place: our release tells it, and our later waiter goes after it", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const redis = yield* admin(server.url)
      const java = redisson(redis, key)
      const told = yield* listen(server.url, java.channel)
      const order: Array<string> = []
      const go = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(FairLock.withLock(key, Deferred.await(go)))
      yield* eventually(Effect.map(cmd<number>(redis, "EXISTS", key), (n) => n === 1), 5_000, "held")
      // Redisson asks while we hold: it gets the lock's TTL and joins the line.
      const ttl = yield* java.tryLock
      assert.isTrue(typeof ttl === "number" && ttl > 0)
      // Then one of ours (not inside the holder's region, which would reenter): it queues behind Redisson.
      yield* Effect.fork(FairLock.withLock(key, Effect.sync(() => order.push("effect-lock")), { wait: "20 seconds" }))
      yield* eventually(
        Effect.map(
          cmd<Array<string>>(redis, "LRANGE", prefixName("redisson_lock_queue", key), 0, -1),
          (q) => q.length === 2
        ),
        5_000,
        "ours in line behind Redisson"
      )
      yield* Deferred.succeed(go, void 0)
      yield* Fiber.join(holder)
      // Our release told Redisson's thread on its own channel, and nobody else got in.
      yield* eventually(Effect.sync(() => told.length === 1), 5_000, "Redisson told")
      assert.isNull(yield* java.tryLock, "the first in line takes the lock")
      yield* Effect.sleep(200)
      assert.deepStrictEqual(order, [], "ours waits behind Redisson")
      assert.strictEqual(yield* java.unlock, 1)
      yield* eventually(Effect.sync(() => order.length === 1), 5_000, "ours after Redisson")
    }).pipe(provide))

  it.scopedLive("a Redisson tryLock without waiting does not jump our line", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const redis = yield* admin(server.url)
      const java = redisson(redis, key)
      const go = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(FairLock.withLock(key, Deferred.await(go)))
      yield* eventually(Effect.map(cmd<number>(redis, "EXISTS", key), (n) => n === 1), 5_000, "held")
      const waiter = yield* Effect.fork(
        FairLock.withLock(key, Effect.sleep(300), { retry: Schedule.spaced("60 seconds") })
      )
      yield* eventually(
        Effect.map(cmd<Array<string>>(redis, "LRANGE", prefixName("redisson_lock_queue", key), 0, -1), (q) =>
          q.length === 1),
        5_000,
        "ours in line"
      )
      yield* Deferred.succeed(go, void 0)
      yield* Fiber.join(holder)
      // Right after our release the lock is free or taken by our waiter: either way Redisson's
      // attempt finds it busy (the line or the holder in front of it).
      const result = yield* java.tryLock
      assert.isNotNull(result)
      yield* Fiber.join(waiter)
    }).pipe(provide))
})
