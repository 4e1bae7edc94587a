/**
 * Redlock on five real redis-servers, under the faults the Redis documentation and the Redlock
 * debate talk about (issue 13, part 4). Each test asserts an outcome, never a duration: what a
 * program can see (who holds the lock, which writes a fenced resource took), and the tokens.
 *
 * - A minority (2 of 5) killed or paused: the lock stays available and exclusive.
 * - A node of the holder's majority restarted without persistence: two clients both hold the lock,
 *   as the Redis documentation predicts; restarted only after a delay longer than the lease, the
 *   first holder has lost the lock before the node is back, and nobody holds it twice.
 * - A holder paused past its lease (an OS process stopped with SIGSTOP): its late write is refused
 *   by fencing.
 * - A node's wall clock stepped forward (libfaketime): the lock expires there at once; with the
 *   holder on that node and two others only, a second client gets the lock (Kleppmann's case), and
 *   fencing, whose counter the node kept, refuses the first holder's writes.
 *
 * The holder's majority is made by hand: nodes D and E (indices 3 and 4) hold the lock for a
 * third owner when the first client acquires, as after a split vote, and let go right after; so
 * the first client holds on A, B, C only.
 */
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Option, Schedule, Scope } from "effect"
import type { Redis } from "ioredis"
import { Fencing, Lock, LockBackend, withLock } from "../../src/index.js"
import type { LockOptions } from "../../src/Lock.js"
import type { LockBackendShape } from "../../src/LockBackend.js"
import * as RedlockBackend from "../../src/RedlockBackend.js"
import { adminClient, cmd, eventually, faultScenario, startWorker } from "../faults/support.js"
import type { FakeClock } from "../support/faketime.js"
import { fakeClock, skipFaketime } from "../support/faketime.js"
import type { RedisServer } from "../support/redisServer.js"
import { redisServer, skipRedis } from "../support/redisServer.js"

const skip = skipRedis(true)
let seq = 0
const freshKey = (label: string) => `redlock5:${label}:${process.pid}:${++seq}`
const tokenKeyOf = (key: string) => `redisson_lock_token:{${key}}`

interface Cluster {
  readonly servers: ReadonlyArray<RedisServer>
  readonly admins: ReadonlyArray<Redis>
  readonly urls: ReadonlyArray<string>
  /** A Redlock client of its own (its own connections), living as long as the test. */
  readonly client: (options?: Omit<RedlockBackend.RedlockBackendOptions, "nodes">) => Effect.Effect<
    LockBackendShape,
    unknown,
    Scope.Scope
  >
}

/** Five servers (node C, index 2, under `clock` when given) and admin connections to each. */
const fiveNodes = (clock?: FakeClock) =>
  Effect.gen(function*() {
    const servers = yield* Effect.all(
      [0, 1, 2, 3, 4].map((i) => redisServer(i === 2 && clock !== undefined ? { env: clock.env } : {})),
      { concurrency: "unbounded" }
    )
    const urls = servers.map((s) => s.url)
    const admins = yield* Effect.forEach(urls, adminClient)
    const cluster: Cluster = {
      servers,
      admins,
      urls,
      // A budget a loaded machine can meet (a killed node refuses at once; a paused one is not waited for).
      client: (options = {}) => RedlockBackend.make({ commandTimeout: "2 seconds", ...options, nodes: urls })
    }
    return cluster
  })

const on = (backend: LockBackendShape) => <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.provideService(effect, LockBackend, backend)

/**
 * A lease taken into a scope of its own (closed by `release`, or with the test), so that the test
 * can look at it while another client acts.
 */
const hold = (backend: LockBackendShape, key: string, options: LockOptions) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    yield* Effect.addFinalizer(() => Scope.close(scope, Exit.void))
    const lease = yield* Scope.extend(Lock.acquire(key, options), scope).pipe(on(backend))
    return { lease, release: Scope.close(scope, Exit.void) }
  })

/**
 * Acquire once the nodes just restarted are reachable again: an attempt that finds too few nodes
 * answering is a `LockBackendError`, retried (busy nodes are waited for by `wait` as usual).
 */
const holdWhenReachable = (backend: LockBackendShape, key: string, options: LockOptions) =>
  hold(backend, key, options).pipe(
    Effect.retry({
      while: (error) => error._tag === "LockBackendError",
      schedule: Schedule.intersect(Schedule.spaced(200), Schedule.recurs(100))
    })
  )

/** Nodes D and E (3, 4) hold `key` for a third owner, as after a split vote. */
const splitVote = (cluster: Cluster, key: string) =>
  Effect.forEach([3, 4], (i) =>
    Effect.gen(function*() {
      yield* cmd(cluster.admins[i]!, "HSET", key, "a-third-client:1", "1")
      yield* cmd(cluster.admins[i]!, "PEXPIRE", key, 60_000)
    }))

/** The third owner gives up on D and E (its minority is no lock). */
const endSplitVote = (cluster: Cluster, key: string) =>
  Effect.forEach([3, 4], (i) => cmd(cluster.admins[i]!, "DEL", key))

const gone = (cluster: Cluster, indices: ReadonlyArray<number>, key: string) =>
  eventually(
    Effect.map(
      Effect.forEach(indices, (i) => cmd<number>(cluster.admins[i]!, "EXISTS", key)),
      (found) => found.every((n) => n === 0)
    ),
    20_000,
    `${key} gone from nodes ${indices.join(", ")}`
  )

/** Which nodes hold `key` for `owner`. */
const holdersOf = (cluster: Cluster, key: string, owner: string) =>
  Effect.map(
    Effect.forEach(cluster.admins, (admin) => cmd<number>(admin, "HEXISTS", key, owner)),
    (found) => found.flatMap((n, i) => (n === 1 ? [i] : []))
  )

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
      }), { lease: "5 seconds", wait: "30 seconds" })
    yield* Effect.all(Array.from({ length: n }, () => worker), { concurrency: "unbounded" })
    return { counter, maxInside, tokens }
  })

const increasing = (tokens: ReadonlyArray<bigint>) => tokens.every((t, i) => i === 0 || t > tokens[i - 1]!)

/** Warm-up grants on all five nodes, so that every counter stands at `n`. */
const warmUp = (backend: LockBackendShape, key: string, n: number) =>
  Effect.replicateEffect(withLock(key, (lease) => Effect.succeed(lease.fencingToken)).pipe(on(backend)), n)

/** The first client's hold on A, B and C only (D and E busy for a third owner at that moment). */
const holdOnMajority = (cluster: Cluster, backend: LockBackendShape, key: string, options: LockOptions) =>
  Effect.gen(function*() {
    yield* splitVote(cluster, key)
    const first = yield* hold(backend, key, options)
    assert.deepStrictEqual(yield* holdersOf(cluster, key, first.lease.owner), [0, 1, 2], "held on A, B and C")
    // The third owner lets go: D and E are free, and kept their counters.
    yield* endSplitVote(cluster, key)
    return first
  })

describe.skipIf(skip)("Redlock on five nodes: a minority down", () => {
  it.scopedLive("two of five killed: the lock stays available and exclusive, renewals go on, tokens increase", () =>
    Effect.gen(function*() {
      const cluster = yield* fiveNodes()
      const backend = yield* cluster.client()
      const key = freshKey("minority-killed")
      const before = yield* contend(key, 5).pipe(on(backend))
      cluster.servers[1]!.kill("SIGKILL")
      cluster.servers[3]!.kill("SIGKILL")
      const after = yield* contend(key, 10).pipe(on(backend))
      assert.strictEqual(after.counter, 10)
      assert.strictEqual(after.maxInside, 1)
      assert.isTrue(increasing([...before.tokens, ...after.tokens]), "tokens go on increasing")
      // A hold more than twice as long as its lease lives on renewals that reach three nodes of five.
      const done = yield* withLock(key, Effect.as(Effect.sleep(3_500), "done"), { lease: "1500 millis" }).pipe(
        on(backend)
      )
      assert.strictEqual(done, "done")
      assert.isFalse(yield* Lock.isLocked(key).pipe(on(backend)))
    }))

  it.scopedLive(
    "two of five paused (SIGSTOP): the lock stays available and exclusive, nobody waits for them",
    () =>
      Effect.gen(function*() {
        const cluster = yield* fiveNodes()
        // A budget far longer than the test's timeout: any wait for a paused node would show.
        const backend = yield* cluster.client({ commandTimeout: "60 seconds" })
        const key = freshKey("minority-paused")
        cluster.servers[0]!.pause()
        cluster.servers[4]!.pause()
        const result = yield* contend(key, 10).pipe(on(backend), Effect.timeout("40 seconds"))
        const done = yield* withLock(key, Effect.as(Effect.sleep(3_500), "done"), { lease: "1500 millis" }).pipe(
          on(backend)
        )
        cluster.servers[0]!.resume()
        cluster.servers[4]!.resume()
        assert.strictEqual(result.counter, 10)
        assert.strictEqual(result.maxInside, 1)
        assert.isTrue(increasing(result.tokens), "tokens increase")
        assert.strictEqual(done, "done")
      }),
    60_000
  )
})

describe.skipIf(skip)("Redlock on five nodes: a node restarted without persistence", () => {
  it.scopedLive(
    "restarted at once: a second client gets the lock while the first still holds it (the double grant the Redis docs predict); the first finds out at its next renewal",
    () =>
      Effect.gen(function*() {
        const cluster = yield* fiveNodes()
        const [one, two] = yield* Effect.all([cluster.client(), cluster.client()])
        const key = freshKey("restart")
        yield* warmUp(two, key, 3)
        // 30 s lease, renewed every 10 s: the steps below take far less than a renewal period.
        const first = yield* holdOnMajority(cluster, one, key, { lease: "30 seconds" })

        // C restarts empty (no persistence): it forgot the lock and its counter.
        yield* Effect.promise(() => cluster.servers[2]!.restart())
        const second = yield* holdWhenReachable(two, key, { lease: "30 seconds", wait: "20 seconds" })
        assert.deepStrictEqual(yield* holdersOf(cluster, key, second.lease.owner), [2, 3, 4], "held on C, D and E")

        // The violation: both clients hold the lock, each by a quorum of its own.
        assert.isTrue(yield* first.lease.isHeld, "the first client still holds the lock")
        assert.isTrue(yield* second.lease.isHeld, "the second client holds it too")
        // D and E kept their counters (raised to the first token), so the second token is larger:
        // fencing orders the two holders, and refuses the first one's write after the second's.
        assert.isTrue(second.lease.fencingToken > first.lease.fencingToken)
        const fence = yield* Fencing.makeMemory
        yield* fence.admit("ledger", first.lease.fencingToken)
        yield* fence.admit("ledger", second.lease.fencingToken)
        const late = yield* Effect.flip(fence.admit("ledger", first.lease.fencingToken))
        assert.strictEqual(late._tag, "FencingTokenRejectedError")

        // The first client's watchdog learns it at its next renewal: C says "not yours", D and E
        // "no lock", so no quorum can be renewed.
        const lost = yield* Effect.flip(first.lease.lost)
        assert.strictEqual(lost.reason, "stolen")
        assert.isTrue(yield* second.lease.isHeld, "the second client keeps it")
      }),
    90_000
  )

  it.scopedLive(
    "restarted empty with every counter: the second token is no larger than the first, and fencing cannot tell the holders apart",
    () =>
      Effect.gen(function*() {
        const cluster = yield* fiveNodes()
        const [one, two] = yield* Effect.all([cluster.client(), cluster.client()])
        const key = freshKey("restart-counters")
        yield* warmUp(two, key, 3)
        const first = yield* holdOnMajority(cluster, one, key, { lease: "30 seconds" })
        // D and E lose their counters too (flushed, or restarted empty while no lock was on them).
        yield* Effect.forEach([3, 4], (i) => cmd(cluster.admins[i]!, "FLUSHALL"))
        yield* Effect.promise(() => cluster.servers[2]!.restart())
        const second = yield* holdWhenReachable(two, key, { lease: "30 seconds", wait: "20 seconds" })

        assert.isTrue(yield* first.lease.isHeld)
        assert.isTrue(yield* second.lease.isHeld)
        assert.strictEqual(first.lease.fencingToken, 4n)
        assert.strictEqual(second.lease.fencingToken, 1n, "the token went back")
        // The second holder writes first: the fence takes both writes, the double grant reaches
        // the resource.
        const fence = yield* Fencing.makeMemory
        yield* fence.admit("ledger", second.lease.fencingToken)
        yield* fence.admit("ledger", first.lease.fencingToken)
        // ... and from then on refuses the newer holder.
        const refused = yield* Effect.flip(fence.admit("ledger", second.lease.fencingToken))
        assert.strictEqual(refused._tag, "FencingTokenRejectedError")
        yield* first.release
      }),
    90_000
  )

  it.scopedLive(
    "restarted only after longer than the lease: the first client has lost the lock before the node is back; never two holders",
    () =>
      Effect.gen(function*() {
        const cluster = yield* fiveNodes()
        const [one, two] = yield* Effect.all([cluster.client(), cluster.client()])
        const key = freshKey("delayed-restart")
        yield* warmUp(two, key, 3)
        const lease = 2_000
        const first = yield* holdOnMajority(cluster, one, key, { lease: `${lease} millis` })

        cluster.servers[2]!.kill("SIGKILL")
        const downSince = Date.now()
        // Renewals reach A and B only, two of five: the lock is lost at the local deadline.
        const lost = yield* Effect.flip(first.lease.lost)
        assert.strictEqual(lost.reason, "renewal-failed")
        // The lost holder's clean-up releases what is left on A and B.
        yield* first.release
        // The delayed restart: C stays down for longer than the lease.
        yield* Effect.sleep(Math.max(0, downSince + lease + 500 - Date.now()))
        yield* Effect.promise(() => cluster.servers[2]!.restart())

        const second = yield* holdWhenReachable(two, key, { lease: "30 seconds", wait: "20 seconds" })
        assert.isFalse(yield* first.lease.isHeld, "the first client no longer believes it holds the lock")
        assert.isTrue(yield* second.lease.isHeld)
        assert.isTrue(second.lease.fencingToken > first.lease.fencingToken, "tokens go on increasing")
      }),
    90_000
  )
})

describe.skipIf(skip)("Redlock on five nodes: a holder paused past its lease", () => {
  it.scopedLive(
    "a worker process stopped (SIGSTOP) past its lease: another client gets the lock, the resumed worker's stale write is refused by fencing",
    () =>
      faultScenario(Effect.gen(function*() {
        const cluster = yield* fiveNodes()
        const resource = cluster.admins[0]!
        const backend = yield* cluster.client()
        const key = freshKey("paused-client")
        const holder = yield* startWorker(cluster.urls[0]!, "redlock-holder", cluster.urls)

        yield* holder.send({ op: "acquire", key, lease: 1_500 })
        const first = BigInt((yield* holder.take("acquired")).token as string)
        yield* holder.send({ op: "write", value: "from the first holder" })
        yield* holder.take("written")

        holder.signal("SIGSTOP")
        // The stopped holder renews nothing: its lease ends on every node, and another client
        // (waiting on notifications and the holder's TTL) gets the lock.
        const second = yield* withLock(key, (lease) =>
          Effect.gen(function*() {
            yield* Fencing.redisSet(resource, {
              key: "data",
              value: "from the second holder",
              token: lease.fencingToken
            })
            return lease.fencingToken
          }), { lease: "30 seconds", wait: "30 seconds" }).pipe(on(backend))
        assert.isTrue(second > first, `token ${second} after ${first}`)

        // Queued while it is stopped: the first things it does when it continues.
        yield* holder.send({ op: "step" })
        yield* holder.send({ op: "write", value: "stale write from the first holder" })
        holder.signal("SIGCONT")

        const refused = yield* holder.take("refused")
        assert.strictEqual(refused.tag, "LockLostError", "the guarded step does not run")
        const rejected = yield* holder.take("rejected")
        assert.strictEqual(rejected.tag, "FencingTokenRejectedError", String(rejected.message))
        assert.strictEqual(rejected.highest, String(second))
        assert.strictEqual(yield* cmd(resource, "GET", "data"), "from the second holder")
      })),
    90_000
  )
})

describe.skipIf(skip || skipFaketime())("Redlock on five nodes: a node's clock stepped forward (libfaketime)", () => {
  it.scopedLive(
    "the lock expires at once on the stepped node; held on four others it stays exclusive and renewed",
    () =>
      Effect.gen(function*() {
        const clock = yield* fakeClock
        const cluster = yield* fiveNodes(clock)
        const [one, two] = yield* Effect.all([cluster.client(), cluster.client()])
        const key = freshKey("clock-all")
        const first = yield* hold(one, key, { lease: "30 seconds" })
        assert.deepStrictEqual(yield* holdersOf(cluster, key, first.lease.owner), [0, 1, 2, 3, 4])
        const ttlBefore = yield* cmd<number>(cluster.admins[2]!, "PTTL", key)
        assert.isAbove(ttlBefore, 0)

        // C's wall clock steps a minute forward (as `date -s` or an NTP step would): the lease,
        // stored there as an absolute expiry time, is over at once.
        yield* clock.setOffset(60)
        yield* gone(cluster, [2], key)
        assert.deepStrictEqual(yield* holdersOf(cluster, key, first.lease.owner), [0, 1, 3, 4])

        // Four of five still hold it: nobody else gets in, and the holder keeps it.
        const attempt = yield* Effect.scoped(Lock.tryAcquire(key).pipe(on(two)))
        assert.isTrue(Option.isNone(attempt), "a second client is refused")
        assert.isTrue(yield* first.lease.isHeld)
        yield* first.release
        assert.isFalse(yield* Lock.isLocked(key).pipe(on(two)))
      }),
    90_000
  )

  it.scopedLive(
    "held on A, B and C, C's clock steps forward: a second client gets the lock on C, D and E (Kleppmann's case); fencing refuses the first holder's late write",
    () =>
      Effect.gen(function*() {
        const clock = yield* fakeClock
        const cluster = yield* fiveNodes(clock)
        const [one, two] = yield* Effect.all([cluster.client(), cluster.client()])
        const key = freshKey("clock-majority")
        yield* warmUp(two, key, 3)
        const first = yield* holdOnMajority(cluster, one, key, { lease: "30 seconds" })
        const fence = yield* Fencing.makeMemory
        yield* fence.admit("ledger", first.lease.fencingToken)

        yield* clock.setOffset(60)
        yield* gone(cluster, [2], key)
        const second = yield* hold(two, key, { lease: "30 seconds", wait: "20 seconds" })
        assert.deepStrictEqual(yield* holdersOf(cluster, key, second.lease.owner), [2, 3, 4], "held on C, D and E")
        assert.isTrue(yield* first.lease.isHeld, "the first client still holds the lock")
        assert.isTrue(yield* second.lease.isHeld, "the second client holds it too")

        // C kept its counter (only the lock expired), so the second token is larger, and fencing
        // refuses the first holder once the second has written.
        assert.isTrue(second.lease.fencingToken > first.lease.fencingToken)
        const tokens = yield* Effect.forEach(cluster.admins, (admin) => cmd<string>(admin, "GET", tokenKeyOf(key)))
        assert.strictEqual(tokens[2], String(second.lease.fencingToken))
        yield* fence.admit("ledger", second.lease.fencingToken)
        const late = yield* Effect.flip(fence.admit("ledger", first.lease.fencingToken))
        assert.strictEqual(late._tag, "FencingTokenRejectedError")
      }),
    90_000
  )
})
