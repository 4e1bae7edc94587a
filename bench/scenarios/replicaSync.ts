/**
 * l. Replica sync (effect-lock only): what `replicas: { sync: 1, timeout }` costs a serial caller.
 * One fiber acquires and releases an uncontended key over and over, as in the serial scenario, on
 * a master of its own with one replica linked to it (both started here on free loopback ports,
 * stopped at the end), once with replica sync off and once on: each acquire and release is then
 * followed by `WAIT 1 <timeout>` on the same connection, in the same write. The two take turns in
 * rounds, so a change in the machine's load touches both alike.
 *
 * Run it alone with `BENCH_SCENARIOS=replicas npm run bench`.
 */
import { Effect } from "effect"
import { Redis } from "ioredis"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type * as EffectLock from "../../src/index.js"
import type * as EffectLockRedisBackend from "../../src/RedisBackend.js"
import { startRedisServer } from "../../test/support/redisServer.js"
import { dec, int, table } from "../format.js"
import type { BenchResults } from "../results.js"
import { isFailed } from "../results.js"
import { sleep } from "../support/stats.js"
import type { BenchContext } from "./common.js"
import { window } from "./common.js"
import type { SerialResult, SerialRound } from "./serial.js"
import { combineSerial, timeLoop } from "./serial.js"

const build = "../../dist/index.js"
const buildRedis = "../../dist/RedisBackend.js"
const { LockBackend, withLock } = (await import(build)) as typeof EffectLock
const RedisBackend = (await import(buildRedis)) as typeof EffectLockRedisBackend

export interface ReplicaSyncResult {
  /** Serial acquire + release with replica sync off, then on (`WAIT 1 <timeoutMillis>`). */
  readonly off: SerialResult
  readonly on: SerialResult
  readonly timeoutMillis: number
}

const ROUNDS = 3
const WARMUP_MS = 300
const ROUND_MS = 800
const TIMEOUT_MILLIS = 100

const waits = async (redis: Redis) => {
  const match = /^cmdstat_wait:calls=(\d+)/m.exec(await redis.info("commandstats"))
  return match === null ? 0 : Number(match[1])
}

export const replicaSync = (ctx: BenchContext): Effect.Effect<ReplicaSyncResult, unknown> =>
  Effect.tryPromise(async () => {
    const dir = mkdtempSync(join(tmpdir(), "effect-lock-bench-replicas-"))
    const master = await startRedisServer({ args: ["--dir", dir, "--repl-diskless-sync-delay", "0"] })
    const replica = await startRedisServer({ args: ["--dir", dir, "--replicaof", master.host, String(master.port)] })
    const admin = new Redis(master.url, { connectionName: "bench-admin", maxRetriesPerRequest: 1 })
    try {
      for (let attempt = 0; !/connected_slaves:1/.test(await admin.info("replication")); attempt++) {
        if (attempt > 600) throw new Error("the replica did not link to the master within 30 s")
        await sleep(50)
      }
      const round = (sync: boolean) =>
        Effect.scoped(Effect.gen(function*() {
          const backend = yield* RedisBackend.make({
            url: master.url,
            ...(sync ? { replicas: { sync: 1, timeout: TIMEOUT_MILLIS } } : {})
          })
          return yield* timeLoop(
            withLock("bench:replicas", Effect.void).pipe(Effect.provideService(LockBackend, backend)),
            window(ctx, WARMUP_MS),
            window(ctx, ROUND_MS)
          )
        }))
      const off: Array<SerialRound> = []
      const on: Array<SerialRound> = []
      let waitCount = 0
      for (let i = 0; i < ROUNDS; i++) {
        off.push(await Effect.runPromise(round(false)))
        const before = await waits(admin)
        const measured = await Effect.runPromise(round(true))
        waitCount += (await waits(admin)) - before
        on.push(measured)
      }
      const onResult = combineSerial("sync on", on)
      // Every measured acquire and release is followed by WAIT (warm-up ones too).
      if (waitCount < 2 * onResult.latency.count) {
        throw new Error(`replica sync: the master ran ${waitCount} WAITs for ${onResult.latency.count} operations`)
      }
      return { off: combineSerial("sync off", off), on: onResult, timeoutMillis: TIMEOUT_MILLIS }
    } finally {
      admin.disconnect()
      await replica.stop()
      await master.stop()
      rmSync(dir, { recursive: true, force: true })
    }
  })

/** The report's section (`report.ts`), empty when the scenario did not run. */
export const replicaSyncSection = (results: BenchResults): string => {
  const outcome = results.replicaSync
  if (outcome === undefined) return ""
  if (isFailed(outcome)) return `### l. Replica sync\n\nFailed: ${outcome.error}\n`
  const row = (name: string, r: SerialResult) => [
    name,
    int(r.opsPerSecond),
    `${dec(r.latency.p50, 1)} µs`,
    `${dec(r.latency.p99, 1)} µs`,
    `${dec(r.cpuMicrosPerOp, 0)} µs`,
    int(r.latency.count)
  ]
  return `### l. Replica sync: serial acquire + release on a master with one replica

${
    table(["Replica sync", "Ops/s", "p50", "p99", "CPU per op", "Samples"], [
      row("off", outcome.off),
      row(`on (\`sync: 1, timeout: ${outcome.timeoutMillis}\`)`, outcome.on)
    ])
  }

One fiber, one uncontended key, \`withLock(key, Effect.void)\` back to back on a master of its own
with one replica linked to it (loopback), with \`replicas\` off and on (each acquire and release then
followed by \`WAIT 1 ${outcome.timeoutMillis}\` in the same write, checked in the master's
\`INFO commandstats\`). ${ROUNDS} rounds of 0.8 s each after 0.3 s of warm-up, taking turns. See
[Sentinel and replica sync](sentinel.md).
`
}
