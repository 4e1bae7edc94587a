/**
 * The watchdog: each hold renews on its own period (on the renewal grid, never later than the
 * period), renewals that come due together go out as one backend call (a call with room takes
 * renewals due a grid step later), and nothing renews once a hold's scope has closed.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Metric, TestClock } from "effect"
import { withLock } from "../src/index.js"
import * as metrics from "../src/internal/metrics.js"
import { makeInstrumented } from "./support/instrumented.js"

const settle = Effect.repeatN(Effect.yieldNow(), 50)
const activeWatchdogs = Effect.map(
  Metric.value(Metric.tagged(metrics.held, "backend", "memory")),
  (state) => state.value
)

describe("watchdog", () => {
  it.scoped("holds with different leases each renew on their own period, and stop on release", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const leases = [300, 600, 900, 1_200, 3_000]
      const fibers = yield* Effect.forEach(
        leases,
        (lease) => Effect.fork(withLock(`k${lease}`, Effect.sleep(3_000), { lease }).pipe(Effect.provide(t.layer)))
      )
      yield* settle
      assert.strictEqual(yield* activeWatchdogs, leases.length)
      for (let i = 0; i < 30; i++) {
        yield* TestClock.adjust(100)
        yield* settle
      }
      yield* Effect.forEach(fibers, Fiber.join)
      // A renewal every lease/3, brought forward to the grid by at most an eighth of the period.
      for (const lease of leases) {
        const count = t.renewalsByKey.get(`k${lease}`) ?? 0
        const period = Math.floor(lease / 3)
        const fewest = Math.floor(3_000 / period) - 1
        const most = Math.ceil(3_000 / (period - period / 8))
        assert.isTrue(
          count >= fewest && count <= most,
          `lease ${lease}: ${count} renewals, expected ${fewest}..${most}`
        )
      }
      assert.strictEqual(yield* activeWatchdogs, 0)
      const total = t.calls.renew
      yield* TestClock.adjust(10_000)
      yield* settle
      assert.strictEqual(t.calls.renew, total, "nothing renews after release")
    }))

  it.scoped("renewals that come due together go out as one backend call", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const keys = Array.from({ length: 250 }, (_, i) => `bulk:${i}`)
      const fibers = yield* Effect.forEach(keys, (key) =>
        Effect.fork(withLock(key, Effect.sleep(10_000), { lease: "3 seconds" }).pipe(Effect.provide(t.layer))))
      yield* settle
      yield* TestClock.adjust(1_000)
      yield* settle
      assert.strictEqual(t.calls.renew, 250, "every hold renewed once")
      assert.strictEqual(t.renewCalls.count, 3, "in batches of at most 100")
      yield* Effect.forEach(fibers, Fiber.interrupt)
    }))

  it.scoped("a call with room takes renewals of the next grid instant, and the holds renew together from then on", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const hold = (key: string) =>
        Effect.fork(withLock(key, Effect.sleep(60_000), { lease: "3 seconds" }).pipe(Effect.provide(t.layer)))
      // Renew every second, on a 64 ms grid: 150 holds due at one instant, 50 at the next.
      const early = yield* Effect.forEach(Array.from({ length: 150 }, (_, i) => `early:${i}`), hold)
      yield* settle
      yield* TestClock.adjust(64)
      const late = yield* Effect.forEach(Array.from({ length: 50 }, (_, i) => `late:${i}`), hold)
      yield* settle
      yield* TestClock.adjust(1_000)
      yield* settle
      assert.strictEqual(t.calls.renew, 200, "every hold renewed once")
      assert.strictEqual(t.renewCalls.count, 2, "two full calls, not 100 + 50 + 50")
      yield* TestClock.adjust(1_000)
      yield* settle
      assert.strictEqual(t.calls.renew, 400, "every hold renewed twice")
      assert.strictEqual(t.renewCalls.count, 4)
      yield* Effect.forEach([...early, ...late], Fiber.interrupt)
    }))

  it.scoped("holds taken at slightly different times renew at the same grid instant", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const fibers: Array<Fiber.RuntimeFiber<void, unknown>> = []
      for (let i = 0; i < 10; i++) {
        fibers.push(yield* Effect.fork(withLock(`spread:${i}`, Effect.sleep(60_000)).pipe(Effect.provide(t.layer))))
        yield* settle
        yield* TestClock.adjust(50) // taken 50 ms apart, 30 s lease: renew every 10 s, on a 1024 ms grid
      }
      yield* TestClock.adjust(10_000)
      yield* settle
      assert.strictEqual(t.calls.renew, 10)
      assert.isAtMost(t.renewCalls.count, 2, "ten holds, at most two grid instants")
      yield* Effect.forEach(fibers, Fiber.interrupt)
    }))
})
