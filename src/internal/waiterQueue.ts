/**
 * Local wait queues, one per key, shared by every backend. A notification wakes the first waiter
 * that has not been woken yet (first in, first out), never the whole herd. A woken waiter that
 * leaves without using its wake-up hands it on, so a notification is never lost locally.
 *
 * `onFirst` / `onLast` let a backend hold an external subscription (a Redis channel) exactly as
 * long as the key has local waiters; registrations that arrive while `onFirst` is in flight wait
 * for it, so nobody tries the lock before notifications are flowing.
 */
import { Deferred, Effect, Exit, FiberId, Scope } from "effect"
import type { LockBackendError } from "../LockError.js"
import type { ReleaseSignal } from "../LockBackend.js"

interface Waiter {
  woken: boolean
  parked: Deferred.Deferred<void> | undefined
}

interface KeyQueue {
  readonly waiters: Set<Waiter>
  readonly ready: Deferred.Deferred<void>
}

export interface WaiterQueueHooks {
  readonly onFirst: (key: string) => Effect.Effect<void, LockBackendError>
  readonly onLast: (key: string) => Effect.Effect<void>
}

export interface WaiterQueue {
  readonly register: (key: string) => Effect.Effect<ReleaseSignal, LockBackendError, Scope.Scope>
  /** Wake the first waiter on `key` that is not awake yet. */
  readonly notify: (key: string) => void
  /** Wake one waiter on every key (after a reconnect, when notifications may have been missed). */
  readonly notifyEveryKey: () => void
  readonly waitingKeys: () => ReadonlyArray<string>
  readonly waiterCount: () => number
}

const noHooks: WaiterQueueHooks = { onFirst: () => Effect.void, onLast: () => Effect.void }

export const makeWaiterQueue = (hooks: WaiterQueueHooks = noHooks): WaiterQueue => {
  const queues = new Map<string, KeyQueue>()
  let count = 0

  const wake = (waiter: Waiter) => {
    waiter.woken = true
    if (waiter.parked !== undefined) {
      const parked = waiter.parked
      waiter.parked = undefined
      Deferred.unsafeDone(parked, Exit.void)
    }
  }

  const notify = (key: string): void => {
    const queue = queues.get(key)
    if (queue === undefined) return
    for (const waiter of queue.waiters) {
      if (!waiter.woken) {
        wake(waiter)
        return
      }
    }
  }

  const leave = (key: string, queue: KeyQueue, waiter: Waiter) =>
    Effect.suspend(() => {
      if (!queue.waiters.delete(waiter)) return Effect.void
      count--
      if (waiter.woken) notify(key)
      if (queue.waiters.size > 0 || queues.get(key) !== queue) return Effect.void
      queues.delete(key)
      return hooks.onLast(key)
    })

  const register = (key: string): Effect.Effect<ReleaseSignal, LockBackendError, Scope.Scope> =>
    Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        let queue = queues.get(key)
        const first = queue === undefined
        if (queue === undefined) {
          queue = { waiters: new Set(), ready: Deferred.unsafeMake<void>(FiberId.none) }
          queues.set(key, queue)
        }
        const waiter: Waiter = { woken: false, parked: undefined }
        queue.waiters.add(waiter)
        count++
        const scope = yield* Effect.scope
        yield* Scope.addFinalizer(scope, leave(key, queue, waiter))
        if (first) {
          const subscribed = yield* Effect.exit(restore(hooks.onFirst(key)))
          // Whatever happened, later registrants must not wait forever on `ready`.
          Deferred.unsafeDone(queue.ready, Exit.void)
          if (Exit.isFailure(subscribed)) return yield* Effect.failCause(subscribed.cause)
        } else {
          yield* restore(Deferred.await(queue.ready))
        }
        const signal: ReleaseSignal = {
          await: Effect.suspend(() => {
            if (waiter.woken) {
              waiter.woken = false
              return Effect.void
            }
            const parked = Deferred.unsafeMake<void>(FiberId.none)
            waiter.parked = parked
            return Deferred.await(parked).pipe(
              Effect.onInterrupt(() =>
                Effect.sync(() => {
                  if (waiter.parked === parked) waiter.parked = undefined
                })
              ),
              Effect.zipRight(Effect.sync(() => {
                waiter.woken = false
              }))
            )
          })
        }
        return signal
      })
    )

  return {
    register,
    notify,
    notifyEveryKey: () => {
      for (const key of queues.keys()) notify(key)
    },
    waitingKeys: () => Array.from(queues.keys()),
    waiterCount: () => count
  }
}
