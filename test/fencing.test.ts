/**
 * The fencing helper: a resource that keeps the highest token it accepted refuses older ones —
 * in process, and atomically in Redis on a real server.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { Redis } from "ioredis"
import { Fencing, MemoryBackend, withLock } from "../src/index.js"
import type { RedisServer } from "./support/redisServer.js"
import { skipRedis, startRedisServer } from "./support/redisServer.js"

describe("Fencing.makeMemory", () => {
  it.effect("admits equal and newer tokens, refuses older ones", () =>
    Effect.gen(function*() {
      const fence = yield* Fencing.makeMemory
      yield* fence.admit("r", 5n)
      yield* fence.admit("r", 5n)
      yield* fence.admit("r", 7n)
      const refused = yield* Effect.flip(fence.admit("r", 6n))
      assert.strictEqual(refused._tag, "FencingTokenRejectedError")
      assert.strictEqual(refused.highest, 7n)
      assert.strictEqual(refused.token, 6n)
      assert.deepStrictEqual(yield* fence.highest("r"), Option.some(7n))
      yield* fence.admit("other", 1n)
    }))

  it.effect("a holder whose token was superseded is refused after the next holder wrote", () =>
    Effect.gen(function*() {
      const fence = yield* Fencing.makeMemory
      const first = yield* withLock("ledger", (lease) => Effect.succeed(lease.fencingToken))
      yield* withLock("ledger", (lease) => fence.admit("ledger", lease.fencingToken))
      const stale = yield* Effect.flip(fence.admit("ledger", first))
      assert.strictEqual(stale._tag, "FencingTokenRejectedError")
    }).pipe(Effect.provide(MemoryBackend.layer)))
})

const skip = skipRedis()
describe.skipIf(skip)("Fencing.redisSet on a real redis-server", () => {
  let server: RedisServer
  let redis: Redis
  beforeAll(async () => {
    server = await startRedisServer()
    redis = new Redis(server.url, { maxRetriesPerRequest: 1 })
  })
  afterAll(async () => {
    redis?.disconnect()
    await server?.stop()
  })

  it.effect("writes with a current token, refuses an older one and leaves the value alone", () =>
    Effect.gen(function*() {
      yield* Fencing.redisSet(redis, { key: "balance", value: "100", token: 41n })
      yield* Fencing.redisSet(redis, { key: "balance", value: "110", token: 42n })
      const refused = yield* Effect.flip(Fencing.redisSet(redis, { key: "balance", value: "999", token: 41n }))
      assert.strictEqual(refused._tag, "FencingTokenRejectedError")
      if (refused._tag === "FencingTokenRejectedError") assert.strictEqual(refused.highest, 42n)
      assert.strictEqual(yield* Effect.promise(() => redis.get("balance")), "110")
      assert.strictEqual(yield* Effect.promise(() => redis.get("fence:{balance}")), "42")
    }))

  it.effect("compares tokens exactly beyond 2^53 and survives SCRIPT FLUSH", () =>
    Effect.gen(function*() {
      const big = 2n ** 62n
      yield* Fencing.redisSet(redis, { key: "big", value: "a", token: big + 1n, fenceKey: "big:fence" })
      yield* Effect.promise(() => redis.script("FLUSH"))
      const refused = yield* Effect.flip(
        Fencing.redisSet(redis, { key: "big", value: "b", token: big, fenceKey: "big:fence" })
      )
      assert.strictEqual(refused._tag, "FencingTokenRejectedError")
      yield* Fencing.redisSet(redis, { key: "big", value: "c", token: big + 10n, fenceKey: "big:fence" })
      assert.strictEqual(yield* Effect.promise(() => redis.get("big")), "c")
    }))
})
