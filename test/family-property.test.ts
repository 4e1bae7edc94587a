/**
 * Property tests of Semaphore and MultiLock on the memory backend under TestClock.
 *
 * - Semaphore: random fibers ask for 1..total permits, hold them for a while, some are interrupted,
 *   and "stalled" holders (a foreign owner that took permits and never renews nor releases them: a
 *   process that died) appear. Invariants: never more than the total in use; every fiber that is
 *   not interrupted gets in within a bound (a stalled holder's permits come back within its
 *   lease); nothing is held at the end.
 * - MultiLock: random fibers take random overlapping subsets of 5 keys (in random order). Invariants:
 *   never two inside on one key; once a program has started, every one of its keys is held (never a
 *   strict subset); everybody finishes within a bound (no deadlock); nothing is held at the end.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Exit, FastCheck as fc, Fiber, Layer, Option, TestClock } from "effect"
import { Lock, LockBackend, MultiLock, Semaphore } from "../src/index.js"
import * as MemoryBackend from "../src/MemoryBackend.js"

const STEP_MILLIS = 50

/** A failure fast-check reported (`{ seed, path }`), replayed: `FC_SEED=... FC_PATH=... npx vitest run ...`. */
const replay = process.env["FC_SEED"] === undefined
  ? {}
  : {
    seed: Number(process.env["FC_SEED"]),
    ...(process.env["FC_PATH"] === undefined ? {} : { path: process.env["FC_PATH"] })
  }

/** Advance the TestClock in steps until every fiber is done or `bound` ms passed. */
const runUntilDone = (fibers: ReadonlyArray<Fiber.RuntimeFiber<unknown, unknown>>, bound: number) =>
  Effect.gen(function*() {
    let elapsed = 0
    while (elapsed <= bound) {
      const polls = yield* Effect.forEach(fibers, Fiber.poll)
      if (polls.every(Option.isSome)) return
      yield* TestClock.adjust(STEP_MILLIS)
      elapsed += STEP_MILLIS
    }
  })

const semaphorePlan = fc.record({
  permits: fc.integer({ min: 1, max: 4 }),
  holdFor: fc.integer({ min: 1, max: 1_500 }),
  startAt: fc.integer({ min: 0, max: 2_000 }),
  interruptAfter: fc.option(fc.integer({ min: 0, max: 3_000 }), { nil: undefined }),
  stalled: fc.boolean()
})

describe("properties of the semaphore under random schedules", () => {
  it.effect.prop(
    "never more than the total in use; stalled permits come back within their lease; everybody gets in",
    [fc.array(semaphorePlan, { minLength: 2, maxLength: 10 })],
    ([plans]) =>
      Effect.scoped(Effect.gen(function*() {
        const TOTAL = 4
        const LEASE = 2_000
        const KEY = "semaphore-property"
        const service = yield* Layer.build(MemoryBackend.layer)
        const semaphore = Context.get(service, LockBackend).primitives.semaphore
        if (semaphore === undefined) return yield* Effect.dieMessage("no semaphore primitives")
        const violations: Array<string> = []
        let inUse = 0
        let stalledInUse = 0
        const fibers: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
        const expected: Array<boolean> = []
        for (let index = 0; index < plans.length; index++) {
          const plan = plans[index]!
          if (plan.stalled) {
            // Takes its permits if they are free, then never renews nor releases them.
            yield* Effect.forkScoped(Effect.zipRight(
              Effect.sleep(plan.startAt),
              Effect.flatMap(
                semaphore.tryAcquire({
                  key: KEY,
                  owner: `stalled:${index}`,
                  permits: plan.permits,
                  total: TOTAL,
                  leaseMillis: LEASE,
                  fencing: true
                }),
                (result) =>
                  result._tag === "Acquired"
                    ? Effect.sync(() => {
                      stalledInUse += plan.permits
                      if (inUse + stalledInUse > TOTAL) violations.push(`stalled ${index}: ${inUse + stalledInUse}`)
                    }).pipe(
                      Effect.zipRight(Effect.sleep(LEASE)),
                      Effect.zipRight(Effect.sync(() => stalledInUse -= plan.permits))
                    )
                    : Effect.void
              )
            ))
            continue
          }
          const critical = Semaphore.withPermits(
            KEY,
            plan.permits,
            Effect.gen(function*() {
              inUse += plan.permits
              if (inUse + stalledInUse > TOTAL) violations.push(`fiber ${index}: ${inUse + stalledInUse} in use`)
              yield* Effect.sleep(plan.holdFor)
            }).pipe(Effect.ensuring(Effect.sync(() => inUse -= plan.permits))),
            { permits: TOTAL, lease: "1 second" }
          )
          const fiber = yield* Effect.fork(
            Effect.zipRight(Effect.sleep(plan.startAt), critical).pipe(Effect.provide(Layer.succeedContext(service)))
          )
          fibers.push(fiber)
          expected.push(plan.interruptAfter === undefined)
          if (plan.interruptAfter !== undefined) {
            yield* Effect.forkScoped(
              Effect.zipRight(Effect.sleep(plan.startAt + plan.interruptAfter), Fiber.interrupt(fiber))
            )
          }
        }
        const bound = 2_000 + LEASE + plans.reduce((sum, p) => sum + p.holdFor + 2 * STEP_MILLIS, 0) + 3_000
        yield* runUntilDone(fibers, bound)
        for (let i = 0; i < fibers.length; i++) {
          const exit = yield* Fiber.poll(fibers[i]!)
          if (Option.isNone(exit)) violations.push(`fiber ${i} did not finish within ${bound} ms`)
          else if (expected[i] && Exit.isFailure(exit.value)) violations.push(`fiber ${i} failed: ${exit.value.cause}`)
        }
        // Past the latest stalled holder's lease (it may have arrived after everybody finished).
        yield* TestClock.adjust(2_000 + LEASE + 1_000)
        assert.deepStrictEqual(violations, [])
        const state = yield* semaphore.state(KEY)
        assert.deepStrictEqual(state.acquired, 0, "nothing held at the end")
        if (state.available !== 0) assert.strictEqual(state.available, TOTAL)
      })),
    // endOnFailure: shrinking a failure here outlasts the test timeout, which then hides the
    // counterexample. FC_SEED and FC_PATH replay a reported one.
    { fastCheck: { numRuns: 20, endOnFailure: true, ...replay } }
  )
})

const multiPlan = fc.record({
  keys: fc.uniqueArray(fc.integer({ min: 0, max: 4 }), { minLength: 1, maxLength: 5 }),
  holdFor: fc.integer({ min: 1, max: 500 }),
  startAt: fc.integer({ min: 0, max: 1_000 })
})

describe("properties of the multi-lock under random schedules", () => {
  it.effect.prop(
    "exclusion per key, never a strict subset once started, no deadlock, nothing left behind",
    [fc.array(multiPlan, { minLength: 2, maxLength: 10 })],
    ([plans]) =>
      Effect.scoped(Effect.gen(function*() {
        const service = yield* Layer.build(MemoryBackend.layer)
        const keyName = (k: number) => `multi-property:${k}`
        const violations: Array<string> = []
        const inside = new Map<string, number>()
        const fibers: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
        for (let index = 0; index < plans.length; index++) {
          const plan = plans[index]!
          const keys = plan.keys.map(keyName)
          const check = (when: string) =>
            Effect.flatMap(Effect.all(keys.map((key) => Lock.isLocked(key))), (held) =>
              Effect.sync(() => {
                if (!held.every(Boolean)) violations.push(`fiber ${index} ${when}: held ${held.join(",")}`)
              }))
          const critical = MultiLock.withLocks(
            keys,
            Effect.gen(function*() {
              for (const key of keys) {
                const n = (inside.get(key) ?? 0) + 1
                inside.set(key, n)
                if (n > 1) violations.push(`fiber ${index}: two inside ${key}`)
              }
              yield* check("at start")
              yield* Effect.sleep(plan.holdFor)
              yield* check("at end")
            }).pipe(Effect.ensuring(Effect.sync(() => {
              for (const key of keys) inside.set(key, (inside.get(key) ?? 1) - 1)
            }))),
            { lease: "1 second" }
          )
          fibers.push(
            yield* Effect.fork(
              Effect.zipRight(Effect.sleep(plan.startAt), critical).pipe(Effect.provide(Layer.succeedContext(service)))
            )
          )
        }
        const bound = 1_000 + plans.reduce((sum, p) => sum + p.holdFor + 2 * STEP_MILLIS, 0) + 3_000
        yield* runUntilDone(fibers, bound)
        for (let i = 0; i < fibers.length; i++) {
          const exit = yield* Fiber.poll(fibers[i]!)
          if (Option.isNone(exit)) violations.push(`fiber ${i} did not finish within ${bound} ms (deadlock?)`)
          else if (Exit.isFailure(exit.value)) violations.push(`fiber ${i} failed: ${exit.value.cause}`)
        }
        assert.deepStrictEqual(violations, [])
        const left = yield* Effect.all([0, 1, 2, 3, 4].map((k) => Lock.isLocked(keyName(k)))).pipe(
          Effect.provide(Layer.succeedContext(service))
        )
        assert.deepStrictEqual(left, [false, false, false, false, false])
      })),
    { fastCheck: { numRuns: 20 } }
  )
})
