/**
 * Local wait queues, one per key, shared by every backend. Waiters on a key are served first in,
 * first out:
 *
 * - a release notification wakes the first waiter that has not been woken yet, never the herd;
 *   a woken waiter that leaves without using its wake-up hands it on, so none is lost locally;
 * - only the head of the queue needs to watch the clock (retry schedule, the holder's lease); the
 *   others sleep until a notification reaches them or they become the head ("promoted"), so a
 *   thousand waiters cost the server no polling;
 * - a release by a holder in this process may hand the lock straight to the waiter it would wake
 *   (`claimHandOver`), in the release's own backend call; that waiter neither attempts nor is
 *   woken meanwhile, and a hand-over to a waiter that has left is undone by the releaser.
 *
 * `onFirst` / `onLast` let a backend hold an external subscription (a Redis channel) exactly as
 * long as the key has local waiters; waiters that get ready while `onFirst` is in flight wait for
 * it, so nobody relies on notifications before they are flowing.
 */
import { Deferred, Effect, Exit, FiberId } from "effect"
import type { HandedOver, LockRequest, ReleaseSignal, WakeUp } from "../LockBackend.js"
import type { LockBackendError } from "../LockError.js"
import { wholeMillis } from "./time.js"

interface Waiter {
  readonly request: LockRequest
  /** A release notification reached this waiter and was not used yet. */
  woken: boolean
  /** The waiter became the head of its queue and was not told yet. */
  promoted: boolean
  /** Between a wake-up that calls for an attempt ("released", "timeout") and the next wait. */
  attempting: boolean
  /** A release is handing the lock to this waiter right now. */
  handingOver: boolean
  /** A notification arrived during the hand-over: it is this waiter's if the hand-over fails. */
  notified: boolean
  /** The lock was handed to this waiter. */
  handedOver: HandedOver | undefined
  /** Its wait ran out while a hand-over to it was in flight: it waits for that to settle. */
  overdue: boolean
  /** The waiter left the queue (got in, gave up or was interrupted). */
  left: boolean
  parked: Deferred.Deferred<void> | undefined
}

interface KeyQueue {
  readonly waiters: Set<Waiter>
  /** The subscription: not asked for yet, being made by the first waiter to get ready, or made. */
  subscription: "none" | "subscribing" | "subscribed"
  readonly subscribed: Deferred.Deferred<void>
}

export interface WaiterQueueHooks {
  readonly onFirst: (key: string) => Effect.Effect<void, LockBackendError>
  readonly onLast: (key: string) => Effect.Effect<void>
}

/**
 * A release's claim on the waiter it is handing the lock to. Exactly one of `grant` and `cancel`
 * must be called, once.
 */
export interface HandOverClaim {
  /** What the waiter asked for: the owner, lease and fencing of the hand-over. */
  readonly request: LockRequest
  /**
   * The lock now belongs to the waiter. `false` when the waiter left meanwhile: the caller must
   * then release the lock for `request.owner`.
   */
  readonly grant: (handedOver: HandedOver) => boolean
  /** Nothing was handed over: the waiter goes on waiting. */
  readonly cancel: () => void
}

export interface WaiterQueue {
  readonly register: (request: LockRequest) => Effect.Effect<ReleaseSignal>
  /** Wake the first waiter on `key` that is not awake yet. */
  readonly notify: (key: string) => void
  /** Wake one waiter on every key (after a reconnect, when notifications may have been missed). */
  readonly notifyEveryKey: () => void
  /**
   * Claim the waiter that a release of `key` would wake (the first one not awake yet) for a
   * hand-over, unless it is about to make or making an attempt of its own, or is already being
   * handed the lock. While claimed it is not woken by notifications and makes no attempt.
   */
  readonly claimHandOver: (key: string) => HandOverClaim | undefined
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

/** The waiter a release would wake: the first that is not awake yet. */
const firstAsleep = (queue: KeyQueue): Waiter | undefined => {
  for (const waiter of queue.waiters) if (!waiter.woken) return waiter
  return undefined
}

export const makeWaiterQueue = (hooks: WaiterQueueHooks = noHooks): WaiterQueue => {
  const queues = new Map<string, KeyQueue>()
  let count = 0

  const wake = (waiter: Waiter) => {
    waiter.woken = true
    unpark(waiter)
  }

  const notify = (key: string): void => {
    const queue = queues.get(key)
    if (queue === undefined) return
    for (const waiter of queue.waiters) {
      if (waiter.woken || (waiter.handingOver && waiter.notified)) continue
      // Kept for a waiter being handed the lock: it is the release's own notification when the
      // hand-over fell back to a plain release, and may reach us before that release's reply.
      if (waiter.handingOver) waiter.notified = true
      else wake(waiter)
      return
    }
  }

  const claimHandOver = (key: string): HandOverClaim | undefined => {
    const queue = queues.get(key)
    const waiter = queue === undefined ? undefined : firstAsleep(queue)
    if (waiter === undefined || waiter.handingOver || waiter.attempting) return undefined
    waiter.handingOver = true
    return {
      request: waiter.request,
      grant: (handedOver) => {
        waiter.handingOver = false
        // A notification meanwhile came while the lock was held throughout: nothing to pass on.
        waiter.notified = false
        if (waiter.left) return false
        waiter.handedOver = handedOver
        unpark(waiter)
        return true
      },
      cancel: () => {
        waiter.handingOver = false
        if (waiter.notified) {
          waiter.notified = false
          if (!waiter.left) wake(waiter)
        } else if (waiter.overdue) {
          unpark(waiter)
        }
      }
    }
  }

  const leave = (key: string, queue: KeyQueue, waiter: Waiter) =>
    Effect.suspend(() => {
      const wasHead = headOf(queue) === waiter
      if (!queue.waiters.delete(waiter)) return Effect.void
      waiter.left = true
      count--
      if (waiter.woken || waiter.notified) notify(key)
      const next = headOf(queue)
      if (wasHead && next !== undefined) {
        next.promoted = true
        unpark(next)
      }
      if (queue.waiters.size > 0 || queues.get(key) !== queue) return Effect.void
      queues.delete(key)
      return hooks.onLast(key)
    })

  const signalOf = (key: string, queue: KeyQueue, waiter: Waiter): ReleaseSignal => {
    const reason = (): WakeUp | undefined => {
      if (waiter.handedOver !== undefined) return waiter.handedOver
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
    // The caller attempts after these (and, when it subscribed, right after `ready`).
    const attemptsAfter = <W extends WakeUp>(wakeUp: W): W => {
      waiter.attempting = wakeUp === "released" || wakeUp === "timeout"
      return wakeUp
    }
    // The first waiter to get ready subscribes; later ones wait for that, so that nobody relies on
    // notifications before they are flowing. Whatever happens, nobody waits on it forever.
    const subscribe = Effect.uninterruptibleMask((restore) => {
      queue.subscription = "subscribing"
      return Effect.flatMap(Effect.exit(restore(hooks.onFirst(key))), (subscribed) => {
        queue.subscription = "subscribed"
        Deferred.unsafeDone(queue.subscribed, Exit.void)
        if (Exit.isFailure(subscribed)) return Effect.failCause(subscribed.cause)
        // Try at once, unless a release is handing the lock over to this waiter already.
        waiter.attempting = !waiter.handingOver && waiter.handedOver === undefined
        return Effect.succeed(waiter.attempting)
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
      leave: leave(key, queue, waiter),
      isHead: () => headOf(queue) === waiter,
      await: (millis) =>
        Effect.suspend(() => {
          waiter.attempting = false
          const now = reason()
          if (now !== undefined) return Effect.succeed(attemptsAfter(now))
          const parked = Deferred.unsafeMake<void>(FiberId.none)
          waiter.parked = parked
          const woken = Effect.map(Deferred.await(parked), () => attemptsAfter(reason() ?? "timeout"))
          if (millis === Infinity) {
            return Effect.ensuring(woken, Effect.sync(() => {
              if (waiter.parked === parked) waiter.parked = undefined
            }))
          }
          // A timer fiber rather than a race: when a wake-up comes first, the waiter resumes in
          // one step and the timer is interrupted without being waited for.
          const outOfTime = Effect.sync(() => {
            if (waiter.parked !== parked) return
            // A hand-over already in flight is waited for; none can start after this step.
            if (waiter.handingOver) {
              waiter.overdue = true
            } else {
              waiter.attempting = true
              unpark(waiter)
            }
          })
          return Effect.flatMap(Effect.forkDaemon(Effect.zipRight(Effect.sleep(wholeMillis(millis)), outOfTime)), (timer) =>
            Effect.ensuring(woken, Effect.sync(() => {
              waiter.overdue = false
              if (waiter.parked === parked) waiter.parked = undefined
              timer.unsafeInterruptAsFork(FiberId.none)
            })))
        })
    }
  }

  const register = (request: LockRequest): Effect.Effect<ReleaseSignal> =>
    Effect.sync(() => {
      const { key } = request
      let queue = queues.get(key)
      if (queue === undefined) {
        queue = { waiters: new Set(), subscription: "none", subscribed: Deferred.unsafeMake<void>(FiberId.none) }
        queues.set(key, queue)
      }
      const waiter: Waiter = {
        request,
        woken: false,
        promoted: false,
        attempting: false,
        handingOver: false,
        notified: false,
        handedOver: undefined,
        overdue: false,
        left: false,
        parked: undefined
      }
      queue.waiters.add(waiter)
      count++
      return signalOf(key, queue, waiter)
    })

  return {
    register,
    notify,
    notifyEveryKey: () => {
      for (const key of queues.keys()) notify(key)
    },
    claimHandOver,
    waitersOn: (key) => queues.get(key)?.waiters.size ?? 0,
    waitingKeys: () => Array.from(queues.keys()),
    waiterCount: () => count
  }
}
