/**
 * The Redis half of the demo (`examples/demo.ts` loads it only when `REDIS_URL` is set, so the
 * memory path never loads ioredis).
 *
 * With `DEMO_PROCESSES=n` the demo starts `n` OS processes (this module's `child`) that contend on
 * the same keys. Nothing they check is kept in a process: every grant is recorded in Redis, by one
 * script run inside the critical section (`enter`), which
 *
 * - adds the worker to the key's "inside" set and counts an **overlap** when somebody else is in it
 *   (the worker removes itself, and only itself, on the way out: `SREM` of its own member),
 * - compares the lease's fencing token with the last one recorded for the key and counts a token
 *   that is **not higher** (out of order),
 * - counts the grants per process, and the grants that went to another process than the previous
 *   one (hand-offs between processes),
 * - and reads the key's counter. The worker then sleeps (the "work"), and writes counter + 1 with
 *   `Fencing.redisSet`, guarded by its fencing token: a read-sleep-write that loses updates as soon
 *   as two workers overlap, so an **exact counter** (the sum of the counters = the grants the
 *   processes report) shows that none did.
 *
 * Every key of the run (locks, fencing counters `redisson_lock_token:{...}`, fences, the demo's
 * own records) is deleted at the end, however the run ends.
 */
import { Cause, Clock, Console, Duration, Effect, Exit, Fiber, Random } from "effect"
import type { Layer, Scope } from "effect"
import { Redis } from "ioredis"
import { type ChildProcess, spawn } from "node:child_process"
import { randomUUID } from "node:crypto"
import { createInterface } from "node:readline"
import * as Fencing from "../src/Fencing.js"
import type { Lease } from "../src/Lock.js"
import { withLock } from "../src/Lock.js"
import type { LockBackend } from "../src/LockBackend.js"
import { RedisBackend } from "../src/RedisBackend.js"

/**
 * Lock names are raw Redis keys: the demo gives the backend a prefix, as the README recommends for
 * anything that does not share locks with Redisson, so that a lock never lands on a data key.
 */
export const LOCK_PREFIX = "locks:"

/** The lock backend, with the URL read from `REDIS_URL`. */
export const layer: Layer.Layer<LockBackend, unknown> = RedisBackend.layerConfig({ prefix: LOCK_PREFIX })

/** The names one run uses: unique per run, so runs never see each other's records. */
export const namesOf = (run: string, keyCount: number) => {
  const base = `effect-lock-demo:${run}`
  const keys = Array.from({ length: keyCount }, (_, i) => {
    const name = `${base}:key-${i}`
    const counter = `${name}:counter`
    return {
      /** The lock name given to `withLock`. */
      name,
      counter,
      inside: `${name}:inside`,
      lastToken: `${name}:last-token`,
      lastProcess: `${name}:last-process`,
      /** What the backend creates in Redis for this lock, and `Fencing.redisSet`'s fence. */
      redisKeys: [
        `${LOCK_PREFIX}${name}`,
        `redisson_lock_token:{${LOCK_PREFIX}${name}}`,
        `fence:{${counter}}`
      ]
    }
  })
  const stats = `${base}:stats`
  const all = [stats, ...keys.flatMap((k) => [k.counter, k.inside, k.lastToken, k.lastProcess, ...k.redisKeys])]
  return { keys, stats, all }
}

type Names = ReturnType<typeof namesOf>

const redisUrl = () => process.env["REDIS_URL"] ?? ""

/** A promise-returning Redis call as an Effect that fails with the Error itself. */
const call = <A>(f: () => Promise<A>): Effect.Effect<A, Error> =>
  Effect.tryPromise({ try: f, catch: (error) => (error instanceof Error ? error : new Error(String(error))) })

/** A plain ioredis client for the demo's own records, closed with the scope. */
const dataClient = Effect.acquireRelease(
  call(async () => {
    // gives up after about a second without a server, rather than reconnecting forever
    const client = new Redis(redisUrl(), {
      lazyConnect: true,
      maxRetriesPerRequest: 1,
      retryStrategy: (times) => (times > 10 ? null : 100)
    })
    client.on("error", () => {}) // failures reach the commands that meet them
    await client.connect().catch((error) => {
      client.disconnect()
      throw new Error(`cannot reach Redis at REDIS_URL: ${error instanceof Error ? error.message : String(error)}`)
    })
    return client
  }),
  (client) => Effect.promise(() => client.quit().catch(() => client.disconnect()))
)

/**
 * Delete every key of the run. The locks are gone once released, but their fencing counters never
 * expire (they must outlive the lock: see docs/fencing.md), so a demo that did not delete them would
 * leave a few keys behind per run.
 */
export const cleanUp = (names: Names): Effect.Effect<number, Error> =>
  Effect.scoped(
    Effect.flatMap(dataClient, (client) =>
      call(async () => {
        const removed = await client.del(...names.all)
        const left = await client.exists(...names.all)
        if (left > 0) throw new Error(`${left} key(s) of the run are still in Redis`)
        return removed
      }))
  )

// ---------------------------------------------------------------------------------------------
// A contending process
// ---------------------------------------------------------------------------------------------

const enterScript = `
-- KEYS: inside set, last token, last process, counter, stats hash
-- ARGV: this worker's member, its fencing token (decimal), its process index
redis.call('sadd', KEYS[1], ARGV[1])
if redis.call('scard', KEYS[1]) > 1 then redis.call('hincrby', KEYS[5], 'overlaps', 1) end
local last = redis.call('get', KEYS[2])
if last and (#ARGV[2] < #last or (#ARGV[2] == #last and ARGV[2] <= last)) then
  redis.call('hincrby', KEYS[5], 'out-of-order', 1)
end
redis.call('set', KEYS[2], ARGV[2])
local previous = redis.call('get', KEYS[3])
if previous and previous ~= ARGV[3] then redis.call('hincrby', KEYS[5], 'switches', 1) end
redis.call('set', KEYS[3], ARGV[3])
redis.call('hincrby', KEYS[5], 'process:' .. ARGV[3], 1)
return redis.call('get', KEYS[4]) or '0'
`

/** What a process reports when its time is up. */
interface ProcessResult {
  readonly process: number
  readonly acquisitions: number
  readonly perKey: ReadonlyArray<number>
  readonly refused: number
  readonly waitP50: number
  readonly waitP99: number
}

export interface Settings {
  readonly workers: number
  readonly keys: number
  readonly seconds: number
  readonly holdMs: number
}

const percentile = (sorted: ReadonlyArray<number>, p: number): number =>
  sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!

const nowMs = Effect.map(Clock.currentTimeNanos, (nanos) => Number(nanos) / 1e6)

/**
 * One of the processes: `settings.workers` fibers, each looping on a random key until the time is
 * up. Prints `ready` once connected, waits for `go` on stdin, and prints one `result {json}` line.
 */
export const child = (index: number, run: string, settings: Settings) =>
  Effect.gen(function*() {
    const names = namesOf(run, settings.keys)
    const client = yield* dataClient
    client.defineCommand("demoEnter", { numberOfKeys: 5, lua: enterScript })
    const enter = (k: Names["keys"][number], member: string, token: bigint) =>
      call(() =>
        (client as unknown as { demoEnter: (...args: Array<string>) => Promise<string> }).demoEnter(
          k.inside,
          k.lastToken,
          k.lastProcess,
          k.counter,
          names.stats,
          member,
          token.toString(),
          String(index)
        )
      )
    const leave = (k: Names["keys"][number], member: string) =>
      Effect.promise(() => client.srem(k.inside, member).catch(() => 0))

    // The backend's layer is built (connected, scripts loaded) before this runs, so all processes
    // start contending at the same moment, when the coordinator says "go".
    yield* Console.log("ready")
    yield* Effect.async<void, Error>((resume) => {
      process.stdin.once("data", () => {
        process.stdin.destroy()
        resume(Effect.void)
      })
      // the coordinator went away before it said "go"
      process.stdin.once("end", () => resume(Effect.fail(new Error("the coordinator is gone"))))
    })

    const perKey = names.keys.map(() => 0)
    let refused = 0
    const waits: Array<number> = []
    const stopAt = (yield* nowMs) + settings.seconds * 1000

    const critical = (k: Names["keys"][number], i: number) => (lease: Lease) =>
      Effect.acquireUseRelease(
        // the member is unique per hold: this process and the lease's owner id
        Effect.map(
          enter(k, `${index}:${lease.owner}`, lease.fencingToken),
          (read) => ({ read, member: `${index}:${lease.owner}` })
        ),
        ({ read }) =>
          Effect.gen(function*() {
            yield* Effect.sleep(Duration.millis(yield* Random.nextIntBetween(1, settings.holdMs + 1)))
            yield* Fencing.redisSet(client, {
              key: k.counter,
              value: String(Number(read) + 1),
              token: lease.fencingToken
            })
            perKey[i]!++
          }).pipe(Effect.catchTag("FencingTokenRejectedError", () => Effect.sync(() => refused++))),
        ({ member }) => leave(k, member)
      )

    const worker = Effect.gen(function*() {
      while ((yield* nowMs) < stopAt) {
        const i = yield* Random.nextIntBetween(0, settings.keys)
        const k = names.keys[i]!
        const requested = yield* nowMs
        yield* withLock(k.name, (lease) =>
          Effect.zipRight(
            Effect.flatMap(nowMs, (entered) => Effect.sync(() => waits.push(entered - requested))),
            critical(k, i)(lease)
          ))
      }
    })
    yield* Effect.all(Array.from({ length: settings.workers }, () => worker), {
      concurrency: "unbounded",
      discard: true
    })

    const sorted = waits.sort((a, b) => a - b)
    const result: ProcessResult = {
      process: index,
      acquisitions: perKey.reduce((a, b) => a + b, 0),
      perKey,
      refused,
      waitP50: percentile(sorted, 50),
      waitP99: percentile(sorted, 99)
    }
    yield* Console.log(`result ${JSON.stringify(result)}`)
  }).pipe(Effect.scoped, Effect.provide(layer))

// ---------------------------------------------------------------------------------------------
// The coordinator
// ---------------------------------------------------------------------------------------------

interface Running {
  readonly child: ChildProcess
  readonly index: number
  /** Resolves with the process's result, or fails when it exits without one. */
  readonly result: Promise<ProcessResult>
}

/** Start process `index` of the run and wait until it is ready (connected to Redis). */
const startProcess = (
  script: string,
  index: number,
  run: string,
  settings: Settings
): Effect.Effect<Running, Error, Scope.Scope> =>
  Effect.acquireRelease(
    Effect.async<Running, Error>((resume) => {
      const proc = spawn(process.execPath, [...process.execArgv, script], {
        env: {
          ...process.env,
          DEMO_CHILD: String(index),
          DEMO_RUN: run,
          DEMO_WORKERS: String(settings.workers),
          DEMO_KEYS: String(settings.keys),
          DEMO_SECONDS: String(settings.seconds),
          DEMO_HOLD_MS: String(settings.holdMs)
        },
        stdio: ["pipe", "pipe", "pipe"]
      })
      let stderr = ""
      proc.stderr.on("data", (chunk) => (stderr += chunk))
      let ready = false
      let resolveResult: (result: ProcessResult) => void = () => {}
      let rejectResult: (error: Error) => void = () => {}
      const result = new Promise<ProcessResult>((res, rej) => {
        resolveResult = res
        rejectResult = rej
      })
      result.catch(() => {}) // read by the coordinator; never an unhandled rejection
      createInterface({ input: proc.stdout }).on("line", (line) => {
        if (line === "ready" && !ready) {
          ready = true
          resume(Effect.succeed({ child: proc, index, result }))
        } else if (line.startsWith("result ")) {
          resolveResult(JSON.parse(line.slice("result ".length)) as ProcessResult)
        }
      })
      proc.once("exit", (code, signal) => {
        const error = new Error(
          `process ${index} exited with ${signal ?? code}${stderr.trim() === "" ? "" : `: ${stderr.trim()}`}`
        )
        if (!ready) resume(Effect.fail(error))
        if (code !== 0) rejectResult(error)
        else rejectResult(new Error(`process ${index} exited without a result`))
      })
      return Effect.sync(() => proc.kill("SIGKILL"))
    }),
    ({ child }) =>
      Effect.promise(() =>
        child.exitCode !== null || child.signalCode !== null
          ? Promise.resolve()
          : new Promise<void>((resolve) => {
            // interrupted: let it release its locks (SIGINT), then make sure it is gone
            const timer = setTimeout(() => child.kill("SIGKILL"), 5000)
            child.once("exit", () => {
              clearTimeout(timer)
              resolve()
            })
            child.kill("SIGINT")
          })
      )
  )

/** Read the run's records in Redis: counters per key and the stats hash. */
const readRecords = (client: Redis, names: Names, processes: number) =>
  call(async () => {
    const counters = (await client.mget(...names.keys.map((k) => k.counter))).map((v) => Number(v ?? "0"))
    const stats = await client.hgetall(names.stats)
    const field = (name: string) => Number(stats[name] ?? "0")
    return {
      counters,
      counter: counters.reduce((a, b) => a + b, 0),
      perProcess: Array.from({ length: processes }, (_, i) => field(`process:${i}`)),
      overlaps: field("overlaps"),
      outOfOrder: field("out-of-order"),
      switches: field("switches")
    }
  })

/**
 * `DEMO_PROCESSES=n`: start `n` processes of `script` (the demo itself), let them contend for
 * `settings.seconds`, check the records in Redis, print per-process and total figures and clean up.
 * Succeeds with whether the run was correct.
 */
export const coordinate = (script: string, processes: number, settings: Settings) =>
  Effect.gen(function*() {
    const run = randomUUID().slice(0, 8)
    const names = namesOf(run, settings.keys)
    yield* Console.log(
      `effect-lock demo: ${processes} processes × ${settings.workers} workers, ${settings.keys} keys, ` +
        `${settings.seconds} s on Redis (${LOCK_PREFIX}effect-lock-demo:${run}:key-*)`
    )
    // Registered first, so it runs last: after every process has exited.
    yield* Effect.addFinalizer(() =>
      cleanUp(names).pipe(
        Effect.flatMap((removed) => Console.log(`cleaned up: ${removed} key(s) of the run deleted, none left`)),
        Effect.catchAll((error) => Console.error(`clean-up failed: ${error.message}`))
      )
    )
    const client = yield* dataClient
    const running = yield* Effect.all(
      Array.from({ length: processes }, (_, i) => startProcess(script, i, run, settings)),
      { concurrency: "unbounded" }
    )
    const start = yield* nowMs
    for (const p of running) p.child.stdin?.write("go\n")

    const progress = yield* Effect.fork(
      Effect.forever(
        Effect.gen(function*() {
          yield* Effect.sleep("500 millis")
          const r = yield* readRecords(client, names, processes)
          const now = yield* nowMs
          yield* Console.log(
            `  ${((now - start) / 1000).toFixed(1)} s  acquisitions ${String(r.counter).padStart(6)}  ` +
              `(by process ${r.perProcess.join(" / ")})  overlaps ${r.overlaps}`
          )
        })
      )
    )
    const exits = yield* Effect.forEach(running, (p) => Effect.exit(call(() => p.result)))
    yield* Fiber.interrupt(progress)
    const elapsed = ((yield* nowMs) - start) / 1000

    const results = exits.flatMap((exit) => (Exit.isSuccess(exit) ? [exit.value] : []))
    const failures = exits.flatMap((exit, i) =>
      Exit.isFailure(exit) ? [`process ${i}: ${String(Cause.squash(exit.cause))}`] : []
    )
    const r = yield* readRecords(client, names, processes)
    const reported = results.reduce((n, p) => n + p.acquisitions, 0)
    const refused = results.reduce((n, p) => n + p.refused, 0)
    const exact = r.counter === reported
    const ok = failures.length === 0 && r.overlaps === 0 && r.outOfOrder === 0 && refused === 0 && exact &&
      reported > 0
    const fmt = (ms: number) => `${ms.toFixed(1)} ms`
    yield* Console.log(
      [
        "",
        "summary",
        `  backend            redis, ${processes} processes`,
        ...results.map((p) =>
          `  process ${p.process}          ${p.acquisitions} acquisitions (per key ${p.perKey.join(" / ")}), ` +
          `wait p50 / p99 ${fmt(p.waitP50)} / ${fmt(p.waitP99)}`
        ),
        ...failures.map((f) => `  ${f}`),
        `  acquisitions       ${reported} in ${elapsed.toFixed(1)} s (${Math.round(reported / elapsed)}/s)`,
        `  counter in Redis   ${r.counter} (per key ${r.counters.join(" / ")}): ${
          exact ? "exact" : `${reported - r.counter} update(s) lost`
        }`,
        `  between processes  ${r.switches} grant(s) went to another process than the one before`,
        `  overlaps           ${r.overlaps}`,
        `  tokens monotonic   ${r.outOfOrder === 0 ? "yes" : `no (${r.outOfOrder} out of order)`}`,
        `  fenced writes      ${refused === 0 ? "all accepted" : `${refused} refused`}`,
        "",
        ok
          ? "OK"
          : "FAILED: two workers were inside at once, a token came out of order, an update was lost or a process failed"
      ].join("\n")
    )
    return ok
  }).pipe(Effect.scoped)
