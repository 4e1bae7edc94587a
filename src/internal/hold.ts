/**
 * A hold: one owner's possession of one key, from the fresh acquisition until the last reentrant
 * release. It owns the watchdog (through its own scope) and the loss signal.
 */
import { Clock, Deferred, Duration, Effect, Exit, FiberId, Metric, Scope } from "effect"
import type { LockBackendShape } from "../LockBackend.js"
import type { LostReason } from "../LockError.js"
import { LockLostError } from "../LockError.js"
import * as metrics from "./metrics.js"
import type { ResolvedOptions } from "./options.js"
import type { Owner } from "./owner.js"

export interface Hold {
  readonly _tag: "Hold"
  readonly key: string
  readonly owner: Owner
  readonly fencingToken: bigint
  readonly backend: LockBackendShape
  readonly options: ResolvedOptions
  readonly acquiredAt: number
  /** Fails with the loss; never succeeds. */
  readonly lost: Deferred.Deferred<never, LockLostError>
  /** The watchdog lives here; closed when the hold ends. */
  readonly scope: Scope.CloseableScope
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
): Effect.Effect<Hold> =>
  Effect.map(Scope.make(), (scope) => ({
    _tag: "Hold",
    key,
    owner,
    fencingToken,
    backend,
    options,
    acquiredAt: startedAt,
    lost: Deferred.unsafeMake<never, LockLostError>(FiberId.none),
    scope,
    count: 1,
    deadline: startedAt + options.leaseMillis - options.driftMillis,
    state: "held"
  }))

/** Declare the hold lost: detach it from its owner and fail everyone guarding on it. */
export const markLost = (hold: Hold, reason: LostReason, cause?: unknown): Effect.Effect<void> =>
  Effect.suspend(() => {
    if (hold.state !== "held") return Effect.void
    hold.state = "lost"
    if (hold.owner.holds.get(hold.key) === hold) hold.owner.holds.delete(hold.key)
    return Effect.flatMap(Clock.currentTimeMillis, (now) => {
      const error = new LockLostError({
        key: hold.key,
        owner: hold.owner.id,
        reason,
        fencingToken: hold.fencingToken,
        heldMillis: now - hold.acquiredAt,
        ...(cause === undefined ? {} : { cause })
      })
      Deferred.unsafeDone(hold.lost, Exit.fail(error))
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
    // A lost hold still tries to clean up after itself, unless the same owner has since started a
    // new acquisition of the key (the owner-checked release would remove that one).
    const release = wasHeld || !holds.has(hold.key)
      ? hold.backend.release(hold.key, hold.owner.id).pipe(
        Effect.catchAll((error) =>
          Effect.zipRight(
            Metric.increment(metrics.releaseFailures),
            Effect.logWarning(`Releasing lock "${hold.key}" failed; its lease will expire on its own`, error)
          )
        ),
        Effect.withSpan("effect-lock.release", { attributes: { key: hold.key } })
      )
      : Effect.void
    return Effect.zipRight(Scope.close(hold.scope, Exit.void), release)
  })

export const remaining = (hold: Hold): Effect.Effect<Duration.Duration> =>
  Effect.map(
    Clock.currentTimeMillis,
    (now) => hold.state === "held" ? Duration.millis(Math.max(0, hold.deadline - now)) : Duration.zero
  )

/** Run `effect` only while the hold lasts: interrupted, failing with `LockLostError`, on loss. */
export const guard = <A, E, R>(hold: Hold, effect: Effect.Effect<A, E, R>): Effect.Effect<A, E | LockLostError, R> =>
  Effect.suspend(() =>
    hold.state === "held" ? Effect.raceFirst(effect, Deferred.await(hold.lost)) : Deferred.await(hold.lost)
  )
