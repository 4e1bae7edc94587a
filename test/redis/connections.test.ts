/**
 * Connections stay flat: however many fibers wait on however many keys, a backend uses one
 * command and one subscriber connection, holds one subscription per key with local waiters, and
 * drops every subscription when the waiters are gone.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Schedule } from "effect"
import { LockBackend, withLock } from "../../src/index.js"
import { backendOf } from "../../src/internal/backend/make.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import { redisServer, skipRedis } from "../support/redisServer.js"
import { admin, clientConnections, cmd, eventually } from "./helpers.js"

const fibers = 1_000
const keys = Array.from({ length: 10 }, (_, i) => `flat:${i}`)

describe.skipIf(skipRedis(true))("connections", () => {
  it.scopedLive(`${fibers} fibers waiting on ${keys.length} keys use exactly 2 connections and leave no subscription`, () =>
    Effect.gen(function*() {
      const server = yield* redisServer()
      const redis = yield* admin(server.url)
      const backend = yield* RedisBackend.make({ url: server.url })
      // The waiters that have joined a local wait queue, to know when all of them wait.
      const { queue } = backendOf(backend)
      const waiting = () => keys.reduce((sum, key) => sum + queue.waitersOn(key), 0)

      for (const key of keys) {
        const held = yield* backend.primitives.tryAcquire({
          key,
          owner: "foreign:1",
          leaseMillis: 30_000,
          fencing: true
        })
        assert.strictEqual(held._tag, "Acquired")
      }
      let entered = 0
      const all = yield* Effect.fork(
        Effect.all(
          Array.from(
            { length: fibers },
            (_, i) =>
              withLock(keys[i % keys.length]!, Effect.sync(() => entered++), { retry: Schedule.spaced("60 seconds") })
          ),
          { concurrency: "unbounded", discard: true }
        ).pipe(Effect.provideService(LockBackend, backend))
      )
      yield* eventually(Effect.sync(() => waiting() === fibers), 20_000, "every fiber to wait")

      const connections = yield* clientConnections(redis)
      assert.strictEqual(connections.length, 2, connections.join("\n"))
      const channels = (yield* cmd<Array<string>>(redis, "PUBSUB", "CHANNELS")).sort()
      assert.deepStrictEqual(channels, keys.map((key) => `redisson_lock__channel:{${key}}`).sort())

      // Sample the connection count while the lock is handed from waiter to waiter.
      let most = 0
      const sampler = yield* Effect.fork(
        Effect.repeat(
          Effect.tap(clientConnections(redis), (list) => Effect.sync(() => (most = Math.max(most, list.length)))),
          Schedule.spaced("5 millis")
        )
      )
      for (const key of keys) {
        assert.deepStrictEqual(yield* backend.primitives.release(key, "foreign:1"), { _tag: "Released" })
      }
      yield* Fiber.join(all)
      yield* Fiber.interrupt(sampler)

      assert.strictEqual(entered, fibers)
      assert.strictEqual(most, 2)
      assert.deepStrictEqual(yield* cmd(redis, "PUBSUB", "CHANNELS"), [], "no subscription left")
      assert.strictEqual((yield* clientConnections(redis)).length, 2)
    }))
})
