/** Timing, percentiles and process-memory helpers for the scenarios. */
import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"

/** Milliseconds from an arbitrary origin, microsecond resolution. */
export const now = (): number => performance.now()

export interface Summary {
  readonly count: number
  readonly p50: number
  readonly p99: number
  readonly mean: number
  readonly max: number
}

/** Nearest-rank percentile of an ascending array. */
export const percentile = (sorted: ArrayLike<number>, p: number): number => {
  if (sorted.length === 0) return Number.NaN
  const rank = Math.ceil((p / 100) * sorted.length)
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))]!
}

export const summarize = (samples: ReadonlyArray<number>): Summary => {
  const sorted = Float64Array.from(samples).sort()
  let total = 0
  for (const x of sorted) total += x
  return {
    count: sorted.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    mean: sorted.length === 0 ? Number.NaN : total / sorted.length,
    max: sorted.length === 0 ? Number.NaN : sorted[sorted.length - 1]!
  }
}

let gcFunction: (() => void) | undefined

/** A full garbage collection (exposing `gc` on first use, so no node flag is needed). */
export const collectGarbage = (): void => {
  if (gcFunction === undefined) {
    setFlagsFromString("--expose-gc")
    gcFunction = runInNewContext("gc") as () => void
  }
  gcFunction()
  gcFunction()
}

export interface MemorySample {
  readonly rss: number
  readonly heapUsed: number
}

export const memory = (): MemorySample => {
  const { rss, heapUsed } = process.memoryUsage()
  return { rss, heapUsed }
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))
