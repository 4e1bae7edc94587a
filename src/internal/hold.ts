/**
 * A hold: one owner's possession of one key, from the fresh acquisition until the last reentrant
 * release. It is watched by the watchdog, carries the loss signal, and knows which fibers run
 * guarded by it so that a loss interrupts them.
 */
import { Cause, Deferred, Duration, Effect, Exit, Fiber, FiberId, FiberRef, Metric, Runtime } from "effect"
import type { LockBackendShape } from "../LockBackend.js"
import type { LostReason } from "../LockError.js"
import { LockLostError } from "../LockError.js"
import * as metrics from "./metrics.js"
import type { ResolvedOptions } from "./options.js"
import type { Owner } from "./owner.js"
import type { Restore } from "./restore.js"
import { currentOwner } from "./owner.js"
import { nowMillis } from "./time.js"

export interface Hold {
  readonly _tag: "Hold"
  readonly key: string
  readonly owner: Owner
  readonly fencingToken: bigint
  readonly backend: LockBackendShape
  readonly options: ResolvedOptions
  readonly acquiredAt: number
  /** Completed with the loss; made only when somebody awaits `Lease.lost`. */
  lostSignal: Deferred.Deferred<never, LockLostError> | undefined
  /** Fibers running a program guarded by this hold: interrupted on loss. */
  guarded: Set<Fiber.RuntimeFiber<unknown, unknown>> | undefined
  /** Set by the watchdog while it watches this hold. */
  watchdog: { readonly stop: () => void } | undefined
  lossError: LockLostError | undefined
  count: number
  /** Local deadline (Clock millis): last confirmed acquire/renew start + lease - drift. */
  deadline: number
  state: "held" | "lost" | "released"
}

export const makeHold = (
  owner: Owner,
  key: string,
  backend: LockBackendShape,
  options: ResolvedOptions,
  fencingToken: bigint,
  startedAt: number
): Hold => ({
  _tag: "Hold",
  key,
  owner,
  fencingToken,
  backend,
  options,
  acquiredAt: startedAt,
  lostSignal: undefined,
  guarded: undefined,
  watchdog: undefined,
  lossError: undefined,
  count: 1,
  deadline: startedAt + options.leaseMillis - options.driftMillis,
  state: "held"
})

/** Declare the hold lost: detach it from its owner and interrupt everything guarded by it. */
export const markLost = (hold: Hold, reason: LostReason, cause?: unknown): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (hold.state !== "held") return Effect.void
    hold.state = "lost"
    hold.watchdog?.stop()
    if (hold.owner.holds.get(hold.key) === hold) hold.owner.holds.delete(hold.key)
    return Effect.flatMap(nowMillis, (now) => {
      const error = new LockLostError({
        key: hold.key,
        owner: hold.owner.id,
        reason,
        fencingToken: hold.fencingToken,
        heldMillis: Math.round(now - hold.acquiredAt),
        ...(cause === undefined ? {} : { cause })
      })
      hold.lossError = error
      if (hold.lostSignal !== undefined) Deferred.unsafeDone(hold.lostSignal, Exit.fail(error))
      if (hold.guarded !== undefined) for (const fiber of hold.guarded) fiber.unsafeInterruptAsFork(FiberId.none)
      return Effect.zipRight(
        Metric.increment(metrics.lost),
        Effect.logWarning(error.message).pipe(Effect.annotateLogs({ key: hold.key, reason }))
      )
    })
  })

/**
 * Drop one hold count; at zero stop the watchdog and release in the backend. A failed release is
 * logged and counted, never raised: the lease then ends on its own.
 */
export const releaseOne = (hold: Hold): Effect.Effect<void> =>
  Effect.suspend(() => {
    hold.count--
    if (hold.count > 0 || hold.state === "released") return Effect.void
    const wasHeld = hold.state === "held"
    hold.state = "released"
    const { holds } = hold.owner
    if (holds.get(hold.key) === hold) holds.delete(hold.key)
    hold.watchdog?.stop()
    // A lost hold still tries to clean up after itself, unless the same owner has since started a
    // new acquisition of the key (the owner-checked release would remove that one).
    if (!wasHeld && holds.has(hold.key)) return Effect.void
    const release = hold.backend.release(hold.key, hold.owner.id).pipe(
      Effect.catchAll((error) =>
        Effect.zipRight(
          Metric.increment(metrics.releaseFailures),
          Effect.logWarning(
            `Releasing lock "${hold.key}" failed (${error.message}); its lease will expire on its own`
          ).pipe(Effect.annotateLogs({ key: hold.key, owner: hold.owner.id }))
        )
      )
    )
    return release
  })

export const remaining = (hold: Hold): Effect.Effect<Duration.Duration> =>
  Effect.map(
    nowMillis,
    (now) => hold.state === "held" ? Duration.millis(Math.max(0, hold.deadline - now)) : Duration.zero
  )

/** Fails with the loss as soon as there is one; never succeeds. */
export const awaitLoss = (hold: Hold): Effect.Effect<never, LockLostError> =>
  Effect.suspend(() =>
    hold.lossError !== undefined
      ? Effect.fail(hold.lossError)
      : Deferred.await(hold.lostSignal ??= Deferred.unsafeMake<never, LockLostError>(FiberId.none))
  )

/** Past the local deadline the hold is lost, whether or not the watchdog has run yet. */
const checkDeadline = (hold: Hold): Effect.Effect<void, LockLostError> =>
  Effect.flatMap(nowMillis, (now) =>
    hold.state === "held" && now >= hold.deadline ? Effect.zipRight(markLost(hold, "expired"), awaitLoss(hold)) : Effect.void)

/**
 * Run `effect` in a fiber of its own that a loss of the hold interrupts; the result is then a
 * `LockLostError`. Must be called inside `uninterruptibleMask`, with its `restore`. Fibers the
 * effect forks are that fiber's children and end with it. `owner`, when given, is installed as the
 * fiber's owner.
 *
 * The fiber's first step checks the local deadline: a process that was paused past its lease
 * learns it there, before the effect takes a step, even if the watchdog has not run yet.
 */
export const runGuarded = <A, E, R>(
  hold: Hold,
  effect: Effect.Effect<A, E, R>,
  restore: Restore,
  owner?: Owner | undefined
): Effect.Effect<A, E | LockLostError, R> =>
  Effect.suspend(() => {
    if (hold.state === "lost") return awaitLoss(hold)
    const started = Effect.zipRight(checkDeadline(hold), restore(effect))
    const child = owner === undefined ? started : Effect.zipRight(FiberRef.set(currentOwner, owner), started)
    // Started at once on this thread (no scheduler hop before the program's first step); it is
    // not a child of the caller's fiber, so every way out below awaits or interrupts it.
    const start = Effect.map(Effect.runtime<R>(), (runtime) => Runtime.runFork(runtime)(child, { immediate: true }))
    return Effect.flatMap(start, (fiber) => {
      ;(hold.guarded ??= new Set()).add(fiber as Fiber.RuntimeFiber<unknown, unknown>)
      if (hold.state === "lost") fiber.unsafeInterruptAsFork(FiberId.none)
      return Effect.flatMap(Effect.exit(restore(Fiber.await(fiber))), (awaited): Effect.Effect<A, E | LockLostError> => {
        if (Exit.isFailure(awaited)) {
          // The caller was interrupted: stop the program first, then pass the interruption on.
          return Effect.zipRight(
            Effect.ensuring(Fiber.interrupt(fiber), Effect.sync(() => hold.guarded?.delete(fiber as never))),
            Effect.failCause(awaited.cause)
          )
        }
        hold.guarded?.delete(fiber as Fiber.RuntimeFiber<unknown, unknown>)
        const exit = awaited.value
        if (Exit.isFailure(exit) && hold.lossError !== undefined && Cause.isInterruptedOnly(exit.cause)) {
          return Effect.fail(hold.lossError)
        }
        return Effect.zipRight(Fiber.inheritAll(fiber), exit)
      })
    })
  })

/** `runGuarded` for callers outside a mask (`Lease.guard`). */
export const guard = <A, E, R>(hold: Hold, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | LockLostError, R> =>
  Effect.uninterruptibleMask((restore) => runGuarded(hold, effect, restore))

/** Held: not lost, not released, and the local deadline not passed. */
export const isHeld = (hold: Hold): Effect.Effect<boolean> =>
  Effect.map(nowMillis, (now) => hold.state === "held" && now < hold.deadline)
