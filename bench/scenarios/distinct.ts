/**
 * b. Distinct keys: 64 fibers, each acquiring and releasing a key of its own, as fast as they can.
 * Nobody waits for anybody: this is the library's per-operation cost (client CPU, round trips,
 * batching) under load.
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
}

export const FIBERS = 64
const WARMUP_MS = 500
const MEASURE_MS = 2_500

export const distinct = (ctx: BenchContext, library: LockLibrary) =>
  withClient(ctx, library, (client) =>
    Effect.gen(function*() {
      let ops = 0
      let failures = 0
      let stop = false
      const worker = (i: number) =>
        Effect.gen(function*() {
          const once = client.withLock(`bench:distinct:${i}`, Effect.void).pipe(
            Effect.catchAll(() => Effect.sync(() => failures++))
          )
          while (!stop) {
            yield* once
            ops++
          }
        })
      const fibers = yield* Effect.forEach(Array.from({ length: FIBERS }, (_, i) => i), (i) => Effect.fork(worker(i)))
      yield* Effect.sleep(window(ctx, WARMUP_MS))
      const startOps = ops
      const start = now()
      yield* Effect.sleep(window(ctx, MEASURE_MS))
      const endOps = ops
      const seconds = (now() - start) / 1000
      stop = true
      yield* Fiber.joinAll(fibers).pipe(
        Effect.timeout("10 seconds"),
        Effect.catchAll(() => Fiber.interruptAll(fibers))
      )
      return {
        library: library.name,
        fibers: FIBERS,
        opsPerSecond: (endOps - startOps) / seconds,
        seconds,
        failures
      } satisfies DistinctResult
    }))
