/**
 * Property tests of the fair lock on the memory backend under TestClock: random schedules of
 * fibers that arrive, hold, get interrupted while waiting, and "ghost" waiters (a foreign owner's
 * waiting attempt that never comes back: a process that died in line). Invariants: never two inside;
 * the fibers that get in do so in the order they arrived; fencing tokens increase; everybody who
 * stays gets in within a bound (a ghost costs at most one wait window); nothing is left behind.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Exit, FastCheck as fc, Fiber, Layer, Option, TestClock } from "effect"
import { FairLock, LockBackend } from "../src/index.js"
import { backendOf } from "../src/internal/backend/make.js"
import { FAIR_WAIT_WINDOW_MILLIS } from "../src/internal/memory/fair.js"
import * as MemoryBackend from "../src/MemoryBackend.js"

const fiberPlan = fc.record({
  holdFor: fc.integer({ min: 1, max: 1_500 }),
  interruptAfter: fc.option(fc.integer({ min: 0, max: 4_000 }), { nil: undefined }),
  ghost: fc.boolean()
})

const STEP_MILLIS = 50
const KEY = "fair-property"

describe("properties of the fair lock under random schedules", () => {
  it.effect.prop(
    "exclusion, arrival order, increasing tokens, bounded waits, nothing left behind",
    [
      fc.array(fiberPlan, { minLength: 2, maxLength: 8 }),
      fc.array(fc.integer({ min: 1, max: 400 }), { minLength: 8, maxLength: 8 })
    ],
    ([plans, gaps]) =>
      Effect.scoped(Effect.gen(function*() {
        const service = yield* Layer.build(MemoryBackend.layer)
        const backend = backendOf(Context.get(service, LockBackend))
        const fair = backend.kinds.fair!.primitives
        const violations: Array<string> = []
        const entered: Array<number> = []
        const tokens: Array<bigint> = []
        let inside = 0

        const critical = (index: number, holdFor: number) =>
          FairLock.withLock(KEY, (lease) =>
            Effect.gen(function*() {
              if (inside > 0) violations.push(`fiber ${index} entered with ${inside} inside`)
              inside++
              entered.push(index)
              const last = tokens[tokens.length - 1]
              if (last !== undefined && last >= lease.fencingToken) {
                violations.push(`token ${lease.fencingToken} after ${last}`)
              }
              tokens.push(lease.fencingToken)
              yield* Effect.sleep(holdFor)
            }).pipe(Effect.ensuring(Effect.sync(() => inside--))), { lease: "2 seconds" })

        // Arrivals one by one, in index order, each some milliseconds after the previous.
        const fibers: Array<Fiber.RuntimeFiber<void, unknown> | undefined> = []
        let startAt = 0
        for (let index = 0; index < plans.length; index++) {
          const plan = plans[index]!
          startAt += gaps[index]!
          if (plan.ghost) {
            fibers.push(undefined)
            yield* Effect.forkScoped(Effect.zipRight(
              Effect.sleep(startAt),
              fair.tryAcquire({ key: KEY, owner: `ghost:${index}`, leaseMillis: 1_000, fencing: true, waiting: true })
            ))
            continue
          }
          const fiber = yield* Effect.fork(
            Effect.zipRight(Effect.sleep(startAt), critical(index, plan.holdFor)).pipe(
              Effect.provide(Layer.succeedContext(service))
            )
          )
          fibers.push(fiber)
          if (plan.interruptAfter !== undefined) {
            yield* Effect.forkScoped(
              Effect.zipRight(Effect.sleep(startAt + plan.interruptAfter), Fiber.interrupt(fiber))
            )
          }
        }

        const bound = startAt + plans.reduce((sum, p) =>
          sum + (p.ghost ? FAIR_WAIT_WINDOW_MILLIS + 1_000 : p.holdFor) + 2 * STEP_MILLIS, 0) +
          3_000
        let elapsed = 0
        const live = fibers.filter((f): f is Fiber.RuntimeFiber<void, unknown> => f !== undefined)
        while (elapsed <= bound) {
          const polls = yield* Effect.forEach(live, Fiber.poll)
          if (polls.every(Option.isSome)) break
          yield* TestClock.adjust(STEP_MILLIS)
          elapsed += STEP_MILLIS
        }
        for (let index = 0; index < fibers.length; index++) {
          const fiber = fibers[index]
          if (fiber === undefined) continue
          const exit = yield* Fiber.poll(fiber)
          if (Option.isNone(exit)) violations.push(`fiber ${index} did not finish within ${bound} ms`)
          else if (plans[index]!.interruptAfter === undefined && Exit.isFailure(exit.value)) {
            violations.push(`fiber ${index} failed: ${String(exit.value.cause)}`)
          }
        }
        // Arrival order: whoever got in, got in after everybody who arrived earlier and got in.
        for (let i = 1; i < entered.length; i++) {
          if (entered[i]! < entered[i - 1]!) violations.push(`order ${entered.join(",")}`)
        }
        yield* TestClock.adjust(20_000)
        assert.deepStrictEqual(violations, [])
        assert.isTrue(Option.isNone(yield* fair.inspect(KEY)), "no lock left")
        assert.strictEqual(backend.kinds.fair!.queue.waiterCount(), 0, "no waiter left")
      })),
    { fastCheck: { numRuns: 15 } }
  )
})
