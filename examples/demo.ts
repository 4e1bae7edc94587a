/**
 * `npm start`: workers contend on a few keys with `withLock`, and the demo checks the two promises
 * a lock makes: nobody is ever inside a key's critical section at the same time as somebody else
 * (overlaps), and every grant of a key carries a higher fencing token than the grant before it
 * (monotonic tokens).
 *
 * - No `REDIS_URL`: one process on the in-memory backend.
 * - `REDIS_URL=redis://...`: one process on the Redis backend.
 * - `REDIS_URL=redis://... DEMO_PROCESSES=3`: three OS processes contend on the same keys through
 *   Redis, and the checks live in Redis too: see `examples/demo-redis.ts`.
 *
 * Knobs (environment): `DEMO_WORKERS` (default 24, split across the processes), `DEMO_KEYS` (3),
 * `DEMO_SECONDS` (3), `DEMO_HOLD_MS` (1..4 ms). On Redis the demo deletes every key it created
 * (fencing counters included) when it ends. Exits non-zero when the run saw an overlap, a token
 * that did not increase or (several processes) a lost update.
 */
import { Cause, Clock, Console, Duration, Effect, Exit, Fiber, Layer, Random } from "effect"
import { randomUUID } from "node:crypto"
import { fileURLToPath } from "node:url"
import type { Lease } from "../src/Lock.js"
import { withLock } from "../src/Lock.js"
import type { LockBackend } from "../src/LockBackend.js"
import * as MemoryBackend from "../src/MemoryBackend.js"

const intFromEnv = (name: string, fallback: number): number => {
  const value = Number(process.env[name])
  return Number.isInteger(value) && value > 0 ? value : fallback
}

const onRedis = process.env["REDIS_URL"] !== undefined && process.env["REDIS_URL"] !== ""
const PROCESSES = process.env["DEMO_PROCESSES"] === undefined ? undefined : intFromEnv("DEMO_PROCESSES", 1)
const distributed = onRedis && PROCESSES !== undefined
const WORKERS = intFromEnv("DEMO_WORKERS", 24)
const KEYS = intFromEnv("DEMO_KEYS", 3)
const SECONDS = intFromEnv("DEMO_SECONDS", 3)
const HOLD_MS = intFromEnv("DEMO_HOLD_MS", 4)
const PROGRESS_EVERY = Duration.millis(500)

// ---------------------------------------------------------------------------------------------
// Backend choice. Memory by default; Redis when REDIS_URL is set. The Redis backend is a module of
// its own (`effect-lock/RedisBackend` in a published install, not re-exported by the root), and it
// is imported lazily here (with the rest of the Redis demo) so that the memory path never loads
// ioredis.
// >>> REDIS BACKEND SPOT: this is the one place to change to plug in another backend. <<<
// ---------------------------------------------------------------------------------------------
const loadRedis = Effect.tryPromise(() => import("./demo-redis.js"))

const backend: { readonly name: string; readonly layer: Layer.Layer<LockBackend, unknown> } = onRedis
  ? { name: "redis", layer: Layer.unwrapEffect(Effect.map(loadRedis, (redis) => redis.layer)) }
  : { name: "memory", layer: MemoryBackend.layer }

// Keys are namespaced per run so that a Redis server shared with other runs starts clean.
const runId = randomUUID().slice(0, 8)
const keyName = (i: number) => `effect-lock-demo:${runId}:key-${i}`

/** What the workers record, per key. */
interface KeyStats {
  readonly name: string
  inside: number
  overlaps: number
  acquisitions: number
  lastToken: bigint
  nonMonotonic: number
}

const percentile = (sorted: ReadonlyArray<number>, p: number): number =>
  sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!

const fmtMs = (ms: number) => `${ms.toFixed(2)} ms`

const nowMs = Effect.map(Clock.currentTimeNanos, (nanos) => Number(nanos) / 1e6)

/** One process, checks kept in the process (enough when every worker is in it). */
const singleProcess = Effect.gen(function*() {
  const keys: Array<KeyStats> = Array.from({ length: KEYS }, (_, i) => ({
    name: keyName(i),
    inside: 0,
    overlaps: 0,
    acquisitions: 0,
    lastToken: -1n,
    nonMonotonic: 0
  }))
  const waits: Array<number> = []
  const start = yield* nowMs
  const stopAt = start + SECONDS * 1000

  yield* Console.log(
    `effect-lock demo: ${WORKERS} workers, ${KEYS} keys, ${SECONDS} s on the ${backend.name} backend` +
      (onRedis ? " (one process; DEMO_PROCESSES=3 runs three)" : "")
  )

  // The critical section: check that we are alone, record the token, hold for a few ms.
  const criticalSection = (stats: KeyStats) => (lease: Lease) =>
    Effect.gen(function*() {
      stats.inside++
      if (stats.inside > 1) stats.overlaps++
      stats.acquisitions++
      if (lease.fencingToken <= stats.lastToken) stats.nonMonotonic++
      stats.lastToken = lease.fencingToken
      yield* Effect.sleep(Duration.millis(yield* Random.nextIntBetween(1, HOLD_MS + 1)))
      stats.inside--
    })

  const worker = Effect.gen(function*() {
    while ((yield* nowMs) < stopAt) {
      const stats = keys[yield* Random.nextIntBetween(0, KEYS)]!
      const requested = yield* nowMs
      yield* withLock(stats.name, (lease) =>
        Effect.zipRight(
          Effect.flatMap(nowMs, (entered) => Effect.sync(() => waits.push(entered - requested))),
          criticalSection(stats)(lease)
        ))
    }
  })

  const total = () => keys.reduce((n, k) => n + k.acquisitions, 0)
  const overlaps = () => keys.reduce((n, k) => n + k.overlaps, 0)
  const progress = yield* Effect.fork(
    Effect.forever(
      Effect.zipRight(
        Effect.sleep(PROGRESS_EVERY),
        Effect.flatMap(nowMs, (now) =>
          Console.log(
            `  ${((now - start) / 1000).toFixed(1)} s  acquisitions ${String(total()).padStart(6)}  ` +
              `(${keys.map((k) => k.acquisitions).join(" / ")})  overlaps ${overlaps()}`
          ))
      )
    )
  )
  yield* Effect.all(Array.from({ length: WORKERS }, () => worker), { concurrency: "unbounded", discard: true })
  yield* Fiber.interrupt(progress)

  const elapsed = ((yield* nowMs) - start) / 1000
  const sorted = [...waits].sort((a, b) => a - b)
  const monotonic = keys.every((k) => k.nonMonotonic === 0)
  const ok = overlaps() === 0 && monotonic && total() > 0
  yield* Console.log(
    [
      "",
      "summary",
      `  backend            ${backend.name}`,
      `  workers / keys     ${WORKERS} / ${KEYS}`,
      `  acquisitions       ${total()} in ${elapsed.toFixed(1)} s (${Math.round(total() / elapsed)}/s)`,
      `  per key            ${keys.map((k) => k.acquisitions).join(" / ")}`,
      `  wait p50 / p99     ${fmtMs(percentile(sorted, 50))} / ${fmtMs(percentile(sorted, 99))}` +
      ` (max ${fmtMs(sorted.at(-1) ?? 0)})`,
      `  overlaps           ${overlaps()}`,
      `  tokens monotonic   ${monotonic ? "yes" : `no (${keys.reduce((n, k) => n + k.nonMonotonic, 0)} out of order)`}`,
      "",
      ok ? "OK" : "FAILED: the lock let two workers in at once or issued a token out of order"
    ].join("\n")
  )
  return ok
})

// On Redis, delete the run's keys afterwards: the locks are gone once released, but their fencing
// counters never expire.
const single: Effect.Effect<boolean, unknown> = onRedis
  ? Effect.flatMap(loadRedis, (redis) =>
    singleProcess.pipe(
      Effect.provide(backend.layer),
      Effect.ensuring(
        redis.cleanUp(redis.namesOf(runId, KEYS)).pipe(
          Effect.flatMap((removed) => Console.log(`cleaned up: ${removed} key(s) of the run deleted, none left`)),
          Effect.catchAll((error) => Console.error(`clean-up failed: ${error.message}`))
        )
      )
    ))
  : Effect.provide(singleProcess, backend.layer)

const main: Effect.Effect<boolean | void, unknown> = (() => {
  const child = process.env["DEMO_CHILD"]
  if (child !== undefined && onRedis) {
    // one of the processes that a DEMO_PROCESSES run started
    return Effect.flatMap(loadRedis, (redis) =>
      redis.child(Number(child), process.env["DEMO_RUN"] ?? runId, {
        workers: WORKERS,
        keys: KEYS,
        seconds: SECONDS,
        holdMs: HOLD_MS
      }))
  }
  if (distributed) {
    const processes = PROCESSES
    return Effect.flatMap(loadRedis, (redis) =>
      redis.coordinate(fileURLToPath(import.meta.url), processes, {
        workers: Math.ceil(WORKERS / processes),
        keys: KEYS,
        seconds: SECONDS,
        holdMs: HOLD_MS
      }))
  }
  if (PROCESSES !== undefined) {
    return Effect.zipRight(
      Console.log(
        `DEMO_PROCESSES=${process.env["DEMO_PROCESSES"]} needs REDIS_URL: on the memory backend every process ` +
          "has locks of its own, so separate processes would not exclude each other. Running one process."
      ),
      single
    )
  }
  return single
})()

const fiber = Effect.runFork(main)
// Ctrl-C or a SIGTERM interrupts the run: locks are released and (on Redis) the run's keys deleted.
for (const signal of ["SIGINT", "SIGTERM"] as const) process.once(signal, () => Effect.runFork(Fiber.interrupt(fiber)))
Effect.runPromise(Fiber.await(fiber)).then((exit) => {
  if (Exit.isSuccess(exit)) {
    process.exitCode = exit.value === false ? 1 : 0
    return
  }
  if (Exit.isInterrupted(exit)) {
    console.error("demo interrupted")
    process.exitCode = 130
    return
  }
  const error = Cause.squash(exit.cause)
  console.error(`demo failed: ${error instanceof Error ? error.message : String(error)}`)
  if (onRedis) console.error("is Redis running at REDIS_URL?")
  process.exitCode = 1
})
