/**
 * effect-lock: distributed locks for Effect.
 *
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 */
export * as Lock from "./Lock.js"

/**
 * @since 0.1.0
 * @category tags
 */
export { LockBackend } from "./LockBackend.js"

/**
 * @since 0.1.0
 * @category models
 */
export type {
  AcquireResult,
  HandedOver,
  LockBackendShape,
  LockInfo,
  LockRequest,
  ReleaseSignal,
  RenewResult,
  WakeUp
} from "./LockBackend.js"

/**
 * @since 0.1.0
 */
export * as MemoryBackend from "./MemoryBackend.js"

/**
 * @since 0.1.0
 */
export * from "./LockError.js"

/**
 * @since 0.1.0
 * @category combinators
 */
export { withLock, withLockIfAvailable } from "./Lock.js"

/**
 * @since 0.1.0
 * @category models
 */
export type { Lease, LockOptions } from "./Lock.js"

/**
 * @since 0.1.0
 */
export * as RedisBackend from "./RedisBackend.js"

/**
 * @since 0.1.0
 */
export * as Fencing from "./Fencing.js"
