/**
 * Least privilege on a real server: a user created with exactly `RedisBackend.aclRule` runs the
 * whole conformance suite; a user missing any one token of the rule is refused at startup with a
 * `LockBackendError` that names that token; a user confined to one prefix cannot run a backend on
 * another; a permission revoked while the backend runs surfaces as a `LockBackendError` saying so.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect, Layer } from "effect"
import type { Redis } from "ioredis"
import { readFileSync } from "node:fs"
import { Lock, LockBackend, LockBackendError } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import { runReadWriteConformance } from "../conformance/readWrite.js"
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
      "&redisson_lock__channel:{locks:*",
      "&redisson_lock__channel:locks:*",
      "&redisson_rwlock:{locks:*",
      "&redisson_rwlock:locks:*"
    ])
    // docs/redis.md shows this very rule.
    const docs = readFileSync(new URL("../../docs/redis.md", import.meta.url), "utf8")
    const block = /```text\nACL SETUSER effect-lock reset on >a-long-password\n([^`]*)```/.exec(docs)?.[1]
    assert.isDefined(block, "the rule's block in docs/redis.md")
    assert.deepStrictEqual(block?.split(/\s+/).filter((t) => t !== ""), [...rule])
    assert.deepStrictEqual(RedisBackend.aclRule().slice(-3), ["~*", "&redisson_lock__channel:*", "&redisson_rwlock:*"])
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
    }))
})
