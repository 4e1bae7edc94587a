/**
 * Property tests on the memory backend under TestClock: random schedules of fibers that acquire,
 * reenter, hold, get interrupted while waiting or holding, and stall past their lease (their
 * renewals stop getting through), with releases and hand-overs that take a while. Invariants: never two owners inside one key at once; fencing
 * tokens strictly increase in grant order; every fiber that is neither interrupted nor stalled
 * gets in within a bound; afterwards no lock, waiter or watchdog fiber is left.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, FastCheck as fc, Fiber, Metric, Option, TestClock } from "effect"
import { Lock, withLock } from "../src/index.js"
import * as metrics from "../src/internal/metrics.js"
import { makeInstrumented } from "./support/instrumented.js"

const fiberPlan = fc.record({
  key: fc.integer({ min: 0, max: 2 }),
  startAt: fc.integer({ min: 0, max: 2_000 }),
  holdFor: fc.integer({ min: 1, max: 2_500 }),
  leaseMillis: fc.integer({ min: 300, max: 3_000 }),
  reenter: fc.boolean(),
  interruptAt: fc.option(fc.integer({ min: 0, max: 6_000 }), { nil: undefined }),
  stall: fc.boolean()
})

type Plan = typeof fiberPlan extends fc.Arbitrary<infer T> ? T : never

const STEP_MILLIS = 50

describe("properties of the lock under random schedules", () => {
  it.effect.prop(
    "mutual exclusion, monotonic tokens, bounded waits, nothing left behind",
    [fc.array(fiberPlan, { minLength: 2, maxLength: 8 }), fc.constantFrom(0, 0, 5, 30)],
    ([plans, releaseDelayMillis]) =>
      Effect.scoped(Effect.gen(function*() {
        const t = yield* makeInstrumented
        // Releases (and hand-overs) that take a while, as a network would: waiters then move up,
        // time out and get interrupted while a hand-over to them is in flight.
        t.releaseDelayMillis = releaseDelayMillis
        const inside = new Map<number, string>()
        const tokens = new Map<number, Array<bigint>>()
        const violations: Array<string> = []

        const critical = (plan: Plan, index: number) =>
          withLock(
            `key-${plan.key}`,
            (lease) =>
              Effect.gen(function*() {
                const holder = inside.get(plan.key)
                if (holder !== undefined) violations.push(`fiber ${index} entered key ${plan.key} held by ${holder}`)
                inside.set(plan.key, lease.owner)
                const granted = tokens.get(plan.key) ?? []
                if (granted.length > 0 && granted[granted.length - 1]! >= lease.fencingToken) {
                  violations.push(`token ${lease.fencingToken} after ${granted[granted.length - 1]} on key ${plan.key}`)
                }
                granted.push(lease.fencingToken)
                tokens.set(plan.key, granted)
                if (plan.stall) t.failRenewals.add(lease.owner)
                if (plan.reenter) {
                  const nested = yield* withLock(`key-${plan.key}`, (inner) => Effect.succeed(inner), { wait: 0 })
                  if (nested.holdCount !== 2 || nested.fencingToken !== lease.fencingToken) {
                    violations.push(`fiber ${index} reentered with ${nested.holdCount}/${nested.fencingToken}`)
                  }
                }
                yield* Effect.sleep(plan.stall ? plan.leaseMillis * 10 : plan.holdFor)
              }).pipe(Effect.ensuring(Effect.sync(() => {
                if (inside.get(plan.key) === lease.owner) inside.delete(plan.key)
              }))),
            { lease: plan.leaseMillis }
          ).pipe(Effect.provide(t.layer))

        const fibers = yield* Effect.forEach(plans, (plan, index) =>
          Effect.fork(Effect.zipRight(Effect.sleep(plan.startAt), critical(plan, index))))
        yield* Effect.forEach(plans, (plan, index) =>
          plan.interruptAt === undefined
            ? Effect.void
            : Effect.forkDaemon(Effect.zipRight(Effect.sleep(plan.interruptAt), Fiber.interrupt(fibers[index]!))))

        // Bound: everybody ahead of a fiber holds at most its hold time (or, stalled, its lease).
        const bound = plans.reduce((sum, p) =>
          sum + p.startAt + Math.max(p.holdFor, p.leaseMillis) + STEP_MILLIS, 0) +
          6_000
        let elapsed = 0
        while (elapsed <= bound) {
          const polls = yield* Effect.forEach(fibers, Fiber.poll)
          if (polls.every(Option.isSome)) break
          yield* TestClock.adjust(STEP_MILLIS)
          elapsed += STEP_MILLIS
        }

        const exits = yield* Effect.forEach(fibers, Fiber.poll)
        plans.forEach((plan, index) => {
          const exit = exits[index]!
          if (Option.isNone(exit)) {
            violations.push(`fiber ${index} did not finish within ${bound} ms`)
            return
          }
          if (plan.interruptAt !== undefined || plan.stall) return
          if (Exit.isFailure(exit.value)) violations.push(`fiber ${index} failed: ${String(exit.value.cause)}`)
        })
        plans.forEach((plan, index) => {
          const exit = exits[index]!
          if (!plan.stall && Option.isSome(exit) && Exit.isFailure(exit.value)) {
            const failure = exit.value.cause
            if (failure._tag === "Fail") {
              violations.push(`fiber ${index} (not stalled) failed with ${String(failure.error)}`)
            }
          }
        })

        yield* TestClock.adjust(10_000)
        assert.deepStrictEqual(violations, [])
        assert.strictEqual(yield* t.backend.lockCount, 0, "no lock left")
        assert.deepStrictEqual(yield* t.backend.waiters, { fibers: 0, keys: [] }, "no waiter left")
        assert.strictEqual(
          (yield* Metric.value(Metric.tagged(metrics.held, "backend", "memory"))).value,
          0,
          "no watchdog left"
        )
        for (const key of [0, 1, 2]) assert.isTrue(Option.isNone(yield* Lock.currentLease(`key-${key}`)))
      })),
    { fastCheck: { numRuns: 40 } }
  )
})
