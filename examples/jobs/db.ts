/**
 * The job runner's PostgreSQL side: one table of results, and the fenced write. A result is
 * admitted only if its fencing token is at least the one already stored for the job, in the same
 * statement (docs/fencing.md, "SQL: a fence column"), so a worker that lost its lock and writes
 * late is refused by the database itself, whatever it believes.
 */
import { Data, Effect } from "effect"
import type { Scope } from "effect"
import pg from "pg"

export class SqlError extends Data.TaggedError("SqlError")<{ readonly message: string; readonly cause: unknown }> {}

export const defaultUrl = "postgres://postgres@127.0.0.1:5432/test"

/** Where PostgreSQL is, for messages: host, port and database (never the password). */
export const describeUrl = (url: string): string => {
  const parsed = new URL(url)
  return `${parsed.hostname}:${parsed.port || "5432"}${parsed.pathname}`
}

export interface Db {
  readonly pool: pg.Pool
  /** The jobs of `run` that have a result. */
  readonly done: (run: string) => Effect.Effect<ReadonlySet<string>, SqlError>
  /** Write a result with its fencing token: `true` admitted, `false` refused (a newer token wrote). */
  readonly fencedWrite: (
    row: {
      readonly run: string
      readonly job: string
      readonly result: string
      readonly worker: string
      readonly token: bigint
    }
  ) => Promise<boolean>
  readonly results: (
    run: string
  ) => Effect.Effect<ReadonlyArray<{ job: string; worker: string; fence: string; result: string }>, SqlError>
}

const query = <R extends pg.QueryResultRow>(pool: pg.Pool, text: string, values: ReadonlyArray<unknown> = []) =>
  Effect.tryPromise({
    try: () => pool.query<R>(text, [...values]),
    catch: (cause) => new SqlError({ message: cause instanceof Error ? cause.message : String(cause), cause })
  })

/** A pool on `url`, the table created if needed; closed with the scope. */
export const connect = (url: string): Effect.Effect<Db, SqlError, Scope.Scope> =>
  Effect.gen(function*() {
    const pool = yield* Effect.acquireRelease(
      Effect.sync(() => new pg.Pool({ connectionString: url, max: 2, connectionTimeoutMillis: 5_000 })),
      (pool) => Effect.promise(() => pool.end())
    )
    pool.on("error", () => {})
    yield* query(
      pool,
      `CREATE TABLE IF NOT EXISTS effect_lock_job_results (
         run    text   NOT NULL,
         job    text   NOT NULL,
         result text   NOT NULL,
         worker text   NOT NULL,
         fence  bigint NOT NULL,
         PRIMARY KEY (run, job)
       )`
    ).pipe(
      // Two processes creating the table at once: one of them sees a unique violation.
      Effect.retry({ times: 2 })
    )
    return {
      pool,
      done: (run) =>
        Effect.map(
          query<{ job: string }>(pool, "SELECT job FROM effect_lock_job_results WHERE run = $1", [run]),
          (result) => new Set(result.rows.map((row) => row.job))
        ),
      fencedWrite: async ({ job, result, run, token, worker }) => {
        const written = await pool.query(
          `INSERT INTO effect_lock_job_results (run, job, result, worker, fence) VALUES ($1, $2, $3, $4, $5)
           ON CONFLICT (run, job) DO UPDATE
              SET result = EXCLUDED.result, worker = EXCLUDED.worker, fence = EXCLUDED.fence
            WHERE effect_lock_job_results.fence <= EXCLUDED.fence`,
          // the token as a decimal string: exact for the whole 64-bit range
          [run, job, result, worker, token.toString()]
        )
        return written.rowCount === 1
      },
      results: (run) =>
        Effect.map(
          query<{ job: string; worker: string; fence: string; result: string }>(
            pool,
            "SELECT job, worker, fence::text AS fence, result FROM effect_lock_job_results WHERE run = $1 ORDER BY length(job), job",
            [run]
          ),
          (result) => result.rows
        )
    }
  })

/** Delete the rows of `run`. */
export const cleanUp = (db: Db, run: string) =>
  Effect.asVoid(query(db.pool, "DELETE FROM effect_lock_job_results WHERE run = $1", [run]))
