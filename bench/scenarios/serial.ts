/**
 * a. Serial: one fiber acquires and releases an uncontended key, over and over. What one caller
 * pays per critical section when nobody else wants the lock: two round trips plus the library.
 *
 * The run is split into short rounds that take turns with the other libraries and the raw
 * references (see `run.ts`), so that a change in the machine's load during the run touches every
 * series alike and the ratios stay fair.
 */
import { Effect } from "effect"
import type { LockLibrary } from "../peers.js"
import type { Summary } from "../support/stats.js"
import { now, summarize } from "../support/stats.js"
import type { BenchContext } from "./common.js"
import { window, withClient } from "./common.js"

export interface SerialResult {
  readonly library: string
  readonly opsPerSecond: number
  /** Latency of one acquire + release, in microseconds. */
  readonly latency: Summary
  /**
   * CPU time this process spent per acquire + release (user + system, `process.cpuUsage` over the
   * measured windows), in microseconds: what the library costs around the round trips.
   */
  readonly cpuMicrosPerOp: number
  /**
   * The Redis server's CPU time per acquire + release (microseconds, from `INFO commandstats` around
   * the measured windows): what the library's commands and scripts cost the server. `undefined`
   * when not measured.
   */
  readonly serverMicrosPerOp?: number | undefined
  readonly seconds: number
  readonly rounds: number
}

/** One round's latencies (microseconds) and its length. */
export interface SerialRound {
  readonly samples: ReadonlyArray<number>
  readonly seconds: number
  /** CPU time of this process over the measured window (user + system), microseconds. */
  readonly cpuMicros: number
  /** The server's CPU time for the commands run in the measured window, microseconds. */
  readonly serverMicros?: number | undefined
}

export const SERIAL_ROUNDS = 3
const WARMUP_MS = 300
const ROUND_MS = 800
const MAX_OPS = 100_000

/**
 * Time `once` back to back for `ms`, after `warmupMs` of the same. `serverMicros`, when given, reads
 * the server's total command time; the round then reports the server's share of the measured window.
 */
export const timeLoop = <E>(
  once: Effect.Effect<unknown, E>,
  warmupMs: number,
  ms: number,
  serverMicros?: () => Promise<number>
): Effect.Effect<SerialRound, E> =>
  Effect.gen(function*() {
    const warmupEnd = now() + warmupMs
    while (now() < warmupEnd) yield* once
    const serverBefore = serverMicros === undefined ? undefined : yield* Effect.promise(serverMicros)
    const samples: Array<number> = []
    const cpuBefore = process.cpuUsage()
    const start = now()
    const end = start + ms
    let t = start
    while (t < end && samples.length < MAX_OPS) {
      yield* once
      const after = now()
      samples.push((after - t) * 1000)
      t = after
    }
    const cpu = process.cpuUsage(cpuBefore)
    const serverAfter = serverMicros === undefined ? undefined : yield* Effect.promise(serverMicros)
    return {
      samples,
      seconds: (t - start) / 1000,
      cpuMicros: cpu.user + cpu.system,
      serverMicros: serverBefore === undefined || serverAfter === undefined ? undefined : serverAfter - serverBefore
    }
  })

export const serialRound = (ctx: BenchContext, library: LockLibrary) =>
  withClient(ctx, library, (client) =>
    timeLoop(
      client.withLock(`bench:serial:${library.name}`, Effect.void),
      window(ctx, WARMUP_MS),
      window(ctx, ROUND_MS),
      ctx.admin.serverMicros
    ))

export const combineSerial = (library: string, rounds: ReadonlyArray<SerialRound>): SerialResult => {
  const samples = rounds.flatMap((round) => round.samples)
  const seconds = rounds.reduce((total, round) => total + round.seconds, 0)
  const cpuMicros = rounds.reduce((total, round) => total + round.cpuMicros, 0)
  const serverMicros = rounds.every((round) => round.serverMicros !== undefined)
    ? rounds.reduce((total, round) => total + (round.serverMicros ?? 0), 0)
    : undefined
  return {
    library,
    opsPerSecond: samples.length / seconds,
    latency: summarize(samples),
    cpuMicrosPerOp: cpuMicros / samples.length,
    serverMicrosPerOp: serverMicros === undefined ? undefined : serverMicros / samples.length,
    seconds,
    rounds: rounds.length
  }
}
