/**
 * An in-process backend with the same semantics as the Redis one: leases expire by `Clock` time
 * (computed lazily on access), hold counts per owner, fencing tokens that outlive their locks, and
 * release notifications. It is the embedded default, what the demo runs without `REDIS_URL`, and
 * what the property tests drive with `TestClock`.
 *
 * It is also the reference for writing a backend: primitives only, turned into the service by
 * `LockBackend.make`.
 *
 * Locks are shared by everything that uses one built layer: provide `MemoryBackend.layer` once,
 * at the top of the program.
 *
 * @since 0.1.0
 */
import type { Scope } from "effect"
import { Effect, Layer, Option } from "effect"
import { backendOf } from "./internal/backend/make.js"
import { makeFair } from "./internal/memory/fair.js"
import { makeReadWrite } from "./internal/memory/readWrite.js"
import { kindConflict, makeNotifier, makeStore, released } from "./internal/memory/store.js"
import { makeMemorySemaphores } from "./internal/semaphore/memory.js"
import { nowMillis, withNow } from "./internal/time.js"
import type {
  AcquireAllResult,
  AcquireResult,
  HandOverResult,
  LockBackendShape,
  LockInfo,
  LockPrimitives,
  ReleaseResult,
  RenewResult
} from "./LockBackend.js"
import { LockBackend } from "./LockBackend.js"
import type { LockBackendError } from "./LockError.js"

/**
 * The memory backend's primitives plus a read-out for tests and diagnostics.
 *
 * @since 0.2.0
 * @category models
 */
export interface MemoryPrimitives extends LockPrimitives {
  /** Locks currently held (expired ones excluded). */
  readonly lockCount: Effect.Effect<number>
}

/**
 * The memory backend service plus read-outs that tests and diagnostics use.
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

const renewed: RenewResult = { _tag: "Renewed" }
const stolen: RenewResult = { _tag: "Lost", reason: "stolen" }
const expired: RenewResult = { _tag: "Lost", reason: "expired" }

/**
 * Fresh, empty memory primitives.
 *
 * @since 0.2.0
 * @category constructors
 */
export const makePrimitives: Effect.Effect<MemoryPrimitives> = Effect.gen(function*() {
  const store = makeStore()
  const notifier = yield* makeNotifier()
  const fair = yield* makeFair(store)
  const { read, write } = yield* makeReadWrite(store)
  const { live, locks } = store

  const releaseWith = <A>(key: string, owner: string, onFree: (now: number) => A) =>
    withNow((now) => Effect.succeed<A | ReleaseResult>(store.releaseWith(key, owner, now, () => onFree(now))))

  return {
    name: "memory",
    tryAcquire: (request) =>
      withNow((now): Effect.Effect<AcquireResult, LockBackendError> => {
        if (store.liveReadWrite(request.key, now) !== undefined) {
          return Effect.fail(kindConflict(request.key, "acquire", "a read-write lock", "a lock"))
        }
        const entry = live(request.key, now)
        if (entry === undefined) {
          return Effect.succeed({ _tag: "Acquired", fencingToken: store.grant(request.key, request, now) })
        }
        const count = entry.holders.get(request.owner)
        if (count === undefined) return Effect.succeed({ _tag: "Busy", ttlMillis: entry.expiresAt - now })
        entry.holders.set(request.owner, count + 1)
        entry.expiresAt = now + request.leaseMillis
        return Effect.succeed({
          _tag: "Acquired",
          fencingToken: request.fencing ? store.currentToken(request.key) : 0n
        })
      }),
    // Every lock checked first, then all taken: in one synchronous step, so all or none.
    tryAcquireAll: (requests) =>
      Effect.flatMap(nowMillis, (now): Effect.Effect<AcquireAllResult, LockBackendError> => {
        for (const [index, request] of requests.entries()) {
          if (store.liveReadWrite(request.key, now) !== undefined) {
            return Effect.fail(kindConflict(request.key, "acquire", "a read-write lock", "a lock"))
          }
          const entry = live(request.key, now)
          if (entry !== undefined && !entry.holders.has(request.owner)) {
            return Effect.succeed({ _tag: "Busy", index, ttlMillis: entry.expiresAt - now })
          }
        }
        const fencingTokens = requests.map((request) => {
          const entry = live(request.key, now)
          if (entry === undefined) return store.grant(request.key, request, now)
          entry.holders.set(request.owner, (entry.holders.get(request.owner) ?? 0) + 1)
          entry.expiresAt = now + request.leaseMillis
          return request.fencing ? store.currentToken(request.key) : 0n
        })
        return Effect.succeed({ _tag: "Acquired", fencingTokens })
      }),
    renew: (requests) =>
      Effect.map(nowMillis, (now) =>
        requests.map((request) => {
          const entry = live(request.key, now)
          if (entry === undefined) return expired
          if (!entry.holders.has(request.owner)) return stolen
          entry.expiresAt = now + request.leaseMillis
          return renewed
        })),
    release: (key, owner) =>
      releaseWith(key, owner, () => {
        notifier.notify(key)
        return released
      }),
    // Every waiter of this backend is in this process, so a release always hands over.
    handOver: (key, from, to): Effect.Effect<HandOverResult> =>
      releaseWith(key, from, (now) => ({ _tag: "HandedOver", fencingToken: store.grant(key, to, now) })),
    forceRelease: (key) =>
      Effect.map(nowMillis, (now) => {
        const entry = live(key, now)
        locks.delete(key)
        if (entry !== undefined) notifier.notify(key)
        return entry !== undefined
      }),
    inspect: (key) =>
      Effect.map(nowMillis, (now): Option.Option<LockInfo> => {
        const entry = live(key, now)
        if (entry === undefined) return Option.none()
        return Option.some({
          key,
          holders: Array.from(entry.holders, ([owner, holdCount]) => ({ owner, holdCount })),
          ttlMillis: entry.expiresAt - now
        })
      }),
    subscribe: notifier.subscribe,
    unsubscribe: notifier.unsubscribe,
    notifications: notifier.notifications,
    semaphore: makeMemorySemaphores(notifier.notify),
    kinds: { fair, read, write },
    lockCount: Effect.map(nowMillis, (now) => {
      let count = 0
      for (const key of Array.from(locks.keys())) if (live(key, now) !== undefined) count++
      return count
    })
  } satisfies MemoryPrimitives
})

/**
 * The service around `primitives` (memory ones, or memory ones wrapped by a test), with the
 * read-outs of `MemoryBackendShape`.
 *
 * @since 0.2.0
 * @category constructors
 */
export const fromPrimitives = (
  primitives: MemoryPrimitives
): Effect.Effect<MemoryBackendShape, never, Scope.Scope> =>
  Effect.map(LockBackend.make(primitives), (service) => {
    const { queue } = backendOf(service)
    return {
      ...service,
      lockCount: primitives.lockCount,
      waiters: Effect.sync(() => ({ fibers: queue.waiterCount(), keys: queue.waitingKeys() }))
    }
  })

/**
 * Build a fresh, empty memory backend in the current scope.
 *
 * @since 0.1.0
 * @category constructors
 */
export const make: Effect.Effect<MemoryBackendShape, never, Scope.Scope> = Effect.flatMap(
  makePrimitives,
  fromPrimitives
)

/**
 * A fresh memory backend as the `LockBackend` service.
 *
 * @since 0.1.0
 * @category layers
 */
export const layer: Layer.Layer<LockBackend> = Layer.scoped(LockBackend, make)
