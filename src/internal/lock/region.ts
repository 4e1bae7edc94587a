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

/**
 * A region: the innermost node first. A node holds a hold, or is a fork mark (`hold` undefined):
 * a forked child's region starts with a mark above what it inherited, so that joining the child
 * back finds its own additions without walking (or comparing against) the inherited rest.
 * `undefined` is the empty region.
 */
export interface Region {
  readonly hold: Hold | undefined
  readonly next: Region | undefined
  /** Nodes from this one down, marks included. */
  readonly size: number
}

const node = (hold: Hold | undefined, next: Region | undefined): Region => ({
  hold,
  next,
  size: next === undefined ? 1 : next.size + 1
})

/** Owner ids are `<process uuid>:<n>`, fresh per hold: unique across processes, never derived from time or pid. */
const processId = globalValue(Symbol.for("effect-lock/processId"), () => randomUUID())
const counter = globalValue(Symbol.for("effect-lock/ownerCounter"), () => ({ next: 0 }))

export const newOwnerId = (): string => `${processId}:${++counter.next}`

/** The hold on `key` at `backend` that this region may reenter, if any. */
export const findHold = (region: Region | undefined, backend: Backend, key: string): Hold | undefined => {
  for (let n = region; n !== undefined; n = n.next) {
    const hold = n.hold
    if (hold !== undefined && hold.key === key && hold.backend === backend && hold.state._tag === "Held") return hold
  }
  return undefined
}

/** The innermost held hold on `key`, on any backend. */
export const findKey = (region: Region | undefined, key: string): Hold | undefined => {
  for (let n = region; n !== undefined; n = n.next) {
    const hold = n.hold
    if (hold !== undefined && hold.key === key && hold.state._tag === "Held") return hold
  }
  return undefined
}

/**
 * `region` with `hold` added. Holds that have ended are dropped on the way, but only when the
 * region's size is a power of two from 16 up: the sweep is linear, so that keeps `extend` constant
 * time amortised however many holds a region gathers (10,000 `Lock.acquire`s into one scope).
 */
export const extend = (region: Region | undefined, hold: Hold): Region => node(hold, sweep(region))

const sweep = (region: Region | undefined): Region | undefined =>
  region !== undefined && region.size >= 16 && (region.size & (region.size - 1)) === 0 ? live(region) : region

/**
 * `region` without `hold`, which has ended (its scope is closing): taken off at once when it is the
 * innermost node (scopes close in the reverse order of their acquisitions), otherwise left for the
 * next sweep, since an ended hold is never reentered. Closing a scope of 10,000 holds stays linear.
 */
export const without = (region: Region | undefined, hold: Hold): Region | undefined =>
  region !== undefined && region.hold === hold ? region.next : region

const live = (region: Region | undefined): Region | undefined => {
  for (let n = region; n !== undefined; n = n.next) {
    if (n.hold !== undefined && n.hold.state._tag !== "Held") return rebuild(region, (h) => h.state._tag === "Held")
  }
  return region
}

/** The region with the holds `keep` rejects left out; marks stay. */
const rebuild = (region: Region | undefined, keep: (hold: Hold) => boolean): Region | undefined => {
  const kept: Array<Hold | undefined> = []
  for (let n = region; n !== undefined; n = n.next) if (n.hold === undefined || keep(n.hold)) kept.push(n.hold)
  return kept.reduceRight<Region | undefined>((next, hold) => node(hold, next), undefined)
}

/** A forked child starts with a mark above its parent's region (nothing to mark in an empty one). */
const fork = (region: Region | undefined): Region | undefined => region === undefined ? region : node(undefined, region)

/**
 * The joiner keeps its region and gains the held, scoped holds the joined child acquired: the
 * child's nodes above its fork mark, or above the `withLock` hold whose guarded fiber it is
 * (everything below either was inherited).
 */
const join = (parent: Region | undefined, child: Region | undefined): Region | undefined => {
  let joined = parent
  for (let n = child; n !== undefined && n !== parent; n = n.next) {
    const hold = n.hold
    if (hold === undefined || !hold.scoped) break
    if (hold.state._tag === "Held") joined = node(hold, joined)
  }
  return joined
}

export const currentRegion = globalValue(
  Symbol.for("effect-lock/currentRegion"),
  () => FiberRef.unsafeMake<Region | undefined>(undefined, { fork, join })
)
