/**
 * effect-lock's ReadWriteLock and Redisson 4.7's RedissonReadLock/RedissonWriteLock share one name:
 * they exclude and wake each other. The test plays a Redisson client by running Redisson's own
 * scripts, copied verbatim from redisson/redisson (RedissonReadLock.java and RedissonWriteLock.java as
 * of the renewal scheduler: tryLockInnerAsync through syncedEvalNoRetry, unlockInnerAsync with the
 * unlock latch, the publish command as an argument and nil for an unlock of a free lock;
 * renewal/ReadLockTask.java and renewal/LockTask.java: the batched watchdog renewals), with
 * Redisson's lock name `<client uuid>:<thread id>` (`:write` for the write lock).
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Option, Schedule } from "effect"
import type { Redis } from "ioredis"
import { randomUUID } from "node:crypto"
import { Lock, ReadWriteLock } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import type { RedisServer } from "../support/redisServer.js"
import { skipRedis, startRedisServer } from "../support/redisServer.js"
import { admin, cmd, eventually, listen } from "./helpers.js"

/** RedissonReadLock.tryLockInnerAsync: KEYS lock, timeout prefix; ARGV lease, lock name, write lock name. */
const redissonReadTryLock = "local mode = redis.call('hget', KEYS[1], 'mode'); " +
  "if (mode == false) then " +
  "redis.call('hset', KEYS[1], 'mode', 'read'); " +
  "redis.call('hset', KEYS[1], ARGV[2], 1); " +
  "redis.call('set', KEYS[2] .. ':1', 1); " +
  "redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); " +
  "redis.call('pexpire', KEYS[1], ARGV[1]); " +
  "return nil; " +
  "end; " +
  "if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then " +
  "local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); " +
  "local key = KEYS[2] .. ':' .. ind;" +
  "redis.call('set', key, 1); " +
  "redis.call('pexpire', key, ARGV[1]); " +
  "local remainTime = redis.call('pttl', KEYS[1]); " +
  "redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); " +
  "return nil; " +
  "end;" +
  "return redis.call('pttl', KEYS[1]);"

/**
 * RedissonReadLock.unlockInnerAsync: KEYS lock, channel, timeout prefix, key prefix, unlock latch;
 * ARGV unlock message (0), lock name, publish command, latch timeout.
 */
const redissonReadUnlock = "local val = redis.call('get', KEYS[5]); " +
  "if val ~= false then " +
  "return tonumber(val);" +
  "end; " +
  "local mode = redis.call('hget', KEYS[1], 'mode'); " +
  "if (mode == false) then " +
  "redis.call(ARGV[3], KEYS[2], ARGV[1]); " +
  "redis.call('set', KEYS[5], 1, 'px', ARGV[4]); " +
  "return nil; " +
  "end; " +
  "local lockExists = redis.call('hexists', KEYS[1], ARGV[2]); " +
  "if (lockExists == 0) then " +
  "return nil;" +
  "end; " +
  "local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); " +
  "if (counter == 0) then " +
  "redis.call('hdel', KEYS[1], ARGV[2]); " +
  "end;" +
  "redis.call('del', KEYS[3] .. ':' .. (counter+1)); " +
  "if (redis.call('hlen', KEYS[1]) > 1) then " +
  "local maxRemainTime = -3; " +
  "local keys = redis.call('hkeys', KEYS[1]); " +
  "for n, key in ipairs(keys) do " +
  "counter = tonumber(redis.call('hget', KEYS[1], key)); " +
  "if type(counter) == 'number' then " +
  "for i=counter, 1, -1 do " +
  "local remainTime = redis.call('pttl', KEYS[4] .. ':' .. key .. ':rwlock_timeout:' .. i); " +
  "maxRemainTime = math.max(remainTime, maxRemainTime);" +
  "end; " +
  "end; " +
  "end; " +
  "if maxRemainTime > 0 then " +
  "redis.call('pexpire', KEYS[1], maxRemainTime); " +
  "redis.call('set', KEYS[5], 0, 'px', ARGV[4]); " +
  "return 0; " +
  "end;" +
  "if mode == 'write' then " +
  "redis.call('set', KEYS[5], 0, 'px', ARGV[4]); " +
  "return 0;" +
  "end; " +
  "end; " +
  "redis.call('del', KEYS[1]); " +
  "redis.call(ARGV[3], KEYS[2], ARGV[1]); " +
  "redis.call('set', KEYS[5], 1, 'px', ARGV[4]); " +
  "return 1; "

/** RedissonWriteLock.tryLockInnerAsync: KEYS lock; ARGV lease, write lock name. */
const redissonWriteTryLock = "local mode = redis.call('hget', KEYS[1], 'mode'); " +
  "if (mode == false) then " +
  "redis.call('hset', KEYS[1], 'mode', 'write'); " +
  "redis.call('hset', KEYS[1], ARGV[2], 1); " +
  "redis.call('pexpire', KEYS[1], ARGV[1]); " +
  "return nil; " +
  "end; " +
  "if (mode == 'write') then " +
  "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then " +
  "redis.call('hincrby', KEYS[1], ARGV[2], 1); " +
  "local currentExpire = redis.call('pttl', KEYS[1]); " +
  "redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); " +
  "return nil; " +
  "end; " +
  "end;" +
  "return redis.call('pttl', KEYS[1]);"

/**
 * RedissonWriteLock.unlockInnerAsync: KEYS lock, channel, unlock latch; ARGV read-unlock message
 * (1), lease, write lock name, publish command, latch timeout.
 */
const redissonWriteUnlock = "local val = redis.call('get', KEYS[3]); " +
  "if val ~= false then " +
  "return tonumber(val);" +
  "end; " +
  "local mode = redis.call('hget', KEYS[1], 'mode'); " +
  "if (mode == false) then " +
  "redis.call(ARGV[4], KEYS[2], ARGV[1]); " +
  "redis.call('set', KEYS[3], 1, 'px', ARGV[5]); " +
  "return nil; " +
  "end;" +
  "if (mode == 'write') then " +
  "local lockExists = redis.call('hexists', KEYS[1], ARGV[3]); " +
  "if (lockExists == 0) then " +
  "return nil;" +
  "else " +
  "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); " +
  "if (counter > 0) then " +
  "redis.call('pexpire', KEYS[1], ARGV[2]); " +
  "redis.call('set', KEYS[3], 0, 'px', ARGV[5]); " +
  "return 0; " +
  "else " +
  "redis.call('hdel', KEYS[1], ARGV[3]); " +
  "if (redis.call('hlen', KEYS[1]) == 1) then " +
  "redis.call('del', KEYS[1]); " +
  "redis.call(ARGV[4], KEYS[2], ARGV[1]); " +
  "else " +
  "redis.call('hset', KEYS[1], 'mode', 'read'); " +
  "end; " +
  "redis.call('set', KEYS[3], 1, 'px', ARGV[5]); " +
  "return 1; " +
  "end; " +
  "end; " +
  "end; " +
  "return nil;"

/**
 * renewal/ReadLockTask: KEYS pairs (lock, key prefix); ARGV lease, then per lock a count and the
 * client's lock names on it. 1 = renewed, 0 = none of them is in the lock.
 */
const redissonReadLockTask = "local result = {} " +
  "local argIdx = 2 " +
  "for i = 1, #KEYS, 2 do " +
  "local anyAlive = false; " +
  "local lockNamesCount = tonumber(ARGV[argIdx]); " +
  "argIdx = argIdx + 1; " +
  "for k = 1, lockNamesCount do " +
  "local counter = redis.call('hget', KEYS[i], ARGV[argIdx]); " +
  "if (counter ~= false) then " +
  "anyAlive = true; " +
  "for c=counter, 1, -1 do " +
  "redis.call('pexpire', KEYS[i+1] .. ':' .. ARGV[argIdx] .. ':rwlock_timeout:' .. c, ARGV[1]); " +
  "end; " +
  "end; " +
  "argIdx = argIdx + 1; " +
  "end; " +
  "if (anyAlive) then " +
  "redis.call('pexpire', KEYS[i], ARGV[1]); " +
  "table.insert(result, 1); " +
  "else " +
  "table.insert(result, 0); " +
  "end; " +
  "end; " +
  "return result;"

/** renewal/LockTask (the write lock's watchdog): KEYS locks; ARGV lease, then one lock name per lock. */
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

/** RedissonObject.prefixName and suffixName. */
const prefixName = (kind: string, name: string) => name.includes("{") ? `${kind}:${name}` : `${kind}:{${name}}`
const suffixName = (name: string, suffix: string) => name.includes("{") ? `${name}:${suffix}` : `{${name}}:${suffix}`
const redissonLease = 30_000

/** A Redisson client (one JVM, thread 1) on read-write lock `name`. */
const redisson = (redis: Redis, name: string, lease = redissonLease) => {
  const lockName = `${randomUUID()}:1`
  const writeName = `${lockName}:write`
  const timeoutPrefix = `${suffixName(name, lockName)}:rwlock_timeout`
  const keyPrefix = timeoutPrefix.split(`:${lockName}`)[0] ?? ""
  const channel = prefixName("redisson_rwlock", name)
  const latch = () => `${prefixName("redisson_unlock_latch", name)}:${randomUUID()}`
  return {
    lockName,
    channel,
    timeoutPrefix,
    readLock: Effect.suspend(() =>
      cmd<number | null>(redis, "EVAL", redissonReadTryLock, 2, name, timeoutPrefix, lease, lockName, writeName)
    ),
    readUnlock: Effect.suspend(() =>
      cmd<number | null>(
        redis,
        "EVAL",
        redissonReadUnlock,
        5,
        name,
        channel,
        timeoutPrefix,
        keyPrefix,
        latch(),
        0,
        lockName,
        "publish",
        10_000
      )
    ),
    writeLock: Effect.suspend(() => cmd<number | null>(redis, "EVAL", redissonWriteTryLock, 1, name, lease, writeName)),
    writeUnlock: Effect.suspend(() =>
      cmd<number | null>(
        redis,
        "EVAL",
        redissonWriteUnlock,
        3,
        name,
        channel,
        latch(),
        1,
        lease,
        writeName,
        "publish",
        10_000
      )
    ),
    renewRead: Effect.suspend(() =>
      cmd<Array<number>>(redis, "EVAL", redissonReadLockTask, 2, name, keyPrefix, lease, 1, lockName)
    ),
    renewWrite: Effect.suspend(() => cmd<Array<number>>(redis, "EVAL", redissonLockTask, 1, name, lease, writeName))
  }
}

let seq = 0
const freshKey = () => `rw-interop:${process.pid}:${++seq}`

describe.skipIf(skipRedis())("Redisson read-write lock interop", () => {
  let server: RedisServer
  beforeAll(async () => {
    server = await startRedisServer()
  })
  afterAll(() => server?.stop())

  const provide = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    Effect.provide(effect, RedisBackend.layer({ url: server.url }))
  const slow = Schedule.spaced("60 seconds")

  it.scopedLive("our read and write holds are Redisson's layout", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const redis = yield* admin(server.url)
      yield* ReadWriteLock.withReadLock(key, (lease) =>
        Effect.gen(function*() {
          assert.deepStrictEqual(yield* cmd(redis, "HGETALL", key), ["mode", "read", lease.owner, "1"])
          const ttl = yield* cmd<number>(redis, "PTTL", `{${key}}:${lease.owner}:rwlock_timeout:1`)
          assert.isTrue(ttl > 0 && ttl <= 30_000, `reader timeout key ttl ${ttl}`)
        }))
      yield* ReadWriteLock.withWriteLock(key, (lease) =>
        Effect.gen(function*() {
          assert.deepStrictEqual(yield* cmd(redis, "HGETALL", key), ["mode", "write", `${lease.owner}:write`, "1"])
          // Downgrade: the writer reads under its own write lock, as a Redisson thread does.
          yield* ReadWriteLock.withReadLock(key, () =>
            Effect.gen(function*() {
              const hash = yield* cmd<Array<string>>(redis, "HGETALL", key)
              assert.includeMembers(hash, [lease.owner, `${lease.owner}:write`, "write"])
            }))
        }))
      assert.strictEqual(yield* cmd(redis, "EXISTS", key), 0)
    }).pipe(provide))

  it.scopedLive("readers of both share; a Redisson reader's unlock wakes our writer", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const redis = yield* admin(server.url)
      const java = redisson(redis, key)
      assert.isNull(yield* java.readLock)
      // Our reader shares with Redisson's.
      assert.strictEqual(yield* ReadWriteLock.withReadLock(key, Effect.succeed("shared"), { wait: 0 }), "shared")
      // Our writer waits behind Redisson's reader (its retry schedule alone would take a minute).
      const writer = yield* Effect.fork(ReadWriteLock.withWriteLock(key, Effect.succeed("wrote"), { retry: slow }))
      yield* Effect.sleep(300)
      assert.isTrue(Option.isNone(yield* Fiber.poll(writer)))
      // Redisson's renewal (ReadLockTask) finds its reader and keeps it.
      assert.deepStrictEqual(yield* java.renewRead, [1])
      assert.strictEqual(yield* java.readUnlock, 1)
      assert.strictEqual(yield* Fiber.join(writer), "wrote")
    }).pipe(provide))

  it.scopedLive("a Redisson writer excludes our readers and writers, and its unlock wakes them", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const redis = yield* admin(server.url)
      const java = redisson(redis, key)
      assert.isNull(yield* java.writeLock)
      assert.isTrue(Option.isNone(yield* Effect.scoped(ReadWriteLock.tryAcquireRead(key))))
      assert.isTrue(Option.isNone(yield* Effect.scoped(ReadWriteLock.tryAcquireWrite(key))))
      const reader = yield* Effect.fork(ReadWriteLock.withReadLock(key, Effect.succeed("read"), { retry: slow }))
      yield* Effect.sleep(300)
      assert.isTrue(Option.isNone(yield* Fiber.poll(reader)))
      assert.deepStrictEqual(yield* java.renewWrite, [1])
      assert.strictEqual(yield* java.writeUnlock, 1)
      assert.strictEqual(yield* Fiber.join(reader), "read")
    }).pipe(provide))

  it.scopedLive("our writer excludes Redisson's reader and writer; our unlock publishes Redisson's message", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const redis = yield* admin(server.url)
      const java = redisson(redis, key)
      const told = yield* listen(server.url, java.channel)
      const go = yield* Deferred.make<void>()
      const held = yield* Deferred.make<void>()
      const writer = yield* Effect.fork(
        ReadWriteLock.withWriteLock(key, Effect.zipRight(Deferred.succeed(held, void 0), Deferred.await(go)))
      )
      yield* Deferred.await(held)
      const busy = yield* java.readLock
      assert.isTrue(typeof busy === "number" && busy > 0, `Redisson's read lock is busy: ${busy}`)
      assert.isTrue(typeof (yield* java.writeLock) === "number")
      yield* Deferred.succeed(go, void 0)
      yield* Fiber.join(writer)
      yield* eventually(Effect.sync(() => told.length === 1), 5_000, "the release published")
      assert.deepStrictEqual(told, ["1"], "READ_UNLOCK_MESSAGE, as Redisson's write unlock sends")
      assert.isNull(yield* java.readLock)
      assert.strictEqual(yield* java.readUnlock, 1)
    }).pipe(provide))

  it.scopedLive("our reader excludes Redisson's writer; our read unlock wakes it", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const redis = yield* admin(server.url)
      const java = redisson(redis, key)
      const told = yield* listen(server.url, java.channel)
      const go = yield* Deferred.make<void>()
      const held = yield* Deferred.make<void>()
      const reader = yield* Effect.fork(
        ReadWriteLock.withReadLock(key, Effect.zipRight(Deferred.succeed(held, void 0), Deferred.await(go)))
      )
      yield* Deferred.await(held)
      assert.isTrue(typeof (yield* java.writeLock) === "number")
      // Redisson's reader shares with ours.
      assert.isNull(yield* java.readLock)
      assert.strictEqual(yield* java.readUnlock, 0, "others still read")
      yield* Deferred.succeed(go, void 0)
      yield* Fiber.join(reader)
      yield* eventually(Effect.sync(() => told.length === 1), 5_000, "the release published")
      assert.deepStrictEqual(told, ["0"], "UNLOCK_MESSAGE, as Redisson's read unlock sends")
      assert.isNull(yield* java.writeLock)
      assert.strictEqual(yield* java.writeUnlock, 1)
    }).pipe(provide))

  it.scopedLive("each reader's lease is its own: a Redisson reader that stopped renewing is dropped", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const redis = yield* admin(server.url)
      const stalled = redisson(redis, key, 400)
      const go = yield* Deferred.make<void>()
      const held = yield* Deferred.make<void>()
      // Ours reads for a while, renewed by its watchdog (300 ms lease, every 100 ms)...
      const ours = yield* Effect.fork(ReadWriteLock.withReadLock(
        key,
        Effect.zipRight(Deferred.succeed(held, void 0), Deferred.await(go)),
        { lease: "300 millis" }
      ))
      yield* Deferred.await(held)
      // ...next to a Redisson reader whose JVM stopped (400 ms lease, never renewed).
      assert.isNull(yield* stalled.readLock)
      yield* Effect.sleep(1_000)
      // Our renewals kept our own reader alive, not the stalled one.
      assert.strictEqual(yield* cmd(redis, "EXISTS", `${stalled.timeoutPrefix}:1`), 0)
      assert.isTrue(Option.isNone(yield* Fiber.poll(ours)))
      yield* Deferred.succeed(go, void 0)
      yield* Fiber.join(ours)
      // Our release dropped the stalled reader: the lock is free at once, not at the hash's lease.
      assert.strictEqual(yield* cmd(redis, "EXISTS", key), 0)
      assert.isNull(yield* stalled.writeLock)
      assert.strictEqual(yield* stalled.writeUnlock, 1)
    }).pipe(provide))

  it.scopedLive("one name, one kind: a Redisson RLock and our read-write lock refuse each other's hash", () =>
    Effect.gen(function*() {
      const key = freshKey()
      const redis = yield* admin(server.url)
      yield* cmd(redis, "HSET", key, `${randomUUID()}:1`, 1)
      yield* cmd(redis, "PEXPIRE", key, 30_000)
      const read = yield* Effect.flip(ReadWriteLock.withReadLock(key, Effect.void))
      assert.strictEqual(read._tag, "LockBackendError")
      assert.include(read.message, key)
      assert.include(read.message, "not a read-write lock")
      const write = yield* Effect.flip(ReadWriteLock.withWriteLock(key, Effect.void))
      assert.strictEqual(write._tag, "LockBackendError")
      yield* cmd(redis, "DEL", key)
      const java = redisson(redis, key)
      assert.isNull(yield* java.readLock)
      const plain = yield* Effect.flip(Lock.withLock(key, Effect.void))
      assert.strictEqual(plain._tag, "LockBackendError")
      assert.include(plain.message, key)
      assert.include(plain.message, "is a read-write lock")
      assert.strictEqual(yield* java.readUnlock, 1)
    }).pipe(provide))
})
