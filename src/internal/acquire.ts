/**
 * Waiting for a lock: one backend attempt, then (when busy) join the key's wait queue, try again
 * at once, and sleep until the earliest of the next retry-schedule step, a release notification,
 * the holder's remaining lease, or the end of the wait budget.
 *
 * Attempts run uninterruptibly (a round trip that acquired must be seen so that it is released);
 * only the sleeps are interruptible, through the `restore` of the caller's `uninterruptibleMask`.
 */
import { Effect, Metric, Option } from "effect"
import * as ScheduleDecision from "effect/ScheduleDecision"
import * as ScheduleIntervals from "effect/ScheduleIntervals"
import type { LockBackendShape, LockRequest } from "../LockBackend.js"
import type { LockBackendError } from "../LockError.js"
import { LockTimeoutError } from "../LockError.js"
import * as metrics from "./metrics.js"
import type { BusyInfo, ResolvedOptions } from "./options.js"
import { nowMillis, wholeMillis } from "./time.js"

export interface Acquired {
  readonly fencingToken: bigint
  /** Clock time at which the successful attempt started: the lease runs from here at the latest. */
  readonly startedAt: number
}

type Restore = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>

/** One attempt; `None` when busy (with the holder's TTL kept in `busy`). */
const attempt = (backend: LockBackendShape, request: LockRequest) =>
  Effect.flatMap(nowMillis, (startedAt) =>
    Effect.map(backend.tryAcquire(request), (result) =>
      result._tag === "Acquired"
        ? ({ _tag: "Acquired", fencingToken: result.fencingToken, startedAt } as const)
        : ({ _tag: "Busy", ttlMillis: result.ttlMillis } as const)
    ))

export const acquireOnce = (
  backend: LockBackendShape,
  request: LockRequest
): Effect.Effect<Option.Option<Acquired>, LockBackendError> =>
  Effect.map(attempt(backend, request), (r) => (r._tag === "Acquired" ? Option.some(r) : Option.none()))

export const acquireWaiting = (
  backend: LockBackendShape,
  request: LockRequest,
  options: ResolvedOptions,
  restore: Restore
): Effect.Effect<Acquired, LockTimeoutError | LockBackendError> =>
  Effect.flatMap(attempt(backend, request), (first) => {
    if (first._tag === "Acquired") return Effect.succeed(first)
    return waitFor(backend, request, options, restore, first.ttlMillis).pipe(
      Metric.trackDuration(metrics.waitTime),
      Effect.tapErrorTag("LockTimeoutError", () => Metric.increment(metrics.timeouts))
    )
  })

/** The slow path, after a first attempt found the lock busy. */
const waitFor = (
  backend: LockBackendShape,
  request: LockRequest,
  options: ResolvedOptions,
  restore: Restore,
  firstTtl: number | undefined
): Effect.Effect<Acquired, LockTimeoutError | LockBackendError> =>
  Effect.scoped(Effect.gen(function*() {
      const start = yield* nowMillis
      const deadline = start + options.waitMillis
      let attempts = 1
      let ttl = firstTtl
      const timeout = (now: number, reason: "wait-elapsed" | "retries-exhausted") =>
        new LockTimeoutError({
          key: request.key,
          reason,
          waitedMillis: Math.round(now - start),
          attempts,
          ...(ttl === undefined ? {} : { holderTtlMillis: ttl })
        })
      if (options.waitMillis === 0) return yield* timeout(start, "wait-elapsed")

      const signal = yield* restore(backend.subscribe(request.key))
      const schedule = options.retry
      let state: unknown = schedule.initial
      while (true) {
        // Right after subscribing, and after every wake-up: a release may have slipped in.
        const result = yield* attempt(backend, request)
        attempts++
        if (result._tag === "Acquired") return result
        ttl = result.ttlMillis
        const now = yield* nowMillis
        if (now >= deadline) return yield* timeout(now, "wait-elapsed")
        const input: BusyInfo = { key: request.key, attempt: attempts, holderTtlMillis: ttl }
        const [next, , decision] = yield* schedule.step(now, input, state)
        if (ScheduleDecision.isDone(decision)) return yield* timeout(now, "retries-exhausted")
        state = next
        const scheduled = Math.max(0, ScheduleIntervals.start(decision.intervals) - now)
        // Never sleep past the holder's lease: when it ends the lock is free without a notification.
        const untilExpiry = ttl === undefined ? Infinity : ttl + 1
        const sleep = wholeMillis(Math.min(scheduled, untilExpiry, deadline - now))
        if (sleep > 0) yield* restore(Effect.timeoutOption(signal.await, sleep))
      }
    }))
