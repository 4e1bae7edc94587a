/**
 * The scripts on a real server, driven directly (as a client of another language would call them):
 * a script that can fail halfway checks its arguments before its first write, so that a bad lease
 * never leaves a lock hash without a TTL, nor replaces a holder's valid lock.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer } from "effect"
import { LockBackend, withLock } from "../../src/index.js"
import { makeKeyLayout } from "../../src/internal/redis/keys.js"
import * as scripts from "../../src/internal/redis/lockScripts.js"
import type { Script } from "../../src/internal/redis/scripts.js"
import { runScript } from "../../src/internal/redis/scripts.js"
import type { LockRequest } from "../../src/LockBackend.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import type { RedisServer } from "../support/redisServer.js"
import { skipRedis, startRedisServer } from "../support/redisServer.js"
import { admin, cmd } from "./helpers.js"

const skip = skipRedis()
const layout = makeKeyLayout("")

/** Run a script; its error message when it fails, its decoded reply when it succeeds. */
const run = <I extends ReadonlyArray<unknown>, A>(
  client: Parameters<typeof runScript>[0],
  script: Script<I, A>,
  ...input: I
) =>
  Effect.async<A | string>((resume) =>
    runScript(
      client,
      script,
      input,
      (reply) => resume(Effect.succeed(script.decode(reply) as A)),
      (error) => resume(Effect.succeed(error instanceof Error ? error.message : String(error)))
    )
  )

const request = (key: string, owner: string, leaseMillis: number): LockRequest => ({
  key,
  owner,
  leaseMillis,
  fencing: true
})

describe.skipIf(skip)("scripts check their arguments before writing", () => {
  let server: RedisServer
  beforeAll(async () => {
    server = await startRedisServer()
  })
  afterAll(() => server?.stop())

  it.scopedLive("acquire: a lease that is not a whole number of milliseconds leaves no key", () =>
    Effect.gen(function*() {
      const redis = yield* admin(server.url)
      for (const lease of [2500.5, 1e21, 0, -1, 2 ** 31, Number.NaN]) {
        const key = `bad-lease:${lease}`
        const reply = yield* run(redis, scripts.acquire, layout.keysOf(key), request(key, "o:1", lease))
        assert.match(String(reply), /effect-lock: the lease must be a whole number/, String(lease))
        assert.strictEqual(yield* cmd(redis, "EXISTS", key), 0, `no lock hash for lease ${lease}`)
        assert.strictEqual(yield* cmd(redis, "EXISTS", layout.keysOf(key).token), 0, "no token drawn")
      }
      const good = yield* run(redis, scripts.acquire, layout.keysOf("good"), request("good", "o:1", 2 ** 31 - 1))
      assert.deepStrictEqual(good, { _tag: "Acquired", fencingToken: 1n })
    }))

  it.scopedLive("hand-over: a bad receiver lease leaves the holder's lock as it was", () =>
    Effect.gen(function*() {
      const redis = yield* admin(server.url)
      const key = "held"
      yield* run(redis, scripts.acquire, layout.keysOf(key), request(key, "holder:1", 60_000))
      const reply = yield* run(
        redis,
        scripts.handOver,
        layout.keysOf(key),
        "holder:1",
        request(key, "next:1", 2500.5),
        0
      )
      assert.match(String(reply), /the receiver's lease must be a whole number/)
      assert.deepStrictEqual(yield* cmd(redis, "HGETALL", key), ["holder:1", "1"])
      const pttl = yield* cmd<number>(redis, "PTTL", key)
      assert.isTrue(pttl > 50_000, `the holder's lease is intact (${pttl})`)
    }))

  it.scopedLive("renew: one bad lease in a batch renews nothing", () =>
    Effect.gen(function*() {
      const redis = yield* admin(server.url)
      yield* run(redis, scripts.acquire, layout.keysOf("r1"), request("r1", "o:1", 5_000))
      yield* run(redis, scripts.acquire, layout.keysOf("r2"), request("r2", "o:2", 5_000))
      const reply = yield* run(redis, scripts.renew, ["r1", "r2"], [
        request("r1", "o:1", 60_000),
        request("r2", "o:2", 0.5)
      ])
      assert.match(String(reply), /lease 2 must be a whole number/)
      assert.isAtMost(yield* cmd<number>(redis, "PTTL", "r1"), 5_000, "r1 was not renewed either")
    }))

  it.scopedLive("a lock name taken by data is a LockBackendError naming the key and its type, and the data is untouched", () =>
    Effect.gen(function*() {
      const redis = yield* admin(server.url)
      yield* cmd(redis, "SET", "app:counter", "41")
      const backend = yield* RedisBackend.make({ url: server.url })
      const error = yield* Effect.flip(
        withLock("app:counter", Effect.void).pipe(Effect.provideService(LockBackend, backend))
      )
      assert.strictEqual(error._tag, "LockBackendError")
      assert.match(error.message, /"app:counter" holds a string, not a lock/)
      assert.strictEqual(yield* cmd(redis, "GET", "app:counter"), "41")
    }))

  it.scopedLive("layerConfig without REDIS_URL says what is missing (not \"<redacted>\")", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(
        Effect.scoped(Layer.build(RedisBackend.layerConfig())).pipe(
          Effect.withConfigProvider(ConfigProvider.fromMap(new Map()))
        )
      )
      assert.match(String(error), /REDIS_URL/)
      assert.match(String(error), /Expected REDIS_URL to exist/)
      assert.notMatch(String(error), /redacted/)
    }))

  it.scopedLive("data written over a lock: renewals in the same call are unharmed, the release finds nothing to release", () =>
    Effect.gen(function*() {
      const redis = yield* admin(server.url)
      yield* run(redis, scripts.acquire, layout.keysOf("over:1"), request("over:1", "o:1", 5_000))
      yield* run(redis, scripts.acquire, layout.keysOf("over:2"), request("over:2", "o:2", 5_000))
      yield* cmd(redis, "SET", "over:1", "data")
      const renewed = yield* run(redis, scripts.renew, ["over:1", "over:2"], [
        request("over:1", "o:1", 60_000),
        request("over:2", "o:2", 60_000)
      ])
      assert.deepStrictEqual(renewed, [{ _tag: "Lost", reason: "stolen" }, { _tag: "Renewed" }])
      assert.isAbove(yield* cmd<number>(redis, "PTTL", "over:2"), 5_000, "the other lock was renewed")
      assert.deepStrictEqual(yield* run(redis, scripts.release, layout.keysOf("over:1"), "o:1"), { _tag: "NotHeld" })
      assert.deepStrictEqual(
        yield* run(redis, scripts.handOver, layout.keysOf("over:1"), "o:1", request("over:1", "o:9", 1_000), 0),
        { _tag: "NotHeld" }
      )
      assert.strictEqual(yield* cmd(redis, "GET", "over:1"), "data", "the data is untouched")
    }))

  it.scopedLive("release, force-release and hand-over refuse a publish command other than publish/spublish, before writing", () =>
    Effect.gen(function*() {
      const redis = yield* admin(server.url)
      const key = "publish-guard"
      yield* run(redis, scripts.acquire, layout.keysOf(key), request(key, "o:1", 60_000))
      const bad = { ...layout.keysOf(key), publish: "del" as never }
      assert.match(String(yield* run(redis, scripts.release, bad, "o:1")), /publish command/)
      assert.match(String(yield* run(redis, scripts.forceRelease, bad)), /publish command/)
      const mixed = { ...layout.keysOf(key), numsub: "shardnumsub" as const }
      assert.match(String(yield* run(redis, scripts.handOver, mixed, "o:1", request(key, "o:2", 1_000), 0)), /numsub/)
      assert.deepStrictEqual(yield* cmd(redis, "HGETALL", key), ["o:1", "1"], "the lock is untouched")
      assert.deepStrictEqual(yield* run(redis, scripts.release, layout.keysOf(key), "o:1"), { _tag: "Released" })
    }))

  it.scopedLive("a bad commandTimeout is a LockOptionsError naming the field, and nothing connects", () =>
    Effect.gen(function*() {
      for (const commandTimeout of [0, -5, 1.5, Number.POSITIVE_INFINITY, "soon" as never]) {
        const error = yield* Effect.flip(RedisBackend.make({ url: server.url, commandTimeout }))
        assert.strictEqual(error._tag, "LockOptionsError", String(commandTimeout))
        if (error._tag === "LockOptionsError") assert.strictEqual(error.field, "commandTimeout")
      }
    }))
})
