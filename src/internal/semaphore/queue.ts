/**
 * Local wait queues for semaphores, one per key, built once per backend by `LockBackend.make`.
 * Waiters on a key are served strictly in arrival order: only the head of the queue attempts, so a
 * request for many permits is never overtaken by later requests for few in this process.
 *
 * - a notification for the key (a release, an expiry seen by a script, `setPermits`) wakes the head;
 *   if it arrives while the head's attempt is in flight, the head attempts again at once;
 * - when the head leaves (it got its permits, ran out of time or was interrupted), the next waiter
 *   becomes the head and attempts at once: the permits a release freed go to the waiters that fit,
 *   in arrival order, until one does not fit;
 * - the others sleep until they become the head (or their wait runs out): they cost the server
 *   nothing.
 *
 * The key's subscription (`onFirst`/`onLast`) lasts exactly as long as the key has local waiters.
 */
import { Deferred, Effect, Exit, FiberId } from "effect"
import type { LockBackendError } from "../../LockError.js"
import { sleepMillis } from "../time.js"

export interface Ticket {
  /**
   * Wait until notifications for the key flow (the first waiter subscribes). `true` when this
   * waiter subscribed: a release before the subscription woke nobody, so it should attempt again.
   */
  readonly ready: Effect.Effect<boolean, LockBackendError>
  readonly isHead: () => boolean
  /** Sleep up to `millis` (`Infinity`: no limit); `true` when woken (notified, or became the head). */
  readonly await: (millis: number) => Effect.Effect<boolean>
  /** Leave the queue (idempotent): the next waiter becomes the head. */
  readonly leave: Effect.Effect<void>
}

export interface SemaphoreQueue {
  readonly register: (key: string) => Effect.Effect<Ticket>
  /** A notification for `key`: wake its head. */
  readonly notify: (key: string) => void
  /** Notifications may have been missed (a reconnect): wake every head. */
  readonly notifyEveryKey: () => void
  /** The backend is closing: wake every waiter (each attempts, fails and leaves). */
  readonly wakeEveryone: () => void
  readonly waitersOn: (key: string) => number
}

interface Waiter {
  woken: boolean
  parked: Deferred.Deferred<void> | undefined
}

interface KeyQueue {
  readonly waiters: Set<Waiter>
  subscription: "none" | "subscribing" | "subscribed"
  readonly subscribed: Deferred.Deferred<void>
}

export interface SemaphoreQueueHooks {
  readonly onFirst: (key: string) => Effect.Effect<void, LockBackendError>
  readonly onLast: (key: string) => Effect.Effect<void>
}

const wake = (waiter: Waiter) => {
  waiter.woken = true
  const parked = waiter.parked
  if (parked !== undefined) {
    waiter.parked = undefined
    Deferred.unsafeDone(parked, Exit.void)
  }
}

const headOf = (queue: KeyQueue): Waiter | undefined => queue.waiters.values().next().value

export const makeSemaphoreQueue = (hooks: SemaphoreQueueHooks): SemaphoreQueue => {
  const queues = new Map<string, KeyQueue>()

  const notify = (key: string) => {
    const queue = queues.get(key)
    const head = queue === undefined ? undefined : headOf(queue)
    if (head !== undefined) wake(head)
  }

  const ticketOf = (key: string, queue: KeyQueue, waiter: Waiter): Ticket => {
    const subscribe = Effect.uninterruptibleMask((restore) => {
      queue.subscription = "subscribing"
      return Effect.flatMap(Effect.exit(restore(hooks.onFirst(key))), (subscribed) => {
        queue.subscription = "subscribed"
        Deferred.unsafeDone(queue.subscribed, Exit.void)
        return Exit.isFailure(subscribed) ? Effect.failCause(subscribed.cause) : Effect.succeed(true)
      })
    })
    return {
      ready: Effect.suspend(() =>
        queue.subscription === "none"
          ? subscribe
          : queue.subscription === "subscribing"
          ? Effect.as(Deferred.await(queue.subscribed), false)
          : Effect.succeed(false)
      ),
      isHead: () => headOf(queue) === waiter,
      await: (millis) =>
        Effect.suspend(() => {
          if (waiter.woken) {
            waiter.woken = false
            return Effect.succeed(true)
          }
          const parked = Deferred.unsafeMake<void>(FiberId.none)
          waiter.parked = parked
          const woken = Effect.map(Deferred.await(parked), () => {
            const was = waiter.woken
            waiter.woken = false
            return was
          })
          const done = () => {
            if (waiter.parked === parked) waiter.parked = undefined
          }
          if (millis === Infinity) return Effect.ensuring(woken, Effect.sync(done))
          return Effect.flatMap(
            Effect.fork(Effect.interruptible(Effect.zipRight(
              sleepMillis(millis),
              Effect.sync(() => {
                if (waiter.parked === parked) {
                  waiter.parked = undefined
                  Deferred.unsafeDone(parked, Exit.void)
                }
              })
            ))),
            (timer) =>
              Effect.ensuring(
                woken,
                Effect.sync(() => {
                  done()
                  timer.unsafeInterruptAsFork(FiberId.none)
                })
              )
          )
        }),
      leave: Effect.suspend(() => {
        const wasHead = headOf(queue) === waiter
        if (!queue.waiters.delete(waiter)) return Effect.void
        const next = headOf(queue)
        if (wasHead && next !== undefined) wake(next)
        if (queue.waiters.size > 0 || queues.get(key) !== queue) return Effect.void
        queues.delete(key)
        return hooks.onLast(key)
      })
    }
  }

  return {
    register: (key) =>
      Effect.sync(() => {
        let queue = queues.get(key)
        if (queue === undefined) {
          queue = { waiters: new Set(), subscription: "none", subscribed: Deferred.unsafeMake<void>(FiberId.none) }
          queues.set(key, queue)
        }
        const waiter: Waiter = { woken: false, parked: undefined }
        queue.waiters.add(waiter)
        return ticketOf(key, queue, waiter)
      }),
    notify,
    notifyEveryKey: () => {
      for (const key of queues.keys()) notify(key)
    },
    wakeEveryone: () => {
      for (const queue of queues.values()) for (const waiter of queue.waiters) wake(waiter)
    },
    waitersOn: (key) => queues.get(key)?.waiters.size ?? 0
  }
}
