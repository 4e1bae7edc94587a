/**
 * One contending process for multiprocess.test.ts. Usage:
 *
 *   node --import tsx test/redis/worker.ts <redis url> <lock key> <iterations> <counter key> [fibers]
 *
 * Prints "ready", waits for "go" on stdin, then takes the lock `iterations` times in all, from
 * `fibers` concurrent fibers (default 1; with more, releases hand the lock over between them while
 * other processes wait too), and inside it does a read-sleep-write of the counter. Prints one JSON line with every critical section's
 * interval (process.hrtime, i.e. CLOCK_MONOTONIC, which all processes of one Linux host share)
 * and fencing token.
 */
import { Effect } from "effect"
import { Redis } from "ioredis"
import { withLock } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"

const [url, key, iterations, counterKey, fibers = "1"] = process.argv.slice(2)
if (url === undefined || key === undefined || iterations === undefined || counterKey === undefined) {
  console.error("usage: worker.ts <redis url> <lock key> <iterations> <counter key>")
  process.exit(2)
}

interface Section {
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
  const counter = yield* Effect.acquireRelease(
    Effect.sync(() => new Redis(url)),
    (redis) => Effect.promise(() => redis.quit())
  )
  const redis = <A>(f: () => Promise<A>) => Effect.tryPromise(f)
  process.stdout.write("ready\n")
  yield* Effect.promise(() => go)
  const sections: Array<Section> = []
  const perFiber = Math.ceil(Number(iterations) / Number(fibers))
  const critical = withLock(key, (lease) =>
    Effect.gen(function*() {
      const start = process.hrtime.bigint()
      const read = Number((yield* redis(() => counter.get(counterKey))) ?? "0")
      yield* Effect.sleep(1 + Math.floor(Math.random() * 2))
      yield* redis(() => counter.set(counterKey, String(read + 1)))
      const end = process.hrtime.bigint()
      sections.push({ start: String(start), end: String(end), token: String(lease.fencingToken) })
    }), { lease: "5 seconds" })
  yield* Effect.forEach(
    Array.from({ length: Number(fibers) }, (_, f) => Math.min(perFiber, Number(iterations) - f * perFiber)),
    (count) => Effect.repeatN(critical, count - 1),
    { concurrency: "unbounded", discard: true }
  )
  process.stdout.write(JSON.stringify(sections) + "\n")
}).pipe(Effect.scoped, Effect.provide(RedisBackend.layer({ url })))

Effect.runPromise(program).then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
