/**
 * Spans and metrics, and a paused process learning of its loss before its next guarded step.
 */
import { assert, describe, it } from "@effect/vitest"
import type { Duration } from "effect"
import { Effect, Fiber, HashMap, Logger, Metric, Option, TestClock, Tracer } from "effect"
import { Lock, MemoryBackend, withLock } from "../src/index.js"
import * as metrics from "../src/internal/metrics.js"
import { makeInstrumented } from "./support/instrumented.js"

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
      const acquisitions = Metric.tagged(metrics.acquisitions, "backend", "memory")
      const reentries = Metric.tagged(metrics.reentries, "backend", "memory")
      const before = (yield* Metric.value(acquisitions)).count
      const reentriesBefore = (yield* Metric.value(reentries)).count
      yield* withLock("counted", withLock("counted", Effect.void))
      assert.strictEqual((yield* Metric.value(acquisitions)).count, before + 1)
      assert.strictEqual((yield* Metric.value(reentries)).count, reentriesBefore + 1)
    }).pipe(Effect.provide(MemoryBackend.layer)))
})

describe("watchdog logs", () => {
  const lost: Array<readonly [unknown, unknown]> = []
  const capture = Logger.make(({ annotations, message }) => {
    const text = Array.isArray(message) ? String(message[0]) : String(message)
    if (text.startsWith("Lost lock")) {
      lost.push([HashMap.unsafeGet(annotations, "key"), Option.getOrUndefined(HashMap.get(annotations, "request"))])
    }
  })

  it.scoped("carry their own lock's annotations, not those of another lock's fiber", () =>
    Effect.gen(function*() {
      const t = yield* makeInstrumented
      t.failAllRenewals = true
      const locked = (key: string, lease: Duration.DurationInput) =>
        withLock(key, Effect.never, { lease }).pipe(Effect.provide(t.layer), Effect.flip)
      const first = yield* Effect.fork(locked("first", "1 second").pipe(Effect.annotateLogs("request", "r-1")))
      yield* Effect.repeatN(Effect.yieldNow(), 20)
      const second = yield* Effect.fork(locked("second", "3 seconds"))
      yield* Effect.repeatN(Effect.yieldNow(), 20)
      yield* TestClock.adjust("5 seconds")
      yield* Fiber.join(first)
      yield* Fiber.join(second)
      assert.deepStrictEqual(lost, [["first", "r-1"], ["second", undefined]])
    }).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, capture))))
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
