/**
 * One campaign: start the servers (redis-server with AOF fsync'ed on every write, so that a restart
 * loses no acknowledged write and the fencing counter survives it), a proxy per worker and server,
 * the worker processes; run the nemesis' schedule; stop it, heal everything and let the workers run
 * a quiet phase; read the resources' final values; check the history.
 */
import { Redis } from "ioredis"
import { type ChildProcess, spawn } from "node:child_process"
import { createWriteStream, mkdirSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import pg from "pg"
import type { RedisServer } from "../test/support/redisServer.js"
import { startRedisServer } from "../test/support/redisServer.js"
import type { TcpProxy } from "../test/support/tcpProxy.js"
import { startTcpProxy } from "../test/support/tcpProxy.js"
import type { CheckResult } from "./checker.js"
import { check } from "./checker.js"
import type { BrokenVariant, WorkerConfig } from "./config.js"
import { namesOf } from "./config.js"
import type { Finals, HistoryRecord } from "./history.js"
import { backends, kinds } from "./kinds.js"
import { inflict, sleep } from "./nemesis.js"
import { parseValue } from "./resources.js"
import type { Fault, FaultKind } from "./schedule.js"
import { schedule } from "./schedule.js"

export interface CampaignOptions {
  readonly seed: number
  /** The whole campaign: nemesis, then the quiet phase. */
  readonly totalMs: number
  /** The quiet phase at the end, after the nemesis stopped. */
  readonly quietMs: number
  /** Every worker must get the lock within this long after the nemesis stopped. */
  readonly recoveryBoundMs: number
  readonly workers: number
  readonly kind: string
  readonly backend: string
  readonly leaseMs: number
  readonly waitMs: number
  readonly workMs: number
  readonly guardedShare: number
  readonly faults?: ReadonlyArray<FaultKind> | undefined
  readonly gapMs?: readonly [number, number] | undefined
  readonly broken: BrokenVariant | null
  /** PostgreSQL connection string. */
  readonly pgUrl: string
  /** Where the history and the workers' logs go. */
  readonly outDir: string
  readonly log: (line: string) => void
}

export interface CampaignResult {
  readonly run: string
  readonly options: CampaignOptions
  readonly schedule: ReadonlyArray<Fault>
  readonly records: ReadonlyArray<HistoryRecord>
  readonly finals: Finals
  readonly result: CheckResult
  /** Whether PostgreSQL took part. */
  readonly postgres: boolean
  readonly startMono: number
  readonly stopMono: number
  readonly endMono: number
}

const mono = (): number => Number(process.hrtime.bigint()) / 1e6
const workerScript = fileURLToPath(new URL("./worker.ts", import.meta.url))
const root = fileURLToPath(new URL("..", import.meta.url))

/** Open PostgreSQL and make the run's row; undefined (and why) when it is not reachable. */
const openPostgres = async (url: string, table: string, row: string) => {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5000 })
  client.on("error", () => {})
  try {
    await client.connect()
  } catch (error) {
    return { error: error instanceof Error ? error.message : String(error) } as const
  }
  // Two campaigns creating the table at once can collide on the catalog: try again.
  for (let attempt = 0;; attempt++) {
    try {
      await client.query(
        `CREATE TABLE IF NOT EXISTS ${table} (run text PRIMARY KEY, value integer NOT NULL, token bigint NOT NULL, writer text NOT NULL)`
      )
      break
    } catch (error) {
      if (attempt >= 5) throw error
      await sleep(100)
    }
  }
  await client.query(`INSERT INTO ${table} (run, value, token, writer) VALUES ($1, 0, 0, '')`, [row])
  return { client } as const
}

export const runCampaign = async (options: CampaignOptions): Promise<CampaignResult> => {
  const kind = kinds[options.kind]
  const backend = backends[options.backend]
  if (kind === undefined) throw new Error(`unknown --kind ${options.kind} (known: ${Object.keys(kinds).join(", ")})`)
  if (backend === undefined) {
    throw new Error(`unknown --backend ${options.backend} (known: ${Object.keys(backends).join(", ")})`)
  }
  const run = `${options.seed}-${process.pid}-${Date.now().toString(36)}`
  const names = namesOf(run)
  const { log } = options
  mkdirSync(options.outDir, { recursive: true })
  const history = createWriteStream(join(options.outDir, "history.jsonl"))
  const records: Array<HistoryRecord> = []
  const record = (r: HistoryRecord) => {
    records.push(r)
    history.write(JSON.stringify(r) + "\n")
  }

  const cleanups: Array<() => Promise<void>> = []
  const cleanup = async () => {
    for (const step of cleanups.reverse()) await step().catch(() => {})
  }
  try {
    const pgOpened = await openPostgres(options.pgUrl, names.pgTable, names.pgRow)
    const pgClient = "client" in pgOpened ? pgOpened.client : undefined
    if (pgClient === undefined) {
      const message = `PostgreSQL is not reachable at ${options.pgUrl} (${pgOpened.error})`
      if (process.env.CI === "true") throw new Error(`${message}: the campaign needs it under CI=true`)
      log(`!!! ${message}: the campaign runs with the Redis resource only`)
    } else {
      cleanups.push(async () => {
        await pgClient.query(`DELETE FROM ${names.pgTable} WHERE run = $1`, [names.pgRow])
        await pgClient.end()
      })
    }

    const servers: Array<RedisServer> = []
    for (let i = 0; i < backend.servers; i++) {
      const dir = mkdtempSync(join(tmpdir(), "effect-lock-chaos-"))
      cleanups.push(async () => rmSync(dir, { recursive: true, force: true }))
      const server = await startRedisServer({ args: ["--appendonly", "yes", "--appendfsync", "always", "--dir", dir] })
      if (!server.controlled) throw new Error("the campaign needs redis-server on the PATH (it restarts and pauses it)")
      cleanups.push(() => server.stop())
      servers.push(server)
    }
    const admins = servers.map((server) => {
      const admin = new Redis(server.url, { connectionName: "chaos-nemesis", maxRetriesPerRequest: 50 })
      admin.on("error", () => {})
      cleanups.push(async () => admin.disconnect())
      return admin
    })
    const proxies: Array<Array<TcpProxy>> = []
    for (let w = 0; w < options.workers; w++) {
      const mine: Array<TcpProxy> = []
      for (const server of servers) {
        const proxy = await startTcpProxy(server.port)
        cleanups.push(() => proxy.close())
        mine.push(proxy)
      }
      proxies.push(mine)
    }

    // --- workers -----------------------------------------------------------------------------------
    const children: Array<ChildProcess | undefined> = []
    const lives: Array<number> = []
    const holding: Array<string | undefined> = []
    let lastHolder: number | undefined
    let stopping = false
    const ready = new Set<number>()
    const readers = new Set<(w: number) => void>()

    const spawnWorker = (w: number) => {
      const life = lives[w] = (lives[w] ?? -1) + 1
      const urls = proxies[w]!.map((proxy) => `redis://127.0.0.1:${proxy.port}`)
      const config: WorkerConfig = {
        w,
        life,
        run,
        kind: options.kind,
        backend: options.backend,
        redisUrls: urls,
        resourceUrl: urls[0]!,
        pgUrl: pgClient === undefined ? null : options.pgUrl,
        leaseMs: options.leaseMs,
        waitMs: options.waitMs,
        workMs: options.workMs,
        guardedShare: options.guardedShare,
        broken: options.broken,
        seed: options.seed
      }
      const child = spawn(process.execPath, ["--import", "tsx", workerScript, JSON.stringify(config)], {
        cwd: root,
        stdio: ["ignore", "pipe", "pipe"]
      })
      children[w] = child
      record({ t: "spawn", w, life, pid: child.pid ?? -1, mono: mono() })
      const logFile = createWriteStream(join(options.outDir, `worker-${w}.log`), { flags: "a" })
      let buffered = ""
      child.stdout!.setEncoding("utf8")
      child.stdout!.on("data", (chunk: string) => {
        buffered += chunk
        let newline: number
        while ((newline = buffered.indexOf("\n")) >= 0) {
          const line = buffered.slice(0, newline)
          buffered = buffered.slice(newline + 1)
          if (!line.startsWith("{")) {
            logFile.write(line + "\n")
            continue
          }
          const r = JSON.parse(line) as HistoryRecord
          record(r)
          if (r.t === "invoke") ready.add(w)
          if (r.t === "acquired") {
            holding[w] = r.id
            lastHolder = w
          }
          if (r.t === "end") holding[w] = undefined
          // the last resource read: the worker is now between reading and writing
          if (r.t === "read" && r.res === "redis") { for (const reader of [...readers]) reader(w) }
        }
      })
      child.stderr!.on("data", (chunk: Buffer) => logFile.write(chunk))
      child.once("exit", (code, signal) => {
        record({ t: "exit", w, life, signal: signal ?? (code === null ? null : `code ${code}`), mono: mono() })
        holding[w] = undefined
        logFile.end()
        // A worker that died on its own (its defect is in the history) is started again.
        if (!stopping && children[w] === child && signal !== "SIGKILL") {
          setTimeout(() => {
            if (!stopping && children[w] === child) spawnWorker(w)
          }, 500)
        }
      })
    }
    const killWorker = (w: number) =>
      new Promise<void>((resolve) => {
        const child = children[w]
        if (child === undefined || child.exitCode !== null || child.signalCode !== null) return resolve()
        child.once("exit", () => resolve())
        child.kill("SIGCONT")
        child.kill("SIGKILL")
      })
    cleanups.push(async () => {
      stopping = true
      await Promise.all(children.map((_, w) => killWorker(w)))
    })

    for (let w = 0; w < options.workers; w++) spawnWorker(w)
    const readyBy = mono() + 300_000
    while (ready.size < options.workers) {
      if (mono() > readyBy) throw new Error("the workers did not start within 300 s")
      await sleep(50)
    }

    // --- nemesis -----------------------------------------------------------------------------------
    const nemesisMs = options.totalMs - options.quietMs
    const faults = schedule({
      seed: options.seed,
      nemesisMs,
      workers: options.workers,
      leaseMs: options.leaseMs,
      kinds: options.faults,
      gapMs: options.gapMs
    })
    const startMono = mono()
    log(`chaos: run ${run}, ${faults.length} faults scheduled over ${Math.round(nemesisMs / 1000)} s`)
    const targets = {
      servers,
      admins,
      proxies,
      holder: () => {
        if (lastHolder !== undefined && holding[lastHolder] !== undefined) return lastHolder
        const current = holding.findIndex((id) => id !== undefined)
        return current >= 0 ? current : undefined
      },
      nextReader: (ms: number) =>
        new Promise<number | undefined>((resolve) => {
          const done = (w: number | undefined) => {
            clearTimeout(timer)
            readers.delete(done)
            resolve(w)
          }
          const timer = setTimeout(() => done(undefined), ms)
          readers.add(done)
        }),
      signal: (w: number, signal: NodeJS.Signals) => void children[w]?.kill(signal),
      kill: killWorker,
      respawn: async (w: number) => spawnWorker(w),
      record,
      mono
    }
    for (const fault of faults) {
      const wait = startMono + fault.at - mono()
      if (wait > 0) await sleep(wait)
      await inflict(fault, targets)
    }
    const remaining = startMono + nemesisMs - mono()
    if (remaining > 0) await sleep(remaining)
    // Every fault heals itself; make sure nothing is left over.
    for (const child of children) child?.kill("SIGCONT")
    for (const server of servers) server.resume()
    for (const mine of proxies) for (const proxy of mine) proxy.heal()
    const stopMono = mono()
    record({ t: "nemesis-stop", mono: stopMono })
    log(`chaos: nemesis stopped; quiet phase of ${Math.round(options.quietMs / 1000)} s`)
    await sleep(options.quietMs)
    // A worker the nemesis started again shortly before may still be starting (tens of seconds on a
    // loaded machine): the quiet phase lasts until each has had the whole bound since its first operation.
    const startedBy = mono() + 300_000
    while (mono() < startedBy) {
      const last = Math.max(...children.map((_, w) => {
        const first = records.find((r) => r.t === "invoke" && r.w === w && r.mono > stopMono)
        return first === undefined ? Infinity : first.mono
      }))
      if (last + options.recoveryBoundMs <= mono()) break
      await sleep(200)
    }

    stopping = true
    await Promise.all(children.map((_, w) => killWorker(w)))
    const endMono = mono()

    // --- final state and check ---------------------------------------------------------------------
    const finals: { -readonly [K in keyof Finals]: Finals[K] } = {}
    if (pgClient !== undefined) {
      const row = await pgClient.query<{ value: number; writer: string; token: string }>(
        `SELECT value, writer, token::text AS token FROM ${names.pgTable} WHERE run = $1`,
        [names.pgRow]
      )
      const found = row.rows[0]
      if (found !== undefined) finals.pg = { n: found.value, writer: found.writer, token: found.token }
    }
    const admin = admins[0]!
    const raw = await admin.get(names.data)
    const fence = await admin.get(names.fence)
    finals.redis = { ...parseValue(raw), token: fence ?? "0" }
    await history.end()

    const result = check(records, finals, {
      recoveryBoundMs: options.recoveryBoundMs,
      workers: Array.from({ length: options.workers }, (_, w) => w)
    })
    return {
      run,
      options,
      schedule: faults,
      records,
      finals,
      result,
      postgres: pgClient !== undefined,
      startMono,
      stopMono,
      endMono
    }
  } finally {
    await cleanup()
  }
}
