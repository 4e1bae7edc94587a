/**
 * The owner of a critical section. One owner id per outermost `withLock` (or scoped `acquire`),
 * carried in a FiberRef so that nested locks by the same program are reentrant and the fibers the
 * program forks share it.
 */
import type { Deferred } from "effect"
import { FiberRef } from "effect"
import { globalValue } from "effect/GlobalValue"
import { randomUUID } from "node:crypto"
import type { Hold } from "./hold.js"

export interface Pending {
  readonly _tag: "Pending"
  /**
   * Completed when the acquisition settles, whichever way. Made only when a sibling fiber of the
   * same owner has to wait for it (rare), to keep the common path free of allocations.
   */
  settled: Deferred.Deferred<void> | undefined
}

export interface Owner {
  readonly id: string
  /** What this owner holds or is acquiring, by key. */
  readonly holds: Map<string, Hold | Pending>
}

/** Owner ids are `<process uuid>:<n>`: unique across processes, never derived from time or pid. */
const processId = globalValue(Symbol.for("effect-lock/processId"), () => randomUUID())
const counter = globalValue(Symbol.for("effect-lock/ownerCounter"), () => ({ next: 0 }))

export const makeOwner = (): Owner => ({ id: `${processId}:${++counter.next}`, holds: new Map() })

/**
 * `fork`: a child inherits its parent's owner, so the critical section is the program and its
 * children. `join`: the parent keeps its own owner; a child's owner (taken by a scoped `acquire` in
 * the child) never leaks into the fiber that joins it.
 */
export const currentOwner = globalValue(
  Symbol.for("effect-lock/currentOwner"),
  () =>
    FiberRef.unsafeMake<Owner | undefined>(undefined, {
      fork: (owner) => owner,
      join: (parent, _child) => parent
    })
)
