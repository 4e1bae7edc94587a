/**
 * Local wait queues, one per key, shared by every backend. Waiters on a key are served first in,
 * first out:
 *
 * - a release notification wakes the first waiter that has not been woken yet, never the herd;
 *   a woken waiter that leaves without using its wake-up hands it on, so none is lost locally;
 * - only the head of the queue needs to watch the clock (retry schedule, the holder's lease); the
 *   others sleep until a notification reaches them or they become the head ("promoted"), so a
 *   thousand waiters cost the server no polling.
 *
 * `onFirst` / `onLast` let a backend hold an external subscription (a Redis channel) exactly as
 * long as the key has local waiters; registrations that arrive while `onFirst` is in flight wait
 * for it, so nobody relies on notifications before they are flowing.
 */
import { Deferred, Effect, Exit, FiberId, Scope } from "effect"
import type { ReleaseSignal } from "../LockBackend.js"
import type { LockBackendError } from "../LockError.js"

interface Waiter {
  /** A release notification reached this waiter and was not used yet. */
  woken: boolean
  /** The waiter became the head of its queue and was not told yet. */
  promoted: boolean
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
  /** How many local waiters `key` has. */
  readonly waitersOn: (key: string) => number
  readonly waitingKeys: () => ReadonlyArray<string>
  readonly waiterCount: () => number
}

const noHooks: WaiterQueueHooks = { onFirst: () => Effect.void, onLast: () => Effect.void }

const unpark = (waiter: Waiter) => {
  if (waiter.parked !== undefined) {
    const parked = waiter.parked
    waiter.parked = undefined
    Deferred.unsafeDone(parked, Exit.void)
  }
}

const headOf = (queue: KeyQueue): Waiter | undefined => queue.waiters.values().next().value

export const makeWaiterQueue = (hooks: WaiterQueueHooks = noHooks): WaiterQueue => {
  const queues = new Map<string, KeyQueue>()
  let count = 0

  const notify = (key: string): void => {
    const queue = queues.get(key)
    if (queue === undefined) return
    for (const waiter of queue.waiters) {
      if (!waiter.woken) {
        waiter.woken = true
        unpark(waiter)
        return
      }
    }
  }

  const leave = (key: string, queue: KeyQueue, waiter: Waiter) =>
    Effect.suspend(() => {
      const wasHead = headOf(queue) === waiter
      if (!queue.waiters.delete(waiter)) return Effect.void
      count--
      if (waiter.woken) notify(key)
      const next = headOf(queue)
      if (wasHead && next !== undefined) {
        next.promoted = true
        unpark(next)
      }
      if (queue.waiters.size > 0 || queues.get(key) !== queue) return Effect.void
      queues.delete(key)
      return hooks.onLast(key)
    })

  const signalOf = (queue: KeyQueue, waiter: Waiter, opened: boolean): ReleaseSignal => ({
    opened,
    isHead: () => headOf(queue) === waiter,
    await: Effect.suspend(() => {
      const reason = (): "released" | "promoted" | undefined => {
        if (waiter.woken) {
          waiter.woken = false
          waiter.promoted = false
          return "released"
        }
        if (waiter.promoted) {
          waiter.promoted = false
          return "promoted"
        }
        return undefined
      }
      const now = reason()
      if (now !== undefined) return Effect.succeed(now)
      const parked = Deferred.unsafeMake<void>(FiberId.none)
      waiter.parked = parked
      return Deferred.await(parked).pipe(
        Effect.onInterrupt(() =>
          Effect.sync(() => {
            if (waiter.parked === parked) waiter.parked = undefined
          })
        ),
        Effect.map(() => reason() ?? "released")
      )
    })
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
        const waiter: Waiter = { woken: false, promoted: false, parked: undefined }
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
        return signalOf(queue, waiter, first)
      })
    )

  return {
    register,
    notify,
    notifyEveryKey: () => {
      for (const key of queues.keys()) notify(key)
    },
    waitersOn: (key) => queues.get(key)?.waiters.size ?? 0,
    waitingKeys: () => Array.from(queues.keys()),
    waiterCount: () => count
  }
}
