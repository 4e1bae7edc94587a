/**
 * d. 1,000 waiters: one holder keeps a key while 1,000 fibers wait for it; then the holder lets go
 * and every waiter takes the lock once (an empty critical section) until all have had it.
 *
 * While they wait: Redis connections (`CLIENT LIST`, admin connection excluded), process memory
 * (RSS and heap after a full GC, against the same numbers before the waiters came), and Redis
 * commands per second spent on waiting alone. Over the whole run (statistics reset before the
 * holder acquires): Redis commands per acquisition, counted by the server (`INFO commandstats`)
 * for the commands the clients issue (the calls a Lua script makes inside Redis are shown apart).
 */
import { Deferred, Effect, Fiber } from "effect"
import type { LockLibrary } from "../peers.js"
import { snapshotClientCommands } from "../support/commands.js"
import { diffStats } from "../support/redis.js"
import { collectGarbage, memory, now } from "../support/stats.js"
import type { BenchContext } from "./common.js"
import { describeFailure, window, withClient } from "./common.js"

export interface WaitersResult {
  readonly library: string
  readonly waiters: number
  /** Connections the library had open before the waiters came, while they waited (max), and after. */
  readonly connectionsIdle: number
  readonly connectionsWaiting: number
  readonly rssDeltaBytes: number
  readonly heapDeltaBytes: number
  /** Client-issued Redis commands per second while everybody waited and nobody could get in. */
  readonly waitingCommandsPerSecond: number
  readonly acquisitions: number
  /** Seconds from the holder's release until the last waiter had the lock (or the cap). */
  readonly drainSeconds: number
  readonly capped: boolean
  /** Client-issued commands (server count) / acquisitions, over holder + all waiters. */
  readonly commandsPerAcquisition: number
  /** Everything the server executed, script-internal calls included, per acquisition. */
  readonly serverCallsPerAcquisition: number
  /** Client-issued commands by name, per acquisition. */
  readonly breakdown: ReadonlyArray<readonly [string, number]>
  /** The in-process count of written commands, per acquisition (cross-check). */
  readonly clientCountedPerAcquisition: number
  readonly overlaps: number
  readonly failures: ReadonlyArray<string>
}

export const WAITERS = 1_000
const SETTLE_MS = 1_000
const DRAIN_CAP_MS = 12_000

const sumOf = (stats: Map<string, number>, names?: ReadonlySet<string>) => {
  let total = 0
  for (const [name, calls] of stats) if (names === undefined || names.has(name)) total += calls
  return total
}

export const waiters = (ctx: BenchContext, library: LockLibrary) =>
  withClient(ctx, library, (client) =>
    Effect.gen(function*() {
      const { admin } = ctx
      const key = "bench:waiters"
      // The library's connections at rest (after one acquisition, so lazy connections are open).
      yield* client.withLock("bench:waiters:warm", Effect.void)
      const connectionsIdle = yield* Effect.promise(() => admin.connections())
      collectGarbage()
      const memBefore = memory()

      // Admin commands are counted by the server too; they are subtracted by name.
      const adminCalls = new Map<string, number>()
      const adminCall = <A>(name: string, f: () => Promise<A>) =>
        Effect.promise(() => {
          adminCalls.set(name, (adminCalls.get(name) ?? 0) + 1)
          return f()
        })

      yield* Effect.promise(() => admin.resetStats())
      const clientBefore = snapshotClientCommands()

      let inside = 0
      let overlaps = 0
      let acquired = 0
      const failures: Array<string> = []
      const body = Effect.sync(() => {
        inside++
        if (inside > 1) overlaps++
        acquired++
        inside--
      })

      const holding = yield* Deferred.make<void>()
      const letGo = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(
        client.withLock(key, Effect.zipRight(Deferred.succeed(holding, undefined), Deferred.await(letGo)))
      )
      yield* Deferred.await(holding)

      const fibers = yield* Effect.forEach(
        Array.from({ length: WAITERS }, (_, i) => i),
        () =>
          Effect.fork(
            client.withLock(key, body).pipe(
              Effect.catchAll((error) => Effect.sync(() => failures.push(describeFailure(error))))
            )
          )
      )

      // Let the waiters settle into waiting, then look.
      yield* Effect.sleep(window(ctx, SETTLE_MS) / 2)
      const statsSettled = yield* adminCall("info", () => admin.commandStats())
      const settledAt = now()
      yield* Effect.sleep(window(ctx, SETTLE_MS) / 2)
      const statsWaiting = yield* adminCall("info", () => admin.commandStats())
      const waitingSeconds = (now() - settledAt) / 1000
      const connectionsWaiting = yield* adminCall("client|list", () => admin.connections())
      collectGarbage()
      const memWaiting = memory()

      const clientNames = new Set(snapshotClientCommands().keys())
      const waitingCalls = diffStats(statsSettled, statsWaiting)
      // The first `info` snapshot is counted in the second.
      const waitingCommands = sumOf(waitingCalls, clientNames) - (clientNames.has("info") ? 1 : 0)

      const released = now()
      yield* Deferred.succeed(letGo, undefined)
      yield* Fiber.join(holder).pipe(
        Effect.catchAll((error) => Effect.sync(() => failures.push(describeFailure(error))))
      )
      const capAt = released + window(ctx, DRAIN_CAP_MS)
      let maxConnections = connectionsWaiting
      while (acquired + failures.length < WAITERS && now() < capAt) {
        yield* Effect.sleep(50)
        if (acquired < WAITERS / 2) {
          maxConnections = Math.max(maxConnections, yield* adminCall("client|list", () => admin.connections()))
        }
      }
      const drainSeconds = (now() - released) / 1000
      const capped = acquired + failures.length < WAITERS
      yield* Fiber.interruptAll(fibers)

      const finalStats = yield* Effect.promise(() => admin.commandStats())
      const clientAfter = snapshotClientCommands()
      const names = new Set(diffStats(clientBefore, clientAfter).keys())
      const serverStats = new Map(finalStats)
      for (const [name, calls] of adminCalls) {
        serverStats.set(name, (serverStats.get(name) ?? 0) - calls)
      }
      serverStats.delete("config|resetstat")
      const acquisitions = acquired + 1
      const clientIssued = sumOf(serverStats, names)
      const breakdown = Array.from(serverStats)
        .filter(([name, calls]) => names.has(name) && calls > 0)
        .sort((a, b) => b[1] - a[1])
        .map(([name, calls]) => [name, calls / acquisitions] as const)

      return {
        library: library.name,
        waiters: WAITERS,
        connectionsIdle,
        connectionsWaiting: maxConnections,
        rssDeltaBytes: memWaiting.rss - memBefore.rss,
        heapDeltaBytes: memWaiting.heapUsed - memBefore.heapUsed,
        waitingCommandsPerSecond: waitingCommands / waitingSeconds,
        acquisitions,
        drainSeconds,
        capped,
        commandsPerAcquisition: clientIssued / acquisitions,
        serverCallsPerAcquisition: sumOf(serverStats) / acquisitions,
        breakdown,
        clientCountedPerAcquisition: sumOf(diffStats(clientBefore, clientAfter)) / acquisitions,
        overlaps,
        failures: Array.from(new Set(failures))
      } satisfies WaitersResult
    }))
