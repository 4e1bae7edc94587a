/**
 * The service every backend implements. It is deliberately small and primitive: one call per
 * script round trip, plus a way to wait for "this key may be free" signals. All policy (waiting,
 * retry schedules, reentrancy, the watchdog, loss detection) lives once in `Lock`, shared by every
 * backend.
 *
 * The request is a record, not positional arguments, so that later primitives (fair lock,
 * read-write lock, leased semaphore, Redlock over several backends) extend it with fields such as a
 * mode or a permit count without changing the policy code that calls it.
 *
 * @since 0.1.0
 */
import type { Effect, Option } from "effect"
import { Context } from "effect"
import { LockBackendError } from "./LockError.js"

export {
  /**
   * @since 0.1.0
   * @category errors
   */
  LockBackendError
}

/**
 * One call to a backend on behalf of one owner.
 *
 * @since 0.1.0
 * @category models
 */
export interface LockRequest {
  readonly key: string
  /** The owner id, `<process uuid>:<n>`. */
  readonly owner: string
  /** The lease to set (acquire) or extend to (renew), in milliseconds. */
  readonly leaseMillis: number
  /** Whether a fresh acquisition draws a fencing token. */
  readonly fencing: boolean
}

/**
 * The outcome of one acquisition attempt.
 *
 * `Busy.ttlMillis` is the holder's remaining lease as the server sees it, or `undefined` when the
 * lock has no expiry (set by a foreign client without one).
 *
 * @since 0.1.0
 * @category models
 */
export type AcquireResult =
  | { readonly _tag: "Acquired"; readonly fencingToken: bigint }
  | { readonly _tag: "Busy"; readonly ttlMillis: number | undefined }

/**
 * The outcome of a renewal: the lease was extended, or the owner no longer holds the lock.
 *
 * @since 0.1.0
 * @category models
 */
export type RenewResult =
  | { readonly _tag: "Renewed" }
  | { readonly _tag: "Lost"; readonly reason: "stolen" | "expired" }

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
 * A lock handed straight to a waiter by the release of its previous holder in this process: the
 * waiter holds it without an attempt of its own.
 *
 * @since 0.1.0
 * @category models
 */
export interface HandedOver {
  readonly _tag: "HandedOver"
  readonly fencingToken: bigint
  /** Clock time (ms) at which the hand-over call started: the lease runs from here at the latest. */
  readonly startedAt: number
}

/**
 * Why a waiter stopped waiting: a release notification reached it (the key may be free: try it),
 * it became the head of the queue (from now on it retries on its schedule and watches the
 * holder's lease), its time ran out, or the lock was handed over to it.
 *
 * @since 0.1.0
 * @category models
 */
export type WakeUp = "released" | "promoted" | "timeout" | HandedOver

/**
 * A registration in a key's local wait queue. Local waiters on one key are served first in, first
 * out: one notification wakes one waiter, and only the head of the queue needs to watch the clock.
 * A release by a holder in this process hands the lock straight to the first waiter that is not
 * awake yet, when the backend can do that in the release's own round trip (see `docs/redis.md`).
 *
 * @since 0.1.0
 * @category models
 */
export interface ReleaseSignal {
  /**
   * Wait up to `millis` (`Infinity`: no limit) for a wake-up. A hand-over in flight to this waiter
   * when the time runs out is waited for: the waiter then learns whether it holds the lock.
   */
  readonly await: (millis: number) => Effect.Effect<WakeUp>
  /** Whether this waiter is the head of its key's local queue. */
  readonly isHead: () => boolean
  /**
   * Wait until release notifications for the key are flowing (the first waiter on a key
   * subscribes here), so that an attempt made after it cannot miss a release. `true` when this
   * waiter subscribed: a release between its last attempt and the subscription woke nobody, so it
   * should try again at once; a later waiter has somebody ahead of it who was woken instead.
   */
  readonly ready: Effect.Effect<boolean, LockBackendError>
  /** Leave the queue: when the waiter got in, gave up, failed or was interrupted. Idempotent. */
  readonly leave: Effect.Effect<void>
}

/**
 * @since 0.1.0
 * @category models
 */
export interface LockBackendShape {
  /** A short name used in errors, logs and spans ("memory", "redis"). */
  readonly name: string
  /** One attempt: acquire when free, or report the holder's remaining lease. */
  readonly tryAcquire: (request: LockRequest) => Effect.Effect<AcquireResult, LockBackendError>
  /** Extend the lease if, and only if, `request.owner` still holds the lock. */
  readonly renew: (request: LockRequest) => Effect.Effect<RenewResult, LockBackendError>
  /**
   * Release the lock if `owner` holds it, and notify waiters, or hand it straight to a local
   * waiter (see `ReleaseSignal`). Idempotent: `false` when the owner did not hold it.
   */
  readonly release: (key: string, owner: string) => Effect.Effect<boolean, LockBackendError>
  /** Delete the lock whoever holds it, and notify waiters. `false` when it was not held. */
  readonly forceRelease: (key: string) => Effect.Effect<boolean, LockBackendError>
  /** Inspect a lock without changing it. */
  readonly inspect: (key: string) => Effect.Effect<Option.Option<LockInfo>, LockBackendError>
  /**
   * Join the key's local wait queue on behalf of `request` (which a hand-over acquires for). The
   * registration is immediate; the caller then awaits `ready` and must `leave` in any case.
   */
  readonly subscribe: (request: LockRequest) => Effect.Effect<ReleaseSignal>
  /**
   * How many fibers of this process wait on `key`. A newcomer queues behind them without trying
   * the lock first: it would not barge ahead of them, and it saves the server a doomed attempt.
   */
  readonly localWaiters: (key: string) => number
}

/**
 * The backend service. Provide it with `MemoryBackend.layer` or `RedisBackend.layer(...)`.
 *
 * @since 0.1.0
 * @category tags
 */
export class LockBackend extends Context.Tag("effect-lock/LockBackend")<LockBackend, LockBackendShape>() {}
