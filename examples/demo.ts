/**
 * `npm start`: workers in one process contend on a few keys with `withLock`, and the demo checks
 * the two promises a lock makes: nobody is ever inside a key's critical section at the same time
 * as somebody else (overlaps), and every grant of a key carries a higher fencing token than the
 * grant before it (monotonic tokens).
 *
 * Runs on the in-memory backend, or on Redis when `REDIS_URL` is set. Knobs (environment):
 * `DEMO_WORKERS` (default 24), `DEMO_KEYS` (3), `DEMO_SECONDS` (3), `DEMO_HOLD_MS` (1..4 ms).
 * Exits non-zero when the run saw an overlap or a token that did not increase.
 */
import { Cause, Clock, Console, Duration, Effect, Exit, Fiber, Layer, Random } from "effect"
import type { Lease } from "../src/Lock.js"
import { withLock } from "../src/Lock.js"
import type { LockBackend } from "../src/LockBackend.js"
import * as MemoryBackend from "../src/MemoryBackend.js"

const intFromEnv = (name: string, fallback: number): number => {
  const value = Number(process.env[name])
  return Number.isInteger(value) && value > 0 ? value : fallback
}

const WORKERS = intFromEnv("DEMO_WORKERS", 24)
const KEYS = intFromEnv("DEMO_KEYS", 3)
const SECONDS = intFromEnv("DEMO_SECONDS", 3)
const HOLD_MS = intFromEnv("DEMO_HOLD_MS", 4)
const PROGRESS_EVERY = Duration.millis(500)

// ---------------------------------------------------------------------------------------------
// Backend choice. Memory by default; Redis when REDIS_URL is set. The Redis backend is a module of
// its own (`effect-lock/RedisBackend` in a published install, not re-exported by the root), and it
// is imported lazily here so that the memory path never loads ioredis.
// >>> REDIS BACKEND SPOT: this is the one place to change to plug in another backend. <<<
// ---------------------------------------------------------------------------------------------
const redisLayer = (): Layer.Layer<LockBackend, unknown> =>
  Layer.unwrapEffect(
    Effect.map(
      Effect.tryPromise(() => import("../src/RedisBackend.js")),
      ({ RedisBackend }) => RedisBackend.layerConfig()
    )
  )

const backend: { readonly name: string; readonly layer: Layer.Layer<LockBackend, unknown> } =
  process.env["REDIS_URL"] !== undefined && process.env["REDIS_URL"] !== ""
    ? { name: "redis", layer: redisLayer() }
    : { name: "memory", layer: MemoryBackend.layer }

// Keys are namespaced per run so that a Redis server shared with other runs starts clean; the
// fencing counters of a key outlive its lock, so reusing a name would still be correct.
const runId = Math.random().toString(36).slice(2, 8)
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

const main = Effect.gen(function*() {
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
    `effect-lock demo: ${WORKERS} workers, ${KEYS} keys, ${SECONDS} s on the ${backend.name} backend`
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

const fiber = Effect.runFork(Effect.provide(main, backend.layer))
process.once("SIGINT", () => Effect.runFork(Fiber.interrupt(fiber)))
Effect.runPromise(Fiber.await(fiber)).then((exit) => {
  if (Exit.isSuccess(exit)) {
    process.exitCode = exit.value ? 0 : 1
    return
  }
  if (Exit.isInterrupted(exit)) {
    console.error("demo interrupted")
    process.exitCode = 130
    return
  }
  const error = Cause.squash(exit.cause)
  console.error(`demo failed: ${error instanceof Error ? error.message : String(error)}`)
  if (backend.name === "redis") console.error("is Redis running at REDIS_URL?")
  process.exitCode = 1
})
