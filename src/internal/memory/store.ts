/**
 * The memory backend's state, shared by the lock kinds as Redis shares its keyspace: the mutex and
 * the fair lock use the same lock entries (as Redisson's `RLock` and `RedissonFairLock` use the same
 * hash), read-write locks have entries of their own, and each kind checks that a name is not taken
 * by the other layout. Time is `Clock` time, passed in; expiry is computed lazily on access.
 */
import { Effect, Queue } from "effect"
import type { LockPrimitives, LockRequest, Notification, ReleaseResult } from "../../LockBackend.js"
import { LockBackendError } from "../../LockError.js"

export interface Entry {
  /** owner -> hold count */
  readonly holders: Map<string, number>
  expiresAt: number
}

export interface ReadWriteEntry {
  mode: "read" | "write"
  /** The write holder and its hold count (mode "write"). */
  writer: { readonly owner: string; count: number; expiresAt: number } | undefined
  /** Read holders: owner -> hold count and that reader's own lease. */
  readonly readers: Map<string, { count: number; expiresAt: number }>
}

export const released: ReleaseResult = { _tag: "Released" }
export const stillHeld: ReleaseResult = { _tag: "StillHeld" }
export const notHeld: ReleaseResult = { _tag: "NotHeld" }

export interface Store {
  readonly locks: Map<string, Entry>
  readonly readWrite: Map<string, ReadWriteEntry>
  /** The live lock entry for `key`, dropping it when its lease has run out. */
  readonly live: (key: string, now: number) => Entry | undefined
  /** The live read-write entry for `key`, dropping expired holders (and the entry once empty). */
  readonly liveReadWrite: (key: string, now: number) => ReadWriteEntry | undefined
  readonly nextToken: (key: string) => bigint
  readonly currentToken: (key: string) => bigint
  /** Create the lock for `request.owner` with a hold count of 1; its fencing token. */
  readonly grant: (key: string, request: LockRequest, now: number) => bigint
  /** One hold count off `owner`; at zero the lock is deleted and `onFree` says what follows. */
  readonly releaseWith: <A>(
    key: string,
    owner: string,
    now: number,
    onFree: () => A
  ) => A | ReleaseResult
}

export const makeStore = (): Store => {
  const locks = new Map<string, Entry>()
  const readWrite = new Map<string, ReadWriteEntry>()
  const tokens = new Map<string, bigint>()
  const live = (key: string, now: number): Entry | undefined => {
    const entry = locks.get(key)
    if (entry === undefined) return undefined
    if (entry.expiresAt <= now) {
      locks.delete(key)
      return undefined
    }
    return entry
  }
  const liveReadWrite = (key: string, now: number): ReadWriteEntry | undefined => {
    const entry = readWrite.get(key)
    if (entry === undefined) return undefined
    if (entry.writer !== undefined && entry.writer.expiresAt <= now) entry.writer = undefined
    for (const [owner, reader] of entry.readers) if (reader.expiresAt <= now) entry.readers.delete(owner)
    if (entry.writer === undefined && entry.readers.size === 0) {
      readWrite.delete(key)
      return undefined
    }
    // A write lock released (or expired) under read locks of its owner leaves a read lock.
    if (entry.writer === undefined) entry.mode = "read"
    return entry
  }
  const nextToken = (key: string): bigint => {
    const token = (tokens.get(key) ?? 0n) + 1n
    tokens.set(key, token)
    return token
  }
  return {
    locks,
    readWrite,
    live,
    liveReadWrite,
    nextToken,
    currentToken: (key) => tokens.get(key) ?? 0n,
    grant: (key, request, now) => {
      const holders = new Map<string, number>()
      holders.set(request.owner, 1)
      locks.set(key, { holders, expiresAt: now + request.leaseMillis })
      return request.fencing ? nextToken(key) : 0n
    },
    releaseWith: (key, owner, now, onFree) => {
      const entry = live(key, now)
      const count = entry?.holders.get(owner)
      if (entry === undefined || count === undefined) return notHeld
      if (count > 1) {
        entry.holders.set(owner, count - 1)
        return stillHeld
      }
      locks.delete(key)
      return onFree()
    }
  }
}

/** A kind's notifications: like a Redis channel, a key is only heard while somebody waits on it. */
export interface Notifier extends Pick<LockPrimitives, "subscribe" | "unsubscribe" | "notifications"> {
  readonly notify: (key: string) => void
}

export const makeNotifier = (): Effect.Effect<Notifier> =>
  Effect.map(Queue.unbounded<Notification>(), (notifications) => {
    const subscribed = new Set<string>()
    return {
      notifications,
      subscribe: (key) => Effect.sync(() => void subscribed.add(key)),
      unsubscribe: (key) => Effect.sync(() => void subscribed.delete(key)),
      notify: (key) => {
        if (subscribed.has(key)) Queue.unsafeOffer(notifications, { _tag: "Released", key })
      }
    }
  })

/** A name taken by the other layout (a lock where a read-write lock is asked for, or the reverse). */
export const kindConflict = (key: string, operation: "acquire", found: string, wanted: string) =>
  new LockBackendError({
    backend: "memory",
    operation,
    key,
    cause: new Error(
      `"${key}" is held as ${found}, not ${wanted}: the lock kinds do not exclude each other, so one name must keep one kind`
    )
  })
