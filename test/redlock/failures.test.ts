/**
 * Redlock on real redis-servers when nodes fail: a minority down or paused changes nothing that a
 * program can see; a majority down fails acquisitions with a typed error and loses held locks.
 */
import { assert, describe, it } from "@effect/vitest"
import { Duration, Effect, Exit, Fiber, Option } from "effect"
import { Lock, LockBackend, withLock } from "../../src/index.js"
import * as RedlockBackend from "../../src/RedlockBackend.js"
import { admin, cmd } from "../redis/helpers.js"
import { skipRedis } from "../support/redisServer.js"
import { redisServers } from "./helpers.js"

const skip = skipRedis(true)
let seq = 0
const freshKey = (label: string) => `redlock:${label}:${process.pid}:${++seq}`

/** Three servers and a Redlock backend over them, in the test's scope. */
const threeNodes = (options: Omit<RedlockBackend.RedlockBackendOptions, "nodes"> = {}) =>
  Effect.gen(function*() {
    const servers = yield* redisServers(3)
    const backend = yield* RedlockBackend.make({ ...options, nodes: servers.map((s) => s.url) })
    return { servers, backend }
  })

/** A read-yield-write counter over `n` contending fibers: exact only under mutual exclusion. */
const contend = (key: string, n: number) =>
  Effect.gen(function*() {
    let counter = 0
    let inside = 0
    let maxInside = 0
    const tokens: Array<bigint> = []
    const worker = withLock(key, (lease) =>
      Effect.gen(function*() {
        inside++
        maxInside = Math.max(maxInside, inside)
        tokens.push(lease.fencingToken)
        const read = counter
        yield* Effect.sleep(2)
        counter = read + 1
        inside--
      }), { lease: "5 seconds", wait: "20 seconds" })
    yield* Effect.all(Array.from({ length: n }, () => worker), { concurrency: "unbounded" })
    return { counter, maxInside, tokens }
  })

const increasing = (tokens: ReadonlyArray<bigint>) => tokens.every((t, i) => i === 0 || t > tokens[i - 1]!)

describe.skipIf(skip)("RedlockBackend when nodes fail", () => {
  it.scopedLive("one node of three killed: locks stay available and exclusive, renewals go on", () =>
    Effect.gen(function*() {
      const { backend, servers } = yield* threeNodes()
      const key = freshKey("minority")
      const run = <A, E>(effect: Effect.Effect<A, E, LockBackend>) =>
        Effect.provideService(effect, LockBackend, backend)
      const before = yield* run(contend(key, 5))
      servers[0]!.kill("SIGKILL")
      const after = yield* run(contend(key, 10))
      assert.strictEqual(after.counter, 10)
      assert.strictEqual(after.maxInside, 1)
      assert.isTrue(increasing([...before.tokens, ...after.tokens]), "tokens go on increasing")
      // A hold longer than its lease lives on renewals that reach two nodes of three.
      const done = yield* run(withLock(key, Effect.as(Effect.sleep(900), "done"), { lease: "300 millis" }))
      assert.strictEqual(done, "done")
      assert.isFalse(yield* run(Lock.isLocked(key)))
    }))

  it.scopedLive("one node of three paused (SIGSTOP): nobody waits for it", () =>
    Effect.gen(function*() {
      // A budget far longer than the test's timeout: any wait for the paused node would show.
      const { backend, servers } = yield* threeNodes({ commandTimeout: "30 seconds" })
      const key = freshKey("paused")
      servers[2]!.pause()
      const result = yield* contend(key, 5).pipe(
        Effect.provideService(LockBackend, backend),
        Effect.timeout("20 seconds")
      )
      servers[2]!.resume()
      assert.strictEqual(result.counter, 5)
      assert.strictEqual(result.maxInside, 1)
    }), 30_000)

  it.scopedLive("two nodes of three killed: acquisition fails with a LockBackendError, a held lock is lost", () =>
    Effect.gen(function*() {
      const { backend, servers } = yield* threeNodes({ commandTimeout: "300 millis" })
      const key = freshKey("majority")
      const run = <A, E>(effect: Effect.Effect<A, E, LockBackend>) =>
        Effect.provideService(effect, LockBackend, backend)
      const holder = yield* Effect.fork(run(withLock(key, Effect.never, { lease: "600 millis" })))
      yield* Effect.sleep(100)
      servers[0]!.kill("SIGKILL")
      servers[1]!.kill("SIGKILL")
      const exit = yield* Fiber.await(holder)
      assert.isTrue(Exit.isFailure(exit))
      const lost = yield* Effect.flip(exit)
      assert.strictEqual(lost._tag, "LockLostError")
      if (lost._tag === "LockLostError") assert.strictEqual(lost.reason, "renewal-failed")

      const error = yield* Effect.flip(run(withLock(freshKey("after"), Effect.void, { wait: "1 second" })))
      assert.strictEqual(error._tag, "LockBackendError")
      if (error._tag === "LockBackendError") {
        assert.strictEqual(error.backend, "redlock")
        assert.strictEqual(error.operation, "acquire")
        assert.include(error.message, "only 1 of 3 Redlock nodes answered, a quorum is 2")
        assert.include(error.message, `127.0.0.1:${servers[0]!.port}`)
      }
    }))

  it.scopedLive("fencing tokens stay monotonic when the nodes' counters differ: each grant raises them all", () =>
    Effect.gen(function*() {
      const { backend, servers } = yield* threeNodes({ commandTimeout: "1 second" })
      const key = freshKey("tokens")
      const tokenKey = `redisson_lock_token:{${key}}`
      const node0 = yield* admin(servers[0]!.url)
      const node1 = yield* admin(servers[1]!.url)
      const node2 = yield* admin(servers[2]!.url)
      const take = withLock(key, (lease) => Effect.succeed(lease.fencingToken)).pipe(
        Effect.provideService(LockBackend, backend)
      )
      yield* cmd(node0, "SET", tokenKey, "100")
      // Node 2 answers nothing: the grant's quorum is nodes 0 and 1.
      servers[2]!.pause()
      const first = yield* take
      servers[2]!.resume()
      assert.strictEqual(first, 101n, "the largest of the quorum's counters")
      // Every node was raised to it (node 2 once it ran what it was sent while paused).
      assert.strictEqual(yield* cmd<string>(node1, "GET", tokenKey), "101")
      assert.strictEqual(yield* cmd<string>(node2, "GET", tokenKey), "101")
      // Without the raise, nodes 1 and 2 would hold 1 and 0, and this token would go back to 2.
      servers[0]!.kill("SIGKILL")
      const second = yield* take
      assert.isTrue(second > first, `${second} > ${first}`)
    }))

  it.scopedLive("a lock is seen where a quorum holds it", () =>
    Effect.gen(function*() {
      const { backend, servers } = yield* threeNodes()
      const key = freshKey("inspect")
      const node0 = yield* admin(servers[0]!.url)
      // A lock on one node of three is no lock.
      yield* cmd(node0, "HSET", key, "someone:1", "1")
      yield* cmd(node0, "PEXPIRE", key, "10000")
      const run = <A, E>(effect: Effect.Effect<A, E, LockBackend>) =>
        Effect.provideService(effect, LockBackend, backend)
      assert.isTrue(Option.isNone(yield* run(Lock.inspect(key))))
      const token = yield* run(withLock(key, (lease) => Effect.succeed(lease.fencingToken), { wait: "1 second" }))
      assert.isTrue(token > 0n, "two free nodes of three are a quorum")
    }))

  it.scopedLive(
    "a hold taken in the scope that built the backend is released when that scope closes",
    () =>
      Effect.gen(function*() {
        const servers = yield* redisServers(3)
        const nodes = servers.map((s) => s.url)
        const key = freshKey("same-scope")
        // The hold's release is a finaliser of the scope whose closing also ends the backend: its
        // calls to the nodes must still run (they once forked into the closing scope and hung).
        yield* Effect.scoped(Effect.gen(function*() {
          const backend = yield* RedlockBackend.make({ nodes })
          yield* Lock.acquire(key, { lease: "30 seconds" }).pipe(Effect.provideService(LockBackend, backend))
        }))
        const other = yield* RedlockBackend.make({ nodes })
        assert.isFalse(yield* Lock.isLocked(key).pipe(Effect.provideService(LockBackend, other)), "released")
      }),
    30_000
  )

  it.effect("bad options fail with LockOptionsError and connect nowhere", () =>
    Effect.gen(function*() {
      const cases = [
        ["nodes", { nodes: [] }],
        ["commandTimeout", { nodes: ["redis://127.0.0.1:1"], commandTimeout: 0 }],
        ["commandTimeout", { nodes: ["redis://127.0.0.1:1"], commandTimeout: 1.5 }],
        ["commandTimeout", { nodes: ["redis://127.0.0.1:1"], commandTimeout: Duration.infinity }]
      ] as const
      for (const [field, options] of cases) {
        const error = yield* Effect.flip(Effect.scoped(RedlockBackend.make(options)))
        assert.strictEqual(error._tag, "LockOptionsError", field)
        if (error._tag === "LockOptionsError") assert.strictEqual(error.field, field)
      }
    }))
})
