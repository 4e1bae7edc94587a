/**
 * Four OS processes, each with its own cluster backend, contend for three locks whose slots are
 * served by the three different masters of a real cluster (started for this file), doing a
 * read-sleep-write of a counter next to each lock (same hash tag, same shard) inside it. Proves
 * mutual exclusion across processes on every shard: each counter ends exact (no lost update), the
 * critical sections of one key (timed on the host-wide monotonic clock) never overlap, and the
 * fencing tokens of one key strictly increase in the order the lock was granted.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { fileURLToPath } from "node:url"
import type { RedisCluster } from "../support/redisCluster.js"
import { startRedisCluster } from "../support/redisCluster.js"
import { clusterAdmin, skipCluster } from "./helpers.js"
import { masterMap } from "./workload.js"

const processes = 4
const iterations = 20
const fibersPerProcess = 2

const worker = fileURLToPath(new URL("./worker.ts", import.meta.url))
const root = fileURLToPath(new URL("../..", import.meta.url))

interface Section {
  readonly process: number
  readonly key: string
  readonly start: bigint
  readonly end: bigint
  readonly token: bigint
}

interface Worker {
  readonly child: ChildProcess
  readonly go: () => Promise<ReadonlyArray<Section>>
}

const startWorker = (index: number, nodes: string, keys: ReadonlyArray<string>) =>
  Effect.acquireRelease(
    Effect.async<Worker, Error>((resume) => {
      const child = spawn(
        process.execPath,
        ["--import", "tsx", worker, nodes, keys.join(","), String(iterations), String(fibersPerProcess)],
        { cwd: root, stdio: ["pipe", "pipe", "pipe"] }
      )
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
              return (JSON.parse(line) as Array<{ key: string; start: string; end: string; token: string }>).map((
                s
              ) => ({
                process: index,
                key: s.key,
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

describe.skipIf(skipCluster())("several processes on a Redis Cluster", () => {
  let cluster: RedisCluster
  beforeAll(async () => {
    cluster = await startRedisCluster()
  }, 60_000)
  afterAll(() => cluster?.stop())

  it.scopedLive(
    `${processes} processes × ${fibersPerProcess} fibers × 3 keys on 3 shards, ${iterations} sections per key and process: exact counters, no overlap, increasing tokens`,
    () =>
      Effect.gen(function*() {
        const masterOf = masterMap(yield* Effect.promise(() => cluster.topology()))
        const byMaster = new Map<string, string>()
        for (let i = 0; byMaster.size < 3; i++) {
          const key = `{mpc:${process.pid}:${i}}`
          if (!byMaster.has(masterOf(key))) byMaster.set(masterOf(key), key)
        }
        const keys = Array.from(byMaster.values())
        const nodes = cluster.nodes.map((n) => `${n.host}:${n.port}`).join(",")
        const workers = yield* Effect.all(
          Array.from({ length: processes }, (_, i) => startWorker(i, nodes, keys)),
          { concurrency: "unbounded" }
        )
        const results = yield* Effect.promise(() => Promise.all(workers.map((w) => w.go())))
        const all = results.flat()
        const admin = yield* clusterAdmin(cluster)
        for (const key of keys) {
          const counter = yield* Effect.promise(() => admin.get(`${key}:counter`))
          assert.strictEqual(counter, String(processes * iterations), `no lost update on ${key}`)
          const sections = all.filter((s) => s.key === key).sort((a, b) =>
            a.start < b.start ? -1 : a.start > b.start ? 1 : 0
          )
          assert.strictEqual(sections.length, processes * iterations)
          assert.strictEqual(new Set(sections.map((s) => s.process)).size, processes)
          for (let i = 1; i < sections.length; i++) {
            const [previous, current] = [sections[i - 1]!, sections[i]!]
            assert.isTrue(current.start > previous.end, `${key}: section ${i} overlaps section ${i - 1}`)
            assert.isTrue(current.token > previous.token, `${key}: token ${current.token} after ${previous.token}`)
          }
          const handOffs = sections.filter((s, i) => i > 0 && s.process !== sections[i - 1]!.process).length
          assert.isAbove(handOffs, processes, `${key} was contended across processes`)
          assert.strictEqual(yield* Effect.promise(() => admin.exists(key)), 0, `${key} released at the end`)
        }
      }),
    120_000
  )
})
