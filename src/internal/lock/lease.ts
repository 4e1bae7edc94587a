/** The user-facing view of a hold. */
import type { Effect } from "effect"
import type { Duration } from "effect"
import type { LockLostError } from "../../LockError.js"
import { guard } from "./guard.js"
import type { Hold } from "./hold.js"
import { awaitLoss, isHeld, remaining } from "./hold.js"

/**
 * A held lock, as the program inside it sees it.
 *
 * @since 0.1.0
 * @category models
 */
export interface Lease {
  readonly key: string
  /** The owner id sent to the backend, `<process uuid>:<n>`: fresh per hold, shared by its reentries. */
  readonly owner: string
  /**
   * Strictly increasing per key across every client, issued on each fresh acquisition (a reentry
   * shares its outer lease's token). `0n` when the lock was taken with `fencing: false`.
   */
  readonly fencingToken: bigint
  /** How many times the owner had entered the lock when this lease was handed out (1 = outermost). */
  readonly holdCount: number
  /** Clock time (ms) at which the acquiring round trip started. */
  readonly acquiredAt: number
  /**
   * Fails with `LockLostError` when the lock is lost (or, with reason `released`, once its scope
   * has released it); never succeeds.
   */
  readonly lost: Effect.Effect<never, LockLostError>
  /** Whether the lock is still held: not lost, not released, and its local deadline not passed. */
  readonly isHeld: Effect.Effect<boolean>
  /** Time left until the local deadline, in whole milliseconds (zero once lost or released). */
  readonly remaining: Effect.Effect<Duration.Duration>
  /**
   * Run an effect only while the lock is held: it is interrupted with `LockLostError` on loss, and
   * refused (`LockLostError`, reason `released`) once the lease's scope has released it.
   */
  readonly guard: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | LockLostError, R>
}

export const makeLease = (hold: Hold): Lease => ({
  key: hold.key,
  owner: hold.owner,
  fencingToken: hold.fencingToken,
  holdCount: hold.count,
  acquiredAt: hold.acquiredAt,
  lost: awaitLoss(hold),
  isHeld: isHeld(hold),
  remaining: remaining(hold),
  guard: (effect) => guard(hold, effect)
})
