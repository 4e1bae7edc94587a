/**
 * The checker: decides, after the campaign, whether a recorded history is legal. Pure: records and
 * the resources' final state in, violations and figures out.
 *
 * The resources make the exact order of their accepted writes recoverable: every value carries the
 * id of the operation that wrote it, and every operation recorded what it read before writing. So
 * from the final value back to 0, each write names its predecessor: that chain is the resource's
 * own order of applied writes. On it and on the recorded times the rules are:
 *
 * - `lost-update`: every write reported accepted is on the chain, and the chain is unbroken
 *   (the counter equals the accepted increments, each write read the value just before its own);
 * - `phantom-write`: no write reported refused is on the chain;
 * - `token-order`: tokens never go down along the chain;
 * - `duplicate-token`: no two acquisitions got the same token;
 * - `uncovered-write`: no write was accepted after an operation with a newer token had claimed the
 *   resource (claimed before the write even started): the resource must have refused it;
 * - `unnoticed-loss`: a lease's guard never admitted a write after the lock had been granted to a
 *   newer token (the write's step started after that grant was recorded): the holder must have
 *   been told (`LockLostError`) first. Applies to operations that guard their writes;
 * - `defect`: no defect, unhandled rejection or uncaught exception in a worker;
 * - `no-recovery`: after the nemesis stopped, every worker got the lock again within the bound
 *   (timed from the stop, or from its first operation for a worker that was still starting then).
 *
 * Times are `process.hrtime` readings of one host, so records of different processes compare.
 */
import type { Finals, FinalState, HistoryRecord, ResourceName, Violation, WriteOutcome } from "./history.js"

type Rec<T extends HistoryRecord["t"]> = Extract<HistoryRecord, { readonly t: T }>

export interface OpView {
  readonly id: string
  readonly w: number
  invoke?: Rec<"invoke">
  acquired?: Rec<"acquired">
  readonly reads: Partial<Record<ResourceName, Rec<"read">>>
  readonly writes: Partial<Record<ResourceName, Rec<"write">>>
  readonly wrote: Partial<Record<ResourceName, Rec<"wrote">>>
  end?: Rec<"end">
}

export interface CheckOptions {
  /** The longest a worker may take to get the lock after the nemesis stopped. */
  readonly recoveryBoundMs: number
  /** The workers that must recover (all of them, normally). */
  readonly workers: ReadonlyArray<number>
}

export interface Summary {
  readonly operations: number
  readonly outcomes: Readonly<Record<string, number>>
  readonly losses: Readonly<Record<string, number>>
  readonly acquisitions: number
  readonly writes: Readonly<Record<string, Readonly<Record<WriteOutcome, number>>>>
  readonly faults: Readonly<Record<string, number>>
  readonly restarts: number
  /** Per worker: ms from the nemesis' stop to its first acquisition after it (undefined: none). */
  readonly recovery: Readonly<Record<number, number | undefined>>
  readonly maxRecoveryMs: number | undefined
}

export interface CheckResult {
  readonly violations: ReadonlyArray<Violation>
  readonly summary: Summary
}

const resources: ReadonlyArray<ResourceName> = ["pg", "redis"]

/** Tokens are decimal strings of int64 values. */
const tokenOf = (token: string): bigint => BigInt(token)

/** Group the records by operation, in time order. */
export const operations = (records: ReadonlyArray<HistoryRecord>): Map<string, OpView> => {
  const ops = new Map<string, OpView>()
  const of = (id: string, w: number): OpView => {
    let op = ops.get(id)
    if (op === undefined) {
      op = { id, w, reads: {}, writes: {}, wrote: {} }
      ops.set(id, op)
    }
    return op
  }
  for (const r of records) {
    switch (r.t) {
      case "invoke":
        of(r.id, r.w).invoke = r
        break
      case "acquired":
        of(r.id, r.w).acquired = r
        break
      case "read":
        of(r.id, r.w).reads[r.res] = r
        break
      case "write":
        of(r.id, r.w).writes[r.res] = r
        break
      case "wrote":
        of(r.id, r.w).wrote[r.res] = r
        break
      case "end":
        of(r.id, r.w).end = r
        break
    }
  }
  return ops
}

interface ChainLink {
  readonly op: OpView
  readonly write: Rec<"write">
}

/**
 * The resource's applied writes in its own order, walked back from the final value. Breaks are
 * reported as `lost-update` (the value is not explained by the history).
 */
const chainOf = (
  res: ResourceName,
  final: FinalState,
  ops: Map<string, OpView>,
  violations: Array<Violation>,
  endMono: number
): Array<ChainLink> => {
  const chain: Array<ChainLink> = []
  const seen = new Set<string>()
  let n = final.n
  let writer = final.writer
  while (n > 0) {
    const op = ops.get(writer)
    const write = op?.writes[res]
    if (op === undefined || write === undefined || write.n !== n) {
      violations.push({
        kind: "lost-update",
        message: `${res}: value ${n} was written by "${writer}", which the history does not show writing it`,
        mono: endMono,
        ops: writer === "" ? [] : [writer]
      })
      break
    }
    if (seen.has(op.id)) {
      violations.push({
        kind: "lost-update",
        message: `${res}: the chain of writes loops at ${op.id}`,
        mono: write.mono,
        ops: [op.id]
      })
      break
    }
    seen.add(op.id)
    chain.push({ op, write })
    const read = op.reads[res]
    if (read === undefined || read.n !== n - 1) {
      violations.push({
        kind: "lost-update",
        message: `${res}: ${op.id} wrote ${n} but read ${read === undefined ? "nothing" : read.n}`,
        mono: write.mono,
        ops: [op.id]
      })
      break
    }
    n = read.n
    writer = read.writer
  }
  return chain.reverse()
}

/** For time-ordered (mono, token) pairs: the highest token among those strictly before `mono`. */
const highestBefore = (
  sorted: ReadonlyArray<{ readonly mono: number; readonly token: bigint; readonly id: string }>
) => {
  const prefix: Array<{ readonly token: bigint; readonly id: string }> = []
  let best: { readonly token: bigint; readonly id: string } | undefined
  for (const entry of sorted) {
    if (best === undefined || entry.token > best.token) best = { token: entry.token, id: entry.id }
    prefix.push(best)
  }
  return (mono: number): { readonly token: bigint; readonly id: string } | undefined => {
    let lo = 0
    let hi = sorted.length
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if ((sorted[mid]?.mono ?? Infinity) < mono) lo = mid + 1
      else hi = mid
    }
    return lo === 0 ? undefined : prefix[lo - 1]
  }
}

const count = (into: Record<string, number>, key: string) => {
  into[key] = (into[key] ?? 0) + 1
}

/** Check a history. `records` may come in any order; they are sorted by `mono`. */
export const check = (
  input: ReadonlyArray<HistoryRecord>,
  finals: Finals,
  options: CheckOptions
): CheckResult => {
  const records = [...input].sort((a, b) => a.mono - b.mono)
  const endMono = records.at(-1)?.mono ?? 0
  const ops = operations(records)
  const violations: Array<Violation> = []

  // duplicate-token
  const grants = new Map<string, OpView>()
  for (const op of ops.values()) {
    if (op.acquired === undefined) continue
    const other = grants.get(op.acquired.token)
    if (other !== undefined) {
      violations.push({
        kind: "duplicate-token",
        message: `token ${op.acquired.token} was granted to ${other.id} and again to ${op.id}`,
        mono: op.acquired.mono,
        ops: [other.id, op.id]
      })
    } else grants.set(op.acquired.token, op)
  }

  const acquisitions = [...ops.values()]
    .flatMap((op) =>
      op.acquired === undefined ? [] : [{ mono: op.acquired.mono, token: tokenOf(op.acquired.token), id: op.id }]
    )
    .sort((a, b) => a.mono - b.mono)
  const newestGrantBefore = highestBefore(acquisitions)

  for (const res of resources) {
    const final = finals[res]
    const chain = final === undefined ? [] : chainOf(res, final, ops, violations, endMono)
    const onChain = new Set(chain.map((link) => link.op.id))

    // token-order and phantom-write, along the resource's own order
    for (let i = 0; i < chain.length; i++) {
      const link = chain[i]!
      if (link.op.wrote[res]?.outcome === "refused") {
        violations.push({
          kind: "phantom-write",
          message: `${res}: ${link.op.id}'s write of ${link.write.n} was reported refused but is applied`,
          mono: link.op.wrote[res]!.mono,
          ops: [link.op.id]
        })
      }
      const previous = chain[i - 1]
      if (previous !== undefined && tokenOf(link.write.token) < tokenOf(previous.write.token)) {
        violations.push({
          kind: "token-order",
          message:
            `${res}: ${link.op.id} wrote ${link.write.n} with token ${link.write.token} after ${previous.op.id} ` +
            `wrote ${previous.write.n} with the newer token ${previous.write.token}`,
          mono: link.op.wrote[res]?.mono ?? link.write.mono,
          ops: [previous.op.id, link.op.id]
        })
      }
    }

    // lost-update: an accepted write that the resource no longer shows
    if (final !== undefined) {
      for (const op of ops.values()) {
        const wrote = op.wrote[res]
        if (wrote?.outcome !== "ok" || onChain.has(op.id)) continue
        const write = op.writes[res]
        const rival = chain.find((link) => link.write.n === write?.n)
        violations.push({
          kind: "lost-update",
          message: `${res}: ${op.id}'s write of ${write?.n} (token ${write?.token}) was accepted but is lost` +
            (rival === undefined
              ? ""
              : `: ${rival.op.id} (token ${rival.write.token}) read the same value and its write is the one kept`),
          // the loss happened when the rival's write overwrote it
          mono: Math.max(wrote.mono, rival?.op.wrote[res]?.mono ?? 0),
          ops: rival === undefined ? [op.id] : [op.id, rival.op.id]
        })
      }
    }

    // uncovered-write: accepted although a newer token had claimed the resource before it started
    const claims = [...ops.values()]
      .flatMap((op) => {
        const read = op.reads[res]
        return read === undefined ? [] : [{ mono: read.mono, token: tokenOf(read.token), id: op.id }]
      })
      .sort((a, b) => a.mono - b.mono)
    const newestClaimBefore = highestBefore(claims)
    for (const op of ops.values()) {
      const write = op.writes[res]
      if (write === undefined) continue
      const accepted = op.wrote[res]?.outcome === "ok" || onChain.has(op.id)
      if (!accepted) continue
      const token = tokenOf(write.token)
      const claim = newestClaimBefore(write.mono)
      if (claim !== undefined && claim.token > token) {
        violations.push({
          kind: "uncovered-write",
          message: `${res}: ${op.id}'s write with token ${write.token} was accepted although ${claim.id} had ` +
            `claimed the resource with the newer token ${claim.token} before the write started`,
          mono: op.wrote[res]?.mono ?? write.mono,
          ops: [op.id, claim.id]
        })
      }
      // unnoticed-loss: the guard admitted the write after a newer holder was granted the lock
      if (op.invoke?.guarded === true) {
        const grant = newestGrantBefore(write.mono)
        if (grant !== undefined && grant.token > token) {
          violations.push({
            kind: "unnoticed-loss",
            message: `${res}: ${op.id} (token ${write.token}) was let write by its lease after ${grant.id} had ` +
              `been granted the lock with token ${grant.token}: it was not told it had lost the lock`,
            mono: write.mono,
            ops: [op.id, grant.id]
          })
        }
      }
    }
  }

  // defect
  for (const r of records) {
    if (r.t === "defect") {
      violations.push({ kind: "defect", message: `worker ${r.w}: ${r.message}`, mono: r.mono, ops: [] })
    }
  }

  // no-recovery
  const stop = records.find((r) => r.t === "nemesis-stop")
  const recovery: Record<number, number | undefined> = {}
  if (stop !== undefined) {
    for (const w of options.workers) {
      // A worker (re)started by the nemesis that was still starting when it stopped is timed from
      // its first operation: process start-up (node, the TypeScript loader) is not the lock's.
      const lastSpawn = records.filter((r) => r.t === "spawn" && r.w === w && r.mono <= stop.mono).at(-1)
      const firstOp = lastSpawn === undefined
        ? undefined
        : records.find((r) => r.t === "invoke" && r.w === w && r.mono > lastSpawn.mono)
      const from = firstOp !== undefined && firstOp.mono > stop.mono ? firstOp.mono : stop.mono
      const first = records.find((r) => r.t === "acquired" && r.w === w && r.mono > stop.mono)
      const took = first === undefined ? undefined : first.mono - from
      recovery[w] = took
      if (took === undefined || took > options.recoveryBoundMs) {
        violations.push({
          kind: "no-recovery",
          message: took === undefined
            ? `worker ${w} never got the lock after the nemesis stopped`
            : `worker ${w} got the lock ${Math.round(took)} ms after the nemesis stopped (or it started), ` +
              `over the bound of ${options.recoveryBoundMs} ms`,
          mono: first?.mono ?? endMono,
          ops: first !== undefined && "id" in first ? [first.id] : []
        })
      }
    }
  }

  violations.sort((a, b) => a.mono - b.mono)
  return { violations, summary: summarize(records, ops, recovery) }
}

const summarize = (
  records: ReadonlyArray<HistoryRecord>,
  ops: Map<string, OpView>,
  recovery: Record<number, number | undefined>
): Summary => {
  const outcomes: Record<string, number> = {}
  const losses: Record<string, number> = {}
  const faults: Record<string, number> = {}
  const writes: Record<string, Record<WriteOutcome, number>> = {}
  let acquisitions = 0
  let restarts = 0
  for (const op of ops.values()) {
    if (op.acquired !== undefined) acquisitions++
    count(outcomes, op.end?.outcome ?? "unfinished")
    if (op.end?.outcome === "lost") count(losses, op.end.reason ?? "unknown")
    for (const res of resources) {
      const wrote = op.wrote[res]
      if (wrote === undefined) continue
      const into = (writes[res] ??= { ok: 0, refused: 0, unknown: 0, skipped: 0 })
      into[wrote.outcome]++
    }
  }
  for (const r of records) {
    if (r.t === "fault") count(faults, r.kind)
    if (r.t === "spawn" && r.life > 0) restarts++
  }
  const times = Object.values(recovery).filter((t): t is number => t !== undefined)
  return {
    operations: ops.size,
    outcomes,
    losses,
    acquisitions,
    writes,
    faults,
    restarts,
    recovery,
    maxRecoveryMs: times.length === 0 ? undefined : Math.max(...times)
  }
}

/** One line per record, for the history around a violation. */
export const describeRecord = (r: HistoryRecord, origin: number): string => {
  const { mono, t, ...rest } = r
  const fields = Object.entries(rest)
    .filter(([key]) => key !== "wall" && key !== "entered")
    .map(([key, value]) => `${key}=${typeof value === "string" ? value : JSON.stringify(value)}`)
  return `${((mono - origin) / 1000).toFixed(3).padStart(9)}s ${t.padEnd(12)} ${fields.join(" ")}`
}

/**
 * The records around a violation: the ones of the operations it names and, interleaved, whatever
 * else happened in the `around` ms before and after it.
 */
export const surrounding = (
  input: ReadonlyArray<HistoryRecord>,
  violation: Violation,
  around = 1500,
  limit = 40
): ReadonlyArray<HistoryRecord> => {
  const involved = new Set(violation.ops)
  const near = input.filter((r) =>
    ("id" in r && involved.has(r.id)) ||
    (Math.abs(r.mono - violation.mono) <= around && (r.t !== "read" && r.t !== "wrote" && r.t !== "write"))
  )
  near.sort((a, b) => a.mono - b.mono)
  if (near.length <= limit) return near
  // keep the ones nearest the violation
  const index = near.findIndex((r) => r.mono >= violation.mono)
  const start = Math.max(0, Math.min(near.length - limit, (index < 0 ? near.length : index) - limit / 2))
  return near.slice(start, start + limit)
}
