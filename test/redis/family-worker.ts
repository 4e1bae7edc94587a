/**
 * One contending process for family-multiprocess.test.ts. Usage:
 *
 *   node --import tsx test/redis/family-worker.ts <redis url> semaphore <iterations> <fibers> <permits>
 *   node --import tsx test/redis/family-worker.ts <redis url> transfer <iterations> <fibers> <accounts>
 *   node --import tsx test/redis/family-worker.ts <redis url> rw <iterations> <fibers> <writer share in %>
 *   node --import tsx test/redis/family-worker.ts <redis url> fair <iterations> <fibers> 0
 *
 * Prints "ready", waits for "go" on stdin, then runs `iterations` critical sections in all, from
 * `fibers` concurrent fibers, and prints one JSON line with what it saw.
 *
 * - semaphore: `Semaphore.withPermits("mp:pool", n, ...)` with n of 1 or 2 out of `permits`; inside,
 *   INCRBY a shared in-use counter by n, sleep, DECRBY it. A counter above `permits` seen by any
 *   holder is a violation.
 * - transfer: `MultiLock.withLocks` over two random accounts of `accounts` (`mp:account:<i>`, in a
 *   random order; the locks are `mp:lock:account:<i>`); inside, a read-sleep-write of both balances. The test checks that the total is
 *   conserved.
 * - rw: `ReadWriteLock` on "mp:rw": a section is a write with the given probability, else a read.
 *   Readers INCR/DECR `mp:readers` around their sleep and count a violation when `mp:writers` is
 *   above 0; writers INCR/DECR `mp:writers`, count a violation when they see another writer or any
 *   reader, and do a read-sleep-write of `mp:counter` (a lost update shows in the total).
 * - fair: `FairLock.withLock("mp:fair", ...)`: INCR/DECR `mp:inside` (a violation above 1) around a
 *   read-sleep-write of `mp:counter`.
 */
import { Effect } from "effect"
import { Redis } from "ioredis"
import { FairLock, MultiLock, ReadWriteLock, Semaphore } from "../../src/index.js"
import * as RedisBackend from "../../src/RedisBackend.js"

const [url, mode, iterations, fibers, size] = process.argv.slice(2)
const modes = ["semaphore", "transfer", "rw", "fair"]
if (url === undefined || mode === undefined || !modes.includes(mode) || size === undefined) {
  console.error("usage: family-worker.ts <redis url> semaphore|transfer|rw|fair <iterations> <fibers> <size>")
  process.exit(2)
}

const go = new Promise<void>((resolve) => {
  process.stdin.setEncoding("utf8")
  process.stdin.on("data", (chunk: string) => {
    if (chunk.includes("go")) resolve()
  })
})

const random = (n: number) => Math.floor(Math.random() * n)

const program = Effect.gen(function*() {
  const data = yield* Effect.acquireRelease(
    Effect.sync(() => new Redis(url)),
    (redis) => Effect.promise(() => redis.quit())
  )
  const redis = <A>(f: () => Promise<A>) => Effect.tryPromise(f)
  process.stdout.write("ready\n")
  yield* Effect.promise(() => go)
  let violations = 0
  let maxInUse = 0
  let done = 0
  const permits = Number(size)
  const semaphoreSection = Effect.suspend(() => {
    const n = 1 + random(2)
    return Semaphore.withPermits(
      "mp:pool",
      n,
      Effect.gen(function*() {
        const inUse = yield* redis(() => data.incrby("mp:in-use", n))
        maxInUse = Math.max(maxInUse, inUse)
        if (inUse > permits) violations++
        yield* Effect.sleep(1 + random(3))
        yield* redis(() => data.decrby("mp:in-use", n))
        done++
      }),
      { permits, lease: "5 seconds" }
    )
  })
  const transferSection = Effect.suspend(() => {
    const accounts = Number(size)
    const from = random(accounts)
    const to = (from + 1 + random(accounts - 1)) % accounts
    const amount = 1 + random(10)
    const [a, b] = [`mp:account:${from}`, `mp:account:${to}`]
    const locks = [`mp:lock:account:${from}`, `mp:lock:account:${to}`]
    return MultiLock.withLocks(
      Math.random() < 0.5 ? locks : locks.reverse(),
      Effect.gen(function*() {
        const source = Number(yield* redis(() => data.get(a)))
        const target = Number(yield* redis(() => data.get(b)))
        yield* Effect.sleep(1 + random(2))
        yield* redis(() => data.set(a, String(source - amount)))
        yield* redis(() => data.set(b, String(target + amount)))
        done++
      }),
      { lease: "5 seconds" }
    )
  })
  let writes = 0
  const increment = Effect.gen(function*() {
    const value = Number(yield* redis(() => data.get("mp:counter")))
    yield* Effect.sleep(1 + random(2))
    yield* redis(() => data.set("mp:counter", String(value + 1)))
    writes++
  })
  const rwSection = Effect.suspend(() =>
    random(100) < Number(size)
      ? ReadWriteLock.withWriteLock(
        "mp:rw",
        Effect.gen(function*() {
          const writers = yield* redis(() => data.incr("mp:writers"))
          const readers = Number(yield* redis(() => data.get("mp:readers")))
          if (writers !== 1 || readers !== 0) violations++
          yield* increment
          yield* redis(() => data.decr("mp:writers"))
          done++
        }),
        { lease: "5 seconds" }
      )
      : ReadWriteLock.withReadLock(
        "mp:rw",
        Effect.gen(function*() {
          const readers = yield* redis(() => data.incr("mp:readers"))
          maxInUse = Math.max(maxInUse, readers)
          if (Number(yield* redis(() => data.get("mp:writers"))) !== 0) violations++
          yield* Effect.sleep(1 + random(3))
          if (Number(yield* redis(() => data.get("mp:writers"))) !== 0) violations++
          yield* redis(() => data.decr("mp:readers"))
          done++
        }),
        { lease: "5 seconds" }
      )
  )
  const fairSection = FairLock.withLock(
    "mp:fair",
    Effect.gen(function*() {
      const inside = yield* redis(() => data.incr("mp:inside"))
      maxInUse = Math.max(maxInUse, inside)
      if (inside !== 1) violations++
      yield* increment
      yield* redis(() => data.decr("mp:inside"))
      done++
    }),
    { lease: "5 seconds" }
  )
  const section = mode === "semaphore"
    ? semaphoreSection
    : mode === "transfer"
    ? transferSection
    : mode === "rw"
    ? rwSection
    : fairSection
  const perFiber = Math.ceil(Number(iterations) / Number(fibers))
  yield* Effect.forEach(
    Array.from({ length: Number(fibers) }, (_, f) => Math.min(perFiber, Number(iterations) - f * perFiber)),
    (count) => Effect.repeatN(section, count - 1),
    { concurrency: "unbounded", discard: true }
  )
  process.stdout.write(JSON.stringify({ violations, maxInUse, done, writes }) + "\n")
}).pipe(Effect.scoped, Effect.provide(RedisBackend.layer({ url })))

Effect.runPromise(program).then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
