/**
 * Four OS processes contend for one key, each doing a read-sleep-write of a counter in Redis
 * inside the lock. Proves mutual exclusion across processes: the counter ends exact, the
 * critical sections (timed on the host-wide monotonic clock) never overlap, and fencing tokens
 * strictly increase in the order the lock was granted.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import { redisServer, skipRedis } from "../support/redisServer.js"
import { admin, cmd } from "./helpers.js"

const processes = 4
const iterations = 40
// Two fibers per process: a release hands the lock to the other local fiber when no other process
// waits on the channel, and notifies everybody when one does.
const fibersPerProcess = 2

const worker = fileURLToPath(new URL("./worker.ts", import.meta.url))
const root = fileURLToPath(new URL("../..", import.meta.url))

interface Section {
  readonly process: number
  readonly start: bigint
  readonly end: bigint
  readonly token: bigint
}

interface Worker {
  readonly child: ChildProcess
  /** Let the worker start contending, and await the sections it recorded. */
  readonly go: () => Promise<ReadonlyArray<Section>>
}

/** Start a worker; resolves once it is ready, with a function that starts it and awaits its output. */
const startWorker = (index: number, url: string) =>
  Effect.acquireRelease(
    Effect.async<Worker, Error>((resume) => {
      const child = spawn(process.execPath, [
        "--import",
        "tsx",
        worker,
        url,
        "mp:lock",
        String(iterations),
        "mp:counter",
        String(fibersPerProcess)
      ], {
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
              const line = stdout.split("\n").find((l) => l.startsWith("["))
              if (line === undefined) throw new Error(`worker ${index} printed no result: ${stdout} ${stderr}`)
              return (JSON.parse(line) as Array<{ start: string; end: string; token: string }>).map((s) => ({
                process: index,
                start: BigInt(s.start),
                end: BigInt(s.end),
                token: BigInt(s.token)
              }))
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

describe.skipIf(skipRedis())("several processes on one key", () => {
  it.scopedLive(`${processes} processes × ${fibersPerProcess} fibers, ${iterations} critical sections per process: exact counter, no overlap, increasing tokens`, () =>
    Effect.gen(function*() {
      const server = yield* redisServer()
      const workers = yield* Effect.all(
        Array.from({ length: processes }, (_, i) => startWorker(i, server.url)),
        { concurrency: "unbounded" }
      )
      const results = yield* Effect.promise(() => Promise.all(workers.map((w) => w.go())))
      const sections = results.flat().sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0))

      const redis = yield* admin(server.url)
      assert.strictEqual(yield* cmd(redis, "GET", "mp:counter"), String(processes * iterations), "no lost update")
      assert.strictEqual(sections.length, processes * iterations)
      assert.strictEqual(new Set(sections.map((s) => s.process)).size, processes)
      for (let i = 1; i < sections.length; i++) {
        const [previous, current] = [sections[i - 1]!, sections[i]!]
        assert.isTrue(
          current.start > previous.end,
          `section ${i} (process ${current.process}) overlaps section ${i - 1} (process ${previous.process})`
        )
        assert.isTrue(current.token > previous.token, `token ${current.token} after ${previous.token}`)
      }
      // Sections from different processes interleaved: the lock really was contended.
      const handOffs = sections.filter((s, i) => i > 0 && s.process !== sections[i - 1]!.process).length
      assert.isAbove(handOffs, processes)
      assert.strictEqual(yield* cmd(redis, "EXISTS", "mp:lock"), 0, "released at the end")
    }))
})
