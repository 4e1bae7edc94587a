/**
 * b. Distinct keys: 64 fibers, each acquiring and releasing a key of its own, as fast as they can.
 * Nobody waits for anybody: this is the library's per-operation cost (client CPU, round trips,
 * batching) under load. Like the serial scenario it runs in rounds that take turns with the other
 * libraries.
 */
import { Effect, Fiber } from "effect"
import type { LockLibrary } from "../peers.js"
import { now } from "../support/stats.js"
import type { BenchContext } from "./common.js"
import { window, withClient } from "./common.js"

export interface DistinctResult {
  readonly library: string
  readonly fibers: number
  readonly opsPerSecond: number
  readonly seconds: number
  readonly failures: number
  readonly rounds: number
}

export interface DistinctRound {
  readonly ops: number
  readonly seconds: number
  readonly failures: number
}

export const FIBERS = 64
export const DISTINCT_ROUNDS = 3
const WARMUP_MS = 300
const ROUND_MS = 900

/** Run `op(i)` from `fibers` loops at once; count completions in the measuring window. */
export const concurrentLoops = <E>(
  ctx: BenchContext,
  fibers: number,
  op: (i: number) => Effect.Effect<unknown, E>
): Effect.Effect<DistinctRound> =>
  Effect.gen(function*() {
    let ops = 0
    let failures = 0
    let stop = false
    const worker = (i: number) =>
      Effect.gen(function*() {
        const once = op(i).pipe(
          Effect.as(true),
          Effect.catchAll(() => Effect.sync(() => (failures++, false)))
        )
        while (!stop) {
          if (yield* once) ops++
        }
      })
    const running = yield* Effect.forEach(Array.from({ length: fibers }, (_, i) => i), (i) => Effect.fork(worker(i)))
    yield* Effect.sleep(window(ctx, WARMUP_MS))
    const startOps = ops
    const start = now()
    yield* Effect.sleep(window(ctx, ROUND_MS))
    const endOps = ops
    const seconds = (now() - start) / 1000
    stop = true
    yield* Fiber.joinAll(running).pipe(
      Effect.timeout("10 seconds"),
      Effect.catchAll(() => Fiber.interruptAll(running))
    )
    return { ops: endOps - startOps, seconds, failures }
  })

export const distinctRound = (ctx: BenchContext, library: LockLibrary) =>
  withClient(
    ctx,
    library,
    (client) => concurrentLoops(ctx, FIBERS, (i) => client.withLock(`bench:distinct:${i}`, Effect.void))
  )

export const combineDistinct = (library: string, rounds: ReadonlyArray<DistinctRound>): DistinctResult => {
  const ops = rounds.reduce((total, round) => total + round.ops, 0)
  const seconds = rounds.reduce((total, round) => total + round.seconds, 0)
  return {
    library,
    fibers: FIBERS,
    opsPerSecond: ops / seconds,
    seconds,
    failures: rounds.reduce((total, round) => total + round.failures, 0),
    rounds: rounds.length
  }
}
