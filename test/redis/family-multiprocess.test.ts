/**
 * Four OS processes share a semaphore and a set of accounts through one Redis:
 *
 * - a pool of 3 permits, requests of 1 or 2, an in-use counter kept in Redis that no holder may
 *   ever see above 3;
 * - transfers between random pairs of 20 accounts under `MultiLock` (the pair passed in a random
 *   order), each a read-sleep-write of both balances: the total is conserved, and every process
 *   finishes (no deadlock);
 * - readers and writers of one `ReadWriteLock` name (a quarter of the sections write): no writer
 *   ever with another writer or a reader inside, readers really share, no lost update;
 * - one `FairLock` name: never two inside, no lost update, every process finishes.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { redisServer, skipRedis } from "../support/redisServer.js"
import { admin, cmd } from "./helpers.js"

const processes = 4
const fibers = 3
const iterations = 20

const worker = fileURLToPath(new URL("./family-worker.ts", import.meta.url))
const root = fileURLToPath(new URL("../..", import.meta.url))

interface Report {
  readonly violations: number
  readonly maxInUse: number
  readonly done: number
  readonly writes: number
}

interface Worker {
  readonly child: ChildProcess
  readonly go: () => Promise<Report>
}

const startWorker = (index: number, args: ReadonlyArray<string>) =>
  Effect.acquireRelease(
    Effect.async<Worker, Error>((resume) => {
      const child = spawn(process.execPath, ["--import", "tsx", worker, ...args], {
        cwd: root,
        stdio: ["pipe", "pipe", "pipe"]
      })
      let stdout = ""
      let stderr = ""
      let ready = false
      child.stderr.on("data", (chunk) => (stderr += chunk))
      const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)))
      child.stdout.on("data", (chunk) => {
        stdout += chunk
        if (!ready && stdout.includes("ready\n")) {
          ready = true
          resume(Effect.succeed({
            child,
            go: async () => {
              child.stdin.write("go\n")
              const code = await exited
              if (code !== 0) throw new Error(`worker ${index} exited with ${code}: ${stderr}`)
              const line = stdout.split("\n").find((l) => l.startsWith("{"))
              if (line === undefined) throw new Error(`worker ${index} printed no result: ${stdout} ${stderr}`)
              return JSON.parse(line) as Report
            }
          }))
        }
      })
      child.once("exit", (code) => {
        if (!ready) resume(Effect.fail(new Error(`worker ${index} exited with ${code} before it was ready: ${stderr}`)))
      })
      return Effect.sync(() => child.kill("SIGKILL"))
    }),
    (handle) => Effect.sync(() => handle.child.kill("SIGKILL"))
  )

const runAll = (args: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const workers = yield* Effect.all(
      Array.from({ length: processes }, (_, i) => startWorker(i, args)),
      { concurrency: "unbounded" }
    )
    return yield* Effect.promise(() => Promise.all(workers.map((w) => w.go())))
  })

describe.skipIf(skipRedis())("the lock family across processes", () => {
  it.scopedLive(
    `Semaphore: ${processes} processes × ${fibers} fibers share 3 permits, never more than 3 in use`,
    () =>
      Effect.gen(function*() {
        const server = yield* redisServer()
        const reports = yield* runAll([server.url, "semaphore", String(iterations), String(fibers), "3"])
        const redis = yield* admin(server.url)
        assert.strictEqual(reports.reduce((n, r) => n + r.violations, 0), 0, "no holder saw more than 3 in use")
        assert.strictEqual(reports.reduce((n, r) => n + r.done, 0), processes * iterations)
        assert.isAtMost(Math.max(...reports.map((r) => r.maxInUse)), 3)
        assert.isAtLeast(Math.max(...reports.map((r) => r.maxInUse)), 2, "the pool was really shared")
        assert.strictEqual(yield* cmd(redis, "GET", "mp:in-use"), "0")
        assert.strictEqual(yield* cmd(redis, "GET", "mp:pool"), "3", "every permit back")
        assert.strictEqual(yield* cmd(redis, "ZCARD", "{mp:pool}:timeout"), 0)
      }),
    240_000
  )

  it.scopedLive(
    `MultiLock: ${processes} processes × ${fibers} fibers transfer between 20 accounts, total conserved`,
    () =>
      Effect.gen(function*() {
        const server = yield* redisServer()
        const redis = yield* admin(server.url)
        for (let i = 0; i < 20; i++) yield* cmd(redis, "SET", `mp:account:${i}`, 1000)
        const reports = yield* runAll([server.url, "transfer", String(iterations), String(fibers), "20"])
        assert.strictEqual(reports.reduce((n, r) => n + r.done, 0), processes * iterations, "every transfer done")
        let total = 0
        for (let i = 0; i < 20; i++) total += Number(yield* cmd<string>(redis, "GET", `mp:account:${i}`))
        assert.strictEqual(total, 20 * 1000, "no lost update: the total is conserved")
        for (let i = 0; i < 20; i++) assert.strictEqual(yield* cmd(redis, "EXISTS", `mp:lock:account:${i}`), 0)
      }),
    240_000
  )

  it.scopedLive(
    `ReadWriteLock: ${processes} processes × ${fibers} fibers read and write one name, never a writer with anyone`,
    () =>
      Effect.gen(function*() {
        const server = yield* redisServer()
        const redis = yield* admin(server.url)
        const reports = yield* runAll([server.url, "rw", String(iterations), String(fibers), "25"])
        const writes = reports.reduce((n, r) => n + r.writes, 0)
        assert.strictEqual(reports.reduce((n, r) => n + r.violations, 0), 0, "no writer with anyone else inside")
        assert.strictEqual(reports.reduce((n, r) => n + r.done, 0), processes * iterations)
        assert.isAbove(writes, 0)
        assert.isAbove(Math.max(...reports.map((r) => r.maxInUse)), 1, "readers really shared")
        assert.strictEqual(Number(yield* cmd<string>(redis, "GET", "mp:counter")), writes, "no lost update")
        assert.strictEqual(yield* cmd(redis, "EXISTS", "mp:rw"), 0)
        assert.deepStrictEqual(yield* cmd(redis, "KEYS", "{mp:rw}:*"), [], "no timeout key or writer mark left")
      }),
    240_000
  )

  it.scopedLive(
    `FairLock: ${processes} processes × ${fibers} fibers on one name, never two inside`,
    () =>
      Effect.gen(function*() {
        const server = yield* redisServer()
        const redis = yield* admin(server.url)
        const reports = yield* runAll([server.url, "fair", String(iterations), String(fibers), "0"])
        assert.strictEqual(reports.reduce((n, r) => n + r.violations, 0), 0, "never two inside")
        assert.strictEqual(reports.reduce((n, r) => n + r.done, 0), processes * iterations)
        assert.strictEqual(Number(yield* cmd<string>(redis, "GET", "mp:counter")), processes * iterations)
        assert.strictEqual(yield* cmd(redis, "EXISTS", "mp:fair"), 0)
      }),
    240_000
  )
})
