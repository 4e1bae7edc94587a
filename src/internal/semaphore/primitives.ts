/**
 * The semaphore's part of the backend contract: what a backend implements so that `Semaphore`
 * works on it. Each method is one round trip (or one synchronous step in memory); the waiting,
 * the watchdog and the release on scope close are built once, in `LockBackend.make`.
 *
 * An acquisition of `n` permits is one lease of its own, held by one owner id: the backend keeps
 * `n` entries for it (Redisson's permit-expirable semaphore keeps `n` ids in its timeout set), each
 * expiring with the lease unless renewed. An entry whose lease ran out is given back to the pool
 * by whichever call sees it first.
 */
import type { Effect } from "effect"
import type { LockRequest, RenewOutcome } from "../../LockBackend.js"
import type { LockBackendError } from "../../LockError.js"

/** One acquisition's request: a `LockRequest` (key, owner, lease, fencing) for `permits` permits. */
export interface PermitRequest extends LockRequest {
  /** How many permits this acquisition takes: a whole number, at least 1. */
  readonly permits: number
  /**
   * The semaphore's total, set when the semaphore does not exist yet (Redisson's `trySetPermits`);
   * `undefined` leaves a missing semaphore at zero permits.
   */
  readonly total: number | undefined
}

/**
 * The outcome of one attempt: acquired (with a fencing token drawn for this acquisition), or busy:
 * how many permits are free now (negative after a shrink below what is held) and how long until
 * the soonest held permit's lease ends (`undefined` when none is held).
 */
export type PermitAcquireResult =
  | { readonly _tag: "Acquired"; readonly fencingToken: bigint }
  | { readonly _tag: "Busy"; readonly available: number; readonly ttlMillis: number | undefined }

/** A semaphore as the backend sees it: free permits (negative after a shrink) and held ones. */
export interface SemaphoreState {
  readonly available: number
  readonly acquired: number
}

/**
 * @since 0.3.0
 */
export interface SemaphorePrimitives {
  /** One attempt to take `request.permits` permits under a lease of their own. */
  readonly tryAcquire: (request: PermitRequest) => Effect.Effect<PermitAcquireResult, LockBackendError>
  /** Extend each acquisition's lease if its permits are still held: one outcome per request. */
  readonly renew: (
    requests: ReadonlyArray<PermitRequest>
  ) => Effect.Effect<ReadonlyArray<RenewOutcome>, LockBackendError>
  /** Give back `owner`'s permits (notifying waiters); how many were still held (0: none). */
  readonly release: (key: string, owner: string, permits: number) => Effect.Effect<number, LockBackendError>
  /** Free and held permits, after giving back the permits whose lease ran out. */
  readonly state: (key: string) => Effect.Effect<SemaphoreState, LockBackendError>
  /**
   * Make the total `total`: the free count moves by the difference (it may go negative: held
   * permits are never revoked, they just are not replaced when they come back). Notifies waiters.
   */
  readonly setPermits: (key: string, total: number) => Effect.Effect<void, LockBackendError>
}

/**
 * The key under which a semaphore's notifications travel through `subscribe` and `notifications`
 * (and its local wait queue lives): apart from the mutex of the same name, whose waiters it must
 * not wake. Lock keys never start with a NUL character in practice; if one did, its waiters would
 * only see extra wake-ups.
 */
export const notificationKey = (key: string): string => `\u0000semaphore\u0000${key}`

/** The semaphore key of a notification key, or `undefined` for a mutex key. */
export const semaphoreKeyOf = (key: string): string | undefined =>
  key.startsWith("\u0000semaphore\u0000") ? key.slice("\u0000semaphore\u0000".length) : undefined

export const isPermitRequest = (request: LockRequest): request is PermitRequest =>
  typeof (request as Partial<PermitRequest>).permits === "number"
