/**
 * m. Semaphore: 64 fibers share 8 permits of one semaphore key, each taking 1 permit, holding it
 * ~1 ms and coming back after ~1 ms, for a fixed window. What a pooled resource (a partner API
 * that allows 8 concurrent calls) costs with each library's semaphore:
 *
 * - effect-lock: `Semaphore.withPermits(key, 1, body, { permits: 8 })` on `RedisBackend.layer`
 *   (leased permits, renewed by a watchdog; waiters woken by notifications, in arrival order);
 * - redis-semaphore: `new Semaphore(redis, key, 8)`, `acquire()` / `release()`, defaults (polls
 *   every 10 ms, gives up after 10 s);
 * - effect-distributed-lock: `DistributedSemaphore.make(key, { limit: 8 })`, `withPermits(1)(body)`
 *   on `RedisBacking.layer(redis)` (polls every 100 ms, a pub/sub connection per waiter).
 *
 * Every fiber stops taking permits at the end of the window and finishes what it holds, so no
 * acquisition is abandoned. *Most inside* is the most permits held at once as the fibers saw it:
 * above 8 is a violation.
 */
import { Context, Data, Effect, Layer } from "effect"
import type { Scope } from "effect"
import { DistributedSemaphore, RedisBacking } from "effect-distributed-lock"
import { Redis } from "ioredis"
import { Semaphore as RedisSemaphore } from "redis-semaphore"
import type * as EffectLock from "../../src/index.js"
import type * as EffectLockRedisBackend from "../../src/RedisBackend.js"
import { dec, int, table } from "../format.js"
import type { BenchResults } from "../results.js"
import type { Summary } from "../support/stats.js"
import { now, summarize } from "../support/stats.js"
import type { BenchContext } from "./common.js"
import { window } from "./common.js"

// effect-lock from its build, as in peers.ts.
const effectLockBuild = "../../dist/index.js"
const effectLockRedisBuild = "../../dist/RedisBackend.js"
const { LockBackend, Semaphore } = (await import(effectLockBuild)) as typeof EffectLock
const { RedisBackend } = (await import(effectLockRedisBuild)) as typeof EffectLockRedisBackend

export const SEMAPHORE_FIBERS = 64
export const SEMAPHORE_PERMITS = 8
const KEY = "bench:semaphore"

class SemaphoreFailure extends Data.TaggedError("SemaphoreFailure")<{ readonly cause: unknown }> {}

export interface SemaphoreResult {
  readonly library: string
  readonly usage: string
  readonly acquisitionsPerSecond: number
  /** How long an acquisition waited for its permit, in milliseconds. */
  readonly wait: Summary
  readonly mostInside: number
  /** Fewest acquisitions any fiber got divided by the most. */
  readonly fairness: number
  readonly violations: number
  readonly failures: ReadonlyArray<string>
}

/** Run `body` holding one permit of the bench semaphore. */
type WithPermit = (body: Effect.Effect<void>) => Effect.Effect<void, SemaphoreFailure>

interface Contender {
  readonly library: string
  readonly usage: string
  readonly open: (url: string) => Effect.Effect<WithPermit, SemaphoreFailure, Scope.Scope>
}

const plainClient = (url: string) =>
  Effect.acquireRelease(
    Effect.tryPromise({
      try: async () => {
        const redis = new Redis(url, { lazyConnect: true })
        await redis.connect()
        return redis
      },
      catch: (cause) => new SemaphoreFailure({ cause })
    }),
    (redis) => Effect.promise(() => redis.quit().catch(() => redis.disconnect()))
  )

const contenders: ReadonlyArray<Contender> = [
  {
    library: "effect-lock",
    usage: "`Semaphore.withPermits(key, 1, body, { permits: 8 })`",
    open: (url) =>
      Effect.map(
        Layer.build(RedisBackend.layer({ url })).pipe(Effect.mapError((cause) => new SemaphoreFailure({ cause }))),
        (context) => {
          const backend = Context.get(context, LockBackend)
          return (body) =>
            Semaphore.withPermits(KEY, 1, body, { permits: SEMAPHORE_PERMITS }).pipe(
              Effect.provideService(LockBackend, backend),
              Effect.mapError((cause) => new SemaphoreFailure({ cause }))
            )
        }
      )
  },
  {
    library: "redis-semaphore",
    usage: "`new Semaphore(redis, key, 8)`, `acquire()` / `release()`, defaults",
    open: (url) =>
      Effect.map(plainClient(url), (redis) => (body) =>
        Effect.acquireUseRelease(
          Effect.tryPromise({
            try: async () => {
              const semaphore = new RedisSemaphore(redis, KEY, SEMAPHORE_PERMITS)
              await semaphore.acquire()
              return semaphore
            },
            catch: (cause) => new SemaphoreFailure({ cause })
          }),
          () => body,
          (semaphore) => Effect.promise(() => semaphore.release().catch(() => undefined))
        ))
  },
  {
    library: "effect-distributed-lock",
    usage: "`DistributedSemaphore.make(key, { limit: 8 })`, `withPermits(1)(body)`",
    open: (url) =>
      Effect.gen(function*() {
        const redis = yield* plainClient(url)
        const context = yield* Layer.build(RedisBacking.layer(redis))
        const semaphore = yield* DistributedSemaphore.make(KEY, { limit: SEMAPHORE_PERMITS }).pipe(
          Effect.provide(context)
        )
        return (body) =>
          semaphore.withPermits(1)(body).pipe(
            Effect.provide(context),
            Effect.mapError((cause) => new SemaphoreFailure({ cause }))
          ) as Effect.Effect<void, SemaphoreFailure>
      })
  }
]

const busyFor = (ms: number) => Effect.sleep(ms * (0.5 + Math.random()))

const runOne = (ctx: BenchContext, contender: Contender): Effect.Effect<SemaphoreResult> =>
  Effect.gen(function*() {
    yield* Effect.promise(() => ctx.admin.flushAll())
    const withPermit = yield* contender.open(ctx.url)
    let inside = 0
    let mostInside = 0
    let violations = 0
    const waits: Array<number> = []
    const counts = new Array<number>(SEMAPHORE_FIBERS).fill(0)
    const failures = new Set<string>()
    const body = Effect.suspend(() => {
      inside++
      mostInside = Math.max(mostInside, inside)
      if (inside > SEMAPHORE_PERMITS) violations++
      return Effect.ensuring(busyFor(1), Effect.sync(() => inside--))
    })
    const loop = (fiber: number, until: number, record: boolean) =>
      Effect.gen(function*() {
        while (now() < until) {
          const asked = now()
          const took = yield* Effect.either(withPermit(Effect.zipRight(
            Effect.sync(() => {
              if (record) {
                waits.push(now() - asked)
                counts[fiber] = (counts[fiber] ?? 0) + 1
              }
            }),
            body
          )))
          if (took._tag === "Left") failures.add(String(took.left.cause))
          yield* busyFor(1)
        }
      })
    const everyone = (ms: number, record: boolean) =>
      Effect.suspend(() => {
        const until = now() + ms
        return Effect.forEach(
          Array.from({ length: SEMAPHORE_FIBERS }, (_, i) => i),
          (i) => loop(i, until, record),
          { concurrency: "unbounded", discard: true }
        )
      })
    yield* everyone(window(ctx, 500), false)
    const start = now()
    yield* everyone(window(ctx, 3_000), true)
    const seconds = (now() - start) / 1000
    const most = Math.max(...counts)
    return {
      library: contender.library,
      usage: contender.usage,
      acquisitionsPerSecond: waits.length / seconds,
      wait: summarize(waits),
      mostInside,
      fairness: most === 0 ? 0 : Math.min(...counts) / most,
      violations,
      failures: [...failures].slice(0, 3)
    }
  }).pipe(
    Effect.scoped,
    Effect.catchAll((error) =>
      Effect.succeed({
        library: contender.library,
        usage: contender.usage,
        acquisitionsPerSecond: 0,
        wait: summarize([]),
        mostInside: 0,
        fairness: 0,
        violations: 0,
        failures: [String(error.cause)]
      })
    )
  )

/** The semaphores of the libraries named in `libraries`, one after the other, on the bench's server. */
export const semaphore = (
  ctx: BenchContext,
  libraries: ReadonlyArray<string>
): Effect.Effect<ReadonlyArray<SemaphoreResult>> =>
  Effect.forEach(
    contenders.filter((contender) => libraries.includes(contender.library)),
    (contender) =>
      Effect.tap(runOne(ctx, contender), (result) =>
        Effect.sync(() =>
          ctx.log(
            `semaphore ${result.library.padEnd(24)} ${Math.round(result.acquisitionsPerSecond)} acq/s, wait p50 ${
              result.wait.p50.toFixed(1)
            } ms p99 ${result.wait.p99.toFixed(1)} ms, most inside ${result.mostInside}, fairness ${
              result.fairness.toFixed(2)
            }${result.failures.length > 0 ? `, errors: ${result.failures.join("; ")}` : ""}`
          )
        ))
  )

export const semaphoreSection = (results: BenchResults): string => {
  const outcomes = results.semaphore ?? []
  if (outcomes.length === 0) return ""
  const rows = outcomes.map((r) => [
    r.library,
    int(r.acquisitionsPerSecond),
    `${dec(r.wait.p50, 1)} ms`,
    `${dec(r.wait.p99, 1)} ms`,
    int(r.mostInside),
    dec(r.fairness, 2),
    int(r.violations),
    r.failures.join("; ")
  ])
  return `### m. Semaphore: ${SEMAPHORE_FIBERS} fibers, ${SEMAPHORE_PERMITS} permits, one key

${
    table(
      ["Library", "Acquisitions/s", "Wait p50", "Wait p99", "Most inside", "Fairness", "Violations", "Errors"],
      rows
    )
  }

${SEMAPHORE_FIBERS} fibers share ${SEMAPHORE_PERMITS} permits of one semaphore, each taking one permit,
holding it ~1 ms and coming back after ~1 ms, for 3 s after 0.5 s of warm-up, one library after
the other: effect-lock's \`Semaphore.withPermits(key, 1, body, { permits: 8 })\` (leased permits,
waiters woken by notifications in arrival order), redis-semaphore's \`Semaphore\` (\`acquire()\` /
\`release()\`, polling every 10 ms) and effect-distributed-lock's \`DistributedSemaphore\`
(\`withPermits(1)\`, polling every 100 ms with a pub/sub connection per waiter). *Most inside* is
the most permits held at once as the fibers saw it; above ${SEMAPHORE_PERMITS} would be a violation.
*Fairness* is the fewest acquisitions any fiber got divided by the most.
`
}
