/**
 * Local wait queues for semaphores, one per key, built once per backend by `LockBackend.make`.
 * Waiters on a key are served in arrival order through a window at the front of the queue: the
 * longest run of waiters, from the head, whose requests fit in the semaphore's total together
 * (just the head when the total is unknown or the head alone asks for more). Only waiters in the
 * window attempt. Since everyone in the window could hold their permits at the same time, a later
 * small request that wins a race inside the window never keeps an earlier large one waiting for
 * more than the holders outside the window; and waiters behind the window never attempt, so a
 * request for many permits is never overtaken by later requests for few in this process.
 *
 * - a notification for the key (a release, an expiry seen by a script, `setPermits`) wakes the
 *   window; a waiter notified while its attempt is in flight attempts again at once;
 * - when a waiter of the window leaves (it got its permits, ran out of time or was interrupted),
 *   the waiters that enter the window attempt at once: the permits a release freed go to the
 *   waiters that fit, in arrival order;
 * - the others sleep until they enter the window (or their wait runs out): they cost the server
 *   nothing.
 *
 * The window lets up to `total` one-permit waiters attempt side by side, so a pool of 8 permits
 * hands over 8 at a time instead of one round trip after another behind a single head.
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
  /** Whether this waiter is in the window at the front of the queue (the ones that attempt). */
  readonly inWindow: () => boolean
  /** Sleep up to `millis` (`Infinity`: no limit); `true` when woken (notified, or became the head). */
  readonly await: (millis: number) => Effect.Effect<boolean>
  /** Leave the queue (idempotent): the next waiter becomes the head. */
  readonly leave: Effect.Effect<void>
}

export interface SemaphoreQueue {
  /** Queue up for `permits` of a semaphore whose total is `total` (`undefined`: unknown). */
  readonly register: (key: string, permits: number, total: number | undefined) => Effect.Effect<Ticket>
  /** A notification for `key`: wake its head. */
  readonly notify: (key: string) => void
  /** Notifications may have been missed (a reconnect): wake every head. */
  readonly notifyEveryKey: () => void
  /** The backend is closing: wake every waiter (each attempts, fails and leaves). */
  readonly wakeEveryone: () => void
  readonly waitersOn: (key: string) => number
}

interface Waiter {
  readonly permits: number
  woken: boolean
  parked: Deferred.Deferred<void> | undefined
}

interface KeyQueue {
  readonly waiters: Set<Waiter>
  /** The semaphore's total as the latest waiter knew it (0: unknown, the window is the head). */
  total: number
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

/** The window: the head, and the waiters after it while all of their requests fit in the total. */
const windowOf = (queue: KeyQueue): Array<Waiter> => {
  const window: Array<Waiter> = []
  let wanted = 0
  for (const waiter of queue.waiters) {
    wanted += waiter.permits
    if (window.length > 0 && wanted > queue.total) break
    window.push(waiter)
  }
  return window
}

export const makeSemaphoreQueue = (hooks: SemaphoreQueueHooks): SemaphoreQueue => {
  const queues = new Map<string, KeyQueue>()

  const notify = (key: string) => {
    const queue = queues.get(key)
    if (queue !== undefined) { for (const waiter of windowOf(queue)) wake(waiter) }
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
      inWindow: () => windowOf(queue).includes(waiter),
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
        const before = windowOf(queue)
        if (!queue.waiters.delete(waiter)) return Effect.void
        // The window may grow whoever leaves: a waiter behind it that asked for more than was left
        // closed it to everybody behind, so its leaving lets them in as surely as a leaving member does.
        for (const entered of windowOf(queue)) if (!before.includes(entered)) wake(entered)
        if (queue.waiters.size > 0 || queues.get(key) !== queue) return Effect.void
        queues.delete(key)
        return hooks.onLast(key)
      })
    }
  }

  return {
    register: (key, permits, total) =>
      Effect.sync(() => {
        let queue = queues.get(key)
        if (queue === undefined) {
          queue = {
            waiters: new Set(),
            total: 0,
            subscription: "none",
            subscribed: Deferred.unsafeMake<void>(FiberId.none)
          }
          queues.set(key, queue)
        }
        if (total !== undefined) queue.total = total
        const waiter: Waiter = { permits, woken: false, parked: undefined }
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
