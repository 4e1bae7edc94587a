/**
 * The memory backend's semaphores: the same rules as the Redis scripts (`lua/semaphore-*.lua`),
 * on `Clock` time. A semaphore is its free count and the acquisitions that hold permits, each with
 * its lease's end; an acquisition whose lease ran out gives its permits back when a call next
 * looks at the semaphore (as Redisson's scripts do), and that wakes waiters.
 */
import { Effect } from "effect"
import type { RenewResult } from "../../LockBackend.js"
import { nowMillis } from "../time.js"
import type { PermitAcquireResult, SemaphorePrimitives, SemaphoreState } from "./primitives.js"
import { notificationKey } from "./primitives.js"

interface Held {
  readonly permits: number
  expiresAt: number
}

interface Entry {
  available: number
  readonly held: Map<string, Held>
}

const renewed: RenewResult = { _tag: "Renewed" }
const expired: RenewResult = { _tag: "Lost", reason: "expired" }

export const makeMemorySemaphores = (notify: (key: string) => void): SemaphorePrimitives => {
  const semaphores = new Map<string, Entry>()
  const tokens = new Map<string, bigint>()

  /** The semaphore at `key` with expired acquisitions given back (waiters notified), if it exists. */
  const live = (key: string, now: number): Entry | undefined => {
    const entry = semaphores.get(key)
    if (entry === undefined) return undefined
    let returned = 0
    for (const [owner, held] of entry.held) {
      if (held.expiresAt <= now) {
        entry.held.delete(owner)
        returned += held.permits
      }
    }
    if (returned > 0) {
      entry.available += returned
      if (entry.available > 0) notify(notificationKey(key))
    }
    return entry
  }

  const acquiredOf = (entry: Entry) => {
    let acquired = 0
    for (const held of entry.held.values()) acquired += held.permits
    return acquired
  }

  return {
    tryAcquire: (request) =>
      Effect.map(nowMillis, (now): PermitAcquireResult => {
        let entry = live(request.key, now)
        if (entry === undefined) {
          if (request.total === undefined) return { _tag: "Busy", available: 0, ttlMillis: undefined }
          entry = { available: request.total, held: new Map() }
          semaphores.set(request.key, entry)
        }
        if (entry.available >= request.permits && !entry.held.has(request.owner)) {
          entry.available -= request.permits
          entry.held.set(request.owner, { permits: request.permits, expiresAt: now + request.leaseMillis })
          if (!request.fencing) return { _tag: "Acquired", fencingToken: 0n }
          const token = (tokens.get(request.key) ?? 0n) + 1n
          tokens.set(request.key, token)
          return { _tag: "Acquired", fencingToken: token }
        }
        let soonest = Infinity
        for (const held of entry.held.values()) soonest = Math.min(soonest, held.expiresAt - now)
        return { _tag: "Busy", available: entry.available, ttlMillis: soonest === Infinity ? undefined : soonest }
      }),
    renew: (requests) =>
      Effect.map(nowMillis, (now) =>
        requests.map((request) => {
          const held = live(request.key, now)?.held.get(request.owner)
          if (held === undefined) return expired
          held.expiresAt = now + request.leaseMillis
          return renewed
        })),
    release: (key, owner) =>
      Effect.map(nowMillis, (now) => {
        const entry = live(key, now)
        const held = entry?.held.get(owner)
        if (entry === undefined || held === undefined) return 0
        entry.held.delete(owner)
        entry.available += held.permits
        notify(notificationKey(key))
        return held.permits
      }),
    state: (key) =>
      Effect.map(nowMillis, (now): SemaphoreState => {
        const entry = live(key, now)
        return entry === undefined ? { available: 0, acquired: 0 } : {
          available: entry.available,
          acquired: acquiredOf(entry)
        }
      }),
    setPermits: (key, total) =>
      Effect.map(nowMillis, (now) => {
        const entry = live(key, now)
        if (entry === undefined) semaphores.set(key, { available: total, held: new Map() })
        else entry.available = total - acquiredOf(entry)
        notify(notificationKey(key))
      })
  }
}
