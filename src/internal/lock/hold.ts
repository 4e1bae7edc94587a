/**
 * A hold: one fresh acquisition of one key on one backend, owned by the region that acquired it,
 * from the acquisition until its scope closes. It carries the owner id sent to the backend, the
 * fencing token, the local deadline, the loss signal, and the fibers that run guarded by it.
 *
 * The state, and every transition (nothing else changes it):
 *
 * ```text
 * Held  --watchdog: stolen, expired, renewal failed; or a guarded step past the deadline-->  Lost
 * Held  --its scope closes-->  Released   (fibers still guarded by it are interrupted)
 * Lost  --its scope closes-->  Lost       (the owner-checked release is still sent: it cleans up
 *                                          whatever is left and cannot touch another owner's lock)
 * ```
 *
 * `count` is the number of entries into the hold that have not left: 1 for the region's own, plus
 * reentries. Reentries are tracked here, in process; the backend sees one hold count per hold.
 */
import { Cause, Deferred, Duration, Effect, Exit, FiberId, MetricLabel, Scope } from "effect"
import type { Fiber, HashMap, Tracer } from "effect"
import type { LockRequest } from "../../LockBackend.js"
import type { LostReason } from "../../LockError.js"
import { LockLostError } from "../../LockError.js"
import type { Backend } from "../backend/make.js"
import type { Member } from "../backend/renewals.js"
import * as metrics from "../metrics.js"
import { clockOf, nowMillis, unsafeNowMillis } from "../time.js"
import * as timers from "../timers.js"
import type { ResolvedOptions } from "./options.js"

export type HoldState =
  | { readonly _tag: "Held" }
  | { readonly _tag: "Lost"; readonly error: LockLostError }
  | { readonly _tag: "Released"; readonly at: number }

export interface Hold {
  readonly key: string
  /** The owner id sent to the backend, `<process uuid>:<n>`. */
  readonly owner: string
  /** What the hold asks the backend for: its key, owner, lease and fencing (renewals reuse it). */
  readonly request: LockRequest
  readonly backend: Backend
  readonly options: ResolvedOptions
  readonly fencingToken: bigint
  /** Clock time at which the acquiring call started. */
  readonly acquiredAt: number
  /** Acquired into a scope (`Lock.acquire`) rather than for a program (`withLock`). */
  readonly scoped: boolean
  /** The acquiring fiber's log annotations: the watchdog logs with them. */
  readonly annotations: HashMap.HashMap<string, unknown>
  state: HoldState
  count: number
  /** Local deadline (Clock millis): last confirmed acquire/renew start + lease - drift. */
  deadline: number
  /** Completed with the loss (or the release); made only when somebody awaits `Lease.lost`. */
  lostSignal: Deferred.Deferred<never, LockLostError> | undefined
  /** Fibers running a program guarded by this hold: interrupted on loss. */
  guarded: Set<Fiber.RuntimeFiber<unknown, unknown>> | undefined
  /**
   * The fiber whose program is taking its first, synchronous steps under this hold (not yet in
   * `guarded`, which it joins when that run ends): a reentry from it is in place too.
   */
  starting: FiberId.FiberId | undefined
  /** The caller's scope, for `Lock.acquire`: the watchdog is forked into it. */
  readonly scope: Scope.Scope | undefined
  /**
   * For `withLock`, the hold's own scope, where its watchdog is forked: made when the watchdog
   * starts, closed by `releaseHold`.
   */
  ownScope: Scope.CloseableScope | undefined
  /** The hold's span, from the acquisition to the release, when a tracer is installed. */
  span: Tracer.Span | undefined
  /** Watched by the renewal scheduler (from the acquisition until released or lost). */
  watched: boolean
  /**
   * Until the watchdog fiber starts: the hold's entry in the scheduler's bucket for its first
   * renewal, at `firstDueAt`.
   */
  firstDue: Member | undefined
  firstDueAt: number
}

/**
 * Stop watching the hold: take its first renewal out of the scheduler, if still there. `true` when
 * it was watched: the caller then tells the scheduler (`untrack`) once the hold is gone for good.
 */
const unwatch = (hold: Hold): boolean => {
  if (!hold.watched) return false
  hold.watched = false
  if (hold.firstDue !== undefined) hold.backend.renewals.unschedule(hold.firstDue, hold.firstDueAt)
  hold.firstDue = undefined
  metrics.count(metrics.held, hold.backend.labels, -1)
  return true
}

const held: HoldState = { _tag: "Held" }

export const makeHold = (
  backend: Backend,
  request: LockRequest,
  options: ResolvedOptions,
  fencingToken: bigint,
  startedAt: number,
  scope: Scope.Scope | undefined,
  annotations: HashMap.HashMap<string, unknown>
): Hold => ({
  key: request.key,
  owner: request.owner,
  request,
  backend,
  options,
  fencingToken,
  acquiredAt: startedAt,
  scoped: scope !== undefined,
  annotations,
  state: held,
  count: 1,
  deadline: startedAt + options.leaseMillis - options.driftMillis,
  lostSignal: undefined,
  guarded: undefined,
  starting: undefined,
  scope,
  ownScope: undefined,
  span: undefined,
  watched: false,
  firstDue: undefined,
  firstDueAt: 0
})

const lostError = (hold: Hold, reason: LostReason, now: number, cause?: unknown) =>
  new LockLostError({
    key: hold.key,
    owner: hold.owner,
    reason,
    fencingToken: hold.fencingToken,
    heldMillis: Math.round(now - hold.acquiredAt),
    ...(cause === undefined ? {} : { cause })
  })

/** Why the hold is no longer usable, or `undefined` while it is held. */
const endedError = (hold: Hold): LockLostError | undefined => {
  const state = hold.state
  return state._tag === "Held" ? undefined : state._tag === "Lost" ? state.error : lostError(hold, "released", state.at)
}

const signalEnd = (hold: Hold, error: LockLostError) => {
  if (hold.lostSignal !== undefined) Deferred.unsafeDone(hold.lostSignal, Exit.fail(error))
  if (hold.guarded !== undefined) { for (const fiber of hold.guarded) fiber.unsafeInterruptAsFork(FiberId.none) }
}

/** Declare the hold lost: interrupt everything guarded by it, count and log it. */
export const markLost = (hold: Hold, reason: LostReason, cause?: unknown): Effect.Effect<void> =>
  Effect.flatMap(nowMillis, (now) => {
    if (hold.state._tag !== "Held") return Effect.void
    const error = lostError(hold, reason, now, cause)
    hold.state = { _tag: "Lost", error }
    if (unwatch(hold)) hold.backend.renewals.untrack()
    hold.span?.attribute("effect_lock.lost", reason)
    signalEnd(hold, error)
    metrics.count(metrics.lost, [...hold.backend.labels, MetricLabel.make("reason", reason)])
    return Effect.logWarning(error.message).pipe(Effect.annotateLogs({ key: hold.key, reason }))
  })

/**
 * The end of the hold's region: the hold is released (fibers still guarded by it are interrupted),
 * its watchdog stopped (its own scope closed, for `withLock`; the caller's scope stops it for
 * `Lock.acquire`), and the owner-checked release goes to the backend, which may hand the lock to a
 * local waiter. A failed release is logged and counted, never raised: the lease then ends on its own.
 */
export const releaseHold = (hold: Hold): Effect.Effect<void> =>
  Effect.withFiberRuntime((fiber) => {
    if (hold.state._tag === "Released") return Effect.void
    const clock = clockOf(fiber)
    const now = unsafeNowMillis(clock)
    const watched = unwatch(hold)
    metrics.time(timers.holdTime, hold.backend.labels, now - hold.acquiredAt)
    if (hold.state._tag === "Held") {
      hold.state = { _tag: "Released", at: now }
      if (hold.lostSignal !== undefined || (hold.guarded !== undefined && hold.guarded.size > 0)) {
        signalEnd(hold, lostError(hold, "released", now))
      }
    }
    const span = hold.span
    const releasing = hold.backend.release(hold.key, hold.owner, span)
    const release = span === undefined ? releasing : Effect.withSpan(releasing, "effect-lock.release", {
      parent: span,
      attributes: { "effect_lock.key": hold.key, "effect_lock.backend": hold.backend.name },
      captureStackTrace: false
    })
    const done = () => {
      if (watched) hold.backend.renewals.untrack()
      hold.backend.forget(hold)
      span?.end(clock.unsafeCurrentTimeNanos(), Exit.void)
    }
    const settled = Effect.matchEffect(release, {
      onFailure: (error) => {
        metrics.count(metrics.releaseFailures, hold.backend.labels)
        return Effect.logWarning(
          `Releasing lock "${hold.key}" failed (${error.message}); its lease will expire on its own`
        ).pipe(Effect.annotateLogs({ key: hold.key, owner: hold.owner }), Effect.zipRight(Effect.sync(done)))
      },
      onSuccess: () => {
        done()
        return Effect.void
      }
    })
    // Stop the watchdog first: no renewal may follow the release. The release never fails and runs
    // uninterruptibly (a finaliser, or inside withLock's mask).
    return hold.ownScope !== undefined ? Effect.zipRight(Scope.close(hold.ownScope, Exit.void), settled) : settled
  })

export const remaining = (hold: Hold): Effect.Effect<Duration.Duration> =>
  Effect.map(
    nowMillis,
    (now) => hold.state._tag === "Held" ? Duration.millis(Math.max(0, Math.floor(hold.deadline - now))) : Duration.zero
  )

/** Fails as soon as the hold is lost or released; never succeeds. */
export const awaitLoss = (hold: Hold): Effect.Effect<never, LockLostError> =>
  Effect.suspend(() => {
    const ended = endedError(hold)
    return ended !== undefined
      ? Effect.fail(ended)
      : Deferred.await(hold.lostSignal ??= Deferred.unsafeMake<never, LockLostError>(FiberId.none))
  })

/**
 * Fails when the hold can no longer be used: lost, released, or past its local deadline (which
 * makes it lost, whether or not the watchdog has run yet: a paused process learns it here).
 */
export const checkHeld = (hold: Hold): Effect.Effect<void, LockLostError> =>
  Effect.flatMap(nowMillis, (now) => checkHeldAt(hold, now) ?? Effect.void)

/** `checkHeld` at clock time `now`: `undefined` while the hold is usable, or the failure. */
export const checkHeldAt = (hold: Hold, now: number): Effect.Effect<never, LockLostError> | undefined => {
  if (hold.state._tag === "Held" && now >= hold.deadline) {
    return Effect.zipRight(markLost(hold, "expired"), awaitLoss(hold))
  }
  const ended = endedError(hold)
  return ended === undefined ? undefined : Effect.fail(ended)
}

/** Held: not lost, not released, and the local deadline not passed. */
export const isHeld = (hold: Hold): Effect.Effect<boolean> =>
  Effect.map(nowMillis, (now) => hold.state._tag === "Held" && now < hold.deadline)

/** The loss (or release) behind an interruption of a guarded fiber, if that is what it was. */
export const endedBy = (hold: Hold, cause: Cause.Cause<unknown>): LockLostError | undefined =>
  hold.state._tag !== "Held" && Cause.isInterruptedOnly(cause) ? endedError(hold) : undefined
