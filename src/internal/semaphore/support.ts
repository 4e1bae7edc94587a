/**
 * What `LockBackend.make` builds for semaphores when the backend's primitives have them: the local
 * wait queues, a renewal scheduler of their own (permit leases are renewed by the semaphore's
 * `renew`, batched like the mutex's), and the view of the backend that a permit hold lives on.
 *
 * A permit hold is an ordinary hold (`lock/hold.ts`: watchdog, local deadline, loss, guarded
 * program, release on scope close) whose backend is that view: the same service (its holds, its
 * shutdown, its metrics), with the semaphore's renewals and release in place of the mutex's.
 */
import type { Scope } from "effect"
import { Effect } from "effect"
import type { LockPrimitives, ReleaseResult, RenewOutcome } from "../../LockBackend.js"
import type { LockBackendError } from "../../LockError.js"
import type { Backend } from "../backend/make.js"
import type { Renewals } from "../backend/renewals.js"
import { makeRenewals } from "../backend/renewals.js"
import type { PermitRequest, SemaphorePrimitives } from "./primitives.js"
import { notificationKey } from "./primitives.js"
import type { SemaphoreQueue } from "./queue.js"
import { makeSemaphoreQueue } from "./queue.js"

export interface SemaphoreSupport {
  readonly primitives: SemaphorePrimitives
  readonly queue: SemaphoreQueue
  /** The backend as permit holds see it; set once the service exists. */
  view: Backend | undefined
  /** Permits held per owner id, from the acquisition to the release. */
  readonly permitsOf: Map<string, number>
  readonly renewals: Renewals
}

const released: ReleaseResult = { _tag: "Released" }
const notHeld: ReleaseResult = { _tag: "NotHeld" }

export const makeSemaphoreSupport = (
  primitives: LockPrimitives,
  semaphore: SemaphorePrimitives,
  labels: Parameters<typeof makeRenewals>[1]
): Effect.Effect<SemaphoreSupport, never, Scope.Scope> =>
  Effect.map(
    // The scheduler only calls `name` and `renew` of what it is given, and only permit holds are
    // scheduled on it, so every request is a `PermitRequest`.
    makeRenewals({
      ...primitives,
      renew: (requests): Effect.Effect<ReadonlyArray<RenewOutcome>, LockBackendError> =>
        semaphore.renew(requests as ReadonlyArray<PermitRequest>)
    }, labels),
    (renewals) => ({
      primitives: semaphore,
      queue: makeSemaphoreQueue({
        onFirst: (key) => primitives.subscribe(notificationKey(key)),
        onLast: (key) => primitives.unsubscribe(notificationKey(key))
      }),
      view: undefined,
      permitsOf: new Map(),
      renewals
    })
  )

/** The backend that permit holds live on: `backend` with the semaphore's renewals and release. */
export const makeView = (backend: Backend, support: SemaphoreSupport): Backend => ({
  ...backend,
  renewals: support.renewals,
  release: (key, owner) =>
    Effect.suspend(() => {
      const permits = support.permitsOf.get(owner) ?? 0
      return Effect.map(
        Effect.ensuring(
          support.primitives.release(key, owner, permits),
          Effect.sync(() => support.permitsOf.delete(owner))
        ),
        (returned) => {
          // Waiters of this process learn of it now, not one pub/sub hop later (that message then
          // wakes the head once more, which costs at most one extra attempt).
          if (returned > 0) support.queue.notify(key)
          return returned > 0 ? released : notHeld
        }
      )
    })
})
