/**
 * An in-process backend with the same semantics as the Redis one: leases expire by `Clock` time
 * (computed lazily on access), fencing tokens outlive their locks, and waiters wait on in-process
 * signals. It is the embedded default, what the demo runs without `REDIS_URL`, and what the
 * property tests drive with `TestClock`.
 *
 * Locks are shared by everything that uses one built layer: provide `MemoryBackend.layer` once,
 * at the top of the program.
 *
 * @since 0.1.0
 */
import { Effect, Layer, Option } from "effect"
import type { AcquireResult, LockBackendShape, LockInfo, LockRequest, RenewResult } from "./LockBackend.js"
import { LockBackend } from "./LockBackend.js"
import type { HandOverResult } from "./internal/handOver.js"
import { releaseHandingOver } from "./internal/handOver.js"
import { makeWaiterQueue } from "./internal/waiterQueue.js"
import { nowMillis } from "./internal/time.js"

interface Entry {
  /** owner -> hold count */
  readonly holders: Map<string, number>
  expiresAt: number
}

/**
 * The memory backend plus read-outs that tests and diagnostics use.
 *
 * @since 0.1.0
 * @category models
 */
export interface MemoryBackendShape extends LockBackendShape {
  /** Locks currently held (expired ones excluded). */
  readonly lockCount: Effect.Effect<number>
  /** Fibers currently waiting on some key, and the keys they wait on. */
  readonly waiters: Effect.Effect<{ readonly fibers: number; readonly keys: ReadonlyArray<string> }>
}

/**
 * Build a fresh, empty memory backend.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<MemoryBackendShape> = Effect.sync(() => {
  const locks = new Map<string, Entry>()
  const tokens = new Map<string, bigint>()
  const queue = makeWaiterQueue()

  /** The live entry for `key`, dropping it when its lease has run out. */
  const live = (key: string, now: number): Entry | undefined => {
    const entry = locks.get(key)
    if (entry === undefined) return undefined
    if (entry.expiresAt <= now) {
      locks.delete(key)
      return undefined
    }
    return entry
  }

  const nextToken = (key: string): bigint => {
    const token = (tokens.get(key) ?? 0n) + 1n
    tokens.set(key, token)
    return token
  }

  const tryAcquire = (request: LockRequest): Effect.Effect<AcquireResult> =>
    Effect.map(nowMillis, (now): AcquireResult => {
      const entry = live(request.key, now)
      if (entry === undefined) {
        locks.set(request.key, { holders: new Map([[request.owner, 1]]), expiresAt: now + request.leaseMillis })
        return { _tag: "Acquired", fencingToken: request.fencing ? nextToken(request.key) : 0n }
      }
      const count = entry.holders.get(request.owner)
      if (count !== undefined) {
        entry.holders.set(request.owner, count + 1)
        entry.expiresAt = now + request.leaseMillis
        return { _tag: "Acquired", fencingToken: request.fencing ? tokens.get(request.key) ?? 0n : 0n }
      }
      return { _tag: "Busy", ttlMillis: entry.expiresAt - now }
    })

  const renew = (request: LockRequest): Effect.Effect<RenewResult> =>
    Effect.map(nowMillis, (now): RenewResult => {
      const entry = live(request.key, now)
      if (entry === undefined) return { _tag: "Lost", reason: "expired" }
      if (!entry.holders.has(request.owner)) return { _tag: "Lost", reason: "stolen" }
      entry.expiresAt = now + request.leaseMillis
      return { _tag: "Renewed" }
    })

  const plainRelease = (key: string, owner: string): Effect.Effect<boolean> =>
    Effect.map(nowMillis, (now) => {
      const entry = live(key, now)
      if (entry === undefined || !entry.holders.has(owner)) return false
      locks.delete(key)
      queue.notify(key)
      return true
    })

  // Every waiter of this backend is in this process, so a release always hands over when a
  // waiter is parked.
  const handOver = (key: string, from: string, to: LockRequest): Effect.Effect<HandOverResult> =>
    Effect.map(nowMillis, (now): HandOverResult => {
      const entry = live(key, now)
      if (entry === undefined || !entry.holders.has(from)) return { _tag: "NotHeld" }
      locks.set(key, { holders: new Map([[to.owner, 1]]), expiresAt: now + to.leaseMillis })
      return { _tag: "HandedOver", fencingToken: to.fencing ? nextToken(key) : 0n }
    })

  const release = (key: string, owner: string): Effect.Effect<boolean> =>
    releaseHandingOver(queue, { release: plainRelease, handOver }, key, owner)

  const forceRelease = (key: string): Effect.Effect<boolean> =>
    Effect.map(nowMillis, (now) => {
      const entry = live(key, now)
      locks.delete(key)
      queue.notify(key)
      return entry !== undefined
    })

  const inspect = (key: string): Effect.Effect<Option.Option<LockInfo>> =>
    Effect.map(nowMillis, (now) => {
      const entry = live(key, now)
      if (entry === undefined) return Option.none()
      return Option.some({
        key,
        holders: Array.from(entry.holders, ([owner, holdCount]) => ({ owner, holdCount })),
        ttlMillis: entry.expiresAt - now
      })
    })

  return {
    name: "memory",
    tryAcquire,
    renew,
    release,
    forceRelease,
    inspect,
    subscribe: queue.register,
    localWaiters: queue.waitersOn,
    lockCount: Effect.map(nowMillis, (now) => {
      let count = 0
      for (const key of Array.from(locks.keys())) if (live(key, now) !== undefined) count++
      return count
    }),
    waiters: Effect.sync(() => ({ fibers: queue.waiterCount(), keys: queue.waitingKeys() }))
  }
})

/**
 * A fresh memory backend as the `LockBackend` service.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<LockBackend> = Layer.effect(LockBackend, make)
