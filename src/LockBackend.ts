/**
 * The backend contract. A backend supplies **primitives only**: one call per round trip (try to
 * acquire, renew many leases, release, hand over, force-release, inspect) and a source of "this key
 * may be free" notifications. `LockBackend.make(primitives)` builds, once per backend layer, what
 * every backend shares: local wait queues with wake-one, hand-over to a local waiter, renewal
 * batching and metrics. Everything built there lives in the layer's scope and dies with it.
 *
 * The model is `RateLimiterStore` -> `RateLimiter.make` in `@effect/experimental`: a store of a few
 * primitive methods, each documented by what it returns, and the policy built once on top.
 * `MemoryBackend` shows a complete backend in a page.
 *
 * @since 0.1.0
 */
import type { Effect, Option, Queue, Scope } from "effect"
import { Context } from "effect"
import * as internal from "./internal/backend/make.js"
import type { SemaphorePrimitives } from "./internal/semaphore/primitives.js"
import { LockBackendError } from "./LockError.js"
import type { KindName, KindPrimitives, LockKinds } from "./LockKinds.js"

export type {
  /**
   * @since 0.3.0
   * @category models
   */
  KindName,
  /**
   * @since 0.3.0
   * @category models
   */
  KindPrimitives,
  /**
   * @since 0.3.0
   * @category models
   */
  LockKinds
}

export {
  /**
   * @since 0.1.0
   * @category errors
   */
  LockBackendError
}

export type {
  /**
   * The semaphore's primitives (`LockPrimitives.semaphore`).
   *
   * @since 0.3.0
   * @category models
   */
  PermitAcquireResult,
  /**
   * @since 0.3.0
   * @category models
   */
  PermitRequest,
  /**
   * @since 0.3.0
   * @category models
   */
  SemaphorePrimitives,
  /**
   * @since 0.3.0
   * @category models
   */
  SemaphoreState
} from "./internal/semaphore/primitives.js"

/**
 * One call to a backend on behalf of one owner.
 *
 * @since 0.1.0
 * @category models
 */
export interface LockRequest {
  readonly key: string
  /** The owner id, `<process uuid>:<n>`: fresh per hold. */
  readonly owner: string
  /** The lease to set (acquire) or extend to (renew): a whole number of milliseconds. */
  readonly leaseMillis: number
  /** Whether a fresh acquisition draws a fencing token. */
  readonly fencing: boolean
  /**
   * Whether the caller goes on waiting when the lock is busy (`acquire`, `withLock`), rather than
   * giving up after one attempt (`tryAcquire`). A fair lock queues only waiting callers.
   */
  readonly waiting?: boolean | undefined
}

/**
 * The outcome of one acquisition attempt.
 *
 * `Busy.ttlMillis` is the holder's remaining lease as the backend sees it, or `undefined` when the
 * lock has no expiry (set by a foreign client without one).
 *
 * @since 0.1.0
 * @category models
 */
export type AcquireResult =
  | { readonly _tag: "Acquired"; readonly fencingToken: bigint }
  | { readonly _tag: "Busy"; readonly ttlMillis: number | undefined }

/**
 * The outcome of one all-or-nothing attempt at several locks (`tryAcquireAll`): every lock taken,
 * with one fencing token per request in order, or none taken because the lock of request `index`
 * is busy (with its holder's remaining lease, as in `AcquireResult`).
 *
 * @since 0.3.0
 * @category models
 */
export type AcquireAllResult =
  | { readonly _tag: "Acquired"; readonly fencingTokens: ReadonlyArray<bigint> }
  | { readonly _tag: "Busy"; readonly index: number; readonly ttlMillis: number | undefined }

/**
 * The outcome of one renewal: the lease was extended, or the owner no longer holds the lock
 * (`stolen`: another owner is in it; `expired`: there is no lock at all).
 *
 * @since 0.1.0
 * @category models
 */
export type RenewResult =
  | { readonly _tag: "Renewed" }
  | { readonly _tag: "Lost"; readonly reason: "stolen" | "expired" }

/**
 * One request's outcome in a batch of renewals: its result, or the error that kept the backend
 * from renewing that request (for example the one node of several that was down).
 *
 * @since 0.2.0
 * @category models
 */
export type RenewOutcome = RenewResult | LockBackendError

/**
 * The outcome of an owner-checked release. The backend counts holds per owner (Redisson's hash
 * field): `Released` when the count reached zero and the lock was deleted (waiters notified),
 * `StillHeld` when the owner's count was above one and was decremented, `NotHeld` when the owner
 * did not hold the lock (nothing changed, so a repeated release is harmless).
 *
 * @since 0.2.0
 * @category models
 */
export type ReleaseResult =
  | { readonly _tag: "Released" }
  | { readonly _tag: "StillHeld" }
  | { readonly _tag: "NotHeld" }

/**
 * The outcome of a release that may hand the lock straight to a waiter: a `ReleaseResult`
 * (`Released` means another client waits too, so the backend notified instead of handing over),
 * or `HandedOver`: the receiver holds the lock now, with this fencing token.
 *
 * @since 0.2.0
 * @category models
 */
export type HandOverResult = ReleaseResult | { readonly _tag: "HandedOver"; readonly fencingToken: bigint }

/**
 * A hint from the backend's notification source: a release of `key` may have happened (wake one
 * waiter on it), or notifications may have been missed (a reconnect: wake one waiter on every key).
 *
 * @since 0.2.0
 * @category models
 */
export type Notification =
  | { readonly _tag: "Released"; readonly key: string }
  | { readonly _tag: "Missed" }

/**
 * What a backend knows about one lock.
 *
 * @since 0.1.0
 * @category models
 */
export interface LockInfo {
  readonly key: string
  readonly holders: ReadonlyArray<{ readonly owner: string; readonly holdCount: number }>
  /** Remaining lease in milliseconds, `undefined` when the lock has no expiry. */
  readonly ttlMillis: number | undefined
}

/**
 * What a backend implements. Each method is one round trip (or one synchronous step in memory)
 * and none of them waits, retries or keeps state about fibers: that is `make`'s work.
 *
 * @since 0.2.0
 * @category models
 */
export interface LockPrimitives {
  /** A short name used in errors, logs and spans ("memory", "redis"). */
  readonly name: string
  /**
   * Optional. Why this backend cannot lock `key` (a valid key in general), or `undefined` when it
   * can: a Redis Cluster refuses names whose companion keys would land in another slot. Checked
   * before anything is sent; a reason becomes a `LockOptionsError` on the field `key`.
   */
  readonly checkKey?: ((key: string) => string | undefined) | undefined
  /** One attempt: acquire when free (or reenter for an owner already in it), or report the holder's TTL. */
  readonly tryAcquire: (request: LockRequest) => Effect.Effect<AcquireResult, LockBackendError>
  /**
   * Optional. One all-or-nothing attempt at several locks in one step (`MultiLock`): every lock is
   * free (or already its request's owner's) and all are taken, or none is. Returns `undefined`,
   * before sending anything, when these keys cannot be taken in one step here (on a Redis Cluster,
   * keys in different slots); `MultiLock` then takes them one by one.
   */
  readonly tryAcquireAll?:
    | ((requests: ReadonlyArray<LockRequest>) => Effect.Effect<AcquireAllResult, LockBackendError> | undefined)
    | undefined
  /**
   * Extend each lease if, and only if, its owner still holds the lock: one outcome per request, in
   * order. `make` gathers the renewals that come due together into one call.
   */
  readonly renew: (
    requests: ReadonlyArray<LockRequest>
  ) => Effect.Effect<ReadonlyArray<RenewOutcome>, LockBackendError>
  /** Owner-checked release of one hold count; at zero the lock is deleted and waiters notified. */
  readonly release: (key: string, owner: string) => Effect.Effect<ReleaseResult, LockBackendError>
  /**
   * Optional. Release `from`'s hold and, when no other client waits, grant the lock to `to` in the
   * same step (no notification, no attempt of the receiver's own). Without it, releases notify.
   */
  readonly handOver?:
    | ((key: string, from: string, to: LockRequest) => Effect.Effect<HandOverResult, LockBackendError>)
    | undefined
  /** Delete the lock whoever holds it, and notify waiters. `false` when it was not held. */
  readonly forceRelease: (key: string) => Effect.Effect<boolean, LockBackendError>
  /** Read a lock without changing it. */
  readonly inspect: (key: string) => Effect.Effect<Option.Option<LockInfo>, LockBackendError>
  /**
   * Start delivering notifications for `key` (the first local waiter on it asks); succeeds once
   * they flow. A failure only means waiters fall back to their schedule and the holder's TTL.
   */
  readonly subscribe: (key: string) => Effect.Effect<void, LockBackendError>
  /** Stop delivering notifications for `key` (its last local waiter left). */
  readonly unsubscribe: (key: string) => Effect.Effect<void>
  /**
   * The notifications, for as long as the backend lives: only for keys subscribed to (and `Missed`).
   * `make` takes them as they come, so an unbounded queue is the usual source.
   */
  readonly notifications: Queue.Dequeue<Notification>
  /**
   * Optional. Semaphores with leased permits (`Semaphore`): without them, `Semaphore` fails with a
   * `LockBackendError` on this backend. Their notifications travel through `subscribe`,
   * `unsubscribe` and `notifications` too, under a key of their own (a NUL-prefixed name).
   */
  readonly semaphore?: SemaphorePrimitives | undefined
  /**
   * Optional. The other lock kinds this backend offers (`FairLock`, `ReadWriteLock`, ...), each
   * with primitives of its own (see `LockKinds`). `make` builds the shared machinery for each.
   */
  readonly kinds?: LockKinds | undefined
}

/**
 * @since 0.2.0
 * @category symbols
 */
export const TypeId: unique symbol = internal.TypeId

/**
 * @since 0.2.0
 * @category symbols
 */
export type TypeId = typeof TypeId

/**
 * The service: a backend's primitives with the shared machinery that `make` built around them.
 * Only `make` builds one.
 *
 * @since 0.1.0
 * @category models
 */
export interface LockBackendShape {
  readonly [TypeId]: TypeId
  /** The backend's name, from its primitives. */
  readonly name: string
  /**
   * The raw primitives, for diagnostics and tests (a foreign owner, say). Locks never call them
   * directly: they go through the machinery, which keeps its queues and hand-overs consistent.
   */
  readonly primitives: LockPrimitives
}

/**
 * The backend service. Provide it with `MemoryBackend.layer`, `RedisBackend.layer(...)`
 * (`effect-lock/RedisBackend`), or a layer of your own built with `make`.
 *
 * @since 0.1.0
 * @category tags
 */
export class LockBackend extends Context.Tag("effect-lock/LockBackend")<LockBackend, LockBackendShape>() {
  /** `make`, reachable from the tag: `LockBackend.make(primitives)`. */
  static readonly make: (primitives: LockPrimitives) => Effect.Effect<LockBackendShape, never, Scope.Scope> =
    internal.make
}

/**
 * Build the service from a backend's primitives: local wait queues (first in, first out; one
 * notification wakes one waiter), hand-over to a local waiter on release, renewal batching (the
 * renewals that come due in one tick go out as one `renew` call) and metrics. Its fibers live in
 * the current scope: build it in the backend layer's scope.
 *
 * @example
 * ```ts
 * import { Effect, Layer } from "effect"
 * import type { LockPrimitives } from "effect-lock"
 * import { LockBackend } from "effect-lock"
 *
 * declare const primitives: Effect.Effect<LockPrimitives>
 * export const layer = Layer.scoped(LockBackend, Effect.flatMap(primitives, LockBackend.make))
 * ```
 *
 * @since 0.2.0
 * @category constructors
 */
export const make: (primitives: LockPrimitives) => Effect.Effect<LockBackendShape, never, Scope.Scope> = internal.make
