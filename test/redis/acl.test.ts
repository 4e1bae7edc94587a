/**
 * Least privilege on a real server: a user created with exactly `RedisBackend.aclRule` runs the
 * conformance suites of every lock kind (mutex, MultiLock, ReadWriteLock, Semaphore, FairLock); a user missing any one token of the rule is refused at startup with a
 * `LockBackendError` that names that token; a user confined to one prefix cannot run a backend on
 * another; a permission revoked while the backend runs surfaces as a `LockBackendError` saying so.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer } from "effect"
import type { Redis } from "ioredis"
import { readFileSync } from "node:fs"
import { FairLock, Lock, LockBackend, LockBackendError, Semaphore } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import { runFairConformance } from "../conformance/fair.js"
import { runMultiLockConformance } from "../conformance/multiLock.js"
import { runReadWriteConformance } from "../conformance/readWrite.js"
import { runSemaphoreConformance } from "../conformance/semaphore.js"
import { runConformance } from "../conformance/suite.js"
import type { RedisServer } from "../support/redisServer.js"
import { redisServer, skipRedis, startRedisServer } from "../support/redisServer.js"
import { admin, cmd } from "./helpers.js"

const prefix = "locks:"
const rule = RedisBackend.aclRule({ prefix })
const password = "acl-user-pa55"

/** `ACL SETUSER name reset on >password ...tokens` on the admin connection. */
const setUser = (redis: Redis, name: string, tokens: ReadonlyArray<string>) =>
  cmd(redis, "ACL", "SETUSER", name, "reset", "on", `>${password}`, ...tokens)

const userUrl = (server: RedisServer, name: string) => `redis://${name}:${password}@127.0.0.1:${server.port}`

const skip = skipRedis(true)

describe.skipIf(skip)("ACL rule", () => {
  it("is the documented one", () => {
    assert.deepStrictEqual(rule, [
      "+info",
      "+client|setname",
      "+script|load",
      "+evalsha",
      "+eval",
      "+subscribe",
      "+unsubscribe",
      "+exists",
      "+hexists",
      "+hincrby",
      "+hgetall",
      "+pexpire",
      "+pttl",
      "+del",
      "+type",
      "+incr",
      "+get",
      "+hget",
      "+hset",
      "+hdel",
      "+set",
      "+decrby",
      "+incrby",
      "+lindex",
      "+lpop",
      "+lpos",
      "+lrange",
      "+lrem",
      "+rpush",
      "+zadd",
      "+zcard",
      "+zincrby",
      "+zrange",
      "+zrangebyscore",
      "+zrem",
      "+zscore",
      "+time",
      "+publish",
      "+pubsub|numsub",
      "~locks:*",
      "~redisson_lock_token:{locks:*",
      "~redisson_lock_token:locks:*",
      "~redisson_lock__channel:{locks:*",
      "~redisson_lock__channel:locks:*",
      "~{locks:*",
      "~redisson_rwlock:{locks:*",
      "~redisson_rwlock:locks:*",
      "~effect_lock_permit_token:{locks:*",
      "~effect_lock_permit_token:locks:*",
      "~redisson_sc:{locks:*",
      "~redisson_sc:locks:*",
      "~redisson_lock_queue:{locks:*",
      "~redisson_lock_queue:locks:*",
      "~redisson_lock_timeout:{locks:*",
      "~redisson_lock_timeout:locks:*",
      "&redisson_lock__channel:{locks:*",
      "&redisson_lock__channel:locks:*",
      "&redisson_rwlock:{locks:*",
      "&redisson_rwlock:locks:*",
      "&redisson_sc:{locks:*",
      "&redisson_sc:locks:*"
    ])
    // docs/redis.md shows this very rule.
    const docs = readFileSync(new URL("../../docs/redis.md", import.meta.url), "utf8")
    const block = /```text\nACL SETUSER effect-lock reset on >a-long-password\n([^`]*)```/.exec(docs)?.[1]
    assert.isDefined(block, "the rule's block in docs/redis.md")
    assert.deepStrictEqual(block?.split(/\s+/).filter((t) => t !== ""), [...rule])
    assert.deepStrictEqual(RedisBackend.aclRule().slice(-4), [
      "~*",
      "&redisson_lock__channel:*",
      "&redisson_rwlock:*",
      "&redisson_sc:*"
    ])
    assert.include(RedisBackend.aclRule({ prefix: "a*[b]?:" }), "~a\\*\\[b\\]\\?:*")
  })
})

if (!skip) {
  const asUser = Layer.unwrapScoped(Effect.gen(function*() {
    const server = yield* redisServer()
    const redis = yield* admin(server.url)
    yield* setUser(redis, "effect-lock", rule)
    return RedisBackend.layer({ url: userUrl(server, "effect-lock"), prefix })
  }))
  runConformance("redis as an ACL user with exactly RedisBackend.aclRule", asUser)
  runReadWriteConformance("redis as an ACL user with exactly RedisBackend.aclRule", asUser)
  runMultiLockConformance("redis as an ACL user with exactly RedisBackend.aclRule", asUser)
  runSemaphoreConformance("redis as an ACL user with exactly RedisBackend.aclRule", asUser)
  runFairConformance("redis as an ACL user with exactly RedisBackend.aclRule", asUser)
}

describe.skipIf(skip)("ACL: every token of the rule is needed and named when missing", () => {
  let server: RedisServer
  beforeAll(async () => {
    server = await startRedisServer()
  })
  afterAll(() => server?.stop())

  /** Make a backend as `name` (with the rule `tokens`) and return its failure. */
  const refusal = (name: string, tokens: ReadonlyArray<string>, backendPrefix = prefix) =>
    Effect.gen(function*() {
      const redis = yield* admin(server.url)
      yield* setUser(redis, name, tokens)
      return yield* Effect.scoped(
        Effect.flip(RedisBackend.make({ url: userUrl(server, name), prefix: backendPrefix }))
      )
    })

  rule.forEach((token, i) => {
    it.scopedLive(`without ${token}: the backend refuses to start and names it`, () =>
      Effect.gen(function*() {
        const error = yield* refusal(`without-${i}`, rule.filter((t) => t !== token))
        assert.instanceOf(error, LockBackendError)
        assert.include(error.message, token)
        assert.include(error.message, "ACL")
      }))
  })

  it.scopedLive("without +info and +client|setname when the connections do not send them", () =>
    Effect.gen(function*() {
      const redis = yield* admin(server.url)
      yield* setUser(redis, "quiet", rule.filter((t) => t !== "+info" && t !== "+client|setname"))
      yield* cmd(redis, "ACL", "LOG", "RESET")
      const backend = yield* RedisBackend.make({
        url: userUrl(server, "quiet"),
        prefix,
        redis: { enableReadyCheck: false, connectionName: "" }
      })
      const token = yield* Lock.withLock("quiet", (lease) => Effect.succeed(lease.fencingToken)).pipe(
        Effect.provideService(LockBackend, backend)
      )
      assert.strictEqual(token, 1n)
      assert.deepStrictEqual(yield* cmd(redis, "ACL", "LOG"), [], "nothing was refused")
    }))

  it.scopedLive("contended semaphores and fair locks under exactly the rule: nothing refused (ACL LOG empty)", () =>
    Effect.gen(function*() {
      const redis = yield* admin(server.url)
      yield* setUser(redis, "kinds", rule)
      yield* cmd(redis, "ACL", "LOG", "RESET")
      const backend = yield* RedisBackend.make({ url: userUrl(server, "kinds"), prefix })
      const run = <A, E>(effect: Effect.Effect<A, E, LockBackend>) =>
        Effect.provideService(effect, LockBackend, backend)
      const pause = Effect.sleep("20 millis")
      // Waiters subscribe (redisson_sc:{...}, each fair waiter's own channel) and are woken by the
      // releases' PUBLISH; a fair waiter that gives up leaves the line (fair-abandon.lua).
      const entered = yield* run(Effect.all([
        Effect.all(
          Array.from({ length: 3 }, () => Semaphore.withPermits("kinds-s", 1, Effect.as(pause, 1), { permits: 1 })),
          { concurrency: "unbounded" }
        ),
        Effect.all(
          Array.from({ length: 3 }, () => FairLock.withLock("kinds-f", Effect.as(pause, 1))),
          { concurrency: "unbounded" }
        )
      ]))
      assert.deepStrictEqual(entered, [[1, 1, 1], [1, 1, 1]])
      const go = yield* Deferred.make<void>()
      const holder = yield* run(Effect.fork(FairLock.withLock("kinds-f", Deferred.await(go))))
      yield* Effect.sleep("50 millis")
      const gaveUp = yield* run(Effect.flip(FairLock.withLock("kinds-f", Effect.void, { wait: "50 millis" })))
      assert.strictEqual(gaveUp._tag, "LockTimeoutError")
      yield* Deferred.succeed(go, void 0)
      yield* Fiber.join(holder)
      yield* run(Semaphore.setPermits("kinds-s", 2))
      assert.strictEqual(yield* run(Semaphore.available("kinds-s")), 2)
      assert.deepStrictEqual(yield* cmd(redis, "ACL", "LOG"), [], "nothing was refused")
    }))

  it.scopedLive("with replica sync the check asks about +wait: refused without it, started with aclRule({ replicas: true })", () =>
    Effect.gen(function*() {
      const redis = yield* admin(server.url)
      const replicas = { sync: 1, timeout: "50 millis" } as const
      yield* setUser(redis, "no-wait", rule)
      const error = yield* Effect.scoped(
        Effect.flip(RedisBackend.make({ url: userUrl(server, "no-wait"), prefix, replicas }))
      )
      assert.instanceOf(error, LockBackendError)
      assert.strictEqual(error.operation, "check-permissions")
      assert.include(error.message, "+wait")
      assert.include(error.message, "RedisBackend.aclRule({ prefix: \"locks:\", replicas: true })")
      // Without replica sync the same user starts: WAIT is not asked about.
      yield* RedisBackend.make({ url: userUrl(server, "no-wait"), prefix })
      yield* setUser(redis, "with-wait", RedisBackend.aclRule({ prefix, replicas: true }))
      yield* cmd(redis, "ACL", "LOG", "RESET")
      yield* RedisBackend.make({ url: userUrl(server, "with-wait"), prefix, replicas })
      assert.deepStrictEqual(yield* cmd(redis, "ACL", "LOG"), [], "nothing was refused")
    }))

  it.scopedLive("a user confined to one prefix cannot run a backend on another prefix", () =>
    Effect.gen(function*() {
      const error = yield* refusal("confined", rule, "other:")
      assert.instanceOf(error, LockBackendError)
      assert.strictEqual(error.operation, "check-permissions")
      for (const token of RedisBackend.aclRule({ prefix: "other:" }).filter((t) => !t.startsWith("+"))) {
        assert.include(error.message, token)
      }
    }))

  it.scopedLive("a permission revoked while the backend runs surfaces as a LockBackendError that says so", () =>
    Effect.gen(function*() {
      const redis = yield* admin(server.url)
      yield* setUser(redis, "revoked", rule)
      const backend = yield* RedisBackend.make({ url: userUrl(server, "revoked"), prefix })
      const run = <A, E>(effect: Effect.Effect<A, E, LockBackend>) =>
        Effect.provideService(effect, LockBackend, backend)
      assert.isFalse(yield* run(Lock.isLocked("k")))

      // Keys of another prefix only: the EVALSHA itself is refused.
      yield* cmd(redis, "ACL", "SETUSER", "revoked", "resetkeys", "~other:*")
      const keys = yield* Effect.flip(run(Lock.withLock("k")(Effect.void)))
      assert.instanceOf(keys, LockBackendError)
      assert.strictEqual(keys.operation, "acquire")
      assert.include(keys.message, "NOPERM")
      assert.include(keys.message, "lacks an ACL permission")

      // A command a script runs: Redis 7 does not name it inside a script; the error lists the
      // operation's needs.
      yield* setUser(redis, "revoked", rule.filter((t) => t !== "+pttl"))
      const command = yield* Effect.flip(run(Lock.inspect("k")))
      assert.instanceOf(command, LockBackendError)
      assert.strictEqual(command.operation, "inspect")
      assert.include(command.message, "lacks an ACL permission")
      assert.include(command.message, "+pttl")

      // The semaphore's and the fair lock's scripts read the server's clock first: without +time
      // each acquisition fails at once with the refusal and what it needs, nothing taken.
      yield* setUser(redis, "revoked", rule.filter((t) => t !== "+time"))
      const permits = yield* Effect.flip(run(Semaphore.withPermits("acl-time-s", 1, Effect.void, { permits: 2 })))
      assert.instanceOf(permits, LockBackendError)
      assert.strictEqual(permits.operation, "acquire")
      assert.include(permits.message, "lacks an ACL permission")
      assert.include(permits.message, "a semaphore: +time")
      const fair = yield* Effect.flip(run(FairLock.withLock("acl-time-f", Effect.void)))
      assert.instanceOf(fair, LockBackendError)
      assert.strictEqual(fair.operation, "acquire")
      assert.include(fair.message, "a fair lock: +hget +hset +del +time")
      assert.deepStrictEqual(yield* cmd(redis, "KEYS", "*acl-time-*"), [], "nothing written")

      // Setting a semaphore's permits: +zcard is refused after the expired permits are read.
      yield* setUser(redis, "revoked", rule.filter((t) => t !== "+zcard"))
      const set = yield* Effect.flip(run(Semaphore.setPermits("acl-time-s", 3)))
      assert.instanceOf(set, LockBackendError)
      assert.strictEqual(set.operation, "set-permits")
      assert.include(set.message, "+zcard")
    }))
})
