/**
 * effect-lock: distributed locks for Effect.
 *
 * The root holds every module that needs nothing beyond `effect`. The Redis backend, which needs
 * the optional peer `ioredis`, is at its own subpath: `effect-lock/RedisBackend`.
 *
 * @since 0.1.0
 */

/**
 * @since 0.1.0
 */
export * as Lock from "./Lock.js"

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
 * @category tags
 */
export { LockBackend } from "./LockBackend.js"

/**
 * @since 0.1.0
 * @category models
 */
export type {
  AcquireResult,
  HandOverResult,
  LockBackendShape,
  LockInfo,
  LockPrimitives,
  LockRequest,
  Notification,
  ReleaseResult,
  RenewOutcome,
  RenewResult
} from "./LockBackend.js"

/**
 * @since 0.3.0
 * @category models
 */
export type { KindName, KindPrimitives, LockKinds } from "./LockKinds.js"

/**
 * @since 0.1.0
 */
export * from "./LockError.js"

/**
 * @since 0.1.0
 */
export * as MemoryBackend from "./MemoryBackend.js"

/**
 * @since 0.1.0
 */
export * as Fencing from "./Fencing.js"

/**
 * @since 0.2.0
 */
export * as LockClient from "./LockClient.js"

/**
 * @since 0.2.0
 */
export * as LockMetrics from "./LockMetrics.js"

/**
 * @since 0.3.0
 */
export * as FairLock from "./FairLock.js"
export * as Semaphore from "./Semaphore.js"

/**
 * @since 0.3.0
 */
export * as MultiLock from "./MultiLock.js"

/**
 * @since 0.3.0
 */
export * as ReadWriteLock from "./ReadWriteLock.js"
