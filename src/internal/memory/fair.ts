/**
 * The fair lock in memory: the mutex's lock entries plus, per name, a queue of waiting owners with
 * a deadline each, the same algorithm as `lua/fair-acquire.lua` (Redisson's `RedissonFairLock`):
 *
 * - a waiting attempt that finds the lock busy (or another owner first in line) joins the end of
 *   the queue; its deadline is its predecessor's (or the holder's lease end) plus the wait window;
 * - the lock goes only to the first owner in line (or to anybody when nobody waits);
 * - each attempt of a queued owner keeps it alive: its deadline becomes at least now + its
 *   position × window; a first in line whose deadline passed (a process that died) is dropped;
 * - when the first in line takes the lock, every other deadline moves a window closer;
 * - when the lock is released, the first in line has one window from then to take it.
 */
import { Effect, Option } from "effect"
import type {
  AcquireResult,
  HandOverResult,
  LockInfo,
  LockRequest,
  ReleaseResult,
  RenewResult
} from "../../LockBackend.js"
import { LockBackendError } from "../../LockError.js"
import type { KindPrimitives } from "../../LockKinds.js"
import { nowMillis } from "../time.js"
import type { Store } from "./store.js"
import { kindConflict, makeNotifier, released } from "./store.js"

/** How long a queued waiter stays in line without an attempt: Redisson's `fairLockWaitTimeout` default. */
export const FAIR_WAIT_WINDOW_MILLIS = 5_000

interface Queued {
  readonly owner: string
  deadline: number
}

const renewed: RenewResult = { _tag: "Renewed" }
const stolen: RenewResult = { _tag: "Lost", reason: "stolen" }
const expired: RenewResult = { _tag: "Lost", reason: "expired" }

export const makeFair = (store: Store, windowMillis = FAIR_WAIT_WINDOW_MILLIS): Effect.Effect<KindPrimitives> =>
  Effect.map(makeNotifier(), (notifier) => {
    const queues = new Map<string, Array<Queued>>()
    const queueOf = (key: string): Array<Queued> => {
      let queue = queues.get(key)
      if (queue === undefined) queues.set(key, queue = [])
      return queue
    }
    const forgetEmpty = (key: string, queue: Array<Queued>) => {
      if (queue.length === 0) queues.delete(key)
    }
    const dropStale = (queue: Array<Queued>, now: number) => {
      while (queue.length > 0 && (queue[0] as Queued).deadline <= now) queue.shift()
    }
    /** The first in line takes the lock: everybody else moves a window closer. */
    const advance = (queue: Array<Queued>) => {
      queue.shift()
      for (const queued of queue) queued.deadline -= windowMillis
    }

    /**
     * The lock is free: the first in line has one window from now to come and take it (it was told),
     * whatever its deadline said; if it never comes (its process died) the next one goes after it.
     */
    const freed = (queue: Array<Queued>, now: number) => {
      dropStale(queue, now)
      const first = queue[0]
      if (first !== undefined) first.deadline = Math.min(first.deadline, now + windowMillis)
    }

    const release = <A extends HandOverResult>(key: string, owner: string, onFree: (now: number) => A) =>
      Effect.map(nowMillis, (now): A | ReleaseResult =>
        store.releaseWith(key, owner, now, () => {
          const queue = queueOf(key)
          freed(queue, now)
          const result = onFree(now)
          forgetEmpty(key, queue)
          return result
        }))

    const attempt = (request: LockRequest, now: number): AcquireResult | LockBackendError => {
      const { key, owner } = request
      if (store.liveReadWrite(key, now) !== undefined) {
        return kindConflict(key, "acquire", "a read-write lock", "a fair lock")
      }
      const queue = queueOf(key)
      dropStale(queue, now)
      const entry = store.live(key, now)
      const first = queue[0]
      if (entry === undefined && (first === undefined || first.owner === owner)) {
        if (first !== undefined) advance(queue)
        forgetEmpty(key, queue)
        return { _tag: "Acquired", fencingToken: store.grant(key, request, now) }
      }
      const count = entry?.holders.get(owner)
      if (entry !== undefined && count !== undefined) {
        entry.holders.set(owner, count + 1)
        entry.expiresAt = now + request.leaseMillis
        return { _tag: "Acquired", fencingToken: request.fencing ? store.currentToken(key) : 0n }
      }
      // Busy: the holder's lease, or (free, but somebody else is first in line) that one's deadline.
      const busyFor = entry !== undefined
        ? entry.expiresAt - now
        : Math.max(0, (first as Queued).deadline - now)
      if (request.waiting === true) {
        const position = queue.findIndex((queued) => queued.owner === owner)
        if (position >= 0) {
          const queued = queue[position] as Queued
          queued.deadline = Math.max(queued.deadline, now + (position + 1) * windowMillis)
        } else {
          const last = queue[queue.length - 1]
          const ahead = last === undefined ? busyFor : last.deadline - now
          queue.push({ owner, deadline: now + ahead + windowMillis })
        }
      }
      forgetEmpty(key, queue)
      // Come back within half a window at the latest, so that a live waiter keeps its place.
      return { _tag: "Busy", ttlMillis: Math.min(busyFor, Math.floor(windowMillis / 2)) }
    }

    return {
      name: "memory",
      tryAcquire: (request) =>
        Effect.flatMap(nowMillis, (now) => {
          const result = attempt(request, now)
          return result instanceof LockBackendError ? Effect.fail(result) : Effect.succeed(result)
        }),
      renew: (requests) =>
        Effect.map(nowMillis, (now) =>
          requests.map((request) => {
            const entry = store.live(request.key, now)
            if (entry === undefined) return expired
            if (!entry.holders.has(request.owner)) return stolen
            entry.expiresAt = now + request.leaseMillis
            return renewed
          })),
      release: (key, owner) =>
        release(key, owner, (): ReleaseResult => {
          notifier.notify(key)
          return released
        }),
      // A release hands over only to the first in line (or when nobody is in line).
      handOver: (key, from, to) =>
        release(key, from, (now): HandOverResult => {
          const queue = queueOf(key)
          const first = queue[0]
          if (first !== undefined && first.owner !== to.owner) {
            notifier.notify(key)
            return released
          }
          if (first !== undefined) advance(queue)
          return { _tag: "HandedOver", fencingToken: store.grant(key, to, now) }
        }),
      abandon: (request) =>
        Effect.sync(() => {
          const queue = queues.get(request.key)
          if (queue === undefined) return
          const position = queue.findIndex((queued) => queued.owner === request.owner)
          if (position < 0) return
          queue.splice(position, 1)
          for (let i = position; i < queue.length; i++) (queue[i] as Queued).deadline -= windowMillis
          forgetEmpty(request.key, queue)
          // The next in line may be able to go now.
          if (position === 0) notifier.notify(request.key)
        }),
      forceRelease: (key) =>
        Effect.map(nowMillis, (now) => {
          const entry = store.live(key, now)
          store.locks.delete(key)
          const queue = queues.get(key)
          if (queue !== undefined) freed(queue, now)
          if (entry !== undefined) notifier.notify(key)
          return entry !== undefined
        }),
      inspect: (key) =>
        Effect.map(nowMillis, (now): Option.Option<LockInfo> => {
          const entry = store.live(key, now)
          if (entry === undefined) return Option.none()
          return Option.some({
            key,
            holders: Array.from(entry.holders, ([owner, holdCount]) => ({ owner, holdCount })),
            ttlMillis: entry.expiresAt - now
          })
        }),
      subscribe: notifier.subscribe,
      unsubscribe: notifier.unsubscribe,
      notifications: notifier.notifications
    }
  })
