/**
 * `npm run example:jobs`: a small job runner. Three worker processes take jobs under locks on
 * Redis and write results to PostgreSQL with a fencing check in SQL. One worker freezes (SIGSTOP)
 * right before its first write, past its lease; another worker takes the job over and writes it;
 * when the frozen worker continues, its late write is refused by the database. The run prints what
 * happened and checks it (exit 1 if a check fails), and deletes its rows and keys at the end.
 *
 * Redis: `REDIS_URL` (default redis://127.0.0.1:6379). PostgreSQL: `JOBS_PG_URL` (default
 * postgres://postgres@127.0.0.1:5432/test, trust authentication). Every key and row is namespaced
 * by a random run id.
 */
import { Effect } from "effect"
import { Redis } from "ioredis"
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { createInterface } from "node:readline"
import { fileURLToPath } from "node:url"
import { cleanUp, connect, defaultUrl, describeUrl } from "./db.js"

const redisUrl = process.env.REDIS_URL ?? "redis://127.0.0.1:6379"
const pgUrl = process.env.JOBS_PG_URL ?? defaultUrl
const run = randomBytes(4).toString("hex")
const jobCount = 9
const leaseMillis = 2_000
const lease = `${leaseMillis / 1000} s`
const workerNames = ["w1", "w2", "w3"] as const
const paused = "w2"

const root = fileURLToPath(new URL("../..", import.meta.url))
const workerScript = fileURLToPath(new URL("./worker.ts", import.meta.url))
const started = Date.now()
const at = () => `+${((Date.now() - started) / 1000).toFixed(2)}s`.padStart(8)
const print = (line: string) => console.log(`${at()}  ${line}`)

interface Event {
  readonly worker: string
  readonly ev: string
  readonly job?: string
  readonly token?: string
  readonly reason?: string
  readonly message?: string
}

const redisHost = (url: string) => {
  const parsed = new URL(url)
  return `${parsed.hostname}:${parsed.port || "6379"}`
}

const startWorker = (name: string, index: number, onEvent: (event: Event) => void) => {
  const child = spawn(process.execPath, ["--import", "tsx", workerScript], {
    cwd: root,
    env: {
      ...process.env,
      REDIS_URL: redisUrl,
      JOBS_PG_URL: pgUrl,
      JOBS_RUN: run,
      JOBS_WORKER: name,
      JOBS_INDEX: String(index),
      JOBS_COUNT: String(jobCount),
      JOBS_LEASE_MILLIS: String(leaseMillis),
      JOBS_PAUSE: name === paused ? "1" : "0"
    },
    stdio: ["pipe", "pipe", "pipe"]
  }) as ChildProcessWithoutNullStreams
  child.stdin.on("error", () => {})
  let stderr = ""
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
  createInterface({ input: child.stdout }).on("line", (line) => {
    if (line.startsWith("{")) onEvent(JSON.parse(line) as Event)
  })
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)))
  return { name, child, exited, stderr: () => stderr }
}

const program = Effect.gen(function*() {
  console.log(
    `job runner ${run}: ${jobCount} jobs, ${workerNames.length} worker processes, lease ${lease}; ` +
      `locks on Redis ${redisHost(redisUrl)}, results in PostgreSQL ${describeUrl(pgUrl)}`
  )
  const db = yield* connect(pgUrl).pipe(
    Effect.mapError((error) =>
      new Error(`cannot use PostgreSQL at ${describeUrl(pgUrl)} (set JOBS_PG_URL): ${error.message}`)
    )
  )
  const redis = yield* Effect.acquireRelease(
    Effect.sync(() => new Redis(redisUrl, { maxRetriesPerRequest: 1, lazyConnect: true }).on("error", () => {})),
    (redis) => Effect.sync(() => redis.disconnect())
  )
  yield* Effect.tryPromise({
    try: () => redis.connect(),
    catch: () => new Error(`cannot reach Redis at ${redisHost(redisUrl)} (set REDIS_URL)`)
  })
  // Whatever happens, the run's rows and keys go.
  yield* Effect.addFinalizer(() =>
    Effect.gen(function*() {
      yield* Effect.ignore(cleanUp(db, run))
      for (const pattern of [`jobs:${run}:*`, `redisson_lock_token:{jobs:${run}:*`]) {
        const keys = yield* Effect.promise(() => redis.keys(pattern)).pipe(Effect.orElseSucceed(() => []))
        if (keys.length > 0) yield* Effect.ignore(Effect.tryPromise(() => redis.del(...keys)))
      }
    })
  )

  const events: Array<Event> = []
  const ready = new Set<string>()
  let pausedJob: { job: string; token: bigint } | undefined
  const workers = workerNames.map((name, index) =>
    startWorker(name, index, (event) => {
      events.push(event)
      switch (event.ev) {
        case "ready":
          ready.add(event.worker)
          return
        case "took":
          return print(`${event.worker} took ${event.job} (fencing token ${event.token})`)
        case "wrote":
          return print(`${event.worker} wrote ${event.job} with token ${event.token}: admitted`)
        case "pausing":
          pausedJob = { job: event.job!, token: BigInt(event.token!) }
          return print(
            `${event.worker} froze (SIGSTOP) just before writing ${event.job} with token ${event.token}; ` +
              `its lease (${lease}) runs out`
          )
        case "refused":
          return print(
            `${event.worker} wrote ${event.job} with token ${event.token}: REFUSED by PostgreSQL (a newer token wrote it)`
          )
        case "lost":
          return print(`${event.worker} lost its lock on ${event.job} (${event.reason}): the program was interrupted`)
        case "finished":
          return print(`${event.worker} finished: every job has a result`)
        case "failed":
          return print(`${event.worker} FAILED: ${event.message}`)
      }
    })
  )
  yield* Effect.addFinalizer(() => Effect.sync(() => workers.forEach((w) => w.child.kill("SIGKILL"))))

  const waitFor = (check: () => boolean, what: string, millis = 120_000) =>
    Effect.gen(function*() {
      const deadline = Date.now() + millis
      while (!check()) {
        const dead = workers.find((w) => w.child.exitCode !== null && w.child.exitCode !== 0)
        if (dead !== undefined) return yield* Effect.fail(new Error(`${dead.name} exited early:\n${dead.stderr()}`))
        if (Date.now() > deadline) return yield* Effect.fail(new Error(`timed out waiting for ${what}`))
        yield* Effect.sleep("50 millis")
      }
    })

  yield* waitFor(() => ready.size === workers.length, "the workers to start")
  print("all workers ready: go")
  for (const worker of workers) worker.child.stdin.write("go\n")

  // The frozen worker stays frozen until another worker has taken its job over and written it.
  yield* waitFor(() => pausedJob !== undefined, `${paused} to reach its first write`)
  const frozen = pausedJob!
  yield* waitFor(
    () => events.some((e) => e.ev === "wrote" && e.job === frozen.job && BigInt(e.token ?? "0") > frozen.token),
    `another worker to write ${frozen.job}`
  )
  print(`continuing ${paused} (SIGCONT)`)
  workers.find((w) => w.name === paused)!.child.kill("SIGCONT")

  const codes = yield* Effect.promise(() => Promise.all(workers.map((w) => w.exited)))
  const rows = yield* db.results(run)

  console.log("\nresults in PostgreSQL:")
  for (const row of rows) {
    console.log(`  ${row.job.padEnd(7)} by ${row.worker}  token ${row.fence.padStart(3)}  ${row.result}`)
  }

  const refused = events.filter((e) => e.ev === "refused")
  const checks: ReadonlyArray<readonly [string, boolean]> = [
    ["every worker exited 0", codes.every((code) => code === 0)],
    [`every job has exactly one result (${rows.length}/${jobCount})`, rows.length === jobCount],
    [
      `${paused}'s late write of ${frozen.job} (token ${frozen.token}) was refused`,
      refused.some((e) => e.worker === paused && e.job === frozen.job && e.token === String(frozen.token))
    ],
    [
      `${frozen.job}'s result is the newer holder's (token > ${frozen.token})`,
      rows.some((row) => row.job === frozen.job && row.worker !== paused && BigInt(row.fence) > frozen.token)
    ]
  ]
  console.log("\nchecks:")
  for (const [what, ok] of checks) console.log(`  ${ok ? "ok  " : "FAIL"}  ${what}`)
  if (checks.some(([, ok]) => !ok)) return yield* Effect.fail(new Error("a check failed"))
  console.log(`\nthe database refused ${refused.length} late write(s); nothing was written twice`)
})

Effect.runPromise(Effect.scoped(program)).then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(`example:jobs failed: ${error instanceof Error ? error.message : String(error)}`)
    process.exit(1)
  }
)
