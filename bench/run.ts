/**
 * `npm run bench`: effect-lock side by side with its peers and the raw Redis limit; writes
 * `docs/benchmarks.md` and `docs/benchmarks.svg`.
 *
 * Environment knobs (all optional):
 * - `REDIS_URL`: use this server (loopback only: it is flushed) instead of starting one;
 * - `BENCH_SCALE`: multiply every measuring window (default 1; 0.3 for a quick look);
 * - `BENCH_LIBS`: comma-separated subset of libraries (e.g. `effect-lock`);
 * - `BENCH_SCENARIOS`: comma-separated subset of `raw,serial,distinct,handoff,waiters,reentrant`.
 *
 * The docs are written only by a full run (every library and scenario, scale 1), unless
 * `BENCH_WRITE=1`; partial runs print their results and the target table to the console.
 */
import { cpus, loadavg, totalmem } from "node:os"
import { readFileSync, writeFileSync } from "node:fs"
import { Effect } from "effect"
import type { LockLibrary } from "./peers.js"
import { backgroundErrors, libraries } from "./peers.js"
import { renderMarkdown, renderTargets } from "./report.js"
import type { BenchResults, Machine, Outcome } from "./results.js"
import type { BenchContext } from "./scenarios/common.js"
import { describeFailure } from "./scenarios/common.js"
import { distinct } from "./scenarios/distinct.js"
import { handoff } from "./scenarios/handoff.js"
import { raw } from "./scenarios/raw.js"
import { reentrant } from "./scenarios/reentrant.js"
import { serial } from "./scenarios/serial.js"
import { waiters } from "./scenarios/waiters.js"
import { renderChart } from "./svg.js"
import { installCommandCounter } from "./support/commands.js"
import { openAdmin, startServer } from "./support/redis.js"
import { now } from "./support/stats.js"

const unhandledRejections: Array<string> = []
process.on("unhandledRejection", (reason) => {
  unhandledRejections.push(reason instanceof Error ? `${reason.name}: ${reason.message}` : String(reason))
})

const scenarioNames = ["raw", "serial", "distinct", "handoff", "waiters", "reentrant"] as const
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

const log = (line: string) => process.stderr.write(`[bench] ${line}\n`)

const main = async () => {
  const started = now()
  const loadAtStart = loadavg()[0]!
  if (loadAtStart > 0.5) log(`load average is ${loadAtStart.toFixed(2)}: other work on this machine will show in the numbers`)
  installCommandCounter()
  const server = await startServer()
  const admin = await openAdmin(server.url)
  log(`redis ${server.version} at ${server.own ? "its own server" : "REDIS_URL"} ${server.host}:${server.port}`)
  const ctx: BenchContext = { url: server.url, host: server.host, port: server.port, admin, scale, log }

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
        log(`${scenario.padEnd(9)} ${library.name.padEnd(24)} ${describe(exit.value)}  (${((now() - t) / 1000).toFixed(1)} s)`)
      } else {
        const error = exit.cause._tag === "Fail" ? describeFailure(exit.cause.error) : String(exit.cause)
        outcomes.push({ library: library.name, error })
        log(`${scenario.padEnd(9)} ${library.name.padEnd(24)} FAILED: ${error}`)
      }
    }
    return outcomes
  }

  try {
    let rawOutcome: BenchResults["raw"]
    if (runs("raw")) {
      const exit = await Effect.runPromiseExit(raw(ctx))
      rawOutcome = exit._tag === "Success" ? exit.value : { library: "raw", error: String(exit.cause) }
      log(`raw       ${JSON.stringify(rawOutcome)}`)
    }
    const fixed = (n: number, digits = 0) => n.toFixed(digits)
    const serialResults = await each("serial", serial, (r) =>
      `${fixed(r.opsPerSecond)} ops/s, p50 ${fixed(r.latency.p50, 1)} µs, p99 ${fixed(r.latency.p99, 1)} µs`)
    const distinctResults = await each("distinct", distinct, (r) =>
      `${fixed(r.opsPerSecond)} ops/s (${r.failures} failures)`)
    const handoffResults = await each("handoff", handoff, (r) =>
      `${fixed(r.acquisitionsPerSecond)} acq/s, wait p50 ${fixed(r.wait.p50, 1)} ms p99 ${
        fixed(r.wait.p99, 1)
      } ms, fairness ${fixed(r.fairness, 2)}, overlaps ${r.overlaps}`)
    const waitersResults = await each("waiters", waiters, (r) =>
      `${r.connectionsWaiting} conns, ${fixed(r.commandsPerAcquisition, 2)} cmds/acq, drain ${
        fixed(r.drainSeconds, 2)
      } s${r.capped ? " (capped)" : ""}, rss +${fixed(r.rssDeltaBytes / 2 ** 20, 1)} MiB`)
    const reentrantResults = await each("reentrant", reentrant, (r) =>
      r.reentrant
        ? `${fixed(r.nanosPerNested ?? NaN)} ns/nested, ${r.redisCommandsDuringLoop} redis commands`
        : r.nestedOutcome)

    const results: BenchResults = {
      date: new Date().toISOString(),
      command: "npm run bench",
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
      backgroundErrors: [...backgroundErrors],
      unhandledRejections: [...unhandledRejections]
    }
    process.stdout.write(`\n${renderTargets(results)}\n`)
    if (write) {
      writeFileSync(new URL("../docs/benchmarks.md", import.meta.url), renderMarkdown(results))
      writeFileSync(new URL("../docs/benchmarks.svg", import.meta.url), renderChart(results))
      log("wrote docs/benchmarks.md and docs/benchmarks.svg")
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

main().then(
  // Peers leave timers behind (redis-semaphore's refresh interval is unref'd, but not every
  // library is as careful): exit rather than wait for them.
  () => process.exit(),
  (error: unknown) => {
    log(`failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}`)
    process.exit(1)
  }
)
