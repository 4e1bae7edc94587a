/**
 * h. The memory backend: what the library itself costs when there is no round trip at all. An
 * uncontended `withLock` (acquire, run an empty program guarded, release) and a nested, reentrant
 * `withLock` inside a held lock, each timed as CPU time of this process (user + system) over a
 * loop, minus the same loop with a bare `Effect.void` in its place. effect-lock only: no peer has
 * an in-process backend.
 */
import { Effect, Runtime } from "effect"
import type * as EffectLock from "../../src/index.js"
import type { BenchContext } from "./common.js"

const build = "../../dist/index.js"
const { MemoryBackend, withLock } = (await import(build)) as typeof EffectLock

export interface MemoryResult {
  readonly iterations: number
  /** CPU microseconds per uncontended `withLock` on the memory backend (loop overhead removed). */
  readonly uncontendedCpuMicros: number
  /** CPU microseconds per nested, reentrant `withLock` (loop overhead removed). */
  readonly reentrantCpuMicros: number
  /** CPU microseconds per iteration of the bare loop that was subtracted. */
  readonly baselineCpuMicros: number
  /**
   * CPU microseconds to start one fiber the way `withLock` starts the fiber that runs its program
   * (`Runtime.runFork` from the caller's fiber, at once, of an empty program, its result polled):
   * the part of every `withLock` that the shape itself costs (loop overhead removed).
   */
  readonly guardFiberCpuMicros: number
}

const ITERATIONS = 200_000

/** CPU microseconds per iteration of `body` run `n` times in a generator loop. */
const cpuPer = <R>(n: number, body: Effect.Effect<unknown, never, R>) =>
  Effect.gen(function*() {
    for (let i = 0; i < n / 10; i++) yield* body
    const before = process.cpuUsage()
    for (let i = 0; i < n; i++) yield* body
    const cpu = process.cpuUsage(before)
    return (cpu.user + cpu.system) / n
  })

/** A fiber started as `withLock` starts the one that runs its program (see `guardFiberCpuMicros`). */
const startFiber = Effect.withFiberRuntime<unknown>((parent, status) => {
  const runtime = Runtime.make({
    context: parent.currentContext,
    runtimeFlags: status.runtimeFlags,
    fiberRefs: parent.getFiberRefs()
  })
  return Effect.succeed(Runtime.runFork(runtime)(Effect.void, { immediate: true }).unsafePoll())
})

export const memory = (ctx: BenchContext): Effect.Effect<MemoryResult> =>
  Effect.gen(function*() {
    const n = Math.max(20_000, Math.round(ITERATIONS * Math.min(1, ctx.scale)))
    const baseline = yield* cpuPer(n, Effect.void)
    const uncontended = yield* cpuPer(n, Effect.orDie(withLock("bench:memory", Effect.void)))
    const guardFiber = yield* cpuPer(n, startFiber)
    const nested = yield* Effect.orDie(withLock(
      "bench:memory:outer",
      cpuPer(n, Effect.orDie(withLock("bench:memory:outer", Effect.void)))
    ))
    return {
      iterations: n,
      uncontendedCpuMicros: uncontended - baseline,
      reentrantCpuMicros: nested - baseline,
      baselineCpuMicros: baseline,
      guardFiberCpuMicros: guardFiber - baseline
    }
  }).pipe(Effect.provide(MemoryBackend.layer))
