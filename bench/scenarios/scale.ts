/**
 * i. Scale in one process (effect-lock only: the targets are absolute).
 *
 * Holds: 10,000 locks taken with `Lock.acquire` into one scope (lease 6 s, so the watchdog renews
 * every 2 s) and kept for three renew periods. Measured: heap per hold (after a full GC, against
 * the heap before), Redis commands written per renew period while they are held (renewals are
 * batched, many leases per call), the event loop's delay p99 over those periods
 * (`perf_hooks.monitorEventLoopDelay`), and how many holds were lost (must be none).
 *
 * A renew period here is one renewal of every hold: the commands written while they are held,
 * divided by the renewals confirmed (`LockMetrics.renewals`) per hold. Commands per 2,000 ms of
 * the clock would count more: a renewal comes due on a grid, up to a grid step (128 ms here) before
 * the period ends, so each hold renews a little more often than every 2 s (3.1 to 3.3 rounds in a
 * 6 s window, where the clock says 3).
 *
 * Waiters: 100 keys, each held by one fiber, and 100 more fibers waiting on each (10,000 waiters).
 * Measured while they wait: Redis connections and heap per waiter (next to the heap per fiber of as
 * many bare fibers forked the same way, parked on a Deferred); then every holder lets go and every
 * waiter takes its lock once: commands written per acquisition, holders included.
 */
import { Deferred, Effect, Exit, Fiber, Metric, Scope } from "effect"
import { monitorEventLoopDelay } from "node:perf_hooks"
import type * as EffectLock from "../../src/index.js"
import type { Lease } from "../../src/Lock.js"
import type * as EffectLockRedisBackend from "../../src/RedisBackend.js"
import { snapshotClientCommands } from "../support/commands.js"
import { collectGarbage, memory, now } from "../support/stats.js"
import type { BenchContext } from "./common.js"

const build = "../../dist/index.js"
const buildRedis = "../../dist/RedisBackend.js"
const { Lock, LockMetrics } = (await import(build)) as typeof EffectLock
const RedisBackend = (await import(buildRedis)) as typeof EffectLockRedisBackend

export interface ScaleResult {
  readonly holds: number
  readonly heapPerHoldBytes: number
  readonly renewPeriodMillis: number
  /** Renew periods observed: renewals confirmed while the holds were kept, per hold. */
  readonly periodsObserved: number
  /** Client-written Redis commands per renew period (one renewal of every hold) while all holds were kept. */
  readonly commandsPerRenewPeriod: number
  /** The same commands per `renewPeriodMillis` of the clock. */
  readonly commandsPerPeriodOfClock: number
  /** Event-loop delay p99 while the holds were renewed, milliseconds. */
  readonly eventLoopDelayP99Millis: number
  readonly lostHolds: number
  readonly acquireSeconds: number
  readonly keys: number
  readonly waiters: number
  readonly connectionsWaiting: number
  readonly heapPerWaiterBytes: number
  /**
   * The same count of fibers forked the same way, each parked on a Deferred: what a waiter costs
   * before the lock does anything (Effect 3.22 copies the FiberRefs map per fiber).
   */
  readonly heapPerBareFiberBytes: number
  readonly commandsPerAcquisition: number
  readonly drainSeconds: number
  readonly acquired: number
  readonly failures: number
  /** The first error a waiter or holder reported, if any. */
  readonly firstFailure: string | undefined
}

const HOLDS = 10_000
const KEYS = 100
const WAITERS_PER_KEY = 100
const LEASE_MILLIS = 6_000
const RENEW_MILLIS = 2_000
const PERIODS = 3
/** Longer than a renewal call takes here. */
const REPLY_MILLIS = 200
const DRAIN_CAP_MS = 60_000

const sumCommands = (before: Map<string, number>, after: Map<string, number>) => {
  let total = 0
  for (const [name, calls] of after) total += calls - (before.get(name) ?? 0)
  return total
}

const holdsPart = (ctx: BenchContext) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    collectGarbage()
    const heapBefore = memory().heapUsed
    const started = now()
    const leases: ReadonlyArray<Lease> = yield* Effect.forEach(
      Array.from({ length: HOLDS }, (_, i) => i),
      (i) => Lock.acquire(`bench:scale:hold:${i}`, { lease: `${LEASE_MILLIS} millis` }),
      { concurrency: 256 }
    ).pipe(Scope.extend(scope))
    const acquireSeconds = (now() - started) / 1000
    collectGarbage()
    const heapPerHoldBytes = (memory().heapUsed - heapBefore) / HOLDS
    ctx.log(`scale     ${HOLDS} holds in ${acquireSeconds.toFixed(1)} s, ${heapPerHoldBytes.toFixed(0)} B heap each`)

    const delay = monitorEventLoopDelay({ resolution: 5 })
    const renewed = Metric.tagged(LockMetrics.renewals, "backend", "redis")
    const commandsBefore = snapshotClientCommands()
    const observedFrom = now()
    delay.enable()
    // Renewals are counted when confirmed, commands when written: the renewals are read a reply's
    // time after each end of the window, so both count the same calls.
    yield* Effect.sleep(REPLY_MILLIS)
    const renewedBefore = (yield* Metric.value(renewed)).count
    yield* Effect.sleep(PERIODS * RENEW_MILLIS - REPLY_MILLIS)
    const commands = sumCommands(commandsBefore, snapshotClientCommands())
    const observedMillis = now() - observedFrom
    yield* Effect.sleep(REPLY_MILLIS)
    delay.disable()
    const rounds = ((yield* Metric.value(renewed)).count - renewedBefore) / HOLDS
    let lostHolds = 0
    for (const lease of leases) if (!(yield* lease.isHeld)) lostHolds++
    yield* Scope.close(scope, Exit.void)
    return {
      holds: HOLDS,
      heapPerHoldBytes,
      renewPeriodMillis: RENEW_MILLIS,
      periodsObserved: rounds,
      commandsPerRenewPeriod: rounds > 0 ? commands / rounds : Number.NaN,
      commandsPerPeriodOfClock: commands / (observedMillis / RENEW_MILLIS),
      eventLoopDelayP99Millis: delay.percentile(99) / 1e6,
      lostHolds,
      acquireSeconds
    }
  })

/** Heap per fiber of `count` fibers forked like the waiters and parked on a Deferred. */
const bareFiberHeap = (count: number) =>
  Effect.gen(function*() {
    const never = yield* Deferred.make<void>()
    collectGarbage()
    const before = memory().heapUsed
    const fibers = yield* Effect.forEach(
      Array.from({ length: count }, (_, i) => i),
      () => Effect.fork(Deferred.await(never).pipe(Effect.catchAll(() => Effect.void)))
    )
    yield* Effect.sleep(100)
    collectGarbage()
    const perFiber = (memory().heapUsed - before) / count
    yield* Fiber.interruptAll(fibers)
    return perFiber
  })

const waitersPart = (ctx: BenchContext) =>
  Effect.gen(function*() {
    const letGo = yield* Deferred.make<void>()
    let acquired = 0
    let failures = 0
    let firstFailure: string | undefined
    const failed = (error: unknown) =>
      Effect.sync(() => {
        failures++
        firstFailure ??= error instanceof Error ? `${error.name}: ${error.message}` : String(error)
      })
    const commandsBefore = snapshotClientCommands()
    const holders = yield* Effect.forEach(
      Array.from({ length: KEYS }, (_, k) => k),
      (k) =>
        Effect.gen(function*() {
          const holding = yield* Deferred.make<void>()
          const fiber = yield* Effect.fork(
            Lock.withLock(
              `bench:scale:key:${k}`,
              Effect.zipRight(Deferred.succeed(holding, undefined), Deferred.await(letGo))
            )
          )
          yield* Deferred.await(holding)
          return fiber
        })
    )
    const heapPerBareFiberBytes = yield* bareFiberHeap(KEYS * WAITERS_PER_KEY)
    collectGarbage()
    const heapBefore = memory().heapUsed
    const waiters = yield* Effect.forEach(
      Array.from({ length: KEYS * WAITERS_PER_KEY }, (_, i) => i),
      (i) =>
        Effect.fork(
          Lock.withLock(`bench:scale:key:${i % KEYS}`, Effect.sync(() => acquired++)).pipe(
            Effect.catchAll(failed)
          )
        )
    )
    yield* Effect.sleep(1_000)
    const connectionsWaiting = yield* Effect.promise(() => ctx.admin.connections())
    collectGarbage()
    const heapPerWaiterBytes = (memory().heapUsed - heapBefore) / (KEYS * WAITERS_PER_KEY)
    const released = now()
    yield* Deferred.succeed(letGo, undefined)
    yield* Fiber.joinAll(holders).pipe(Effect.catchAll(failed))
    const capAt = released + DRAIN_CAP_MS
    while (acquired + failures < KEYS * WAITERS_PER_KEY && now() < capAt) yield* Effect.sleep(20)
    const drainSeconds = (now() - released) / 1000
    yield* Fiber.interruptAll(waiters)
    const commands = sumCommands(commandsBefore, snapshotClientCommands())
    return {
      keys: KEYS,
      waiters: KEYS * WAITERS_PER_KEY,
      connectionsWaiting,
      heapPerWaiterBytes,
      heapPerBareFiberBytes,
      commandsPerAcquisition: commands / (acquired + KEYS),
      drainSeconds,
      acquired,
      failures,
      firstFailure
    }
  })

export const scale = (ctx: BenchContext): Effect.Effect<ScaleResult> =>
  Effect.gen(function*() {
    yield* Effect.promise(() => ctx.admin.flushAll())
    const holds = yield* holdsPart(ctx)
    yield* Effect.promise(() => ctx.admin.flushAll())
    const waiting = yield* waitersPart(ctx)
    return { ...holds, ...waiting }
  }).pipe(Effect.scoped, Effect.provide(RedisBackend.layer({ url: ctx.url })), Effect.orDie)
