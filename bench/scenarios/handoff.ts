/**
 * c. Hand-off: 16 workers share one key. Each holds the lock ~1 ms, then works ~1 ms outside it,
 * and goes again. The lock is almost never free, so what counts is how fast it passes from one
 * holder to the next (a notification round trip, or the rest of a poll interval), how long a
 * worker waits, and whether every worker gets its turn.
 *
 * An in-process counter of workers inside the critical section catches overlaps: a second worker
 * entering while one is inside would mean the lock failed at its one job.
 */
import { Effect, Fiber } from "effect"
import type { LockLibrary } from "../peers.js"
import type { Summary } from "../support/stats.js"
import { now, summarize } from "../support/stats.js"
import type { BenchContext } from "./common.js"
import { describeFailure, window, withClient } from "./common.js"

export interface HandoffResult {
  readonly library: string
  readonly workers: number
  readonly acquisitionsPerSecond: number
  /** From asking for the lock to holding it, in milliseconds. */
  readonly wait: Summary
  /**
   * From one holder leaving the critical section to the next one entering it, in microseconds:
   * the hand-off itself (release, notification or poll, acquire), which DESIGN §7 puts at about
   * two round trips for effect-lock.
   */
  readonly gap: Summary
  readonly minPerWorker: number
  readonly maxPerWorker: number
  /** min / max acquisitions per worker: 1 is perfectly even. */
  readonly fairness: number
  readonly overlaps: number
  /** Share of acquisitions that went to the worker that had just released (it asked again and won). */
  readonly regrabs: number
  readonly failures: ReadonlyArray<string>
  readonly seconds: number
}

export const WORKERS = 16
const HOLD_MS = 1
const OUTSIDE_MS = 1
const WARMUP_MS = 500
const MEASURE_MS = 4_000

export const handoff = (ctx: BenchContext, library: LockLibrary) =>
  withClient(ctx, library, (client) =>
    Effect.gen(function*() {
      const key = "bench:handoff"
      let measuring = false
      let inside = 0
      let overlaps = 0
      let lastHolder = -1
      let regrabs = 0
      let lastExit = 0
      const gaps: Array<number> = []
      const counts = new Array<number>(WORKERS).fill(0)
      const waits: Array<number> = []
      const failures: Array<string> = []

      const worker = (i: number) =>
        Effect.forever(
          Effect.gen(function*() {
            const asked = now()
            yield* client.withLock(
              key,
              Effect.gen(function*() {
                const entered = now()
                inside++
                if (inside > 1) overlaps++
                if (measuring) {
                  counts[i]!++
                  waits.push(entered - asked)
                  if (lastHolder === i) regrabs++
                  if (lastExit > 0) gaps.push((entered - lastExit) * 1000)
                }
                lastHolder = i
                yield* Effect.sleep(HOLD_MS)
                inside--
                lastExit = now()
              })
            ).pipe(Effect.catchAll((error) => Effect.sync(() => failures.push(describeFailure(error)))))
            yield* Effect.sleep(OUTSIDE_MS)
          })
        )

      const fibers = yield* Effect.forEach(Array.from({ length: WORKERS }, (_, i) => i), (i) => Effect.fork(worker(i)))
      yield* Effect.sleep(window(ctx, WARMUP_MS))
      measuring = true
      const start = now()
      yield* Effect.sleep(window(ctx, MEASURE_MS))
      measuring = false
      const seconds = (now() - start) / 1000
      // Stop the workers wherever they are (waiting, inside, outside); the libraries release what
      // they hold, and the peers' abandoned acquisitions are settled when the client closes.
      yield* Fiber.interruptAll(fibers)

      const total = counts.reduce((a, b) => a + b, 0)
      const min = Math.min(...counts)
      const max = Math.max(...counts)
      return {
        library: library.name,
        workers: WORKERS,
        acquisitionsPerSecond: total / seconds,
        wait: summarize(waits),
        gap: summarize(gaps),
        minPerWorker: min,
        maxPerWorker: max,
        fairness: max === 0 ? 0 : min / max,
        overlaps,
        regrabs: total === 0 ? 0 : regrabs / total,
        failures: Array.from(new Set(failures)),
        seconds
      } satisfies HandoffResult
    }))
