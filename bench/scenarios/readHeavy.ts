/**
 * j. Read-heavy: 16 readers and 1 writer on one key, each holding ~1 ms; readers work ~1 ms outside
 * the lock, the writer ~10 ms. Run twice on effect-lock's Redis backend: with `ReadWriteLock`
 * (readers share, the writer goes first) and, next to it, with the plain mutex (`withLock` for
 * everybody), which serialises the readers too. What counts: reads and writes per second, and how
 * long readers and the writer wait.
 *
 * In-process counters of readers and writers inside catch violations: a writer with anybody else
 * inside, or a reader with a writer.
 */
import { Context, Effect, Fiber, Layer } from "effect"
import type * as EffectLock from "../../src/index.js"
import type * as EffectLockRedisBackend from "../../src/RedisBackend.js"
import type { Summary } from "../support/stats.js"
import { now, summarize } from "../support/stats.js"
import type { BenchContext } from "./common.js"
import { describeFailure, window } from "./common.js"

// effect-lock from its build, as in peers.ts.
const effectLockBuild = "../../dist/index.js"
const effectLockRedisBuild = "../../dist/RedisBackend.js"
const { LockBackend, ReadWriteLock, withLock } = (await import(effectLockBuild)) as typeof EffectLock
const { RedisBackend } = (await import(effectLockRedisBuild)) as typeof EffectLockRedisBackend

export type ReadHeavyLock = "ReadWriteLock" | "Lock (mutex)"

export interface ReadHeavyResult {
  readonly library: string
  readonly lock: ReadHeavyLock
  readonly readers: number
  readonly readsPerSecond: number
  readonly writesPerSecond: number
  /** From asking to holding, in milliseconds. */
  readonly readWait: Summary
  readonly writeWait: Summary
  /** The most readers inside at once. */
  readonly maxReadersInside: number
  readonly violations: number
  readonly failures: ReadonlyArray<string>
  readonly seconds: number
}

export const READERS = 16
const HOLD_MS = 1
const READER_OUTSIDE_MS = 1
const WRITER_OUTSIDE_MS = 10
const WARMUP_MS = 500
const MEASURE_MS = 3_000

export const readHeavy = (ctx: BenchContext, lock: ReadHeavyLock) =>
  Effect.scoped(Effect.gen(function*() {
    yield* Effect.promise(() => ctx.admin.flushAll())
    const context = yield* Layer.build(RedisBackend.layer({ url: ctx.url }))
    const backend = Context.get(context, LockBackend)
    const key = "bench:read-heavy"
    let measuring = false
    let readers = 0
    let writers = 0
    let maxReadersInside = 0
    let violations = 0
    let reads = 0
    let writes = 0
    const readWaits: Array<number> = []
    const writeWaits: Array<number> = []
    const failures: Array<string> = []

    const body = (writer: boolean, asked: number) =>
      Effect.gen(function*() {
        const entered = now()
        if (writer) {
          writers++
          if (writers > 1 || readers > 0) violations++
        } else {
          readers++
          maxReadersInside = Math.max(maxReadersInside, readers)
          if (writers > 0) violations++
        }
        if (measuring) {
          if (writer) {
            writes++
            writeWaits.push(entered - asked)
          } else {
            reads++
            readWaits.push(entered - asked)
          }
        }
        yield* Effect.sleep(HOLD_MS)
        if (writer) writers--
        else readers--
      })
    const locked = (writer: boolean, asked: number) =>
      lock === "Lock (mutex)"
        ? withLock(key, body(writer, asked))
        : writer
        ? ReadWriteLock.withWriteLock(key, body(writer, asked))
        : ReadWriteLock.withReadLock(key, body(writer, asked))
    const worker = (writer: boolean) =>
      Effect.forever(
        Effect.suspend(() => locked(writer, now())).pipe(
          Effect.catchAll((error) => Effect.sync(() => failures.push(describeFailure(error)))),
          Effect.zipRight(Effect.sleep(writer ? WRITER_OUTSIDE_MS : READER_OUTSIDE_MS))
        )
      ).pipe(Effect.provideService(LockBackend, backend))

    const fibers = yield* Effect.forEach(
      [true, ...Array.from({ length: READERS }, () => false)],
      (writer) => Effect.fork(worker(writer))
    )
    yield* Effect.sleep(window(ctx, WARMUP_MS))
    measuring = true
    const start = now()
    yield* Effect.sleep(window(ctx, MEASURE_MS))
    measuring = false
    const seconds = (now() - start) / 1000
    yield* Fiber.interruptAll(fibers)
    return {
      library: "effect-lock",
      lock,
      readers: READERS,
      readsPerSecond: reads / seconds,
      writesPerSecond: writes / seconds,
      readWait: summarize(readWaits),
      writeWait: summarize(writeWaits),
      maxReadersInside,
      violations,
      failures: Array.from(new Set(failures)),
      seconds
    } satisfies ReadHeavyResult
  }))
