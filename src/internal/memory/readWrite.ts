/**
 * The read-write lock in memory: the read and the write kind share one entry per name (as Redisson's
 * read and write locks share one hash), with the same rules as `lua/rw-*.lua`:
 *
 * - readers share: a read is granted when nobody writes, or to the writer itself (a downgrade);
 * - a writer excludes everybody; reads and writes are reentrant per owner;
 * - each reader has its own lease (Redisson's per-reader timeout keys), renewed and lost on its own;
 * - writers go first: while a writer waits (its waiting attempts keep a mark alive for one wait
 *   window), new readers are refused, so a stream of readers cannot starve it;
 * - a release that frees the name, or turns a write into reads, wakes waiters of both kinds.
 */
import { Effect, Option } from "effect"
import type { AcquireResult, LockInfo, LockRequest, ReleaseResult, RenewResult } from "../../LockBackend.js"
import { LockBackendError } from "../../LockError.js"
import type { KindPrimitives } from "../../LockKinds.js"
import { nowMillis } from "../time.js"
import { FAIR_WAIT_WINDOW_MILLIS } from "./fair.js"
import type { Notifier, ReadWriteEntry, Store } from "./store.js"
import { kindConflict, makeNotifier, notHeld, released, stillHeld } from "./store.js"

const renewed: RenewResult = { _tag: "Renewed" }
const stolen: RenewResult = { _tag: "Lost", reason: "stolen" }
const expired: RenewResult = { _tag: "Lost", reason: "expired" }

export const makeReadWrite = (
  store: Store,
  windowMillis = FAIR_WAIT_WINDOW_MILLIS
): Effect.Effect<{ readonly read: KindPrimitives; readonly write: KindPrimitives }> =>
  Effect.gen(function*() {
    const readers = yield* makeNotifier()
    const writers = yield* makeNotifier()
    /** A waiting writer's mark: owner and until when it holds readers back. */
    const waitingWriter = new Map<string, { owner: string; until: number }>()
    const notifyAll = (key: string) => {
      readers.notify(key)
      writers.notify(key)
    }
    const writerWaits = (key: string, now: number) => {
      const mark = waitingWriter.get(key)
      if (mark !== undefined && mark.until <= now) waitingWriter.delete(key)
      return mark !== undefined && mark.until > now
    }
    const ttlOf = (entry: ReadWriteEntry, now: number) => {
      let end = entry.writer?.expiresAt ?? 0
      for (const reader of entry.readers.values()) end = Math.max(end, reader.expiresAt)
      return end - now
    }
    const run = (
      f: (now: number) => AcquireResult | LockBackendError
    ): Effect.Effect<AcquireResult, LockBackendError> =>
      Effect.flatMap(nowMillis, (now) => {
        const result = f(now)
        return result instanceof LockBackendError ? Effect.fail(result) : Effect.succeed(result)
      })
    const token = (request: LockRequest) => request.fencing ? store.nextToken(request.key) : 0n

    const inspect = (key: string) =>
      Effect.map(nowMillis, (now): Option.Option<LockInfo> => {
        const entry = store.liveReadWrite(key, now)
        if (entry === undefined) return Option.none()
        const holders = Array.from(entry.readers, ([owner, reader]) => ({ owner, holdCount: reader.count }))
        if (entry.writer !== undefined) {
          holders.push({ owner: `${entry.writer.owner}:write`, holdCount: entry.writer.count })
        }
        return Option.some({ key, holders, ttlMillis: ttlOf(entry, now) })
      })

    const common = (notifier: Notifier) => ({
      name: "memory",
      inspect,
      subscribe: notifier.subscribe,
      unsubscribe: notifier.unsubscribe,
      notifications: notifier.notifications
    })

    const read: KindPrimitives = {
      ...common(readers),
      tryAcquire: (request) =>
        run((now) => {
          const { key, owner } = request
          if (store.live(key, now) !== undefined) return kindConflict(key, "acquire", "a lock", "a read-write lock")
          const entry = store.liveReadWrite(key, now)
          const expiresAt = now + request.leaseMillis
          if (entry === undefined && writerWaits(key, now)) {
            // Free, but a writer waits: it goes first.
            return { _tag: "Busy", ttlMillis: Math.max(0, (waitingWriter.get(key)?.until ?? now) - now) }
          }
          if (entry === undefined) {
            store.readWrite.set(key, {
              mode: "read",
              writer: undefined,
              readers: new Map([[owner, { count: 1, expiresAt }]])
            })
            return { _tag: "Acquired", fencingToken: token(request) }
          }
          const mine = entry.readers.get(owner)
          if (mine !== undefined) {
            mine.count++
            mine.expiresAt = Math.max(mine.expiresAt, expiresAt)
            return { _tag: "Acquired", fencingToken: request.fencing ? store.currentToken(key) : 0n }
          }
          const downgrade = entry.mode === "write" && entry.writer?.owner === owner
          if (downgrade || (entry.mode === "read" && !writerWaits(key, now))) {
            entry.readers.set(owner, { count: 1, expiresAt })
            return { _tag: "Acquired", fencingToken: token(request) }
          }
          return { _tag: "Busy", ttlMillis: Math.max(0, ttlOf(entry, now)) }
        }),
      renew: (requests) =>
        Effect.map(nowMillis, (now) =>
          requests.map((request) => {
            const entry = store.liveReadWrite(request.key, now)
            if (entry === undefined) return expired
            const reader = entry.readers.get(request.owner)
            if (reader === undefined) return stolen
            reader.expiresAt = now + request.leaseMillis
            return renewed
          })),
      release: (key, owner) =>
        Effect.map(nowMillis, (now): ReleaseResult => {
          const entry = store.liveReadWrite(key, now)
          const reader = entry?.readers.get(owner)
          if (entry === undefined || reader === undefined) return notHeld
          if (reader.count > 1) {
            reader.count--
            return stillHeld
          }
          entry.readers.delete(owner)
          if (entry.readers.size === 0 && entry.writer === undefined) {
            store.readWrite.delete(key)
            notifyAll(key)
          }
          return released
        }),
      forceRelease: (key) =>
        Effect.map(nowMillis, (now) => {
          const entry = store.liveReadWrite(key, now)
          if (entry === undefined || entry.mode !== "read") return false
          store.readWrite.delete(key)
          notifyAll(key)
          return true
        })
    }

    const write: KindPrimitives = {
      ...common(writers),
      tryAcquire: (request) =>
        run((now) => {
          const { key, owner } = request
          if (store.live(key, now) !== undefined) return kindConflict(key, "acquire", "a lock", "a read-write lock")
          const entry = store.liveReadWrite(key, now)
          const expiresAt = now + request.leaseMillis
          if (entry === undefined) {
            if (waitingWriter.get(key)?.owner === owner) waitingWriter.delete(key)
            store.readWrite.set(key, { mode: "write", writer: { owner, count: 1, expiresAt }, readers: new Map() })
            return { _tag: "Acquired", fencingToken: token(request) }
          }
          if (entry.mode === "write" && entry.writer?.owner === owner) {
            entry.writer.count++
            entry.writer.expiresAt = Math.max(entry.writer.expiresAt, expiresAt)
            return { _tag: "Acquired", fencingToken: request.fencing ? store.currentToken(key) : 0n }
          }
          if (request.waiting === true) waitingWriter.set(key, { owner, until: now + windowMillis })
          return { _tag: "Busy", ttlMillis: Math.min(Math.max(0, ttlOf(entry, now)), Math.floor(windowMillis / 2)) }
        }),
      renew: (requests) =>
        Effect.map(nowMillis, (now) =>
          requests.map((request) => {
            const entry = store.liveReadWrite(request.key, now)
            if (entry === undefined) return expired
            if (entry.writer?.owner !== request.owner) return stolen
            entry.writer.expiresAt = now + request.leaseMillis
            return renewed
          })),
      release: (key, owner) =>
        Effect.map(nowMillis, (now): ReleaseResult => {
          const entry = store.liveReadWrite(key, now)
          const writer = entry?.writer
          if (entry === undefined || writer === undefined || writer.owner !== owner) return notHeld
          if (writer.count > 1) {
            writer.count--
            return stillHeld
          }
          entry.writer = undefined
          if (entry.readers.size === 0) store.readWrite.delete(key)
          else entry.mode = "read"
          notifyAll(key)
          return released
        }),
      abandon: (request) =>
        Effect.sync(() => {
          if (waitingWriter.get(request.key)?.owner === request.owner) {
            waitingWriter.delete(request.key)
            readers.notify(request.key)
          }
        }),
      forceRelease: (key) =>
        Effect.map(nowMillis, (now) => {
          const entry = store.liveReadWrite(key, now)
          if (entry === undefined || entry.mode !== "write") return false
          store.readWrite.delete(key)
          notifyAll(key)
          return true
        })
    }
    return { read, write }
  })
