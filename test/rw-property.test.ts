/**
 * Property tests of the read-write lock on the memory backend under TestClock: random schedules of
 * readers and writers that arrive, hold for a while, get interrupted (waiting or inside), and
 * stalled holders of either side (a foreign owner that took the lock and never renews nor releases
 * it: a process that died inside). Invariants: never a writer with anyone else inside (a stalled
 * holder counts until its lease ends); fencing tokens are all distinct, and a writer's is above
 * every token that entered before it; every fiber that is not interrupted gets in and finishes
 * within a bound (writers are not starved by readers, readers not by writers); nothing is left.
 */
import { assert, describe, it } from "@effect/vitest"
import { Context, Effect, Exit, FastCheck as fc, Fiber, Layer, Option, TestClock } from "effect"
import { LockBackend, ReadWriteLock } from "../src/index.js"
import { backendOf } from "../src/internal/backend/make.js"
import { FAIR_WAIT_WINDOW_MILLIS } from "../src/internal/memory/fair.js"
import * as MemoryBackend from "../src/MemoryBackend.js"

const STEP_MILLIS = 50
const LEASE = 2_000
const KEY = "rw-property"

const plan = fc.record({
  write: fc.boolean(),
  holdFor: fc.integer({ min: 1, max: 1_000 }),
  startAt: fc.integer({ min: 0, max: 2_000 }),
  interruptAfter: fc.option(fc.integer({ min: 0, max: 3_000 }), { nil: undefined }),
  stalled: fc.boolean()
})

describe("properties of the read-write lock under random schedules", () => {
  it.effect.prop(
    "a writer is alone, tokens increase past every writer, everybody gets in within a bound, nothing left",
    [fc.array(plan, { minLength: 2, maxLength: 10 })],
    ([plans]) =>
      Effect.scoped(Effect.gen(function*() {
        const service = yield* Layer.build(MemoryBackend.layer)
        const backend = backendOf(Context.get(service, LockBackend))
        const read = backend.kinds.read!
        const write = backend.kinds.write!
        const violations: Array<string> = []
        const tokens: Array<bigint> = []
        let readers = 0
        let writers = 0

        const enter = (label: string, isWriter: boolean, token: bigint) => {
          if (isWriter && (readers > 0 || writers > 0)) {
            violations.push(`${label} entered with ${readers} readers and ${writers} writers inside`)
          }
          if (!isWriter && writers > 0) violations.push(`${label} entered with a writer inside`)
          if (tokens.includes(token)) violations.push(`${label}: token ${token} given twice`)
          if (isWriter && tokens.some((t) => t >= token)) {
            violations.push(`${label}: token ${token} not above ${tokens.join(",")}`)
          }
          tokens.push(token)
          if (isWriter) writers++
          else readers++
        }
        const leave = (isWriter: boolean) =>
          Effect.sync(() => {
            if (isWriter) writers--
            else readers--
          })

        const fibers: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
        const expected: Array<boolean> = []
        for (let index = 0; index < plans.length; index++) {
          const p = plans[index]!
          const label = `${p.write ? "writer" : "reader"} ${index}`
          if (p.stalled) {
            // Takes the lock if it can, then never renews nor releases it: its lease ends on its own.
            const side = p.write ? write : read
            yield* Effect.forkScoped(Effect.zipRight(
              Effect.sleep(p.startAt),
              Effect.flatMap(
                side.primitives.tryAcquire({
                  key: KEY,
                  owner: `stalled:${index}`,
                  leaseMillis: LEASE,
                  fencing: true
                }),
                (result) =>
                  result._tag === "Acquired"
                    ? Effect.sync(() => enter(`stalled ${label}`, p.write, result.fencingToken)).pipe(
                      // Counted inside until just before its lease ends (then anybody may enter).
                      Effect.zipRight(Effect.sleep(LEASE - 1)),
                      Effect.zipRight(leave(p.write))
                    )
                    : Effect.void
              )
            ))
            continue
          }
          const program = (lease: { readonly fencingToken: bigint }) =>
            Effect.sync(() => enter(label, p.write, lease.fencingToken)).pipe(
              Effect.zipRight(Effect.sleep(p.holdFor)),
              Effect.ensuring(leave(p.write))
            )
          const locked = p.write
            ? ReadWriteLock.withWriteLock(KEY, program, { lease: LEASE })
            : ReadWriteLock.withReadLock(KEY, program, { lease: LEASE })
          const fiber = yield* Effect.fork(
            Effect.zipRight(Effect.sleep(p.startAt), locked).pipe(Effect.provide(Layer.succeedContext(service)))
          )
          fibers.push(fiber)
          expected.push(p.interruptAfter === undefined)
          if (p.interruptAfter !== undefined) {
            yield* Effect.forkScoped(
              Effect.zipRight(Effect.sleep(p.startAt + p.interruptAfter), Fiber.interrupt(fiber))
            )
          }
        }

        // Everybody waits at most for everybody else's holds, a stalled holder's whole lease, and a
        // wait window for each writer's mark (a writer interrupted while waiting drops its mark).
        const bound = Math.max(...plans.map((p) => p.startAt)) +
          plans.reduce((sum, p) => sum + (p.stalled ? LEASE : p.holdFor) + 2 * STEP_MILLIS, 0) +
          FAIR_WAIT_WINDOW_MILLIS + 3_000
        let elapsed = 0
        while (elapsed <= bound) {
          const polls = yield* Effect.forEach(fibers, Fiber.poll)
          if (polls.every(Option.isSome)) break
          yield* TestClock.adjust(STEP_MILLIS)
          elapsed += STEP_MILLIS
        }
        for (let i = 0; i < fibers.length; i++) {
          const exit = yield* Fiber.poll(fibers[i]!)
          if (Option.isNone(exit)) violations.push(`fiber ${i} did not finish within ${bound} ms`)
          else if (expected[i] && Exit.isFailure(exit.value)) {
            violations.push(`fiber ${i} failed: ${String(exit.value.cause)}`)
          }
        }
        yield* TestClock.adjust(20_000)
        assert.deepStrictEqual(violations, [])
        assert.isTrue(Option.isNone(yield* read.primitives.inspect(KEY)), "no lock left")
        assert.strictEqual(read.queue.waiterCount() + write.queue.waiterCount(), 0, "no waiter left")
      })),
    { fastCheck: { numRuns: 25 } }
  )
})
