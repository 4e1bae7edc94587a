/**
 * n. Redis Cluster: 64 fibers, each acquiring and releasing a key of its own (`bench:cluster:<i>`,
 * spread over the three shards by their slots), as fast as they can, on a 3-master, 3-replica
 * cluster the bench starts on loopback ports (test/support/redisCluster.ts). The distinct-keys
 * scenario on a cluster: per-operation cost when every key's commands go to its own master.
 *
 * Libraries that take an ioredis `Cluster`: effect-lock (`RedisBackend.layer({ cluster: { nodes } })`),
 * redis-semaphore (`new Mutex(cluster, key)`) and redlock (`new Redlock([cluster])`: one "instance",
 * so no quorum across shards). effect-distributed-lock is left out: it takes a single ioredis
 * `Redis`. Rounds take turns between the libraries, as in the distinct-keys scenario.
 */
import { Context, Effect, Layer } from "effect"
import { Cluster } from "ioredis"
import { Mutex } from "redis-semaphore"
import type { default as RedlockClass } from "../../node_modules/redlock/dist/index.js"
// @ts-expect-error redlock 5.0.0-beta.2's "exports" map has no "types" entry (see peers.ts)
import RedlockModule from "redlock"
import type * as EffectLock from "../../src/index.js"
import { hashSlot } from "../../src/internal/redis/slot.js"
import type * as EffectLockRedisBackend from "../../src/RedisBackend.js"
import { startRedisCluster } from "../../test/support/redisCluster.js"
import { dec, failedRows, int, table } from "../format.js"
import type { BenchResults, Outcome } from "../results.js"
import { isFailed } from "../results.js"
import type { BenchContext } from "./common.js"
import type { DistinctRound } from "./distinct.js"
import { concurrentLoops, FIBERS } from "./distinct.js"

const Redlock = RedlockModule as typeof RedlockClass
// effect-lock from its build, as in peers.ts.
const effectLockBuild = "../../dist/index.js"
const effectLockRedisBuild = "../../dist/RedisBackend.js"
const { LockBackend, withLock } = (await import(effectLockBuild)) as typeof EffectLock
const RedisBackend = (await import(effectLockRedisBuild)) as typeof EffectLockRedisBackend

export const CLUSTER_ROUNDS = 3

export interface ClusterResult {
  readonly library: string
  readonly fibers: number
  readonly opsPerSecond: number
  readonly seconds: number
  readonly failures: number
  readonly rounds: number
  /** How many of the fibers' keys each master serves. */
  readonly keysPerShard: ReadonlyArray<number>
}

type Nodes = ReadonlyArray<{ readonly host: string; readonly port: number }>

interface ClusterLibrary {
  readonly name: string
  /** Open a client on the cluster (closed with the scope) and run 64 loops of `withLock` on it. */
  readonly round: (ctx: BenchContext, nodes: Nodes) => Effect.Effect<DistinctRound, unknown>
}

const keyOf = (i: number) => `bench:cluster:${i}`

/** A plain ioredis `Cluster`, as the peers' READMEs would build one, closed with the scope. */
const plainCluster = (nodes: Nodes) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const cluster = new Cluster([...nodes], { slotsRefreshInterval: 1_000 })
      cluster.on("error", () => {})
      await cluster.ping()
      return cluster
    }),
    (cluster) => Effect.promise(() => cluster.quit().catch(() => cluster.disconnect()))
  )

const libraries: ReadonlyArray<ClusterLibrary> = [
  {
    name: "effect-lock",
    round: (ctx, nodes) =>
      Effect.scoped(Effect.gen(function*() {
        const context = yield* Layer.build(RedisBackend.layer({ cluster: { nodes } }))
        const backend = Context.get(context, LockBackend)
        return yield* concurrentLoops(
          ctx,
          FIBERS,
          (i) => Effect.provideService(withLock(keyOf(i), Effect.void), LockBackend, backend)
        )
      }))
  },
  {
    name: "redis-semaphore",
    round: (ctx, nodes) =>
      Effect.scoped(Effect.gen(function*() {
        const cluster = yield* plainCluster(nodes)
        return yield* concurrentLoops(ctx, FIBERS, (i) =>
          Effect.tryPromise(async () => {
            const mutex = new Mutex(cluster, keyOf(i))
            await mutex.acquire()
            await mutex.release()
          }))
      }))
  },
  {
    name: "redlock",
    round: (ctx, nodes) =>
      Effect.scoped(Effect.gen(function*() {
        const cluster = yield* plainCluster(nodes)
        const redlock = new Redlock([cluster], { retryCount: -1 })
        return yield* concurrentLoops(
          ctx,
          FIBERS,
          (i) => Effect.tryPromise(() => redlock.using([keyOf(i)], 30_000, () => Promise.resolve()))
        )
      }))
  }
]

/** The scenario: one cluster for all libraries, `CLUSTER_ROUNDS` rounds taking turns. */
export const cluster = (
  ctx: BenchContext,
  selected: (name: string) => boolean
): Effect.Effect<ReadonlyArray<Outcome<ClusterResult>>> =>
  Effect.gen(function*() {
    const running = yield* Effect.acquireRelease(
      Effect.promise(() => startRedisCluster()),
      (running) => Effect.promise(() => running.stop())
    )
    const topology = yield* Effect.promise(() => running.topology())
    const masters = topology.filter((n) => n.role === "master")
    const keysPerShard = masters.map((master) =>
      Array.from({ length: FIBERS }, (_, i) => hashSlot(keyOf(i))).filter((slot) =>
        master.slots.some(([from, to]) => slot >= from && slot <= to)
      ).length
    )
    const chosen = libraries.filter((library) => selected(library.name))
    const rounds = new Map<string, Array<DistinctRound> | string>(chosen.map((library) => [library.name, []]))
    for (let round = 0; round < CLUSTER_ROUNDS; round++) {
      for (const library of chosen) {
        const sofar = rounds.get(library.name)
        if (typeof sofar === "string") continue
        const exit = yield* Effect.exit(library.round(ctx, running.nodes))
        if (exit._tag === "Success") sofar!.push(exit.value)
        else rounds.set(library.name, String(exit.cause))
      }
    }
    return Array.from(rounds, ([library, outcome]): Outcome<ClusterResult> => {
      if (typeof outcome === "string") return { library, error: outcome }
      const ops = outcome.reduce((total, r) => total + r.ops, 0)
      const seconds = outcome.reduce((total, r) => total + r.seconds, 0)
      return {
        library,
        fibers: FIBERS,
        opsPerSecond: ops / seconds,
        seconds,
        failures: outcome.reduce((total, r) => total + r.failures, 0),
        rounds: outcome.length,
        keysPerShard
      }
    })
  }).pipe(Effect.scoped)

export const describeCluster = (r: ClusterResult) =>
  `${dec(r.opsPerSecond, 0)} ops/s (${r.failures} failures), keys per shard ${r.keysPerShard.join("/")}`

export const clusterSection = (results: BenchResults): string => {
  const outcomes = results.cluster ?? []
  if (outcomes.length === 0) return ""
  const rows = outcomes.filter((o): o is ClusterResult => !isFailed(o)).map((r) => [
    r.library,
    int(r.opsPerSecond),
    int(r.failures),
    r.keysPerShard.join(" / ")
  ])
  return `### n. Redis Cluster: ${FIBERS} fibers on distinct keys across three shards

${table(["Library", "Ops/s", "Failures", "Keys per shard"], [...rows, ...failedRows(outcomes, 4)])}

The distinct-keys scenario (b) on a 3-master, 3-replica Redis Cluster started by the bench on
loopback ports: ${FIBERS} fibers, each acquiring and releasing \`bench:cluster:<i>\`, whose slots spread
the keys over the three masters. ${CLUSTER_ROUNDS} rounds of 0.9 s after 0.3 s of warm-up, taking turns. effect-lock
uses \`RedisBackend.layer({ cluster: { nodes } })\`; redis-semaphore and redlock get an ioredis
\`Cluster\` (redlock with that one cluster as its only instance). effect-distributed-lock takes a
single \`Redis\` and is left out. Seven Redis processes share the machine's cores with the bench here.
`
}
