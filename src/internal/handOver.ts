/**
 * Releasing with a hand-over. When a holder in this process releases a key on which fibers of this
 * process wait, the backend can release and grant the lock to the waiter a notification would have
 * woken, in one call: that waiter then holds the lock without a notification, a wake-up and an
 * attempt of its own. Shared by every backend; each supplies the one atomic call.
 *
 * The waiter is claimed in its queue while the call is in flight (it neither attempts nor is woken
 * meanwhile). If it left in the meantime (interrupted, timed out), the lock it was given is
 * released again for it, which may hand it on to the next waiter.
 */
import { Effect, Metric } from "effect"
import type { LockRequest } from "../LockBackend.js"
import * as metrics from "./metrics.js"
import { nowMillis } from "./time.js"
import type { WaiterQueue } from "./waiterQueue.js"

/** What one hand-over call did. */
export type HandOverResult =
  /** The releasing owner did not hold the lock: nothing changed. */
  | { readonly _tag: "NotHeld" }
  /** The releasing owner still holds it (its hold count was above one). */
  | { readonly _tag: "StillHeld" }
  /** Released and waiters notified, without a hand-over (another process waits too). */
  | { readonly _tag: "Released" }
  /** The receiver holds the lock now. */
  | { readonly _tag: "HandedOver"; readonly fencingToken: bigint }

export interface ReleaseCalls<E> {
  /** The plain owner-checked release (notifying waiters); `false` when `owner` did not hold it. */
  readonly release: (key: string, owner: string) => Effect.Effect<boolean, E>
  /** Release `from`'s hold and, where the backend allows, grant the lock to `to` atomically. */
  readonly handOver: (key: string, from: string, to: LockRequest) => Effect.Effect<HandOverResult, E>
}

/**
 * Release `owner`'s hold on `key`, handing the lock to a parked local waiter when there is one.
 * `false` when `owner` did not hold the lock.
 */
export const releaseHandingOver = <E>(
  queue: WaiterQueue,
  calls: ReleaseCalls<E>,
  key: string,
  owner: string
): Effect.Effect<boolean, E> =>
  Effect.suspend(() => {
    const claim = queue.claimHandOver(key)
    if (claim === undefined) return calls.release(key, owner)
    return Effect.flatMap(nowMillis, (startedAt) =>
      calls.handOver(key, owner, claim.request).pipe(
        Effect.onError(() => Effect.sync(claim.cancel)),
        Effect.flatMap((result) => {
          if (result._tag !== "HandedOver") {
            claim.cancel()
            return Effect.succeed(result._tag !== "NotHeld")
          }
          if (claim.grant({ _tag: "HandedOver", fencingToken: result.fencingToken, startedAt })) {
            // Let the receiver run first: its program is what everybody waits for.
            return Effect.as(Effect.zipRight(Effect.yieldNow(), Metric.increment(metrics.handOvers)), true)
          }
          // The receiver left while the lock was on its way: release it on its behalf.
          return releaseHandingOver(queue, calls, key, claim.request.owner).pipe(
            Effect.catchAll((error) =>
              Effect.logWarning(
                `Releasing lock "${key}" for a waiter that left during its hand-over failed; its lease will end on its own`,
                error
              ).pipe(Effect.annotateLogs({ key, owner: claim.request.owner }))
            ),
            Effect.as(true)
          )
        })
      ))
  })
