/**
 * Waiters survive faults of the server and of their notifications: Redis restarted with its data
 * lost (scenario 5) and the subscriber connection killed (scenario 6). Every waiter uses a retry
 * schedule of one attempt a minute, so only release notifications (and the holder's lease) can
 * get it in within the bounds below.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Schedule } from "effect"
import type { LockBackendShape } from "../../src/index.js"
import { LockBackend, withLock } from "../../src/index.js"
import { backendOf } from "../../src/internal/backend/make.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import { redisServer, skipRedis } from "../support/redisServer.js"
import { adminClient, cmd, eventually, faultScenario, hrMillis, keyspace, measured, numsub, within } from "./support.js"

const channelOf = (key: string) => `redisson_lock__channel:{${key}}`
const tokenKeyOf = (key: string) => `redisson_lock_token:{${key}}`

interface Entry {
  readonly key: string
  readonly waiter: number
  readonly token: bigint
  readonly enteredAt: number
  readonly leftAt: number
}

/**
 * `waiters` fibers per key, each waiting for the lock (default 30 s lease, retry once a minute) and
 * holding it for `holdMillis`. Resolves once every one of them has joined the key's wait queue.
 */
const startWaiters = (backend: LockBackendShape, keys: ReadonlyArray<string>, waiters: number, holdMillis: number) =>
  Effect.gen(function*() {
    // The waiters that have joined a local wait queue.
    const { queue } = backendOf(backend)
    const waiting = () => keys.reduce((sum, key) => sum + queue.waitersOn(key), 0)
    const entries: Array<Entry> = []
    const fiber = yield* Effect.fork(
      Effect.all(
        keys.flatMap((key) =>
          Array.from({ length: waiters }, (_, waiter) =>
            withLock(key, (lease) =>
              Effect.gen(function*() {
                const enteredAt = hrMillis()
                yield* Effect.sleep(holdMillis)
                entries.push({ key, waiter, token: lease.fencingToken, enteredAt, leftAt: hrMillis() })
              }), { retry: Schedule.spaced("60 seconds") }))
        ),
        { concurrency: "unbounded", discard: true }
      ).pipe(Effect.provideService(LockBackend, backend))
    )
    yield* eventually(Effect.sync(() => waiting() === keys.length * waiters), 10_000, "every waiter to wait")
    return { fiber, entries }
  })

/** Critical sections on one key never overlap. */
const assertExclusive = (entries: ReadonlyArray<Entry>, key: string) => {
  const sections = entries.filter((e) => e.key === key).sort((a, b) => a.enteredAt - b.enteredAt)
  for (let i = 1; i < sections.length; i++) {
    assert.isAtLeast(sections[i]!.enteredAt, sections[i - 1]!.leftAt, `sections ${i - 1} and ${i} on ${key} overlap`)
  }
}

describe.skipIf(skipRedis(true))("faults: waiters", () => {
  it.scopedLive(
    "Redis restarted (data lost, same port) while fibers wait: they reconnect, resubscribe and get in, none past the holder's TTL",
    () =>
      faultScenario(Effect.gen(function*() {
        const key = "reports:daily"
        const holderTtl = 6_000
        const waiters = 4
        const server = yield* redisServer()
        const redis = yield* adminClient(server.url)
        const backend = yield* RedisBackend.make({ url: server.url })

        // A holder in another process, as Redis sees it: it will never release.
        const heldAt = hrMillis()
        yield* Effect.promise(() => redis.multi().hset(key, "elsewhere:1", "1").pexpire(key, holderTtl).exec())
        const { fiber, entries } = yield* startWaiters(backend, [key], waiters, 200)
        assert.strictEqual(yield* numsub(redis, channelOf(key)), 1)

        yield* Effect.promise(() => server.restart())
        const restartedAt = hrMillis()
        // The backend subscribes again from its own wait queue (while waiters remain to be served).
        yield* eventually(Effect.map(numsub(redis, channelOf(key)), (n) => n === 1), 5_000, "the resubscription")

        yield* Fiber.join(fiber).pipe(within(holderTtl + 5_000, "the waiters"))
        assert.strictEqual(entries.length, waiters, "every waiter got in")
        const lastOut = Math.max(...entries.map((e) => e.leftAt))
        measured("restart: last waiter out after the restart", lastOut - restartedAt)
        assert.isAtMost(lastOut, heldAt + holderTtl, "every waiter was in and out before the old holder's TTL ran out")
        assertExclusive(entries, key)
        // The restart lost the fencing counter along with the lock (no persistence): tokens started
        // over. docs/safety.md says so; this keeps the page honest.
        assert.deepStrictEqual(entries.map((e) => e.token).sort(), [1n, 2n, 3n, 4n])

        assert.strictEqual(yield* numsub(redis, channelOf(key)), 0, "no subscription left")
        yield* eventually(
          Effect.map(keyspace(redis), (keys) => keys.join() === tokenKeyOf(key)),
          5_000,
          "only the counter"
        )
      }))
  )

  it.scopedLive(
    "subscriber connection killed (CLIENT KILL TYPE pubsub) and the release missed: waiters still get in, woken after the resubscription",
    () =>
      faultScenario(Effect.gen(function*() {
        const keys = ["exports:a", "exports:b"]
        const holderLease = 20_000
        const waiters = 3
        const server = yield* redisServer()
        const redis = yield* adminClient(server.url)
        const backend = yield* RedisBackend.make({ url: server.url })
        // The holder: another client, which releases (and publishes) through its own connection.
        const other = yield* RedisBackend.make({ url: server.url })
        for (const key of keys) {
          const held = yield* other.primitives.tryAcquire({
            key,
            owner: "elsewhere:1",
            leaseMillis: holderLease,
            fencing: true
          })
          assert.strictEqual(held._tag, "Acquired")
        }
        const { fiber, entries } = yield* startWaiters(backend, keys, waiters, 200)
        for (const key of keys) assert.strictEqual(yield* numsub(redis, channelOf(key)), 1)

        assert.strictEqual(yield* cmd(redis, "CLIENT", "KILL", "TYPE", "pubsub"), 1, "the backend's one subscriber")
        // Released while the subscriber is away: nobody hears the notification.
        for (const key of keys) {
          assert.deepStrictEqual(yield* other.primitives.release(key, "elsewhere:1"), { _tag: "Released" })
        }
        const releasedAt = hrMillis()
        for (const key of keys) {
          yield* eventually(
            Effect.map(numsub(redis, channelOf(key)), (n) => n === 1),
            5_000,
            `the resubscription to ${key}`
          )
        }

        yield* Fiber.join(fiber).pipe(within(10_000, "the waiters"))
        assert.strictEqual(entries.length, keys.length * waiters, "every waiter got in")
        const lastOut = Math.max(...entries.map((e) => e.leftAt))
        measured("pubsub kill: last waiter out after the release", lastOut - releasedAt)
        // Three hand-offs of 200 ms per key; far below the 20 s lease or the 60 s retry.
        assert.isAtMost(lastOut - releasedAt, 5_000, "woken by notifications, not by a lease or the schedule")
        for (const key of keys) assertExclusive(entries, key)

        for (const key of keys) assert.strictEqual(yield* numsub(redis, channelOf(key)), 0, "no subscription left")
        const counters = keys.map(tokenKeyOf).sort().join()
        yield* eventually(Effect.map(keyspace(redis), (left) => left.join() === counters), 5_000, "only the counters")
      }))
  )
})
