/**
 * Spans and metrics, and a paused process learning of its loss before its next guarded step.
 */
import { assert, describe, it } from "@effect/vitest"
import type { Duration } from "effect"
import { Effect, Fiber, HashMap, Logger, Metric, Option, TestClock, Tracer } from "effect"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import type { LockBackend } from "../src/index.js"
import { Lock, MemoryBackend, withLock } from "../src/index.js"
import * as metrics from "../src/internal/metrics.js"
import { makeInstrumented } from "./support/instrumented.js"

const settle = Effect.repeatN(Effect.yieldNow(), 50)

/** The names docs/observability.md documents in its tables: spans (`effect-lock.*`) and metrics. */
const documented = (() => {
  const page = readFileSync(join(fileURLToPath(import.meta.url), "..", "..", "docs", "observability.md"), "utf8")
  const names = (pattern: RegExp) => new Set(Array.from(page.matchAll(pattern), (m) => m[1]!))
  return {
    spans: names(/^\| `(effect-lock\.[a-zA-Z]+)` \|/gm),
    metrics: names(/^\| `(effect_lock_[a-z_]+)` \|/gm)
  }
})()

/** A tracer that records the spans it is asked to start: name, attributes and links. */
const recordingTracer = (spans: Array<{ name: string; attributes: Map<string, unknown>; links: number }>) => {
  const base = Effect.runSync(Effect.tracer)
  return Tracer.make({
    span: (name, parent, context, links, startTime, kind, options) => {
      const span = base.span(name, parent, context, links, startTime, kind, options)
      const recorded = { name, attributes: span.attributes as Map<string, unknown>, links: links.length }
      spans.push(recorded)
      const addLinks = span.addLinks.bind(span)
      span.addLinks = (more) => {
        recorded.links += more.length
        addLinks(more)
      }
      return span
    },
    context: (f) => f()
  })
}

describe("observability", () => {
  it.scoped("every span and metric the code emits is documented, and every documented one is emitted", () =>
    Effect.gen(function*() {
      const spans: Array<{ name: string; attributes: Map<string, unknown>; links: number }> = []
      const tracer = recordingTracer(spans)
      // The backend is built with the tracer installed, as an application's layers are: its renewal
      // scheduler's fibers trace too.
      const t = yield* makeInstrumented.pipe(Effect.withTracer(tracer))
      const run = <A, E>(effect: Effect.Effect<A, E, LockBackend>): Effect.Effect<A, E> =>
        effect.pipe(Effect.provide(t.layer), Effect.withTracer(tracer))
      // a lock held across a renewal, with a second acquirer handed the lock by its release
      const first = yield* Effect.fork(run(withLock("a", withLock("a", Effect.sleep("15 seconds")))))
      yield* settle
      const second = yield* Effect.fork(run(withLock("a", Effect.void)))
      yield* settle
      yield* TestClock.adjust("16 seconds")
      yield* Fiber.join(first)
      yield* Fiber.join(second)
      // a timeout, a loss and a failed release
      yield* t.inner.tryAcquire({ key: "b", owner: "foreign:1", leaseMillis: 60_000, fencing: true })
      yield* run(Effect.flip(withLock("b", Effect.void, { wait: 0 })))
      const loser = yield* Effect.fork(
        run(Effect.flip(withLock("c", Effect.never, { lease: "1 second", renew: false })))
      )
      yield* settle
      yield* TestClock.adjust("1 second")
      yield* Fiber.join(loser)
      t.failReleases = true
      yield* run(withLock("d", Effect.void))
      t.failReleases = false
      yield* run(Lock.forceUnlock("a"))

      const emitted = new Set(spans.map((span) => span.name).filter((name) => name.startsWith("effect-lock.")))
      assert.deepStrictEqual([...emitted].sort(), [...documented.spans].sort())
      const handedOver = spans.find((span) =>
        span.name === "effect-lock.acquire" && span.attributes.get("effect_lock.via") === "hand-over"
      )
      assert.isDefined(handedOver, "the second acquisition was handed over")
      assert.isTrue(
        spans.some((span) => span.name === "effect-lock.hold" && span.links === 1),
        "its hold links to the first hold"
      )
      const renew = spans.find((span) => span.name === "effect-lock.renew")
      assert.strictEqual(renew?.attributes.get("effect_lock.renewals"), 1)

      const snapshot = yield* Metric.snapshot
      const metricNames = new Set(
        snapshot.map((pair) => pair.metricKey.name).filter((name) => name.startsWith("effect_lock_"))
      )
      // Emitted only by a Redis backend with replica sync (test/redis/replica-sync.test.ts checks it).
      const redisOnly = new Set(["effect_lock_replica_sync_short_total"])
      assert.deepStrictEqual(
        [...metricNames].sort(),
        [...documented.metrics].filter((name) => !redisOnly.has(name)).sort()
      )
      for (const pair of snapshot) {
        if (!pair.metricKey.name.startsWith("effect_lock_")) continue
        const tags = pair.metricKey.tags.map((tag) => tag.key)
        assert.include(tags, "backend", pair.metricKey.name)
        assert.notInclude(tags, "key", pair.metricKey.name)
      }
    }))

  it.effect("acquisitions and reentries are counted, by backend", () =>
    Effect.gen(function*() {
      const acquisitions = Metric.tagged(metrics.acquisitions, "backend", "memory")
      const reentries = Metric.tagged(metrics.reentries, "backend", "memory")
      const before = (yield* Metric.value(acquisitions)).count
      const reentriesBefore = (yield* Metric.value(reentries)).count
      yield* withLock("counted", withLock("counted", Effect.void))
      assert.strictEqual((yield* Metric.value(acquisitions)).count, before + 1)
      assert.strictEqual((yield* Metric.value(reentries)).count, reentriesBefore + 1)
    }).pipe(Effect.provide(MemoryBackend.layer)))

  it.effect("a wait that gets in is timed, and one that runs out is counted as a timeout", () =>
    Effect.gen(function*() {
      const waited = Metric.tagged(metrics.waitTime, "backend", "memory")
      const timeouts = Metric.tagged(metrics.timeouts, "backend", "memory")
      const waitedBefore = (yield* Metric.value(waited)).count
      const timeoutsBefore = (yield* Metric.value(timeouts)).count
      const holder = yield* Effect.fork(withLock("timed", Effect.sleep(1_000)))
      yield* settle
      const patient = yield* Effect.fork(withLock("timed", Effect.void))
      const hasty = yield* Effect.fork(Effect.flip(withLock("timed", Effect.void, { wait: "100 millis" })))
      yield* settle
      yield* TestClock.adjust(2_000)
      yield* Fiber.join(holder)
      yield* Fiber.join(patient)
      assert.strictEqual((yield* Fiber.join(hasty))._tag, "LockTimeoutError")
      assert.strictEqual((yield* Metric.value(waited)).count, waitedBefore + 1)
      assert.strictEqual((yield* Metric.value(timeouts)).count, timeoutsBefore + 1)
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
