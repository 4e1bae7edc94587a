/**
 * One contending process for test/cluster/multiprocess.test.ts. Usage:
 *
 *   node --import tsx test/cluster/worker.ts <host:port,...> <key,...> <iterations> <fibers>
 *
 * Prints "ready", waits for "go" on stdin, then, for every lock key at once, takes the lock
 * `iterations` times in all from `fibers` concurrent fibers and inside it does a read-sleep-write
 * of the counter `<key>:counter` (same hash tag, same shard) on its own cluster client. Prints one
 * JSON line with every critical section: key, interval (process.hrtime, i.e. CLOCK_MONOTONIC,
 * which all processes of one Linux host share) and fencing token.
 */
import { Effect } from "effect"
import { Cluster } from "ioredis"
import { withLock } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"

const [nodeList, keyList, iterations, fibers] = process.argv.slice(2)
if (nodeList === undefined || keyList === undefined || iterations === undefined || fibers === undefined) {
  console.error("usage: worker.ts <host:port,...> <key,...> <iterations> <fibers>")
  process.exit(2)
}
const nodes = nodeList.split(",").map((entry) => {
  const [host = "127.0.0.1", port = "0"] = entry.split(":")
  return { host, port: Number(port) }
})
const keys = keyList.split(",")

interface Section {
  readonly key: string
  readonly start: string
  readonly end: string
  readonly token: string
}

const go = new Promise<void>((resolve) => {
  process.stdin.setEncoding("utf8")
  process.stdin.on("data", (chunk: string) => {
    if (chunk.includes("go")) resolve()
  })
})

const program = Effect.gen(function*() {
  const counters = yield* Effect.acquireRelease(
    Effect.sync(() => new Cluster(nodes, { slotsRefreshInterval: 1_000 })),
    (cluster) => Effect.promise(() => cluster.quit())
  )
  const redis = <A>(f: () => Promise<A>) => Effect.tryPromise(f)
  yield* Effect.promise(() => counters.ping())
  process.stdout.write("ready\n")
  yield* Effect.promise(() => go)
  const sections: Array<Section> = []
  const perFiber = Math.ceil(Number(iterations) / Number(fibers))
  const critical = (key: string) =>
    withLock(key, (lease) =>
      Effect.gen(function*() {
        const start = process.hrtime.bigint()
        const read = Number((yield* redis(() => counters.get(`${key}:counter`))) ?? "0")
        yield* Effect.sleep(1 + Math.floor(Math.random() * 2))
        yield* redis(() => counters.set(`${key}:counter`, String(read + 1)))
        const end = process.hrtime.bigint()
        sections.push({ key, start: String(start), end: String(end), token: String(lease.fencingToken) })
      }), { lease: "5 seconds" })
  const counts = Array.from(
    { length: Number(fibers) },
    (_, f) => Math.min(perFiber, Number(iterations) - f * perFiber)
  )
  yield* Effect.forEach(
    keys.flatMap((key) => counts.map((count) => ({ key, count }))),
    ({ count, key }) => Effect.repeatN(critical(key), count - 1),
    { concurrency: "unbounded", discard: true }
  )
  process.stdout.write(JSON.stringify(sections) + "\n")
}).pipe(Effect.scoped, Effect.provide(RedisBackend.layer({ cluster: { nodes } })))

Effect.runPromise(program).then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
