/** The user-facing view of a hold. */
import type { Lease } from "../../Lock.js"
import { guard } from "./guard.js"
import type { Hold } from "./hold.js"
import { awaitLoss, isHeld, remaining } from "./hold.js"

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
