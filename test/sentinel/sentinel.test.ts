/**
 * RedisBackend through Redis Sentinel, on a real group (a master, a replica and three sentinels
 * with quorum 2, on free loopback ports; one group for the whole file): locks through ioredis'
 * `{ sentinels, name }` options and through `layerConfig`, `failoverDetector` on by default, and a
 * backend that follows `SENTINEL FAILOVER` to the new master.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { ConfigProvider, Effect, Exit, Layer, Option, Scope } from "effect"
import { Redis } from "ioredis"
import { Lock, LockBackend, withLock } from "../../src/index.js"
import { withSentinelDefaults } from "../../src/internal/redis/clientOptions.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import { skipRedis } from "../support/redisServer.js"
import type { SentinelGroup } from "../support/sentinel.js"
import { sentinelGroup } from "../support/sentinel.js"

const skip = skipRedis(true)
let seq = 0
const freshKey = (label: string) => `sentinel:${label}:${process.pid}:${++seq}`

/** A plain connection to one data server, closed with the scope. */
const direct = (port: number) =>
  Effect.acquireRelease(
    Effect.sync(() => new Redis({ host: "127.0.0.1", port, maxRetriesPerRequest: 1, connectionName: "test-admin" })),
    (redis) => Effect.sync(() => redis.disconnect())
  )

describe.skipIf(skip)("RedisBackend through Sentinel", () => {
  let group: SentinelGroup
  const scope = Effect.runSync(Scope.make())
  beforeAll(async () => {
    group = await Effect.runPromise(Scope.extend(sentinelGroup(), scope))
    await group.ready()
  }, 90_000)
  afterAll(() => Effect.runPromise(Scope.close(scope, Exit.void)))

  const sentinelOptions = () => ({ redis: { sentinels: [...group.sentinels], name: group.name } })
  const sentinelEnv = () =>
    new Map([
      ["REDIS_SENTINELS", group.sentinels.map((s) => `${s.host}:${s.port}`).join(",")],
      ["REDIS_SENTINEL_NAME", group.name]
    ])

  it("failoverDetector is on for a Sentinel configuration unless it is set", () => {
    assert.deepStrictEqual(withSentinelDefaults({ sentinels: [{ port: 1 }], name: "m" }), {
      failoverDetector: true,
      sentinels: [{ port: 1 }],
      name: "m"
    })
    assert.strictEqual(
      withSentinelDefaults({ sentinels: [{ port: 1 }], failoverDetector: false })?.failoverDetector,
      false
    )
    assert.deepStrictEqual(withSentinelDefaults({ port: 1 }), { port: 1 })
    assert.strictEqual(withSentinelDefaults(undefined), undefined)
  })

  it.scopedLive("locks on the master the sentinels name, through options and through layerConfig", () =>
    Effect.gen(function*() {
      const master = yield* direct(yield* Effect.promise(group.masterPort))
      const key = freshKey("options")
      const seen = yield* withLock(key, (lease) =>
        Effect.map(
          Effect.promise(() => master.hgetall(key)),
          (hash) => ({ token: lease.fencingToken, fields: Object.values(hash) })
        )).pipe(Effect.provide(RedisBackend.layer(sentinelOptions())))
      assert.isTrue(seen.token > 0n)
      assert.deepStrictEqual(seen.fields, ["1"], "the lock hash is on the master")

      const viaConfig = yield* withLock(freshKey("config"), (lease) => Effect.succeed(lease.fencingToken)).pipe(
        Effect.provide(
          RedisBackend.layerConfig().pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(sentinelEnv()))))
        )
      )
      assert.isTrue(viaConfig > 0n)
    }))

  it.scopedLive("layerConfig: a bad REDIS_SENTINELS or a missing REDIS_SENTINEL_NAME is a ConfigError", () =>
    Effect.gen(function*() {
      const build = (env: Map<string, string>) =>
        Effect.flip(
          Effect.scoped(
            Layer.build(
              RedisBackend.layerConfig().pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(env))))
            )
          )
        )
      const bad = yield* build(new Map([["REDIS_SENTINELS", "nowhere"], ["REDIS_SENTINEL_NAME", "m"]]))
      assert.include(String(bad), "REDIS_SENTINELS")
      assert.include(String(bad), "not host:port")
      const env = sentinelEnv()
      env.delete("REDIS_SENTINEL_NAME")
      const missing = yield* build(env)
      assert.include(String(missing), "REDIS_SENTINEL_NAME")
    }))

  it.scopedLive("follows SENTINEL FAILOVER: the next lock is taken on the new master", () =>
    Effect.gen(function*() {
      const backend = yield* RedisBackend.make(sentinelOptions())
      const key = freshKey("failover")
      const before = yield* withLock(key, (lease) => Effect.succeed(lease.fencingToken)).pipe(
        Effect.provideService(LockBackend, backend)
      )
      const switched = yield* Effect.promise(() => group.failover())
      console.log(`SENTINEL FAILOVER: ${switched.from} -> ${switched.to} in ${switched.switchMillis} ms`)
      // Held on the new master once the backend has followed (failoverDetector: ~at once; the
      // wait budget covers the reconnect on a loaded machine).
      const next = yield* withLock(key, (lease) =>
        Effect.gen(function*() {
          const master = yield* direct(switched.to)
          const fields = yield* Effect.promise(() => master.hkeys(key))
          return { token: lease.fencingToken, fields }
        }), { wait: "20 seconds" }).pipe(
          Effect.retry({ times: 20, while: (error) => error._tag === "LockBackendError" }),
          Effect.provideService(LockBackend, backend)
        )
      assert.strictEqual(next.fields.length, 1, "the lock hash is on the new master")
      assert.isTrue(next.token > before, "the fencing counter was replicated before the failover")
      assert.isTrue(Option.isNone(yield* Lock.inspect(key).pipe(Effect.provideService(LockBackend, backend))))
    }), 120_000)
})
