/**
 * Local wait queues, one per key, built once per backend by `LockBackend.make`. Waiters on a key
 * are served first in, first out:
 *
 * - a release notification wakes the first waiter that is not awake yet, never the herd; a woken
 *   waiter that leaves without using its wake-up passes it on, so none is lost locally;
 * - only the head of the queue watches the clock (retry schedule, the holder's lease); the others
 *   sleep until a notification reaches them or they become the head ("promoted"), so a thousand
 *   waiters cost the server no polling;
 * - a release by a holder in this process may hand the lock straight to the waiter it would wake
 *   (`claimHandOver`), in the release's own backend call.
 *
 * A waiter's phase, and every transition (nothing else changes a phase):
 *
 * ```text
 * Waiting{woken, attempting}
 *   --notify-->         Waiting{woken: true}                 (and unparked)
 *   --claimHandOver-->  HandingOver                          (only when not woken and not attempting)
 *   --leave-->          Left                                 (a pending wake-up passes to the next)
 * HandingOver{notified, overdue}
 *   --notify-->         HandingOver{notified: true}          (kept: it is the waiter's if the hand-over fails)
 *   --wait runs out-->  HandingOver{overdue: true}           (the waiter waits for the call to settle)
 *   --grant-->          HandedOver                           (and unparked)
 *   --cancel-->         Waiting{woken: notified}             (unparked when notified or overdue)
 *   --leave-->          Left                                 (the releaser's grant then fails: it releases)
 * HandedOver{lease}
 *   --leave(kept)-->    Left                                 (not kept, i.e. interrupted before it took
 *                                                             the lock: released on its behalf, onOrphan)
 * ```
 *
 * `promoted` (became the head, not told yet) and `parked` (what resumes a sleeping waiter)
 * are independent of the phase.
 *
 * `onFirst` / `onLast` let a backend hold a subscription (a Redis channel) exactly as long as the
 * key has local waiters; waiters that get ready while `onFirst` is in flight wait for it, so nobody
 * relies on notifications before they are flowing.
 */
import type { Tracer } from "effect"
import { Deferred, Effect, Exit, FiberId } from "effect"
import type { LockRequest } from "../../LockBackend.js"
import type { LockBackendError } from "../../LockError.js"
import { sleepMillis } from "../time.js"

/** A lock handed straight to a waiter by a release in this process. */
export interface HandedOver {
  readonly _tag: "HandedOver"
  readonly fencingToken: bigint
  /** Clock time (ms) at which the hand-over call started: the lease runs from here at the latest. */
  readonly startedAt: number
  /** The span of the hold that handed it over, when traced. */
  readonly from?: Tracer.AnySpan | undefined
}

/**
 * Why a waiter stopped waiting: a release notification reached it (try the lock), it became the
 * head of the queue (from now on it watches the clock), its time ran out, or the lock was handed
 * over to it.
 */
export type WakeUp = "released" | "promoted" | "timeout" | HandedOver

/** A registration in a key's local wait queue. */
export interface ReleaseSignal {
  /**
   * Wait up to `millis` (`Infinity`: no limit) for a wake-up. A hand-over in flight to this waiter
   * when the time runs out is waited for: the waiter then learns whether it holds the lock.
   */
  readonly await: (millis: number) => Effect.Effect<WakeUp>
  /** Whether this waiter is the head of its key's local queue. */
  readonly isHead: () => boolean
  /**
   * Wait until release notifications for the key flow (the first waiter on a key subscribes here).
   * `true` when this waiter subscribed: a release between its last attempt and the subscription
   * woke nobody, so it should try again at once.
   */
  readonly ready: Effect.Effect<boolean, LockBackendError>
  /**
   * Leave the queue, whatever happened. `kept`: the waiter got the lock it was handed over (if
   * any); otherwise a lock handed to it is released on its behalf. Idempotent.
   */
  readonly leave: (kept: boolean) => Effect.Effect<void>
}

type Phase =
  | { readonly _tag: "Waiting"; woken: boolean; attempting: boolean }
  | { readonly _tag: "HandingOver"; notified: boolean; overdue: boolean }
  | { readonly _tag: "HandedOver"; readonly handedOver: HandedOver }
  | { readonly _tag: "Left" }

interface Waiter {
  readonly request: LockRequest
  phase: Phase
  promoted: boolean
  /** Resumes the waiter's fiber, which then reads why it was woken. */
  parked: (() => void) | undefined
}

interface KeyQueue {
  readonly waiters: Set<Waiter>
  /** The subscription: not asked for yet, being made by the first waiter to get ready, or made. */
  subscription: "none" | "subscribing" | "subscribed"
  readonly subscribed: Deferred.Deferred<void>
}

export interface WaiterQueueHooks {
  /** The number of waiters changed by `delta` (for the waiters gauge). */
  readonly onCount: (delta: number) => void
  readonly onFirst: (key: string) => Effect.Effect<void, LockBackendError>
  readonly onLast: (key: string) => Effect.Effect<void>
  /** A lock was handed to a waiter that left without taking it: release it for `request.owner`. */
  readonly onOrphan: (request: LockRequest) => Effect.Effect<void>
}

/**
 * A release's claim on the waiter it is handing the lock to. Exactly one of `grant` and `cancel`
 * must be called, once.
 */
export interface HandOverClaim {
  /** What the waiter asked for: the owner, lease and fencing of the hand-over. */
  readonly request: LockRequest
  /**
   * The lock now belongs to the waiter. `false` when the waiter left meanwhile: the caller must then
   * release the lock for `request.owner`.
   */
  readonly grant: (handedOver: HandedOver) => boolean
  /** Nothing was handed over: the waiter goes on waiting. */
  readonly cancel: () => void
}

export interface WaiterQueue {
  readonly register: (request: LockRequest) => Effect.Effect<ReleaseSignal>
  /** `register`, done now (the caller leaves the queue however it ends). */
  readonly registerNow: (request: LockRequest) => ReleaseSignal
  /** Wake the first waiter on `key` that is not awake yet. */
  readonly notify: (key: string) => void
  /** Wake one waiter on every key (after a reconnect, when notifications may have been missed). */
  readonly notifyEveryKey: () => void
  /** Wake every waiter on every key (the backend is closing: each attempts, fails and leaves). */
  readonly wakeEveryone: () => void
  /**
   * Claim the waiter that a release of `key` would wake for a hand-over, unless it is about to make
   * or making an attempt of its own, or is already being handed the lock.
   */
  readonly claimHandOver: (key: string) => HandOverClaim | undefined
  /** How many local waiters `key` has. */
  readonly waitersOn: (key: string) => number
  /**
   * Count an attempt of this process on `key` as in flight until `attemptDone`: a caller that would
   * wait for `key` meanwhile queues up at once rather than send an attempt of its own (the first
   * waiter of a key tries again right after subscribing, so nothing is missed).
   */
  readonly attemptStarted: (key: string) => void
  readonly attemptDone: (key: string) => void
  /** Whether fibers of this process wait for `key`, or attempt it (`attemptStarted`). */
  readonly isContended: (key: string) => boolean
  readonly waitingKeys: () => ReadonlyArray<string>
  readonly waiterCount: () => number
}

const left: Phase = { _tag: "Left" }

const unpark = (waiter: Waiter) => {
  const parked = waiter.parked
  if (parked !== undefined) {
    waiter.parked = undefined
    parked()
  }
}

const headOf = (queue: KeyQueue): Waiter | undefined => queue.waiters.values().next().value

/** The waiter a release would wake or hand over to: the first that is neither awake nor served. */
const firstAsleep = (queue: KeyQueue): Waiter | undefined => {
  for (const waiter of queue.waiters) {
    const phase = waiter.phase
    if (phase._tag === "HandingOver" || (phase._tag === "Waiting" && !phase.woken)) return waiter
  }
  return undefined
}

export const makeWaiterQueue = (hooks: WaiterQueueHooks): WaiterQueue => {
  const queues = new Map<string, KeyQueue>()
  const attempting = new Map<string, number>()
  let count = 0

  const notify = (key: string): void => {
    const queue = queues.get(key)
    if (queue === undefined) return
    for (const waiter of queue.waiters) {
      const phase = waiter.phase
      if (phase._tag === "Waiting" && !phase.woken) {
        phase.woken = true
        unpark(waiter)
        return
      }
      // Kept for a waiter being handed the lock: it is the release's own notification when the
      // hand-over fell back to a plain release, and may reach us before that release's reply.
      if (phase._tag === "HandingOver" && !phase.notified) {
        phase.notified = true
        return
      }
    }
  }

  const claimHandOver = (key: string): HandOverClaim | undefined => {
    const queue = queues.get(key)
    const waiter = queue === undefined ? undefined : firstAsleep(queue)
    if (waiter === undefined || waiter.phase._tag !== "Waiting" || waiter.phase.attempting) return undefined
    const handingOver = { _tag: "HandingOver" as const, notified: false, overdue: false }
    waiter.phase = handingOver
    return {
      request: waiter.request,
      grant: (handedOver) => {
        if (waiter.phase !== handingOver) return false
        // A notification meanwhile came while the lock was held throughout: nothing to pass on.
        waiter.phase = { _tag: "HandedOver", handedOver }
        unpark(waiter)
        return true
      },
      cancel: () => {
        if (waiter.phase !== handingOver) return
        waiter.phase = { _tag: "Waiting", woken: handingOver.notified, attempting: false }
        if (handingOver.notified || handingOver.overdue) unpark(waiter)
      }
    }
  }

  const leave = (key: string, queue: KeyQueue, waiter: Waiter, kept: boolean): Effect.Effect<void> =>
    Effect.suspend(() => {
      const wasHead = headOf(queue) === waiter
      if (!queue.waiters.delete(waiter)) return Effect.void
      const phase = waiter.phase
      waiter.phase = left
      count--
      hooks.onCount(-1)
      if ((phase._tag === "Waiting" && phase.woken) || (phase._tag === "HandingOver" && phase.notified)) notify(key)
      const next = headOf(queue)
      if (wasHead && next !== undefined) {
        next.promoted = true
        unpark(next)
      }
      const orphan = phase._tag === "HandedOver" && !kept ? hooks.onOrphan(waiter.request) : Effect.void
      if (queue.waiters.size > 0 || queues.get(key) !== queue) return orphan
      queues.delete(key)
      return Effect.zipRight(orphan, hooks.onLast(key))
    })

  /**
   * A waiter and its side of the queue in one object per waiter, its behaviour on the prototype:
   * ten thousand parked waiters cost their fields, not a set of closures and effects each.
   */
  class Signal implements Waiter, ReleaseSignal {
    phase: Phase = { _tag: "Waiting", woken: false, attempting: false }
    promoted = false
    parked: (() => void) | undefined = undefined
    constructor(readonly key: string, readonly queue: KeyQueue, readonly request: LockRequest) {}

    /** The wake-up waiting for this waiter, if any, consumed. */
    reason(): WakeUp | undefined {
      const phase = this.phase
      if (phase._tag === "HandedOver") return phase.handedOver
      if (phase._tag === "Waiting" && phase.woken) {
        phase.woken = false
        this.promoted = false
        return "released"
      }
      // Also while a hand-over is in flight: the waiter then watches the clock, and makes no attempt.
      if (this.promoted) {
        this.promoted = false
        return "promoted"
      }
      return undefined
    }

    // The caller attempts after these (and, when it subscribed, right after `ready`).
    attemptsAfter<W extends WakeUp>(wakeUp: W): W {
      if (this.phase._tag === "Waiting") this.phase.attempting = wakeUp === "released" || wakeUp === "timeout"
      return wakeUp
    }

    woke(): WakeUp {
      return this.attemptsAfter(this.reason() ?? "timeout")
    }

    // The first waiter to get ready subscribes; later ones wait for that, so that nobody relies on
    // notifications before they are flowing. Whatever happens, nobody waits on it forever.
    get ready(): Effect.Effect<boolean, LockBackendError> {
      return Effect.suspend(() => {
        const queue = this.queue
        if (queue.subscription === "subscribed") return Effect.succeed(false)
        if (queue.subscription === "subscribing") return Effect.as(Deferred.await(queue.subscribed), false)
        return Effect.uninterruptibleMask((restore) => {
          queue.subscription = "subscribing"
          return Effect.flatMap(Effect.exit(restore(hooks.onFirst(this.key))), (subscribed) => {
            queue.subscription = "subscribed"
            Deferred.unsafeDone(queue.subscribed, Exit.void)
            if (Exit.isFailure(subscribed)) return Effect.failCause(subscribed.cause)
            // Try at once, unless a release is handing the lock over to this waiter already.
            const phase = this.phase
            if (phase._tag !== "Waiting") return Effect.succeed(false)
            phase.attempting = true
            return Effect.succeed(true)
          })
        })
      })
    }

    leave(kept: boolean): Effect.Effect<void> {
      return leave(this.key, this.queue, this, kept)
    }

    isHead(): boolean {
      return headOf(this.queue) === this
    }

    /** The time ran out for the wait that `wake` would end (the head's timer). */
    outOfTime(wake: () => void): void {
      if (this.parked !== wake) return
      const phase = this.phase
      // A hand-over already in flight is waited for; none can start after this step.
      if (phase._tag === "HandingOver") {
        phase.overdue = true
        return
      }
      if (phase._tag === "Waiting") phase.attempting = true
      unpark(this)
    }

    /** Sleep until woken: no timer, and nothing but the resume callback while parked. */
    park(): Effect.Effect<WakeUp> {
      return Effect.async<WakeUp>((resume) => {
        const wake = () => resume(Effect.sync(() => this.woke()))
        this.parked = wake
        return Effect.sync(() => {
          if (this.parked === wake) this.parked = undefined
        })
      })
    }

    await(millis: number): Effect.Effect<WakeUp> {
      return Effect.suspend(() => {
        if (this.phase._tag === "Waiting") this.phase.attempting = false
        const now = this.reason()
        if (now !== undefined) return Effect.succeed(this.attemptsAfter(now))
        if (millis === Infinity) return this.park()
        const parked = Deferred.unsafeMake<void>(FiberId.none)
        const wake = () => Deferred.unsafeDone(parked, Exit.void)
        this.parked = wake
        const woken = Effect.map(Deferred.await(parked), () => this.woke())
        // A child timer fiber rather than a race: when a wake-up comes first, the waiter resumes
        // in one step and the timer is interrupted without being waited for.
        return Effect.flatMap(
          Effect.fork(
            Effect.interruptible(Effect.zipRight(sleepMillis(millis), Effect.sync(() => this.outOfTime(wake))))
          ),
          (timer) =>
            Effect.ensuring(
              woken,
              Effect.sync(() => {
                if (this.parked === wake) this.parked = undefined
                timer.unsafeInterruptAsFork(FiberId.none)
              })
            )
        )
      })
    }
  }

  const register = (request: LockRequest): Effect.Effect<ReleaseSignal> => Effect.sync(() => registerNow(request))

  const registerNow = (request: LockRequest): ReleaseSignal => {
    const { key } = request
    let queue = queues.get(key)
    if (queue === undefined) {
      queue = { waiters: new Set(), subscription: "none", subscribed: Deferred.unsafeMake<void>(FiberId.none) }
      queues.set(key, queue)
    }
    const waiter = new Signal(key, queue, request)
    queue.waiters.add(waiter)
    count++
    hooks.onCount(1)
    return waiter
  }

  return {
    register,
    registerNow,
    notify,
    notifyEveryKey: () => {
      for (const key of queues.keys()) notify(key)
    },
    wakeEveryone: () => {
      for (const queue of queues.values()) {
        for (const waiter of queue.waiters) {
          if (waiter.phase._tag === "Waiting" && !waiter.phase.woken) {
            waiter.phase.woken = true
            unpark(waiter)
          }
        }
      }
    },
    claimHandOver,
    waitersOn: (key) => queues.get(key)?.waiters.size ?? 0,
    attemptStarted: (key) => {
      attempting.set(key, (attempting.get(key) ?? 0) + 1)
    },
    attemptDone: (key) => {
      const n = attempting.get(key) ?? 0
      if (n <= 1) attempting.delete(key)
      else attempting.set(key, n - 1)
    },
    isContended: (key) => queues.has(key) || attempting.has(key),
    waitingKeys: () => Array.from(queues.keys()),
    waiterCount: () => count
  }
}
