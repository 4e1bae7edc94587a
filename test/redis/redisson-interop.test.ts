/**
 * effect-lock and Redisson exclude each other on the same lock name. The test plays a Redisson
 * client by running Redisson 4.7's own RLock scripts, copied verbatim (tryLockInnerAsync,
 * unlockInnerAsync with the unlock latch and the publish command as an argument, and the batched
 * watchdog renewal of renewal/LockTask) with Redisson's lock-name field `<client uuid>:<thread id>`.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Duration, Effect, Fiber, Option, Schedule } from "effect"
import type { Redis } from "ioredis"
import { randomUUID } from "node:crypto"
import { Lock, withLock } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import type { RedisServer } from "../support/redisServer.js"
import { skipRedis, startRedisServer } from "../support/redisServer.js"
import { admin, cmd, eventually } from "./helpers.js"

/**
 * RedissonLock.tryLockInnerAsync (Redisson 4.7): KEYS[1] lock; ARGV[1] lease ms, ARGV[2] lock name.
 * nil = acquired, otherwise the holder's PTTL.
 */
const redissonTryLock = "if ((redis.call('exists', KEYS[1]) == 0) " +
  "or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then " +
  "redis.call('hincrby', KEYS[1], ARGV[2], 1); " +
  "redis.call('pexpire', KEYS[1], ARGV[1]); " +
  "return nil; " +
  "end; " +
  "return redis.call('pttl', KEYS[1]);"

/**
 * RedissonLock.unlockInnerAsync (Redisson 4.7, with the unlock latch): KEYS[1] lock, KEYS[2]
 * channel, KEYS[3] unlock latch; ARGV[1] unlock message (0), ARGV[2] lease ms, ARGV[3] lock name,
 * ARGV[4] publish command, ARGV[5] latch timeout. 1 = released, 0 = still held, nil = not held.
 */
const redissonUnlock = "local val = redis.call('get', KEYS[3]); " +
  "if val ~= false then " +
  "return tonumber(val);" +
  "end; " +
  "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then " +
  "return nil;" +
  "end; " +
  "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); " +
  "if (counter > 0) then " +
  "redis.call('pexpire', KEYS[1], ARGV[2]); " +
  "redis.call('set', KEYS[3], 0, 'px', ARGV[5]); " +
  "return 0; " +
  "else " +
  "redis.call('del', KEYS[1]); " +
  "redis.call(ARGV[4], KEYS[2], ARGV[1]); " +
  "redis.call('set', KEYS[3], 1, 'px', ARGV[5]); " +
  "return 1; " +
  "end; "

/**
 * renewal/LockTask (Redisson 4.7's watchdog, many locks in one script): KEYS locks; ARGV[1] lease
 * ms, then one lock name per lock. 1 = renewed, 0 = that lock name is not in the lock.
 */
const redissonLockTask = "local result = {} " +
  "for i = 1, #KEYS, 1 do " +
  "if (redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1) then " +
  "redis.call('pexpire', KEYS[i], ARGV[1]); " +
  "table.insert(result, 1); " +
  "else " +
  "table.insert(result, 0); " +
  "end; " +
  "end; " +
  "return result;"

/** RedissonObject.prefixName: how Redisson names a lock's channel and token counter. */
const prefixName = (kind: string, name: string) => name.includes("{") ? `${kind}:${name}` : `${kind}:{${name}}`

const redissonLease = 30_000
const prefix = "svc:"

/** A Redisson client (one JVM, thread 1) on lock `name` (Redisson sees the prefixed name). */
const redisson = (redis: Redis, name: string) => {
  const lockName = `${randomUUID()}:1`
  return {
    lockName,
    tryLock: cmd<number | null>(redis, "EVAL", redissonTryLock, 1, name, redissonLease, lockName),
    // Each unlock is a new request: a latch of its own (Redisson's getUnlockLatchName(requestId)).
    unlock: Effect.suspend(() =>
      cmd<number | null>(
        redis,
        "EVAL",
        redissonUnlock,
        3,
        name,
        prefixName("redisson_lock__channel", name),
        `${prefixName("redisson_unlock_latch", name)}:${randomUUID()}`,
        0,
        redissonLease,
        lockName,
        "publish",
        10_000
      )
    ),
    /** The watchdog's batched renewal of this lock (one lock of the batch). */
    renew: Effect.suspend(() => cmd<Array<number>>(redis, "EVAL", redissonLockTask, 1, name, redissonLease, lockName))
  }
}

let seq = 0
const freshKey = () => `interop:${process.pid}:${++seq}`
/** A name with its own hash tag, as cluster users write them: Redisson then adds no braces. */
const taggedKey = () => `{tenant-${process.pid}}:orders:${++seq}`

describe.skipIf(skipRedis())("Redisson interop", () => {
  let server: RedisServer
  beforeAll(async () => {
    server = await startRedisServer()
  })
  afterAll(() => server?.stop())

  const provide = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    Effect.provide(effect, RedisBackend.layer({ url: server.url, prefix }))

  for (const [label, makeKey] of [["a plain name", freshKey], ["a hash-tagged name", taggedKey]] as const) {
    it.scopedLive(`while Redisson holds, withLock waits and is woken by Redisson's release (${label})`, () =>
      Effect.gen(function*() {
        const key = makeKey()
        const redis = yield* admin(server.url)
        const java = redisson(redis, prefix + key)
        assert.isNull(yield* java.tryLock)
        const waiter = yield* Effect.fork(
          Effect.timed(
            withLock(key, (lease) => Effect.succeed(lease.fencingToken), { retry: Schedule.spaced("60 seconds") })
          )
        )
        yield* Effect.sleep(200)
        assert.isTrue(Option.isNone(yield* Fiber.poll(waiter)), "excluded while Redisson holds")
        assert.strictEqual(yield* java.unlock, 1)
        const [waited, token] = yield* Fiber.join(waiter)
        assert.isTrue(token > 0n)
        assert.strictEqual(yield* cmd(redis, "GET", prefixName("redisson_lock_token", prefix + key)), String(token))
        assert.isAtLeast(Duration.toMillis(waited), 200)
        assert.isBelow(
          Duration.toMillis(waited),
          10_000,
          "woken by the release, long before Redisson's 30 s lease ended"
        )
      }).pipe(provide))
  }

  it.scopedLive("Redisson's hold count is respected: a re-entered Redisson lock needs two unlocks", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const redis = yield* admin(server.url)
      const java = redisson(redis, prefix + key)
      assert.isNull(yield* java.tryLock)
      assert.isNull(yield* java.tryLock)
      assert.deepStrictEqual(yield* java.renew, [1], "Redisson's watchdog renews its own hold")
      assert.strictEqual(yield* java.unlock, 0, "still held once")
      const timeout = yield* Effect.flip(withLock(key, Effect.void, { wait: "300 millis" }))
      assert.strictEqual(timeout._tag, "LockTimeoutError")
      assert.strictEqual(yield* java.unlock, 1)
      assert.isTrue(Option.isSome(yield* withLock(key, Effect.succeed("in")).pipe(Effect.option)))
    }).pipe(provide))

  it.scopedLive("while effect-lock holds, Redisson's tryLock gets the PTTL and changes nothing; our release wakes Redisson", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const name = prefix + key
      const redis = yield* admin(server.url)
      const java = redisson(redis, name)
      const channel = yield* admin(server.url)
      const messages: Array<string> = []
      channel.on("message", (_: string, message: string) => messages.push(message))
      yield* Effect.promise(() => channel.subscribe(prefixName("redisson_lock__channel", name)))

      yield* withLock(key, (lease) =>
        Effect.gen(function*() {
          const pttl = yield* java.tryLock
          assert.isNumber(pttl)
          assert.isTrue(pttl! > 0 && pttl! <= 10_000, `positive PTTL (${pttl})`)
          assert.deepStrictEqual(yield* cmd(redis, "HGETALL", name), [lease.owner, "1"])
          assert.isNull(yield* java.unlock, "Redisson cannot unlock what it does not hold")
          assert.deepStrictEqual(yield* java.renew, [0], "nor renew it")
          assert.isTrue(yield* Lock.isLocked(key))
        }), { lease: "10 seconds" })

      yield* eventually(Effect.sync(() => messages.length > 0), 5_000, "the release message")
      assert.deepStrictEqual(messages, ["0"], "Redisson's waiters listen for exactly this")
      assert.isNull(yield* java.tryLock, "and Redisson gets the lock afterwards")
      assert.strictEqual(yield* java.unlock, 1)
    }).pipe(provide))
})
