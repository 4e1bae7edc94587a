/**
 * The lock kinds beyond the mutex (DESIGN §8), as a backend offers them: each kind is a set of
 * primitives of its own, an optional member of `LockPrimitives.kinds`. Kinds are additive: a kind
 * is one optional field here, a primitives value in each backend that supports it, and a public
 * module (`FairLock`, `ReadWriteLock`, ...) that asks the backend for it. A backend without a kind
 * makes that module fail with `LockBackendError` ("does not support ...").
 *
 * A kind whose primitives have the mutex's shape (`KindPrimitives`) gets the whole machinery of
 * `LockBackend.make` (local wait queues, hand-over, renewal batching, the watchdog, shutdown) built
 * around it, once per backend, next to the mutex's: its holds, waiters and reentries are its own.
 *
 * @since 0.3.0
 */
import type { Effect } from "effect"
import type { LockPrimitives, LockRequest } from "./LockBackend.js"
import type { LockBackendError } from "./LockError.js"

/**
 * The primitives of a lock kind with the mutex's shape. Everything `LockPrimitives` says holds,
 * per kind: `tryAcquire` takes or reenters the kind's lock (or reports how long to wait), `renew`
 * extends leases, `release` drops one hold count, and notifications say a key of this kind may be
 * free. Keys are the user's lock names; the kind maps them to its own layout.
 *
 * @since 0.3.0
 * @category models
 */
export interface KindPrimitives extends LockPrimitives {
  /**
   * Optional. The waiter `request.owner` stopped waiting without the lock (it timed out or was
   * interrupted): forget whatever a waiting attempt (`request.waiting`) left for it, such as a
   * place in a fair lock's queue. Failures are logged; the backend must forget on its own too
   * (a process can die without calling this).
   */
  readonly abandon?: ((request: LockRequest) => Effect.Effect<void, LockBackendError>) | undefined
}

/**
 * The kinds a backend may offer, each optional. Names are the keys of this interface.
 *
 * @since 0.3.0
 * @category models
 */
export interface LockKinds {
  /** `FairLock`: first come, first served across every process (Redisson's `RedissonFairLock`). */
  readonly fair?: KindPrimitives | undefined
  /** `ReadWriteLock`'s read side (Redisson's `RedissonReadLock`); shares its state with `write`. */
  readonly read?: KindPrimitives | undefined
  /** `ReadWriteLock`'s write side (Redisson's `RedissonWriteLock`); shares its state with `read`. */
  readonly write?: KindPrimitives | undefined
}

/**
 * The name of a kind with the mutex's shape, which `LockBackend.make` builds its machinery for.
 *
 * @since 0.3.0
 * @category models
 */
export type KindName = {
  readonly [K in keyof LockKinds]-?: NonNullable<LockKinds[K]> extends KindPrimitives ? K : never
}[keyof LockKinds]
