/**
 * Spans and metrics, and a paused process learning of its loss before its next guarded step.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Metric, Option, Tracer } from "effect"
import { Lock, MemoryBackend, withLock } from "../src/index.js"
import * as metrics from "../src/internal/metrics.js"

/** A tracer that records the names of the spans it is asked to start. */
const recordingTracer = (names: Array<string>) => {
  const base = Effect.runSync(Effect.tracer)
  return Tracer.make({
    span: (name, parent, context, links, startTime, kind, options) => {
      names.push(name)
      return base.span(name, parent, context, links, startTime, kind, options)
    },
    context: (f) => f()
  })
}

describe("observability", () => {
  it.effect("acquisitions and force-unlocks are spans when a tracer is installed", () =>
    Effect.gen(function*() {
      const names: Array<string> = []
      yield* Effect.zipRight(withLock("traced", Effect.void), Lock.forceUnlock("traced")).pipe(
        Effect.withTracer(recordingTracer(names))
      )
      assert.deepStrictEqual(names, ["effect-lock.acquire", "effect-lock.forceUnlock"])
    }).pipe(Effect.provide(MemoryBackend.layer)))

  it.effect("acquisitions and reentries are counted", () =>
    Effect.gen(function*() {
      const before = (yield* Metric.value(metrics.acquisitions)).count
      const reentriesBefore = (yield* Metric.value(metrics.reentries)).count
      yield* withLock("counted", withLock("counted", Effect.void))
      assert.strictEqual((yield* Metric.value(metrics.acquisitions)).count, before + 1)
      assert.strictEqual((yield* Metric.value(metrics.reentries)).count, reentriesBefore + 1)
    }).pipe(Effect.provide(MemoryBackend.layer)))
})

describe("a paused process", () => {
  it.live("learns that its lease ran out before its next guarded step, even before the watchdog runs", () =>
    Effect.scoped(Effect.gen(function*() {
      const lease = yield* Lock.acquire("paused", { lease: "200 millis", renew: false })
      // Block the event loop past the lease, as a stop-the-world pause would: no timer can fire.
      const until = performance.now() + 300
      while (performance.now() < until) { /* paused */ }
      let ran = false
      const error = yield* Effect.flip(lease.guard(Effect.sync(() => ran = true)))
      assert.isFalse(ran)
      assert.strictEqual(error.reason, "expired")
      assert.isFalse(yield* lease.isHeld)
      assert.isTrue(Option.isNone(yield* Lock.currentLease("paused")))
    })).pipe(Effect.provide(MemoryBackend.layer)))
})
