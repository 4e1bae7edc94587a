/**
 * The watchdog's timer: one heap of due times serves every hold; each hold still renews on its own
 * period and stops when released.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, FastCheck as fc, Fiber, TestClock } from "effect"
import { LockBackend, withLock } from "../src/index.js"
import * as metrics from "../src/internal/metrics.js"
import type { Timer } from "../src/internal/timerHeap.js"
import { TimerHeap } from "../src/internal/timerHeap.js"
import { makeInstrumented } from "./support/instrumented.js"

describe("TimerHeap", () => {
  it.prop("pops in due order whatever was pushed and removed", [
    fc.array(fc.tuple(fc.integer({ min: 0, max: 1_000 }), fc.boolean()), { maxLength: 200 })
  ], ([entries]) => {
    const heap = new TimerHeap<Timer & { readonly id: number }>()
    const items = entries.map(([due], id) => ({ due, index: -1, id }))
    items.forEach((item) => heap.push(item))
    const kept = items.filter((item, i) => {
      if (entries[i]![1]) return true
      heap.remove(item)
      return false
    })
    heap.remove(items[0] ?? { due: 0, index: -1, id: -1 }) // removing twice or a stranger is harmless
    const popped: Array<number> = []
    for (let item = heap.pop(); item !== undefined; item = heap.pop()) popped.push(item.due)
    const expected = kept.filter((item) => item !== items[0]).map((item) => item.due).sort((a, b) => a - b)
    assert.deepStrictEqual(popped, expected)
  })
})

describe("watchdog", () => {
  it.effect("holds with different leases each renew on their own period, and stop on release", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      const leases = [300, 600, 900, 1_200, 3_000]
      const renewals = new Map<string, number>()
      const original = t.backend.renew
      const counting = { ...t.backend, renew: (request: Parameters<typeof original>[0]) => {
        renewals.set(request.key, (renewals.get(request.key) ?? 0) + 1)
        return original(request)
      } }
      const fibers = yield* Effect.forEach(leases, (lease) =>
        Effect.fork(
          withLock(`k${lease}`, Effect.sleep(3_000), { lease }).pipe(Effect.provideService(LockBackend, counting))
        ))
      yield* Effect.repeatN(Effect.yieldNow(), 50)
      assert.strictEqual(metrics.watchdogs.active, leases.length)
      for (let i = 0; i < 30; i++) {
        yield* TestClock.adjust(100)
        yield* Effect.repeatN(Effect.yieldNow(), 20)
      }
      yield* Effect.forEach(fibers, Fiber.join)
      // Renewal every lease/3 over 3 s (the last one may coincide with the release).
      for (const lease of leases) {
        const count = renewals.get(`k${lease}`) ?? 0
        const expected = Math.floor(3_000 / Math.floor(lease / 3))
        assert.isTrue(count === expected || count === expected - 1, `lease ${lease}: ${count} renewals, expected ~${expected}`)
      }
      assert.strictEqual(metrics.watchdogs.active, 0)
      const total = [...renewals.values()].reduce((a, b) => a + b, 0)
      yield* TestClock.adjust(10_000)
      yield* Effect.repeatN(Effect.yieldNow(), 20)
      assert.strictEqual([...renewals.values()].reduce((a, b) => a + b, 0), total, "nothing renews after release")
    }))
})
