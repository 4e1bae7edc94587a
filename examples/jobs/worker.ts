/**
 * One worker process of the job runner (started by `main.ts`). It waits for "go" on stdin, then
 * takes jobs under locks on Redis until every job of the run has a result in PostgreSQL, and
 * prints one JSON line per event on stdout.
 *
 * With `JOBS_PAUSE=1` it stops itself (SIGSTOP) right before the database write of its first job,
 * as a long GC pause or a frozen VM would; `main.ts` continues it (SIGCONT) once another worker has
 * taken the job over and written it. The write then goes out with the old fencing token and the
 * database refuses it.
 */
import { Duration, Effect, Option } from "effect"
import { createHash } from "node:crypto"
import { createInterface } from "node:readline"
import type { Lease } from "../../src/Lock.js"
import * as Lock from "../../src/Lock.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import { connect, type Db } from "./db.js"

const env = (name: string) => {
  const value = process.env[name]
  if (value === undefined) throw new Error(`${name} is not set (start workers with npm run example:jobs)`)
  return value
}
const redisUrl = env("REDIS_URL")
const pgUrl = env("JOBS_PG_URL")
const run = env("JOBS_RUN")
const name = env("JOBS_WORKER")
const index = Number(env("JOBS_INDEX"))
const jobCount = Number(env("JOBS_COUNT"))
const pauseFirst = process.env.JOBS_PAUSE === "1"
const lease = Duration.millis(Number(env("JOBS_LEASE_MILLIS")))

const say = (event: Record<string, unknown>) => console.log(JSON.stringify({ worker: name, ...event }))

const jobs = Array.from({ length: jobCount }, (_, i) => `job-${i + 1}`)
// Each worker starts at a different job, and goes round.
const order = [...jobs.slice((index * 3) % jobCount), ...jobs.slice(0, (index * 3) % jobCount)]

let paused = false

/** The work: 300 ms of "processing", then a result derived from the job. */
const work = (job: string) =>
  Effect.as(Effect.sleep("300 millis"), createHash("sha256").update(job).digest("hex").slice(0, 12))

const processJob = (db: Db, job: string, held: Lease) =>
  Effect.gen(function*() {
    // Under the lock: a job finished by a previous holder is not done again.
    if ((yield* db.done(run)).has(job)) return
    const token = held.fencingToken
    say({ ev: "took", job, token: String(token) })
    const result = yield* work(job)
    const pause = pauseFirst && !paused
    paused ||= pause
    if (pause) say({ ev: "pausing", job, token: String(token) })
    // The write starts in the same synchronous step as the resume (nothing runs in between), and is
    // uninterruptible, as a statement already sent would be: the database is what must refuse it.
    // The answer is reported in the same region: the watchdog interrupts the program right after.
    yield* Effect.uninterruptible(
      Effect.tryPromise(() => {
        if (pause) process.kill(process.pid, "SIGSTOP")
        return db.fencedWrite({ run, job, result, worker: name, token })
      }).pipe(Effect.tap((admitted) => say({ ev: admitted ? "wrote" : "refused", job, token: String(token) })))
    )
  })

const main = Effect.gen(function*() {
  const db = yield* connect(pgUrl)
  say({ ev: "ready" })
  yield* Effect.async<void>((resume) => {
    const lines = createInterface({ input: process.stdin })
    lines.once("line", () => {
      lines.close()
      resume(Effect.void)
    })
  })
  while (true) {
    const done = yield* db.done(run)
    const pending = order.filter((job) => !done.has(job))
    if (pending.length === 0) break
    let took = false
    for (const job of pending) {
      const outcome = yield* Lock.withLockIfAvailable(
        `jobs:${run}:${job}`,
        (held) => processJob(db, job, held),
        { lease }
      ).pipe(
        Effect.catchTag("LockLostError", (error) => {
          say({ ev: "lost", job, reason: error.reason })
          return Effect.succeed(Option.some(undefined))
        })
      )
      took ||= Option.isSome(outcome)
    }
    if (!took) yield* Effect.sleep("100 millis")
  }
  say({ ev: "finished" })
}).pipe(
  Effect.scoped,
  Effect.provide(RedisBackend.layer({ url: redisUrl }))
)

Effect.runPromise(main).then(
  () => process.exit(0),
  (error: unknown) => {
    say({ ev: "failed", message: String(error) })
    process.exit(1)
  }
)
