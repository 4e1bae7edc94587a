/**
 * The user-facing view of a hold. A class, so that a lease costs one small object: its effects are
 * made when they are asked for, from the prototype, rather than as closures per lease.
 */
import type { Duration, Effect } from "effect"
import type { Lease } from "../../Lock.js"
import type { LockLostError } from "../../LockError.js"
import { guard } from "./guard.js"
import type { Hold } from "./hold.js"
import { awaitLoss, isHeld, remaining } from "./hold.js"

class LeaseImpl implements Lease {
  readonly holdCount: number
  constructor(readonly hold: Hold) {
    this.holdCount = hold.count
  }
  get key(): string {
    return this.hold.key
  }
  get owner(): string {
    return this.hold.owner
  }
  get fencingToken(): bigint {
    return this.hold.fencingToken
  }
  get acquiredAt(): number {
    return this.hold.acquiredAt
  }
  get lost(): Effect.Effect<never, LockLostError> {
    return awaitLoss(this.hold)
  }
  get isHeld(): Effect.Effect<boolean> {
    return isHeld(this.hold)
  }
  get remaining(): Effect.Effect<Duration.Duration> {
    return remaining(this.hold)
  }
  // A getter, so that `lease.guard` may be passed around on its own (`program.pipe(lease.guard)`).
  get guard(): <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | LockLostError, R> {
    const hold = this.hold
    return (effect) => guard(hold, effect)
  }
  toJSON() {
    return {
      key: this.key,
      owner: this.owner,
      fencingToken: this.fencingToken.toString(),
      holdCount: this.holdCount,
      acquiredAt: this.acquiredAt
    }
  }
}

export const makeLease = (hold: Hold): Lease => new LeaseImpl(hold)
