/**
 * Releasing with a hand-over. When a holder in this process releases a key on which fibers of this
 * process wait, a backend with a `handOver` primitive releases and grants the lock to the waiter a
 * notification would have woken, in one call: that waiter then holds the lock without a
 * notification, a wake-up and an attempt of its own.
 *
 * The waiter is claimed in its queue while the call is in flight (it neither attempts nor is woken
 * meanwhile). If it left in the meantime (interrupted, timed out), the lock it was given is
 * released again for it, which may hand it on to the next waiter.
 */
import type { MetricLabel, Tracer } from "effect"
import { Effect } from "effect"
import type { LockPrimitives, ReleaseResult } from "../../LockBackend.js"
import type { LockBackendError } from "../../LockError.js"
import * as metrics from "../metrics.js"
import { nowMillis } from "../time.js"
import type { WaiterQueue } from "./waiterQueue.js"

const released: ReleaseResult = { _tag: "Released" }

/**
 * Release `owner`'s hold on `key`, handing the lock to a parked local waiter when the backend can.
 */
export const releaseHandingOver = (
  queue: WaiterQueue,
  primitives: LockPrimitives,
  labels: ReadonlyArray<MetricLabel.MetricLabel>,
  key: string,
  owner: string,
  span?: Tracer.AnySpan | undefined
): Effect.Effect<ReleaseResult, LockBackendError> =>
  Effect.suspend(() => {
    const handOver = primitives.handOver
    const claim = handOver === undefined ? undefined : queue.claimHandOver(key)
    if (handOver === undefined || claim === undefined) return primitives.release(key, owner)
    return Effect.flatMap(nowMillis, (startedAt) =>
      handOver(key, owner, claim.request).pipe(
        Effect.onError(() => Effect.sync(claim.cancel)),
        Effect.flatMap((result): Effect.Effect<ReleaseResult, LockBackendError> => {
          if (result._tag !== "HandedOver") {
            claim.cancel()
            return Effect.succeed(result)
          }
          if (claim.grant({ _tag: "HandedOver", fencingToken: result.fencingToken, startedAt, from: span })) {
            metrics.count(metrics.handOvers, labels)
            // Let the receiver run first: its program is what everybody waits for.
            return Effect.as(Effect.yieldNow(), released)
          }
          // The receiver left while the lock was on its way: release it on its behalf.
          return releaseHandingOver(queue, primitives, labels, key, claim.request.owner).pipe(
            Effect.catchAll((error) =>
              Effect.logWarning(
                `Releasing lock "${key}" for a waiter that left during its hand-over failed; its lease will end on its own`,
                error
              ).pipe(Effect.annotateLogs({ key, owner: claim.request.owner }))
            ),
            Effect.as(released)
          )
        })
      ))
  })
