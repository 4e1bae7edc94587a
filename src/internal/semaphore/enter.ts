/**
 * Taking permits: one attempt, or waiting in the key's local queue (`queue.ts`), then a hold of its
 * own per acquisition (`lock/hold.ts`, on the semaphore's view of the backend), watched by the
 * renewal scheduler and released when its region ends: after the program for `withPermits`, when
 * the caller's scope closes for `acquire`. Permits are never reentrant: every acquisition is fresh.
 */
import type { Fiber } from "effect"
import { Context, Effect, FiberRef, Scope } from "effect"
import * as ScheduleDecision from "effect/ScheduleDecision"
import * as ScheduleIntervals from "effect/ScheduleIntervals"
import type { BusyInfo, Lease } from "../../Lock.js"
import { LockBackend } from "../../LockBackend.js"
import { LockBackendError, LockTimeoutError } from "../../LockError.js"
import type { LockLostError } from "../../LockError.js"
import type { Backend } from "../backend/make.js"
import { backendOf } from "../backend/make.js"
import { runGuarded } from "../lock/guard.js"
import type { Hold } from "../lock/hold.js"
import { releaseHold } from "../lock/hold.js"
import { makeLease } from "../lock/lease.js"
import type { ResolvedOptions } from "../lock/options.js"
import { newOwnerId } from "../lock/region.js"
import { holdAcquired } from "../lock/watchdog.js"
import type { Restore } from "../restore.js"
import { nowMillis } from "../time.js"
import type { PermitRequest } from "./primitives.js"
import type { SemaphoreSupport } from "./support.js"

/** A held acquisition of permits, as the program sees it: a `Lease` with its permit count. */
export interface PermitLease extends Lease {
  /** How many permits this acquisition holds. */
  readonly permits: number
}

class PermitLeaseImpl implements PermitLease {
  readonly lease: Lease
  constructor(hold: Hold, readonly permits: number) {
    this.lease = makeLease(hold)
  }
  get key() {
    return this.lease.key
  }
  get owner() {
    return this.lease.owner
  }
  get fencingToken() {
    return this.lease.fencingToken
  }
  get holdCount() {
    return this.lease.holdCount
  }
  get acquiredAt() {
    return this.lease.acquiredAt
  }
  get lost() {
    return this.lease.lost
  }
  get isHeld() {
    return this.lease.isHeld
  }
  get remaining() {
    return this.lease.remaining
  }
  get guard() {
    return this.lease.guard
  }
  toJSON() {
    return { ...(this.lease as unknown as { toJSON(): object }).toJSON(), permits: this.permits }
  }
}

export interface PermitsWanted {
  readonly key: string
  readonly permits: number
  /** The total to create the semaphore with when it does not exist yet. */
  readonly total: number | undefined
  readonly options: ResolvedOptions
}

interface Acquired {
  readonly fencingToken: bigint
  readonly startedAt: number
}

const unsupported = (backend: Backend, key: string) =>
  new LockBackendError({
    backend: backend.name,
    operation: "acquire",
    key,
    cause: new Error(`the "${backend.name}" backend has no semaphore primitives`)
  })

const closed = (backend: Backend, key: string) =>
  new LockBackendError({
    backend: backend.name,
    operation: "acquire",
    key,
    cause: new Error("the backend is shutting down (its layer's scope is closing)")
  })

/** The semaphore support of the backend in the fiber's context, or the error that says it has none. */
export const supportOf = (backend: Backend, key: string): Effect.Effect<SemaphoreSupport, LockBackendError> =>
  backend.semaphores === undefined ? Effect.fail(unsupported(backend, key)) : Effect.succeed(backend.semaphores)

type Attempted =
  | { readonly _tag: "Acquired"; readonly fencingToken: bigint; readonly startedAt: number }
  | { readonly _tag: "Busy"; readonly ttlMillis: number | undefined }

const attempt = (backend: Backend, support: SemaphoreSupport, request: PermitRequest): Effect.Effect<
  Attempted,
  LockBackendError
> =>
  backend.isClosing() ? Effect.fail(closed(backend, request.key)) : Effect.flatMap(
    nowMillis,
    (startedAt) =>
      Effect.map(support.primitives.tryAcquire(request), (result): Attempted =>
        result._tag === "Acquired"
          ? { _tag: "Acquired", fencingToken: result.fencingToken, startedAt }
          : { _tag: "Busy", ttlMillis: result.ttlMillis })
  )

/**
 * Wait for the permits: attempt at once unless fibers of this process already wait on the key
 * (then queue up behind them), and otherwise wait in the key's queue. Only the waiters in its
 * window (`queue.ts`) attempt: on a notification, when they enter the window, on their retry
 * schedule, or when the soonest held lease ends. Attempts are uninterruptible; the sleeps are interruptible through `restore`.
 */
const waitFor = (
  backend: Backend,
  support: SemaphoreSupport,
  request: PermitRequest,
  options: ResolvedOptions,
  restore: Restore
): Effect.Effect<Acquired, LockTimeoutError | LockBackendError> =>
  Effect.gen(function*() {
    const queued = support.queue.waitersOn(request.key) > 0
    let attempts = 0
    let ttl: number | undefined = undefined
    if (!queued || options.waitMillis === 0) {
      const first = yield* attempt(backend, support, request)
      attempts++
      if (first._tag === "Acquired") return first
      ttl = first.ttlMillis
    }
    const start = yield* nowMillis
    const deadline = start + options.waitMillis
    const timeout = (now: number, reason: "wait-elapsed" | "retries-exhausted") =>
      new LockTimeoutError({
        key: request.key,
        reason,
        waitedMillis: Math.round(now - start),
        attempts,
        ...(ttl === undefined ? {} : { holderTtlMillis: ttl })
      })
    if (options.waitMillis === 0) return yield* timeout(start, "wait-elapsed")
    const schedule = options.retry
    let state: unknown = schedule.initial
    let delay = 0
    const step = (now: number) =>
      Effect.map(
        schedule.step(now, { key: request.key, attempt: attempts, holderTtlMillis: ttl } satisfies BusyInfo, state),
        ([next, , decision]) => {
          if (ScheduleDecision.isDone(decision)) return false
          state = next
          delay = Math.max(0, ScheduleIntervals.start(decision.intervals) - now)
          return true
        }
      )
    if (attempts > 0 && !(yield* step(start))) return yield* timeout(start, "retries-exhausted")
    return yield* Effect.acquireUseRelease(
      support.queue.register(request.key, request.permits, request.total),
      (ticket) =>
        Effect.gen(function*() {
          // A release between the first attempt and the subscription woke nobody: try again.
          let tryNow = (yield* restore(ticket.ready)) || attempts === 0
          while (true) {
            if (backend.isClosing()) return yield* closed(backend, request.key)
            if (tryNow && ticket.inWindow()) {
              const result = yield* attempt(backend, support, request)
              attempts++
              if (result._tag === "Acquired") return result
              ttl = result.ttlMillis
              if (!(yield* step(yield* nowMillis))) return yield* timeout(yield* nowMillis, "retries-exhausted")
            }
            const now = yield* nowMillis
            if (now >= deadline) return yield* timeout(now, "wait-elapsed")
            const untilExpiry = ttl === undefined ? Infinity : ttl + 1
            const sleep = ticket.inWindow() ? Math.min(delay, untilExpiry, deadline - now) : deadline - now
            yield* restore(ticket.await(sleep))
            tryNow = true
          }
        }),
      (ticket) => ticket.leave
    )
  })

export type Attempt<E, Busy extends undefined> = (
  backend: Backend,
  support: SemaphoreSupport,
  request: PermitRequest,
  options: ResolvedOptions,
  restore: Restore
) => Effect.Effect<Acquired | Busy, E>

export const waiting: Attempt<LockTimeoutError | LockBackendError, never> = waitFor

/** One attempt: the acquisition, or `undefined` when too few permits are free. */
export const once: Attempt<LockBackendError, undefined> = (backend, support, request) =>
  Effect.map(attempt(backend, support, request), (r) => (r._tag === "Acquired" ? r : undefined))

/** A fresh permit hold, or `undefined` when attempting once and too few permits are free. */
const acquireFresh = <E, Busy extends undefined>(
  backend: Backend,
  wanted: PermitsWanted,
  attemptWith: Attempt<E, Busy>,
  restore: Restore,
  scope: Scope.Scope | undefined,
  fiber: Fiber.RuntimeFiber<unknown, unknown>
): Effect.Effect<Hold | Busy, E | LockBackendError> =>
  Effect.flatMap(supportOf(backend, wanted.key), (support) => {
    const request: PermitRequest = {
      key: wanted.key,
      owner: newOwnerId(),
      leaseMillis: wanted.options.leaseMillis,
      fencing: wanted.options.fencing,
      permits: wanted.permits,
      total: wanted.total
    }
    return Effect.map(attemptWith(backend, support, request, wanted.options, restore), (acquired): Hold | Busy => {
      if (acquired === undefined) return acquired as Busy
      support.permitsOf.set(request.owner, request.permits)
      return holdAcquired(
        support.view ?? backend,
        backend,
        request,
        wanted.options,
        acquired,
        scope,
        fiber.getFiberRef(FiberRef.currentLogAnnotations)
      )
    })
  })

/** A program run under permits: an effect, or a function of the `PermitLease`. */
export type PermitProgram<A, E, R> = Effect.Effect<A, E, R> | ((lease: PermitLease) => Effect.Effect<A, E, R>)

const runProgram = <A, E, R>(program: PermitProgram<A, E, R>, hold: Hold, permits: number) =>
  Effect.isEffect(program) ? program : Effect.suspend(() => program(new PermitLeaseImpl(hold, permits)))

/** Take the permits, run `program` guarded by their hold, and give them back: `withPermits`. */
export const runWithPermits = <A, E, R, E2, Busy extends undefined>(
  wanted: PermitsWanted,
  attemptWith: Attempt<E2, Busy>,
  program: PermitProgram<A, E, R>
): Effect.Effect<A | Busy, E | E2 | LockBackendError | LockLostError, R | LockBackend> =>
  Effect.withFiberRuntime((fiber) => {
    const backend = backendOf(Context.unsafeGet(fiber.currentContext, LockBackend))
    return Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(
        acquireFresh(backend, wanted, attemptWith, restore, undefined, fiber),
        (hold): Effect.Effect<A | Busy, E | LockLostError, R> => {
          if (hold === undefined) return Effect.succeed(hold as Busy)
          return Effect.flatMap(
            Effect.exit(runGuarded(hold, runProgram(program, hold, wanted.permits), restore)),
            (exit) => Effect.zipRight(releaseHold(hold), exit)
          )
        }
      )
    )
  })

/** Take the permits for the rest of the current scope: `acquire` and `tryAcquire`. */
export const acquireScoped = <E, Busy extends undefined>(
  wanted: PermitsWanted,
  attemptWith: Attempt<E, Busy>
): Effect.Effect<PermitLease | Busy, E | LockBackendError, LockBackend | Scope.Scope> =>
  Effect.withFiberRuntime((fiber) => {
    const backend = backendOf(Context.unsafeGet(fiber.currentContext, LockBackend))
    const scope = Context.unsafeGet(fiber.currentContext, Scope.Scope)
    return Effect.uninterruptibleMask((restore) =>
      Effect.flatMap(
        acquireFresh(backend, wanted, attemptWith, restore, scope, fiber),
        (hold): Effect.Effect<PermitLease | Busy> =>
          hold === undefined ? Effect.succeed(hold as Busy) : Effect.as(
            Scope.addFinalizer(scope, releaseHold(hold)),
            new PermitLeaseImpl(hold, wanted.permits)
          )
      )
    )
  })
