/**
 * a. Serial: one fiber acquires and releases an uncontended key, over and over. What one caller
 * pays per critical section when nobody else wants the lock: two round trips plus the library.
 */
import { Effect } from "effect"
import type { LockLibrary } from "../peers.js"
import type { Summary } from "../support/stats.js"
import { now, summarize } from "../support/stats.js"
import type { BenchContext } from "./common.js"
import { window, withClient } from "./common.js"

export interface SerialResult {
  readonly library: string
  readonly opsPerSecond: number
  /** Latency of one acquire + release, in microseconds. */
  readonly latency: Summary
  readonly seconds: number
}

const WARMUP_MS = 500
const MEASURE_MS = 2_000
const MAX_OPS = 200_000

export const serial = (ctx: BenchContext, library: LockLibrary) =>
  withClient(ctx, library, (client) =>
    Effect.gen(function*() {
      const key = `bench:serial:${library.name}`
      const once = client.withLock(key, Effect.void)
      const warmupEnd = now() + window(ctx, WARMUP_MS)
      while (now() < warmupEnd) yield* once

      const samples: Array<number> = []
      const start = now()
      const end = start + window(ctx, MEASURE_MS)
      let t = start
      while (t < end && samples.length < MAX_OPS) {
        yield* once
        const after = now()
        samples.push((after - t) * 1000)
        t = after
      }
      const seconds = (t - start) / 1000
      return {
        library: library.name,
        opsPerSecond: samples.length / seconds,
        latency: summarize(samples),
        seconds
      } satisfies SerialResult
    }))
