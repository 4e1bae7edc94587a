/**
 * Waiting for a lock: one backend attempt, then (when busy) join the key's wait queue, try again
 * at once, and sleep until the earliest of the next retry-schedule step, a release notification,
 * the holder's remaining lease, or the end of the wait budget, unless a release in this process
 * hands the lock over first.
 *
 * Attempts run uninterruptibly (a round trip that acquired must be seen so that it is released);
 * only the sleeps are interruptible, through the `restore` of the caller's `uninterruptibleMask`.
 */
import type { Tracer } from "effect"
import { Effect, Exit, Metric } from "effect"
import * as ScheduleDecision from "effect/ScheduleDecision"
import * as ScheduleIntervals from "effect/ScheduleIntervals"
import type { BusyInfo } from "../../Lock.js"
import type { LockRequest } from "../../LockBackend.js"
import { LockBackendError, LockTimeoutError } from "../../LockError.js"
import type { Backend } from "../backend/make.js"
import type { ResolvedOptions } from "../lock/options.js"
import * as metrics from "../metrics.js"
import type { Restore } from "../restore.js"
import { fiberNowMillis, nowMillis } from "../time.js"

export interface Acquired {
  readonly fencingToken: bigint
  /** Clock time at which the successful attempt started: the lease runs from here at the latest. */
  readonly startedAt: number
  /** Attempts made, the successful one included (0 for a hand-over to a waiter that made none). */
  readonly attempts: number
  /** How it was got: at once, after a wait by an attempt of its own, or handed over by a release. */
  readonly via: "free" | "attempt" | "hand-over"
  /** The releasing hold's span, for a hand-over traced on both sides. */
  readonly from?: Tracer.AnySpan | undefined
}

const closed = (backend: Backend, key: string) =>
  new LockBackendError({
    backend: backend.name,
    operation: "acquire",
    key,
    cause: new Error("the backend is shutting down (its layer's scope is closing)")
  })

type Attempted =
  | (Acquired & { readonly _tag: "Acquired" })
  | { readonly _tag: "Busy"; readonly ttlMillis: number | undefined }

/** One attempt; `Busy` (with the holder's TTL) when busy. Fails once the backend closes. */
const attempt = (backend: Backend, request: LockRequest): Effect.Effect<Attempted, LockBackendError> =>
  backend.isClosing() ? Effect.fail(closed(backend, request.key)) : Effect.withFiberRuntime((fiber) => {
    const startedAt = fiberNowMillis(fiber)
    return Effect.map(backend.primitives.tryAcquire(request), (result): Attempted =>
      result._tag === "Acquired"
        ? { _tag: "Acquired", fencingToken: result.fencingToken, startedAt, attempts: 1, via: "free" }
        : { _tag: "Busy", ttlMillis: result.ttlMillis })
  })

/** One attempt; `undefined` when busy. */
export const acquireOnce = (
  backend: Backend,
  request: LockRequest
): Effect.Effect<Acquired | undefined, LockBackendError> =>
  Effect.map(attempt(backend, request), (r) => (r._tag === "Acquired" ? r : undefined))

export const acquireWaiting = (
  backend: Backend,
  request: LockRequest,
  options: ResolvedOptions,
  restore: Restore
): Effect.Effect<Acquired, LockTimeoutError | LockBackendError> => {
  const slowPath = (firstTtl: number | undefined, attempted: boolean) =>
    waitFor(backend, request, options, restore, firstTtl, attempted).pipe(
      Metric.trackDuration(Metric.taggedWithLabels(metrics.waitTime, backend.labels)),
      Effect.tapErrorTag("LockTimeoutError", () => Effect.sync(() => metrics.count(metrics.timeouts, backend.labels)))
    )
  // Fibers of this process already wait for the key: queue up behind them, first in, first out,
  // rather than barge in with an attempt that would be refused anyway (or win against them).
  if (options.waitMillis > 0 && backend.queue.waitersOn(request.key) > 0) return slowPath(undefined, false)
  return Effect.flatMap(
    attempt(backend, request),
    (first) => first._tag === "Acquired" ? Effect.succeed(first) : slowPath(first.ttlMillis, true)
  )
}

/**
 * The slow path. Join the key's local queue; then attempt only when there is reason to: a release
 * notification reached this waiter, or, for the head of the queue, its retry schedule or the
 * holder's lease ran out. The opener of the queue also tries once right after subscribing, since a
 * release just before the subscription woke nobody. Waiters behind the head sleep until a
 * notification or their promotion to head reaches them, so they cost the server nothing.
 */
const waitFor = (
  backend: Backend,
  request: LockRequest,
  options: ResolvedOptions,
  restore: Restore,
  firstTtl: number | undefined,
  attempted: boolean
): Effect.Effect<Acquired, LockTimeoutError | LockBackendError> =>
  Effect.gen(function*() {
    const start = yield* nowMillis
    const deadline = start + options.waitMillis
    let attempts = attempted ? 1 : 0
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

    // Leaving the queue is the release of the registration, whatever happens.
    return yield* Effect.acquireUseRelease(
      backend.queue.register(request),
      (signal) =>
        Effect.gen(function*() {
          const opened = yield* restore(signal.ready)
          const schedule = options.retry
          let state: unknown = schedule.initial
          let delay = 0
          /** Advance the retry schedule: `false` when it has ended. */
          const step = (now: number) =>
            Effect.map(
              schedule.step(
                now,
                { key: request.key, attempt: attempts, holderTtlMillis: ttl } satisfies BusyInfo,
                state
              ),
              ([next, , decision]) => {
                if (ScheduleDecision.isDone(decision)) return false
                state = next
                delay = Math.max(0, ScheduleIntervals.start(decision.intervals) - now)
                return true
              }
            )
          let tryNow = opened
          while (true) {
            if (tryNow) {
              const result = yield* attempt(backend, request)
              attempts++
              if (result._tag === "Acquired") {
                // A shared kind (readers): the other local waiters may get in beside this one, so
                // wake them all (their attempts go out together) rather than one by one.
                if (backend.shared) {
                  for (let n = backend.queue.waitersOn(request.key); n > 0; n--) backend.queue.notify(request.key)
                }
                return { ...result, attempts, via: "attempt" as const }
              }
              ttl = result.ttlMillis
            }
            const now = yield* nowMillis
            if (now >= deadline) return yield* timeout(now, "wait-elapsed")
            // The schedule advances after every failed attempt and on promotion to head; when it ends,
            // the waiter gives up.
            if (tryNow && !(yield* step(now))) return yield* timeout(now, "retries-exhausted")
            // Only the head watches the clock: the next schedule step, and never past the holder's lease
            // (when it ends the lock is free without a notification). The others wait to be woken.
            const untilExpiry = ttl === undefined ? Infinity : ttl + 1
            const sleep = signal.isHead() ? Math.min(delay, untilExpiry, deadline - now) : deadline - now
            const woken = yield* restore(signal.await(sleep))
            // Handed over by a release in this process: held, with no attempt of our own (even if the
            // wait ran out while the hand-over was in flight).
            if (typeof woken === "object") {
              return {
                fencingToken: woken.fencingToken,
                startedAt: woken.startedAt,
                attempts,
                via: "hand-over" as const,
                from: woken.from
              }
            }
            // A kind that keeps a line of waiters in the backend (a fair lock's queue, a waiting writer's
            // mark) gets a place in it only by an attempt: a new head makes one at once.
            tryNow = woken !== "promoted" || (backend.abandon !== undefined && request.waiting === true)
            if (!tryNow) {
              // Promoted to head: from now on watch the clock, starting from the next schedule step.
              ttl = undefined
              if (!(yield* step(yield* nowMillis))) return yield* timeout(yield* nowMillis, "retries-exhausted")
            }
          }
        }),
      // Kept: the waiter got in (by its own attempt or a hand-over it took). Otherwise a lock handed
      // to it while it was being interrupted is released on its behalf.
      // A kind that remembers waiters (a fair lock's queue) is told when one leaves empty-handed.
      (signal, exit) => {
        const left = signal.leave(Exit.isSuccess(exit))
        return Exit.isSuccess(exit) || backend.abandon === undefined || !request.waiting
          ? left
          : Effect.zipRight(left, backend.abandon(request))
      }
    )
  })
