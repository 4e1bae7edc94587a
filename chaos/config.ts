/** What the runner tells a worker process (as JSON, its one argument). */
export interface WorkerConfig {
  /** The worker's index. */
  readonly w: number
  /** How many times this worker was started before (0 for the first start). */
  readonly life: number
  readonly run: string
  readonly kind: string
  readonly backend: string
  /** The backend's redis-servers, through this worker's proxies. */
  readonly redisUrls: ReadonlyArray<string>
  /** The resource Redis (the first server), through this worker's proxy. */
  readonly resourceUrl: string
  /** PostgreSQL connection string, or null when the campaign runs without it. */
  readonly pgUrl: string | null
  readonly leaseMs: number
  readonly waitMs: number
  /** The work between reading and writing: up to this many ms (random). */
  readonly workMs: number
  /** The share of operations whose resource steps go through the lease's guard. */
  readonly guardedShare: number
  /** Deliberately broken variants, to prove the checker. */
  readonly broken: BrokenVariant | null
  readonly seed: number
}

/**
 * - `fencing`: the resources do not check the token (a plain SELECT/UPDATE and GET/SET);
 * - `release`: after every operation the worker DELetes the lock key, owner or not (a release
 *   that does not check the owner).
 */
export type BrokenVariant = "fencing" | "release"

/** The names a run uses in Redis and PostgreSQL. */
export const namesOf = (run: string) => ({
  lock: `chaos:{${run}}:lock`,
  data: `chaos:{${run}}:data`,
  fence: `chaos:{${run}}:fence`,
  claim: `chaos:{${run}}:claim`,
  pgTable: "effect_lock_chaos",
  pgRow: run
})
