/**
 * A held lock is lost, and the program is told: the lock is stolen by another client (scenario 1),
 * or Redis goes away or stops answering while the lock is held (scenario 2).
 */
import { assert, describe, it } from "@effect/vitest"
import type { Scope } from "effect"
import { Deferred, Duration, Effect, Fiber, Option } from "effect"
import type { Redis } from "ioredis"
import type { Lease, LockBackendShape } from "../../src/index.js"
import { Lock, LockBackend, withLock } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import type { RedisServer } from "../support/redisServer.js"
import { redisServer, skipRedis } from "../support/redisServer.js"
import {
  adminClient,
  cmd,
  driftOf,
  eventually,
  faultScenario,
  hrMillis,
  keyspace,
  measured,
  SLACK_MILLIS,
  within
} from "./support.js"

const LEASE = 1_500
const RENEW = Math.floor(LEASE / 3)

/**
 * Hold `key` on `backend` in a forked `withLock` whose program runs until it is interrupted.
 * Resolves once the program runs, with its lease, the moment it was interrupted (host monotonic
 * ms) and the fiber, which ends with the error `withLock` failed with.
 */
const holdUntilInterrupted = (backend: LockBackendShape, key: string) =>
  Effect.gen(function*() {
    const started = yield* Deferred.make<Lease>()
    const state: { interruptedAt?: number; failedAt?: number } = {}
    const program = (lease: Lease) =>
      Effect.zipRight(Deferred.succeed(started, lease), Effect.never).pipe(
        Effect.onInterrupt(() => Effect.sync(() => (state.interruptedAt = hrMillis())))
      )
    const fiber = yield* Effect.fork(
      withLock(key, program, { lease: LEASE }).pipe(
        Effect.provideService(LockBackend, backend),
        Effect.flip,
        Effect.tap(() => Effect.sync(() => (state.failedAt = hrMillis())))
      )
    )
    const lease = yield* Deferred.await(started)
    return { lease, fiber, state }
  })

type Steal = (redis: Redis, server: RedisServer, key: string) => Effect.Effect<void, unknown, Scope.Scope>

const steals: ReadonlyArray<
  readonly [string, Steal, "thief:1" | "lock" | undefined, ReadonlyArray<"stolen" | "deleted">]
> = [
  [
    "overwritten by a foreign client (DEL + HSET other-owner)",
    (redis, _server, key) =>
      Effect.promise(() => redis.multi().del(key).hset(key, "thief:1", "1").pexpire(key, 30_000).exec()),
    "thief:1",
    ["stolen"]
  ],
  [
    "force-unlocked and then taken by another client (Lock.forceUnlock + Lock.acquire)",
    (_redis, server, key) =>
      Effect.gen(function*() {
        const other = yield* RedisBackend.make({ url: server.url })
        const thief = Effect.provideService(LockBackend, other)
        assert.isTrue(yield* thief(Lock.forceUnlock(key)))
        // Held for the rest of the test's scope, by an owner of the other client.
        yield* thief(Lock.acquire(key, { lease: "30 seconds", wait: 0 }))
      }),
    "lock",
    // "deleted" when the renewal falls between the force-unlock and the other client's acquire
    ["stolen", "deleted"]
  ],
  [
    "deleted by a foreign client (DEL)",
    (redis, _server, key) => Effect.asVoid(cmd(redis, "DEL", key)),
    undefined,
    ["deleted"]
  ]
]

describe.skipIf(skipRedis(true))("faults: the lock is stolen", () => {
  for (const [how, steal, thief, reasons] of steals) {
    it.scopedLive(`${how}: LockLostError "${reasons[0]}" within one renewal period`, () =>
      faultScenario(Effect.gen(function*() {
        const key = "orders:1"
        const server = yield* redisServer()
        const redis = yield* adminClient(server.url)
        const backend = yield* RedisBackend.make({ url: server.url })
        const held = yield* holdUntilInterrupted(backend, key)
        // Steal it between two renewals, at an arbitrary point of the period.
        yield* Effect.sleep(RENEW + Math.floor(Math.random() * RENEW))
        yield* steal(redis, server, key)
        const stolenAt = hrMillis()

        const error = yield* Fiber.join(held.fiber).pipe(within(10_000, "the loss of the stolen lock"))
        assert.strictEqual(error._tag, "LockLostError", String(error))
        if (error._tag !== "LockLostError") return
        assert.include(reasons, error.reason)
        assert.strictEqual(error.key, key)
        assert.strictEqual(error.fencingToken, held.lease.fencingToken)
        const detectedAfter = held.state.interruptedAt! - stolenAt
        measured(`${how}: interrupted after the steal`, detectedAfter)
        assert.isAtMost(
          detectedAfter,
          RENEW + SLACK_MILLIS,
          `the program was interrupted ${detectedAfter} ms after the steal`
        )

        // The loser's release is owner-checked: the thief keeps what it took. (Asked through the
        // loser's own connection, so after its release.)
        const holders = Option.map(yield* backend.primitives.inspect(key), (info) => info.holders.map((h) => h.owner))
        if (thief === undefined) assert.isTrue(Option.isNone(holders), "nobody holds it")
        else if (thief === "thief:1") assert.deepStrictEqual(holders, Option.some(["thief:1"]))
        else {
          const owners = Option.getOrElse(holders, () => [])
          assert.strictEqual(owners.length, 1)
          assert.notStrictEqual(owners[0], held.lease.owner)
        }
      })))
  }
})

describe.skipIf(skipRedis(true))("faults: Redis goes away while the lock is held", () => {
  // With the default-like budget a renewal call waits for the reconnect until the deadline cuts it
  // off; with a short one, renewals fail fast and are retried until the deadline.
  for (const commandTimeout of [2_000, 100]) {
    it.scopedLive(
      `redis-server stopped (commandTimeout ${commandTimeout} ms): interrupted by the local deadline (last confirmed renewal + lease - drift) with renewal-failed, not before it, never later`,
      () =>
        faultScenario(Effect.gen(function*() {
          const key = "payouts"
          const server = yield* redisServer()
          const redis = yield* adminClient(server.url)
          const backend = yield* RedisBackend.make({ url: server.url, commandTimeout })
          const held = yield* holdUntilInterrupted(backend, key)
          // Past at least one renewal, and stopped at an arbitrary point of the renewal period.
          yield* Effect.sleep(RENEW + 50 + Math.floor(Math.random() * RENEW))
          const ttlBefore = yield* cmd<number>(redis, "PTTL", key)
          assert.isAbove(ttlBefore, 0)

          // redis-server acts on SIGTERM at its next cron tick (up to 100 ms at the default hz), so
          // it may still answer a renewal after the signal: it is gone only once stop() resolves.
          const stoppedAt = hrMillis()
          yield* Effect.promise(() => server.stop())
          const goneAt = hrMillis()
          // A renewal answered just before the stop has been processed by now.
          yield* Effect.sleep(100)
          const now = hrMillis()
          const deadline = now + Duration.toMillis(yield* held.lease.remaining)
          // The deadline is the start of the last confirmed renewal (a renew period or less before
          // the stop: the watchdog renews every period) + lease - drift.
          const lastConfirmed = deadline - (LEASE - driftOf(LEASE))
          assert.isAtMost(lastConfirmed, goneAt, "the deadline counts from a renewal that was confirmed")
          assert.isAtLeast(lastConfirmed, stoppedAt - RENEW - SLACK_MILLIS, "renewed on its period until the stop")

          const error = yield* Fiber.join(held.fiber).pipe(within(LEASE + 10_000, "the loss"))
          assert.strictEqual(error._tag, "LockLostError", String(error))
          if (error._tag !== "LockLostError") return
          assert.strictEqual(error.reason, "renewal-failed")
          const interruptedAt = held.state.interruptedAt!
          measured(`stopped (${commandTimeout} ms budget): interrupted after the deadline`, interruptedAt - deadline)
          assert.isAtLeast(interruptedAt, deadline, "not interrupted before the local deadline")
          assert.isAtMost(
            interruptedAt,
            deadline + SLACK_MILLIS,
            `interrupted ${interruptedAt - deadline} ms after the deadline`
          )
          // withLock returns once the program has ended; its release (which fails) does not hold it up.
          assert.isAtMost(held.state.failedAt!, interruptedAt + commandTimeout + SLACK_MILLIS)
        }))
    )
  }

  it.scopedLive(
    "redis-server paused (SIGSTOP): interrupted by the local deadline with renewal-failed; after it continues no lock is left",
    () =>
      faultScenario(Effect.gen(function*() {
        const key = "payouts"
        const server = yield* redisServer()
        const redis = yield* adminClient(server.url)
        const backend = yield* RedisBackend.make({ url: server.url, commandTimeout: "2 seconds" })
        const held = yield* holdUntilInterrupted(backend, key)
        yield* Effect.sleep(RENEW + 50 + Math.floor(Math.random() * RENEW))

        server.pause()
        const pausedAt = hrMillis()
        const deadline = hrMillis() + Duration.toMillis(yield* held.lease.remaining)
        assert.isAtMost(deadline, pausedAt + LEASE - driftOf(LEASE))

        const error = yield* Fiber.join(held.fiber).pipe(
          within(LEASE + 10_000, "the loss"),
          Effect.ensuring(Effect.sync(() => server.resume()))
        )
        assert.strictEqual(error._tag, "LockLostError", String(error))
        if (error._tag !== "LockLostError") return
        assert.strictEqual(error.reason, "renewal-failed")
        const interruptedAt = held.state.interruptedAt!
        measured("paused server: interrupted after the deadline", interruptedAt - deadline)
        assert.isAtLeast(interruptedAt, deadline, "not interrupted before the local deadline")
        assert.isAtMost(
          interruptedAt,
          deadline + SLACK_MILLIS,
          `interrupted ${interruptedAt - deadline} ms after the deadline`
        )

        // The renewal and the release that were waiting in the paused server's socket run now, in
        // order: the lock is renewed once more and then released.
        yield* eventually(Effect.map(keyspace(redis), (keys) => !keys.includes(key)), 5_000, "the lock to be released")
        yield* Effect.sleep(200)
        assert.deepStrictEqual(yield* keyspace(redis), [`redisson_lock_token:{${key}}`])
      }))
  )
})
