/**
 * Scenario 9: bad input on a Redis backend. Every bad key or option fails with `LockOptionsError`
 * naming the field, from every entry point, and Redis is left untouched: no key written, and no
 * script, subscription or publication reached the server (its command statistics, reset after the
 * backend was built, show none).
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Schedule } from "effect"
import type { LockOptions } from "../../src/index.js"
import { Lock, LockBackend, LockOptionsError, withLock } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import { redisServer, skipRedis } from "../support/redisServer.js"
import { adminClient, cmd, faultScenario } from "./support.js"

const oneMiB = "k".repeat(1024 * 1024)

const badKeys: ReadonlyArray<readonly [string, string]> = [
  ["empty", ""],
  ["1 MiB", oneMiB],
  ["4097 bytes", "k".repeat(4097)]
]

const badOptions: ReadonlyArray<readonly [string, LockOptions, string]> = [
  ["lease 0", { lease: 0 }, "lease"],
  ["lease negative", { lease: -1 }, "lease"],
  ["lease \"-5 seconds\"", { lease: "-5 seconds" }, "lease"],
  ["lease NaN", { lease: Number.NaN }, "lease"],
  ["lease Infinity", { lease: Number.POSITIVE_INFINITY }, "lease"],
  ["lease Duration.infinity", { lease: Duration.infinity }, "lease"],
  ["lease 2 ms (not above its drift margin)", { lease: 2 }, "lease"],
  ["renew equal to the lease", { lease: "10 seconds", renew: "10 seconds" }, "renew"],
  ["renew longer than the lease", { lease: "10 seconds", renew: "1 minute" }, "renew"],
  ["renew 0", { renew: 0 }, "renew"],
  ["renew negative", { renew: -100 }, "renew"],
  ["renew NaN", { renew: Number.NaN }, "renew"],
  ["wait negative", { wait: -1 }, "wait"],
  ["wait \"-1 second\"", { wait: "-1 second" }, "wait"],
  ["wait NaN", { wait: Number.NaN }, "wait"],
  ["retry Schedule.stop", { retry: Schedule.stop }, "retry"],
  ["retry Schedule.recurs(0)", { retry: Schedule.recurs(0) }, "retry"],
  ["retry not a schedule", { retry: "often" as never }, "retry"],
  ["fencing not a boolean", { fencing: "yes" as never }, "fencing"]
]

/** Every entry point that takes a key and options, as one effect each. */
type Entry = readonly [string, Effect.Effect<unknown, unknown, LockBackend>]

const entryPoints = (key: string, options?: LockOptions): ReadonlyArray<Entry> => [
  ["withLock", withLock(key, Effect.dieMessage("ran the program"), options)],
  ["Lock.withLock (data-last)", Effect.dieMessage("ran the program").pipe(Lock.withLock(key, options))],
  ["Lock.withLockIfAvailable", Lock.withLockIfAvailable(key, Effect.dieMessage("ran the program"), options)],
  ["Lock.acquire", Effect.scoped(Lock.acquire(key, options))],
  ["Lock.tryAcquire", Effect.scoped(Lock.tryAcquire(key, options))]
]

/** The `LockOptionsError` an effect fails with (any other outcome fails the test). */
const optionsError = <R>(label: string, effect: Effect.Effect<unknown, unknown, R>) =>
  Effect.flatMap(Effect.exit(effect), (exit) => {
    if (exit._tag === "Failure" && exit.cause._tag === "Fail" && exit.cause.error instanceof LockOptionsError) {
      return Effect.succeed(exit.cause.error)
    }
    return Effect.dieMessage(`${label}: expected a LockOptionsError, got ${String(exit)}`)
  })

describe.skipIf(skipRedis(true))("faults: bad input on Redis", () => {
  it.scopedLive("every bad key and option fails with LockOptionsError naming the field, and Redis is left untouched", () =>
    faultScenario(Effect.gen(function*() {
      const server = yield* redisServer()
      const redis = yield* adminClient(server.url)
      const backend = yield* RedisBackend.make({ url: server.url })
      yield* cmd(redis, "CONFIG", "RESETSTAT")

      const run = Effect.provideService(LockBackend, backend)
      let checked = 0
      for (const [what, key] of badKeys) {
        for (const [entry, effect] of entryPoints(key)) {
          const error = yield* optionsError(`${entry}, ${what} key`, run(effect))
          assert.strictEqual(error.field, "key", `${entry}, ${what} key: ${error.reason}`)
          checked++
        }
        const admin: ReadonlyArray<Entry> = [
          ["Lock.inspect", Lock.inspect(key)],
          ["Lock.isLocked", Lock.isLocked(key)],
          ["Lock.forceUnlock", Lock.forceUnlock(key)]
        ]
        for (const [entry, effect] of admin) {
          const error = yield* optionsError(`${entry}, ${what} key`, run(effect))
          assert.strictEqual(error.field, "key", `${entry}, ${what} key: ${error.reason}`)
          checked++
        }
      }
      for (const [what, options, field] of badOptions) {
        for (const [entry, effect] of entryPoints("orders:42", options)) {
          const error = yield* optionsError(`${entry}, ${what}`, run(effect))
          assert.strictEqual(error.field, field, `${entry}, ${what}: ${error.reason}`)
          checked++
        }
      }
      assert.strictEqual(checked, badKeys.length * 8 + badOptions.length * 5)

      assert.strictEqual(yield* cmd(redis, "DBSIZE"), 0, "no key was written")
      const stats = yield* cmd<string>(redis, "INFO", "commandstats")
      for (const command of ["evalsha", "eval", "subscribe", "publish", "hset", "set", "incr"]) {
        assert.notInclude(stats, `cmdstat_${command}:`, `no ${command} reached the server`)
      }
      assert.deepStrictEqual(yield* cmd(redis, "PUBSUB", "CHANNELS"), [])

      // The same backend still works for good input, and a key of exactly 4096 bytes is good.
      const token = yield* run(withLock("k".repeat(4096), (lease) => Effect.succeed(lease.fencingToken)))
      assert.strictEqual(token, 1n)
      assert.include(yield* cmd<string>(redis, "INFO", "commandstats"), "cmdstat_evalsha:")
    })))
})
