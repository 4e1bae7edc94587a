/**
 * Ownership (DESIGN §2.2). A hold belongs to the region that acquired it: the program of a
 * `withLock`, or the rest of the `Scope` for `Lock.acquire`. Fibers inside the region reenter at
 * once; anything else excludes.
 *
 * The holds a fiber may reenter are its region: a FiberRef holding a persistent list, so that
 * extending it for a program is one allocation and siblings never see each other's additions.
 *
 * - fork: a child starts inside its parent's region (the program's children reenter);
 * - join: holds acquired into a scope by a joined child (`Effect.all([Lock.acquire("a"),
 *   Lock.acquire("b")], { concurrency: 2 })`) belong to that scope, so the joiner sees them; a
 *   `withLock` program's own hold never travels outward, since its region ends with the program.
 *
 * Two concurrent acquirers never share a hold: each acquires fresh, with its own owner id, and
 * the backend makes them exclude each other, even when they share an ancestor.
 */
import { FiberRef } from "effect"
import { globalValue } from "effect/GlobalValue"
import { randomUUID } from "node:crypto"
import type { Backend } from "../backend/make.js"
import type { Hold } from "./hold.js"

/** A region: the innermost hold first. `undefined` is the empty region. */
export interface Region {
  readonly hold: Hold
  readonly next: Region | undefined
}

/** Owner ids are `<process uuid>:<n>`, fresh per hold: unique across processes, never derived from time or pid. */
const processId = globalValue(Symbol.for("effect-lock/processId"), () => randomUUID())
const counter = globalValue(Symbol.for("effect-lock/ownerCounter"), () => ({ next: 0 }))

export const newOwnerId = (): string => `${processId}:${++counter.next}`

const contains = (region: Region | undefined, hold: Hold): boolean => {
  for (let node = region; node !== undefined; node = node.next) if (node.hold === hold) return true
  return false
}

/** The hold on `key` at `backend` that this region may reenter, if any. */
export const findHold = (region: Region | undefined, backend: Backend, key: string): Hold | undefined => {
  for (let node = region; node !== undefined; node = node.next) {
    const hold = node.hold
    if (hold.key === key && hold.backend === backend && hold.state._tag === "Held") return hold
  }
  return undefined
}

/** The innermost held hold on `key`, on any backend. */
export const findKey = (region: Region | undefined, key: string): Hold | undefined => {
  for (let node = region; node !== undefined; node = node.next) {
    if (node.hold.key === key && node.hold.state._tag === "Held") return node.hold
  }
  return undefined
}

/** `region` with `hold` added, dropping holds that have ended on the way. */
export const extend = (region: Region | undefined, hold: Hold): Region => ({ hold, next: live(region) })

/** `region` without `hold`. */
export const without = (region: Region | undefined, hold: Hold): Region | undefined =>
  contains(region, hold) ? rebuild(region, (h) => h !== hold) : region

const live = (region: Region | undefined): Region | undefined => {
  for (let node = region; node !== undefined; node = node.next) {
    if (node.hold.state._tag !== "Held") return rebuild(region, (h) => h.state._tag === "Held")
  }
  return region
}

const rebuild = (region: Region | undefined, keep: (hold: Hold) => boolean): Region | undefined => {
  const kept: Array<Hold> = []
  for (let node = region; node !== undefined; node = node.next) if (keep(node.hold)) kept.push(node.hold)
  return kept.reduceRight<Region | undefined>((next, hold) => ({ hold, next }), undefined)
}

/** The joiner keeps its region and gains the held, scoped holds the joined child acquired. */
const join = (parent: Region | undefined, child: Region | undefined): Region | undefined => {
  let joined = parent
  for (let node = child; node !== undefined && node !== parent; node = node.next) {
    const hold = node.hold
    if (hold.scoped && hold.state._tag === "Held" && !contains(parent, hold)) joined = { hold, next: joined }
  }
  return joined
}

export const currentRegion = globalValue(
  Symbol.for("effect-lock/currentRegion"),
  () => FiberRef.unsafeMake<Region | undefined>(undefined, { fork: (region) => region, join })
)
