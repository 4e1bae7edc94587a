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
import { Cause, Effect, Exit, Option } from "effect"
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
import * as timers from "../timers.js"
import type { ReleaseSignal, WakeUp } from "./waiterQueue.js"

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
  // One attempt, then the slow path when busy.
  const attemptFirst = () =>
    Effect.flatMap(
      attempt(backend, request),
      (first) =>
        first._tag === "Acquired"
          ? Effect.succeed(first)
          : waitFor(backend, request, options, restore, true, first.ttlMillis)
    )
  if (options.waitMillis === 0) return attemptFirst()
  // Fibers of this process already wait for the key, or attempt it: queue up behind them, first in,
  // first out, rather than barge in with an attempt that would be refused anyway (or win against
  // them). Ten thousand fibers that come for a hundred keys at once send a hundred attempts, not ten
  // thousand whose replies would have to wait for the process to get through all of them.
  // A kind that keeps a line of waiters in the backend (fair, write) takes its place in that line by
  // its attempt, and readers may share the lock: those queue up behind waiters only, as before.
  const { queue } = backend
  const { key } = request
  if (backend.abandon !== undefined || backend.shared) {
    if (queue.waitersOn(key) > 0) return waitFor(backend, request, options, restore, false, undefined)
    return attemptFirst()
  }
  if (queue.isContended(key)) return waitFor(backend, request, options, restore, false, undefined)
  queue.attemptStarted(key)
  // One step for both ways out (the attempt runs uninterruptibly, so neither is skipped).
  return Effect.matchCauseEffect(attempt(backend, request), {
    onFailure: (cause) => {
      queue.attemptDone(key)
      return Effect.failCause(cause)
    },
    onSuccess: (first) => {
      queue.attemptDone(key)
      return first._tag === "Acquired"
        ? Effect.succeed(first)
        : waitFor(backend, request, options, restore, true, first.ttlMillis)
    }
  })
}

/**
 * The slow path. Join the key's local queue; then attempt only when there is reason to: a release
 * notification reached this waiter, or, for the head of the queue, its retry schedule or the
 * holder's lease ran out. The opener of the queue also tries once right after subscribing, since a
 * release just before the subscription woke nobody. Waiters behind the head sleep until a
 * notification or their promotion to head reaches them, so they cost the server nothing.
 *
 * `attempted`: an attempt found the lock busy (its holder's TTL: `firstTtl`); otherwise the waiter
 * queued up without one.
 */
const waitFor = (
  backend: Backend,
  request: LockRequest,
  options: ResolvedOptions,
  restore: Restore,
  attempted: boolean,
  firstTtl: number | undefined
): Effect.Effect<Acquired, LockTimeoutError | LockBackendError> =>
  Effect.flatMap(nowMillis, (start) => {
    const waiting = new Waiting(backend, request, options, restore, attempted, firstTtl, start)
    if (options.waitMillis === 0) {
      metrics.count(metrics.timeouts, backend.labels)
      return Effect.fail(waiting.timeout(start, "wait-elapsed"))
    }
    // Leaving the queue is the release of the registration, whatever happens (the caller's region is
    // uninterruptible: only the waits inside `restore` can be interrupted).
    waiting.signal = backend.queue.registerNow(request)
    return Effect.onExit(waiting.begin(), (exit) => waiting.end(exit))
  })

/**
 * One waiter's state, and its steps as methods: a parked waiter keeps this object and a few frames
 * of its fiber, not a generator and the closures of every step (ten thousand waiters).
 */
class Waiting {
  attempts: number
  ttl: number | undefined
  readonly deadline: number
  /** The retry schedule's state, and its delay from the last step. */
  state: unknown
  delay = 0
  signal!: ReleaseSignal
  constructor(
    readonly backend: Backend,
    readonly request: LockRequest,
    readonly options: ResolvedOptions,
    readonly restore: Restore,
    attempted: boolean,
    firstTtl: number | undefined,
    readonly start: number
  ) {
    this.attempts = attempted ? 1 : 0
    this.ttl = firstTtl
    this.deadline = start + options.waitMillis
    this.state = options.retry.initial
  }

  timeout(now: number, reason: "wait-elapsed" | "retries-exhausted"): LockTimeoutError {
    return new LockTimeoutError({
      key: this.request.key,
      reason,
      waitedMillis: Math.round(now - this.start),
      attempts: this.attempts,
      ...(this.ttl === undefined ? {} : { holderTtlMillis: this.ttl })
    })
  }

  begin(): Effect.Effect<Acquired, LockTimeoutError | LockBackendError> {
    return Effect.flatMap(this.restore(this.signal.ready), (opened) => this.next(opened))
  }

  /**
   * Kept: the waiter got in (by its own attempt or a hand-over it took). Otherwise a lock handed to
   * it while it was being interrupted is released on its behalf. A kind that remembers waiters (a
   * fair lock's queue) is told when one leaves empty-handed.
   */
  end(exit: Exit.Exit<Acquired, LockTimeoutError | LockBackendError>): Effect.Effect<void> {
    const { backend, request } = this
    const kept = Exit.isSuccess(exit)
    const left = this.signal.leave(kept)
    return Effect.flatMap(nowMillis, (now) => {
      if (kept) metrics.time(timers.waitTime, backend.labels, now - this.start)
      else if (Exit.isFailure(exit)) countTimeout(backend, exit.cause)
      return kept || backend.abandon === undefined || !request.waiting
        ? left
        : Effect.zipRight(left, backend.abandon(request))
    })
  }

  /** Advance the retry schedule: `false` when it has ended. */
  step(now: number): Effect.Effect<boolean> {
    const info: BusyInfo = { key: this.request.key, attempt: this.attempts, holderTtlMillis: this.ttl }
    return Effect.map(this.options.retry.step(now, info, this.state), ([next, , decision]) => {
      if (ScheduleDecision.isDone(decision)) return false
      this.state = next
      this.delay = Math.max(0, ScheduleIntervals.start(decision.intervals) - now)
      return true
    })
  }

  /** Attempt (when there is reason to), then wait for the next reason. */
  next(tryNow: boolean): Effect.Effect<Acquired, LockTimeoutError | LockBackendError> {
    if (!tryNow) return Effect.flatMap(nowMillis, (now) => this.sleep(now, false))
    return Effect.flatMap(attempt(this.backend, this.request), (result) => {
      this.attempts++
      if (result._tag === "Acquired") {
        const { backend, request } = this
        // A shared kind (readers): the other local waiters may get in beside this one, so
        // wake them all (their attempts go out together) rather than one by one.
        if (backend.shared) {
          for (let n = backend.queue.waitersOn(request.key); n > 0; n--) backend.queue.notify(request.key)
        }
        return Effect.succeed({ ...result, attempts: this.attempts, via: "attempt" as const })
      }
      this.ttl = result.ttlMillis
      return Effect.flatMap(nowMillis, (now) => this.sleep(now, true))
    })
  }

  sleep(now: number, attempted: boolean): Effect.Effect<Acquired, LockTimeoutError | LockBackendError> {
    if (now >= this.deadline) return Effect.fail(this.timeout(now, "wait-elapsed"))
    // The schedule advances after every failed attempt and on promotion to head; when it ends,
    // the waiter gives up.
    if (!attempted) return this.wait(now)
    return Effect.flatMap(
      this.step(now),
      (more) => more ? this.wait(now) : Effect.fail(this.timeout(now, "retries-exhausted"))
    )
  }

  wait(now: number): Effect.Effect<Acquired, LockTimeoutError | LockBackendError> {
    // Only the head watches the clock: the next schedule step, and never past the holder's lease
    // (when it ends the lock is free without a notification). The others wait to be woken.
    const untilExpiry = this.ttl === undefined ? Infinity : this.ttl + 1
    const sleep = this.signal.isHead() ? Math.min(this.delay, untilExpiry, this.deadline - now) : this.deadline - now
    return Effect.flatMap(this.restore(this.signal.await(sleep)), (woken) => this.woken(woken))
  }

  woken(woken: WakeUp): Effect.Effect<Acquired, LockTimeoutError | LockBackendError> {
    // Handed over by a release in this process: held, with no attempt of our own (even if the
    // wait ran out while the hand-over was in flight).
    if (typeof woken === "object") {
      return Effect.succeed({
        fencingToken: woken.fencingToken,
        startedAt: woken.startedAt,
        attempts: this.attempts,
        via: "hand-over" as const,
        from: woken.from
      })
    }
    // A kind that keeps a line of waiters in the backend (a fair lock's queue, a waiting writer's
    // mark) gets a place in it only by an attempt: a new head makes one at once.
    const tryNow = woken !== "promoted" || (this.backend.abandon !== undefined && this.request.waiting === true)
    if (tryNow) return this.next(true)
    // Promoted to head: from now on watch the clock, starting from the next schedule step.
    this.ttl = undefined
    return Effect.flatMap(nowMillis, (now) =>
      Effect.flatMap(
        this.step(now),
        (more) =>
          more
            ? Effect.flatMap(nowMillis, (later) => this.sleep(later, false))
            : Effect.flatMap(nowMillis, (later) => Effect.fail(this.timeout(later, "retries-exhausted")))
      ))
  }
}

const countTimeout = (backend: Backend, cause: Cause.Cause<LockTimeoutError | LockBackendError>): void => {
  const failure = Cause.failureOption(cause)
  if (Option.isSome(failure) && failure.value._tag === "LockTimeoutError") {
    metrics.count(metrics.timeouts, backend.labels)
  }
}
