/**
 * How the two sides of a `ReadWriteLock` enter, beyond their kinds: a read lock asked for inside a
 * region that holds the write lock on the same name is taken with the write hold's owner (a
 * downgrade, which the backend grants under its own write lock), and a write lock asked for inside
 * a region that holds only the read lock fails at once with `LockUpgradeError` (waiting for every
 * reader to leave would include waiting for itself).
 */
import { LockUpgradeError } from "../../LockError.js"
import type { KindEntry } from "./enter.js"
import { findHold } from "./region.js"

export const readEntry: KindEntry<never> = {
  kind: "read",
  check: (region, base, key) => {
    const write = base.kinds.write
    const held = write === undefined ? undefined : findHold(region, write, key)
    return held === undefined ? undefined : { owner: held.owner }
  }
}

export const writeEntry: KindEntry<LockUpgradeError> = {
  kind: "write",
  check: (region, base, key) => {
    const read = base.kinds.read
    const held = read === undefined ? undefined : findHold(region, read, key)
    return held === undefined ? undefined : new LockUpgradeError({ key, owner: held.owner })
  }
}
