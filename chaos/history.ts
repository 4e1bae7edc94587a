/**
 * The recorded history of a chaos campaign: one JSON line per event, written by the workers (the
 * operations) and by the runner (processes, faults, the nemesis' end). Every record carries `mono`,
 * milliseconds on `process.hrtime` (CLOCK_MONOTONIC, shared by every process on the host), so
 * records of different processes order correctly; operation records also carry `wall` (epoch ms).
 *
 * One operation of worker `w` (`op` counts from 0 in each worker life, `id` = `w<w>.<life>.<op>`):
 *
 *   invoke -> acquired -> read(pg) read(redis) -> write(pg) wrote(pg) write(redis) wrote(redis) -> end
 *
 * and any prefix of it (an operation ends early when the lock is lost, a write is refused, the
 * resource fails, or the process is killed: then there is no `end`).
 */

/** The protected resources: a PostgreSQL row and a Redis key written through `Fencing.redisSet`. */
export type ResourceName = "pg" | "redis"

/** How an operation ended. */
export type Outcome =
  | "ok"
  | "lost" // LockLostError (with `reason`)
  | "timeout" // LockTimeoutError
  | "backend-error" // LockBackendError
  | "refused" // a resource refused the fencing token
  | "resource-error" // a resource failed (connection, timeout)
  | "defect" // anything else: also recorded as a `defect` record

/**
 * How one write ended: `unknown` when it may or may not have been applied (timeout, interrupted
 * while in flight), `skipped` when the lease's guard refused to start it (the lock was lost).
 */
export type WriteOutcome = "ok" | "refused" | "unknown" | "skipped"

interface Base {
  /** Monotonic milliseconds (host-wide). */
  readonly mono: number
}

interface OfOp extends Base {
  readonly w: number
  readonly id: string
}

export type HistoryRecord =
  /** The operation starts waiting for the lock. */
  | OfOp & { readonly t: "invoke"; readonly wall: number; readonly guarded: boolean }
  /** The lock was granted with `token` (decimal). */
  | OfOp & { readonly t: "acquired"; readonly token: string }
  /**
   * The resource was claimed with the token and read: it held value `n`, last written by `writer`
   * (an operation id, "" for the initial value). `entered` is when the step began.
   */
  | OfOp & {
    readonly t: "read"
    readonly res: ResourceName
    readonly token: string
    readonly n: number
    readonly writer: string
    readonly entered: number
  }
  /** About to write `n` with `token`; `mono` is taken before the lease's guard was asked. */
  | OfOp & { readonly t: "write"; readonly res: ResourceName; readonly token: string; readonly n: number }
  /** How that write ended. */
  | OfOp & { readonly t: "wrote"; readonly res: ResourceName; readonly outcome: WriteOutcome; readonly detail?: string }
  /** The operation ended (the lock is released or lost). */
  | OfOp & { readonly t: "end"; readonly wall: number; readonly outcome: Outcome; readonly reason?: string }
  /** A defect, unhandled rejection or uncaught exception in a worker. */
  | Base & { readonly t: "defect"; readonly w: number; readonly message: string }
  /** Runner: a worker process started (`life` counts restarts) or exited. */
  | Base & { readonly t: "spawn"; readonly w: number; readonly life: number; readonly pid: number }
  | Base & { readonly t: "exit"; readonly w: number; readonly life: number; readonly signal: string | null }
  /** Runner: a fault began (`fault` numbers the schedule entry) and healed. */
  | Base & {
    readonly t: "fault"
    readonly fault: number
    readonly kind: string
    readonly target: string
    readonly detail: string
  }
  | Base & { readonly t: "healed"; readonly fault: number; readonly kind: string }
  /** Runner: the nemesis stopped and every fault is healed; liveness is measured from here. */
  | Base & { readonly t: "nemesis-stop" }

/** What the resources hold at the end of the campaign, read by the runner. */
export interface FinalState {
  readonly n: number
  readonly writer: string
  readonly token: string
}

export type Finals = Partial<Record<ResourceName, FinalState>>

/** The kinds of violation the checker reports. */
export type ViolationKind =
  | "token-order" // accepted writes of a resource, in the resource's order, with a token going down
  | "duplicate-token" // two acquisitions granted the same fencing token
  | "lost-update" // an accepted write is missing from the resource's chain of writes, or the chain is broken
  | "phantom-write" // a write reported refused was applied
  | "uncovered-write" // a write accepted after a newer token had claimed the resource
  | "unnoticed-loss" // a lease admitted a write after the lock had been granted to a newer holder
  | "defect" // a defect or unhandled rejection in a worker
  | "no-recovery" // a worker did not get the lock within the bound after the nemesis stopped

export interface Violation {
  readonly kind: ViolationKind
  readonly message: string
  /** When the illegal step happened (monotonic ms), to show the history around it. */
  readonly mono: number
  /** The operations involved. */
  readonly ops: ReadonlyArray<string>
}
