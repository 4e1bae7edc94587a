/**
 * The errors a user of effect-lock can meet. Each is a `Schema.TaggedError` whose `_tag` is the
 * class name and which carries the key and the facts needed to act on it.
 *
 * @since 0.1.0
 */
import { Schema } from "effect"

/**
 * Why a held lock was lost.
 *
 * - `stolen`: a renewal found another owner in the lock (a foreign client overwrote it, or took it
 *   after it had been deleted).
 * - `deleted`: a renewal found no lock at all, before the lease could have run out: it was
 *   force-unlocked (`Lock.forceUnlock`, the CLI), deleted or flushed, or lost in a failover.
 * - `expired`: the lease ran out: the lock was taken with `renew: false` and its lease ended, or
 *   the process did not get to renew before the local deadline (paused, starved).
 * - `renewal-failed`: the local deadline (last confirmed renewal + lease - drift) passed without a
 *   confirmed renewal: the backend was unreachable, slow, or the process was paused.
 * - `released`: the lease was used after its own scope released it (`lease.guard` or `lease.lost`
 *   outside the region that held it). Nothing was taken from anyone: the hold had simply ended.
 *
 * @since 0.1.0
 * @category errors
 */
export const LostReason = Schema.Literal("stolen", "deleted", "expired", "renewal-failed", "released")

/**
 * @since 0.1.0
 * @category errors
 */
export type LostReason = typeof LostReason.Type

/**
 * Waiting for a lock ran out: either the `wait` budget elapsed (`reason: "wait-elapsed"`) or the
 * `retry` schedule stopped recurring (`reason: "retries-exhausted"`).
 *
 * @since 0.1.0
 * @category errors
 */
export class LockTimeoutError extends Schema.TaggedError<LockTimeoutError>()("LockTimeoutError", {
  key: Schema.String,
  reason: Schema.Literal("wait-elapsed", "retries-exhausted"),
  waitedMillis: Schema.Number,
  attempts: Schema.Number,
  holderTtlMillis: Schema.optional(Schema.Number)
}) {
  override get message(): string {
    const why = this.reason === "wait-elapsed" ? "the wait budget elapsed" : "the retry schedule ended"
    const ttl = this.holderTtlMillis === undefined ? "" : `; the holder's lease had ${this.holderTtlMillis} ms left`
    return `Could not acquire lock "${this.key}" after ${this.waitedMillis} ms and ${this.attempts} attempt(s): ${why}${ttl}`
  }
}

/**
 * A held lock was lost before the program finished. `withLock` interrupts the program and fails
 * with this error; `Lease.lost` fails with it.
 *
 * @since 0.1.0
 * @category errors
 */
export class LockLostError extends Schema.TaggedError<LockLostError>()("LockLostError", {
  key: Schema.String,
  owner: Schema.String,
  reason: LostReason,
  fencingToken: Schema.BigIntFromSelf,
  heldMillis: Schema.Number,
  cause: Schema.optional(Schema.Defect)
}) {
  override get message(): string {
    const why = this.reason === "stolen"
      ? "another owner took it"
      : this.reason === "deleted"
      ? "it was deleted before its lease ended (force-unlocked, flushed, or lost in a failover)"
      : this.reason === "expired"
      ? "its lease expired"
      : this.reason === "released"
      ? "it was already released (the lease was used after its scope closed)"
      : "no renewal was confirmed before the local deadline"
    return `Lost lock "${this.key}" (owner ${this.owner}, fencing token ${this.fencingToken}) after ${this.heldMillis} ms: ${why}`
  }
}

/**
 * What a backend was doing when it failed: connecting (opening a connection, loading ioredis),
 * loading its scripts, checking its ACL permissions at startup (since 0.2.0), one of the lock primitives, subscribing to release notifications, or a
 * fenced write (`Fencing.redisSet`).
 *
 * @since 0.2.0
 * @category errors
 */
export const BackendOperation = Schema.Literal(
  "connect",
  "load-scripts",
  "check-permissions",
  "acquire",
  "renew",
  "release",
  "force-release",
  "inspect",
  "subscribe",
  "fenced-set",
  "set-permits"
)

/**
 * @since 0.2.0
 * @category errors
 */
export type BackendOperation = typeof BackendOperation.Type

const operationText: Record<BackendOperation, string> = {
  "connect": "connect",
  "load-scripts": "load its scripts",
  "check-permissions": "check its ACL permissions",
  "acquire": "acquire",
  "renew": "renew",
  "release": "release",
  "force-release": "force-release",
  "inspect": "inspect",
  "subscribe": "subscribe to release notifications",
  "fenced-set": "do a fenced write",
  "set-permits": "set the permits of a semaphore"
}

/**
 * The backend (Redis, ...) failed or could not be reached within its command timeout.
 *
 * @since 0.1.0
 * @category errors
 */
export class LockBackendError extends Schema.TaggedError<LockBackendError>()("LockBackendError", {
  backend: Schema.String,
  operation: BackendOperation,
  key: Schema.optional(Schema.String),
  cause: Schema.optional(Schema.Defect)
}) {
  override get message(): string {
    const key = this.key === undefined ? "" : ` on "${this.key}"`
    const cause = this.cause instanceof Error
      ? `: ${this.cause.message}`
      : this.cause === undefined
      ? ""
      : `: ${String(this.cause)}`
    return `${this.backend} backend failed to ${operationText[this.operation]}${key}${cause}`
  }
}

/**
 * An option or key was invalid. Raised before anything touches a backend.
 *
 * @since 0.1.0
 * @category errors
 */
export class LockOptionsError extends Schema.TaggedError<LockOptionsError>()("LockOptionsError", {
  field: Schema.String,
  reason: Schema.String
}) {
  override get message(): string {
    return `Invalid lock option "${this.field}": ${this.reason}`
  }
}

/**
 * A region that holds the read lock of a `ReadWriteLock` asked for its write lock. Waiting could
 * never end (the write lock waits for every reader, this one included), so it fails at once: release
 * the read lock first, or take the write lock from the start (a write holder may take the read lock).
 *
 * @since 0.3.0
 * @category errors
 */
export class LockUpgradeError extends Schema.TaggedError<LockUpgradeError>()("LockUpgradeError", {
  key: Schema.String,
  /** The owner of the read hold that made the upgrade impossible. */
  owner: Schema.String
}) {
  override get message(): string {
    return `Cannot take the write lock on "${this.key}" while holding its read lock (owner ${this.owner}): ` +
      "it would wait for itself; release the read lock first, or take the write lock first (a writer may then read)"
  }
}

/**
 * Replica sync (`RedisBackend` option `replicas`): an acquisition that no replica confirmed
 * within the replica sync timeout. A failover could promote a replica without it and hand the lock
 * to someone else, so the acquisition was undone (`released`: the release was sent, on the same
 * connection, right after). It is the `cause` of the `LockBackendError` (operation `"acquire"`)
 * that the acquisition fails with; catch it with `Effect.catchIf(error =>
 * error.cause instanceof LockReplicaSyncError, ...)`.
 *
 * @since 0.3.0
 * @category errors
 */
export class LockReplicaSyncError extends Schema.TaggedError<LockReplicaSyncError>()("LockReplicaSyncError", {
  key: Schema.String,
  /** Replicas asked for (`replicas.sync`). */
  required: Schema.Number,
  /** Replicas that confirmed the acquisition (`WAIT`'s answer): 0. */
  confirmed: Schema.Number,
  timeoutMillis: Schema.Number,
  /** The command that was asked: `WAIT`, or `WAITAOF` on Redis 7.2+ with `replicas.aof`. */
  command: Schema.Literal("WAIT", "WAITAOF")
}) {
  override get message(): string {
    return `no replica confirmed the acquisition of "${this.key}" within ${this.timeoutMillis} ms ` +
      `(${this.command} answered ${this.confirmed} of ${this.required}); the lock was released`
  }
}
