/**
 * `npm run bench`: effect-lock side by side with its peers and the raw Redis limit; writes
 * `docs/benchmarks.md` and `docs/benchmarks.svg`.
 *
 * Environment knobs (all optional):
 * - `REDIS_URL`: use this server (loopback only: it is flushed) instead of starting one;
 * - `BENCH_SCALE`: multiply every measuring window (default 1; 0.3 for a quick look);
 * - `BENCH_LIBS`: comma-separated subset of libraries (e.g. `effect-lock`);
 * - `BENCH_SCENARIOS`: comma-separated subset of
 *   `raw,serial,distinct,handoff,waiters,reentrant,promise,memory,scale,readheavy,fairhandoff,replicas,semaphore,cluster,redlock`.
 *
 * The docs are written only by a full run (every library and scenario, scale 1), unless
 * `BENCH_WRITE=1`; partial runs print their results and the target table to the console. Every run
 * keeps its raw results in `.bench-tmp/results.json`; `BENCH_REPORT_ONLY=1` re-renders the docs
 * from that file without measuring anything (for work on the report itself).
 */
import { Cause, Effect } from "effect"
import type { Exit } from "effect"
import { spawnSync } from "node:child_process"
import { mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { cpus, loadavg, totalmem } from "node:os"
import type { LockLibrary } from "./peers.js"
import { backgroundErrors, libraries } from "./peers.js"
import { renderHeadline, renderMarkdown } from "./report.js"
import type { BenchResults, Machine, Outcome } from "./results.js"
import { isFailed } from "./results.js"
import type { ClusterResult } from "./scenarios/cluster.js"
import { cluster as clusterScenario, describeCluster } from "./scenarios/cluster.js"
import type { BenchContext } from "./scenarios/common.js"
import { describeFailure } from "./scenarios/common.js"
import type { DistinctRound } from "./scenarios/distinct.js"
import { combineDistinct, DISTINCT_ROUNDS, distinctRound } from "./scenarios/distinct.js"
import type { FairHandoffLock } from "./scenarios/fairHandoff.js"
import { fairHandoff } from "./scenarios/fairHandoff.js"
import { handoff } from "./scenarios/handoff.js"
import { memory } from "./scenarios/memory.js"
import type { PromiseResult } from "./scenarios/promise.js"
import { PROMISE_ROUNDS, promiseCallers, promiseRound } from "./scenarios/promise.js"
import type { FloorClient, FloorResult, RawResult, RedisBenchmarkResult } from "./scenarios/raw.js"
import { floorDistinctRound, floorSerialRound, loadAcquire, median, redisBenchmark } from "./scenarios/raw.js"
import type { ReadHeavyLock } from "./scenarios/readHeavy.js"
import { readHeavy } from "./scenarios/readHeavy.js"
import type { RedlockResult } from "./scenarios/redlock.js"
import { redlockScenario } from "./scenarios/redlock.js"
import { reentrant } from "./scenarios/reentrant.js"
import { replicaSync } from "./scenarios/replicaSync.js"
import { scale as scaleScenario } from "./scenarios/scale.js"
import { semaphore } from "./scenarios/semaphore.js"
import type { SerialRound } from "./scenarios/serial.js"
import { combineSerial, SERIAL_ROUNDS, serialRound } from "./scenarios/serial.js"
import { waiters } from "./scenarios/waiters.js"
import { installCommandCounter } from "./support/commands.js"
import { openAdmin, startServer } from "./support/redis.js"
import { now } from "./support/stats.js"
import { renderChart } from "./svg.js"
import { renderTargets } from "./targets.js"

const unhandledRejections: Array<string> = []
process.on("unhandledRejection", (reason) => {
  unhandledRejections.push(reason instanceof Error ? `${reason.name}: ${reason.message}` : String(reason))
})

const scenarioNames = [
  "raw",
  "serial",
  "distinct",
  "handoff",
  "waiters",
  "reentrant",
  "promise",
  "memory",
  "scale",
  "readheavy",
  "fairhandoff",
  "replicas",
  "semaphore",
  "cluster",
  "redlock"
] as const
type ScenarioName = typeof scenarioNames[number]

const list = (name: string): ReadonlyArray<string> | undefined => {
  const value = process.env[name]
  return value === undefined || value.trim() === "" ? undefined : value.split(",").map((s) => s.trim())
}

const scale = Number(process.env["BENCH_SCALE"] ?? "1")
if (!(scale > 0)) throw new Error(`BENCH_SCALE must be a positive number, got ${process.env["BENCH_SCALE"]}`)
const libraryFilter = list("BENCH_LIBS")
const scenarioFilter = list("BENCH_SCENARIOS")
for (const name of libraryFilter ?? []) {
  if (!libraries.some((library) => library.name === name)) throw new Error(`unknown library in BENCH_LIBS: ${name}`)
}
for (const name of scenarioFilter ?? []) {
  if (!(scenarioNames as ReadonlyArray<string>).includes(name)) throw new Error(`unknown scenario: ${name}`)
}
const selected = libraries.filter((library) => libraryFilter === undefined || libraryFilter.includes(library.name))
const runs = (scenario: ScenarioName) => scenarioFilter === undefined || scenarioFilter.includes(scenario)
const fullRun = libraryFilter === undefined && scenarioFilter === undefined && scale === 1
const write = fullRun || process.env["BENCH_WRITE"] === "1"

const machine = (redis: string, loadAtStart: number): Machine => {
  const cpuInfo = readFileSync("/proc/cpuinfo", "utf8")
  const model = /^model name\s*:\s*(.+)$/m.exec(cpuInfo)?.[1]?.trim() ?? cpus()[0]?.model ?? "unknown"
  let os = `${process.platform} ${process.arch}`
  try {
    const release = readFileSync("/etc/os-release", "utf8")
    os = /^PRETTY_NAME="?([^"\n]+)"?$/m.exec(release)?.[1] ?? os
  } catch {
    // not Linux: keep the platform name
  }
  return {
    cpu: model,
    cores: cpus().length,
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    os,
    node: process.version,
    redis,
    loadAverage: [loadAtStart, loadavg()[0]!]
  }
}

/** `BENCH_REVISION`, or the git commit of this checkout (noting uncommitted changes to the library). */
const revision = (): string => {
  const given = process.env["BENCH_REVISION"]
  if (given !== undefined && given !== "") return given
  const git = (...args: Array<string>) =>
    spawnSync("git", args, { encoding: "utf8", cwd: new URL("..", import.meta.url) })
  const head = git("rev-parse", "--short", "HEAD")
  if (head.status !== 0) return "unknown"
  const dirty = git("status", "--porcelain", "--", "src", "lua").stdout.trim() !== ""
  return `${head.stdout.trim()}${dirty ? " + local changes" : ""}`
}

const log = (line: string) => process.stderr.write(`[bench] ${line}\n`)

const resultsFile = new URL("../.bench-tmp/results.json", import.meta.url)

const headlineStart = "<!-- bench:headline:start -->"
const headlineEnd = "<!-- bench:headline:end -->"

/** The page, the chart, and the README's headline (between its markers, when it has them). */
const writeDocs = (results: BenchResults) => {
  writeFileSync(new URL("../docs/benchmarks.md", import.meta.url), renderMarkdown(results))
  writeFileSync(new URL("../docs/benchmarks.svg", import.meta.url), renderChart(results))
  log("wrote docs/benchmarks.md and docs/benchmarks.svg")
  const readme = new URL("../README.md", import.meta.url)
  let text: string
  try {
    text = readFileSync(readme, "utf8")
  } catch {
    return
  }
  const start = text.indexOf(headlineStart)
  const end = text.indexOf(headlineEnd)
  if (start < 0 || end < start) return
  const updated = `${text.slice(0, start + headlineStart.length)}\n${renderHeadline(results)}\n${text.slice(end)}`
  if (updated !== text) {
    writeFileSync(readme, updated)
    log("updated the README's benchmark headline")
  }
}

const main = async () => {
  const started = now()
  const measured = revision()
  const loadAtStart = loadavg()[0]!
  if (loadAtStart > 0.5) {
    log(`load average is ${loadAtStart.toFixed(2)}: other work on this machine will show in the numbers`)
  }
  installCommandCounter()
  const server = await startServer()
  const admin = await openAdmin(server.url)
  log(`redis ${server.version} at ${server.own ? "its own server" : "REDIS_URL"} ${server.host}:${server.port}`)
  const ctx: BenchContext = { url: server.url, host: server.host, port: server.port, admin, scale, log }

  const fixed = (n: number, digits = 0) => n.toFixed(digits)
  const failure = (exit: Exit.Exit<unknown, unknown>) =>
    exit._tag === "Failure"
      ? (exit.cause._tag === "Fail" ? describeFailure(exit.cause.error) : Cause.pretty(exit.cause))
      : ""
  const report = (scenario: string, name: string, text: string, started: number) =>
    log(`${scenario.padEnd(9)} ${name.padEnd(24)} ${text}  (${((now() - started) / 1000).toFixed(1)} s)`)

  /** One scenario for every selected library, one after the other. */
  const each = async <A>(
    scenario: ScenarioName,
    run: (ctx: BenchContext, library: LockLibrary) => Effect.Effect<A, unknown>,
    describe: (a: A) => string
  ): Promise<ReadonlyArray<Outcome<A>>> => {
    if (!runs(scenario)) return []
    const outcomes: Array<Outcome<A>> = []
    for (const library of selected) {
      const t = now()
      const exit = await Effect.runPromiseExit(run(ctx, library))
      if (exit._tag === "Success") {
        outcomes.push(exit.value)
        report(scenario, library.name, describe(exit.value), t)
      } else {
        outcomes.push({ library: library.name, error: failure(exit) })
        report(scenario, library.name, `FAILED: ${failure(exit)}`, t)
      }
    }
    return outcomes
  }

  /**
   * A scenario in rounds: every round runs each library (and the references) once, in turn, so a
   * change in the machine's load touches every series alike. A library that fails a round is out.
   */
  const inRounds = async <R>(
    scenario: ScenarioName,
    rounds: number,
    run: (ctx: BenchContext, library: LockLibrary) => Effect.Effect<R, unknown>,
    references: (round: number) => Promise<void>
  ): Promise<Map<string, Outcome<Array<R>>>> => {
    const collected = new Map<string, Outcome<Array<R>>>(selected.map((library) => [library.name, []]))
    if (!runs(scenario)) return new Map()
    for (let round = 0; round < rounds; round++) {
      await references(round)
      for (const library of selected) {
        const sofar = collected.get(library.name)!
        if (isFailed(sofar)) continue
        const exit = await Effect.runPromiseExit(run(ctx, library))
        if (exit._tag === "Success") sofar.push(exit.value)
        else collected.set(library.name, { library: library.name, error: failure(exit) })
      }
    }
    return collected
  }

  const combine = <R, A>(
    scenario: ScenarioName,
    collected: Map<string, Outcome<Array<R>>>,
    make: (library: string, rounds: Array<R>) => A,
    describe: (a: A) => string,
    started: number
  ): ReadonlyArray<Outcome<A>> =>
    Array.from(collected, ([library, outcome]) => {
      const result = isFailed(outcome) ? outcome : make(library, outcome)
      report(scenario, library, isFailed(result) ? `FAILED: ${result.error}` : describe(result), started)
      return result
    })

  try {
    const withRaw = runs("raw")
    const sha = withRaw ? await Effect.runPromise(loadAcquire(ctx)) : ""
    const floorClients: ReadonlyArray<FloorClient> = ["default", "autoPipelining", "primitives"]
    const singles: Array<RedisBenchmarkResult> = []
    const floorSerial = new Map<FloorClient, Array<SerialRound>>(floorClients.map((c) => [c, []]))
    const floorDistinct = new Map<FloorClient, Array<DistinctRound>>(floorClients.map((c) => [c, []]))

    let t = now()
    const serialRounds = await inRounds("serial", SERIAL_ROUNDS, serialRound, async () => {
      if (!withRaw) return
      await ctx.admin.flushAll()
      singles.push(await Effect.runPromise(redisBenchmark(ctx, sha, 1, Math.round(10_000 * Math.min(1, scale * 2)))))
      for (const client of floorClients) {
        floorSerial.get(client)!.push(await Effect.runPromise(floorSerialRound(ctx, client)))
      }
    })
    const serialResults = combine(
      "serial",
      serialRounds,
      combineSerial,
      (r) => `${fixed(r.opsPerSecond)} ops/s, p50 ${fixed(r.latency.p50, 1)} µs, p99 ${fixed(r.latency.p99, 1)} µs`,
      t
    )

    t = now()
    const distinctRounds = await inRounds("distinct", DISTINCT_ROUNDS, distinctRound, async () => {
      if (!withRaw) return
      await ctx.admin.flushAll()
      for (const client of floorClients) {
        floorDistinct.get(client)!.push(await Effect.runPromise(floorDistinctRound(ctx, client)))
      }
    })
    const distinctResults = combine(
      "distinct",
      distinctRounds,
      combineDistinct,
      (r) => `${fixed(r.opsPerSecond)} ops/s (${r.failures} failures)`,
      t
    )

    let rawOutcome: BenchResults["raw"]
    if (withRaw) {
      const exit = await Effect.runPromiseExit(Effect.gen(function*() {
        yield* Effect.promise(() => ctx.admin.flushAll())
        if (singles.length === 0) {
          singles.push(yield* redisBenchmark(ctx, sha, 1, Math.round(10_000 * Math.min(1, scale * 2))))
        }
        const fifty = yield* redisBenchmark(ctx, sha, 50, Math.round(150_000 * Math.min(1, scale * 2)))
        const floors: Array<FloorResult> = []
        for (const client of floorClients) {
          const serial = floorSerial.get(client)!
          const distinct = floorDistinct.get(client)!
          if (serial.length === 0) serial.push(yield* floorSerialRound(ctx, client))
          if (distinct.length === 0) distinct.push(yield* floorDistinctRound(ctx, client))
          const s = combineSerial(client, serial)
          floors.push({
            client,
            serial: {
              opsPerSecond: s.opsPerSecond,
              latency: s.latency,
              cpuMicrosPerOp: s.cpuMicrosPerOp,
              serverMicrosPerOp: s.serverMicrosPerOp
            },
            distinctOpsPerSecond: combineDistinct(client, distinct).opsPerSecond
          })
        }
        return {
          acquireSha: sha,
          single: singles,
          singleP50: median(singles.map((r) => r.p50)),
          fifty,
          floors
        } satisfies RawResult
      }))
      rawOutcome = exit._tag === "Success" ? exit.value : { library: "raw", error: failure(exit) }
      if (isFailed(rawOutcome)) log(`raw       FAILED: ${rawOutcome.error}`)
      else {
        const r = rawOutcome
        log(
          `raw       redis-benchmark 1 client p50 ${fixed(r.singleP50 * 1000)} µs (rounds: ${
            r.single.map((s) => fixed(s.p50 * 1000)).join(", ")
          }), 50 clients ${fixed(r.fifty.requestsPerSecond)}/s; ioredis pair ${
            r.floors.map((f) =>
              `${f.client}: p50 ${fixed(f.serial.latency.p50, 1)} µs, 64 loops ${fixed(f.distinctOpsPerSecond)}/s`
            ).join("; ")
          }`
        )
      }
    }

    const handoffResults = await each(
      "handoff",
      handoff,
      (r) =>
        `${fixed(r.acquisitionsPerSecond)} acq/s, wait p50 ${fixed(r.wait.p50, 1)} ms p99 ${
          fixed(r.wait.p99, 1)
        } ms, gap p50 ${fixed(r.gap.p50)} µs, fairness ${fixed(r.fairness, 2)}, re-grabs ${
          fixed(r.regrabs * 100)
        } %, overlaps ${r.overlaps}`
    )
    const waitersResults = await each(
      "waiters",
      waiters,
      (r) =>
        `${r.connectionsWaiting} conns, ${fixed(r.commandsPerAcquisition, 2)} cmds/acq, drain ${
          fixed(r.drainSeconds, 2)
        } s${r.capped ? " (capped)" : ""}, heap ${fixed(r.heapDeltaBytes / 2 ** 20, 1)} MiB`
    )
    const reentrantResults = await each("reentrant", reentrant, (r) =>
      r.reentrant
        ? `${fixed(r.nanosPerNested ?? NaN)} ns/nested, ${r.redisCommandsDuringLoop} redis commands`
        : r.nestedOutcome)

    // g. Promise-land callers, in rounds that take turns like the serial scenario's.
    const promiseOutcomes: Array<Outcome<PromiseResult>> = []
    if (runs("promise") && (libraryFilter === undefined || libraryFilter.includes("effect-lock"))) {
      t = now()
      const pooled = new Map<string, Array<SerialRound> | string>(promiseCallers.map(([name]) => [name, []]))
      for (let round = 0; round < PROMISE_ROUNDS; round++) {
        for (const [name, open] of promiseCallers) {
          const sofar = pooled.get(name)
          if (typeof sofar === "string") continue
          const exit = await Effect.runPromiseExit(promiseRound(ctx, open, name))
          if (exit._tag === "Success") sofar!.push(exit.value)
          else pooled.set(name, failure(exit))
        }
      }
      for (const [name, rounds] of pooled) {
        const result = typeof rounds === "string" ? { library: name, error: rounds } : combineSerial(name, rounds)
        promiseOutcomes.push(result)
        report(
          "promise",
          name,
          isFailed(result)
            ? `FAILED: ${result.error}`
            : `p50 ${fixed(result.latency.p50, 1)} µs, CPU ${fixed(result.cpuMicrosPerOp, 0)} µs/op`,
          t
        )
      }
    }

    // h, i: effect-lock alone.
    const subjectAlone = libraryFilter === undefined || libraryFilter.includes("effect-lock")
    const single = async <A>(scenario: ScenarioName, run: Effect.Effect<A, unknown>, describe: (a: A) => string) => {
      if (!runs(scenario) || !subjectAlone) return undefined
      const started = now()
      const exit = await Effect.runPromiseExit(run)
      const outcome: Outcome<A> = exit._tag === "Success"
        ? exit.value
        : { library: "effect-lock", error: failure(exit) }
      report(scenario, "effect-lock", isFailed(outcome) ? `FAILED: ${outcome.error}` : describe(outcome), started)
      return outcome
    }
    const memoryOutcome = await single(
      "memory",
      memory(ctx),
      (r) => `withLock ${fixed(r.uncontendedCpuMicros, 2)} µs, reentrant ${fixed(r.reentrantCpuMicros, 2)} µs CPU`
    )
    const scaleOutcome = await single(
      "scale",
      scaleScenario(ctx),
      (r) =>
        `${fixed(r.heapPerHoldBytes)} B/hold, ${fixed(r.commandsPerRenewPeriod, 1)} cmds/renew period, ELD p99 ${
          fixed(r.eventLoopDelayP99Millis, 1)
        } ms, ${r.lostHolds} lost; ${r.connectionsWaiting} conns, ${fixed(r.heapPerWaiterBytes)} B/waiter, ${
          fixed(r.commandsPerAcquisition, 2)
        } cmds/acq`
    )

    // j, k: effect-lock's read-write and fair locks, each next to its mutex.
    const readHeavyOutcomes = []
    for (const lock of ["ReadWriteLock", "Lock (mutex)"] satisfies Array<ReadHeavyLock>) {
      const outcome = await single(
        "readheavy",
        readHeavy(ctx, lock),
        (r) =>
          `${lock}: ${fixed(r.readsPerSecond)} reads/s, ${fixed(r.writesPerSecond)} writes/s, write wait p99 ${
            fixed(r.writeWait.p99, 1)
          } ms, ${r.violations} violations`
      )
      if (outcome !== undefined) readHeavyOutcomes.push(outcome)
    }
    const fairHandoffOutcomes = []
    for (const lock of ["FairLock", "Lock (mutex)"] satisfies Array<FairHandoffLock>) {
      const outcome = await single(
        "fairhandoff",
        fairHandoff(ctx, lock),
        (r) =>
          `${lock}: ${fixed(r.acquisitionsPerSecond)} acq/s, wait p99 ${fixed(r.wait.p99, 1)} ms, fairness ${
            fixed(r.fairness, 2)
          }, overlaps ${r.overlaps}`
      )
      if (outcome !== undefined) fairHandoffOutcomes.push(outcome)
    }

    // l: replica sync off and on, on a master and replica of its own.
    const replicaSyncOutcome = await single(
      "replicas",
      replicaSync(ctx),
      (r) => `p50 off ${fixed(r.off.latency.p50, 1)} µs, on ${fixed(r.on.latency.p50, 1)} µs`
    )

    // m: every selected library's semaphore.
    const semaphoreResults = runs("semaphore")
      ? await Effect.runPromise(semaphore(ctx, selected.map((library) => library.name)))
      : undefined
    // n. Redis Cluster: a cluster of its own, the libraries that take an ioredis Cluster.
    const clusterOutcomes: Array<Outcome<ClusterResult>> = []
    if (runs("cluster")) {
      t = now()
      const selectedName = (name: string) => libraryFilter === undefined || libraryFilter.includes(name)
      const exit = await Effect.runPromiseExit(clusterScenario(ctx, selectedName))
      if (exit._tag === "Success") clusterOutcomes.push(...exit.value)
      else clusterOutcomes.push({ library: "cluster", error: failure(exit) })
      for (const r of clusterOutcomes) {
        report("cluster", r.library, isFailed(r) ? `FAILED: ${r.error}` : describeCluster(r), t)
      }
    }

    // o: Redlock on servers of its own (3, then 5), effect-lock next to redlock and RedlockMutex.
    let redlockOutcomes: ReadonlyArray<Outcome<RedlockResult>> = []
    if (runs("redlock")) {
      t = now()
      redlockOutcomes = await Effect.runPromise(redlockScenario(ctx, libraryFilter))
      for (const r of redlockOutcomes) {
        report(
          "redlock",
          isFailed(r) ? r.library : `${r.library}, ${r.nodes} nodes`,
          isFailed(r) ?
            `FAILED: ${r.error}` :
            `serial p50 ${fixed(r.serial.latency.p50, 1)} µs, CPU ${fixed(r.serial.cpuMicrosPerOp)} µs/op; 64 fibers ${
              fixed(r.distinct.opsPerSecond)
            } ops/s (${r.distinct.failures} failures)`,
          t
        )
      }
    }

    const results: BenchResults = {
      date: new Date().toISOString(),
      command: "npm run bench",
      revision: measured,
      seconds: (now() - started) / 1000,
      scale,
      machine: machine(server.version, loadAtStart),
      libraries: selected.map(({ name, reentrant, usage, version, waiting }) => ({
        name,
        version,
        usage,
        waiting,
        reentrant
      })),
      raw: rawOutcome,
      serial: serialResults,
      distinct: distinctResults,
      handoff: handoffResults,
      waiters: waitersResults,
      reentrant: reentrantResults,
      promise: promiseOutcomes,
      memory: memoryOutcome,
      atScale: scaleOutcome,
      readHeavy: readHeavyOutcomes,
      fairHandoff: fairHandoffOutcomes,
      replicaSync: replicaSyncOutcome,
      semaphore: semaphoreResults,
      cluster: clusterOutcomes,
      redlock: redlockOutcomes,
      backgroundErrors: [...backgroundErrors],
      unhandledRejections: [...unhandledRejections]
    }
    process.stdout.write(`\n${renderTargets(results)}\n`)
    mkdirSync(new URL("../.bench-tmp/", import.meta.url), { recursive: true })
    writeFileSync(resultsFile, JSON.stringify(results, null, 2))
    if (write) {
      writeDocs(results)
    } else {
      log("partial run: docs not written (BENCH_WRITE=1 to write them anyway)")
    }
    log(`done in ${results.seconds.toFixed(1)} s`)
    if (unhandledRejections.length > 0) {
      log(`UNHANDLED REJECTIONS: ${unhandledRejections.join("; ")}`)
      process.exitCode = 1
    }
  } finally {
    admin.close()
    await server.stop()
  }
}

const reportOnly = () => {
  const results = JSON.parse(readFileSync(resultsFile, "utf8")) as BenchResults
  process.stdout.write(`${renderTargets(results)}\n`)
  writeDocs(results)
}
;(process.env["BENCH_REPORT_ONLY"] === "1" ? Promise.resolve().then(reportOnly) : main()).then(
  // Peers leave timers behind (redis-semaphore's refresh interval is unref'd, but not every
  // library is as careful): exit rather than wait for them.
  () => process.exit(),
  (error: unknown) => {
    log(`failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}`)
    process.exit(1)
  }
)
