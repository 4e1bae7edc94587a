/**
 * A failover that loses an acknowledged acquisition, on a real 3-master, 3-replica cluster
 * started for this file: the shard's replica is cut off from its master (SIGSTOP, then the master
 * drops its replication link), a holder takes a lock on the master (acknowledged, never
 * replicated), the master is frozen (SIGSTOP), the replica is woken and promoted without the
 * master's consent (`CLUSTER FAILOVER TAKEOVER`), and the old master comes back as its replica.
 * The lock is gone on the new master: this is the asynchronous-replication loss docs/cluster.md
 * describes.
 *
 * What must hold: the holder is told (its program is interrupted and `withLock` fails with
 * `LockLostError`), never left believing it holds; a waiter on another backend that waited through
 * it all gets in (retrying on the typed errors its calls to the frozen master got). And what the
 * docs warn about shows: the fencing counter's increment was lost too, so the waiter's token is
 * not above the lost holder's.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Deferred, Effect, Either, Fiber, Layer, Schedule } from "effect"
import { withLock } from "../../src/index.js"
import type { RedisCluster } from "../support/redisCluster.js"
import { startRedisCluster } from "../support/redisCluster.js"
import { clusterBackend, skipCluster } from "./helpers.js"
import { masterMap, namesWhere } from "./workload.js"

describe.skipIf(skipCluster())("Redis Cluster: a failover that loses the acquisition", () => {
  let cluster: RedisCluster
  const stopped = new Set<number>()
  beforeAll(async () => {
    cluster = await startRedisCluster()
  }, 60_000)
  afterAll(async () => {
    // Never leave a frozen process behind, whatever the test did.
    for (const pid of stopped) {
      try {
        process.kill(pid, "SIGCONT")
      } catch {
        // already gone
      }
    }
    await cluster?.stop()
  })

  it.scopedLive("the holder is told with LockLostError, the waiter gets in", () =>
    Effect.gen(function*() {
      const topology = yield* Effect.promise(() => cluster.topology())
      const master = topology.find((n) => n.role === "master")!
      const replica = topology.find((n) => n.masterId === master.id)!
      const [key] = namesWhere(masterMap(topology), "loss", 1, (m) => m === master.id)
      const call = <A>(port: number, ...args: Array<string | number>) =>
        Effect.promise(() => cluster.node(port).call(args[0] as string, ...args.slice(1)) as Promise<A>)
      const pidOf = (port: number) =>
        Effect.map(call<string>(port, "INFO", "server"), (info) => Number(/process_id:(\d+)/.exec(info)?.[1]))
      const masterPid = yield* pidOf(master.port)
      const replicaPid = yield* pidOf(replica.port)
      const signal = (pid: number, sig: "SIGSTOP" | "SIGCONT") =>
        Effect.sync(() => {
          process.kill(pid, sig)
          if (sig === "SIGSTOP") stopped.add(pid)
          else stopped.delete(pid)
        })
      const a = yield* Layer.build(clusterBackend(cluster))
      const b = yield* Layer.build(clusterBackend(cluster))

      // Cut the replica off: frozen, and its link dropped by the master, so that nothing written
      // from now on reaches it.
      yield* signal(replicaPid, "SIGSTOP")
      yield* call(master.port, "CLIENT", "KILL", "TYPE", "replica")

      const holding = yield* Deferred.make<bigint>()
      const holder = yield* Effect.fork(
        withLock(key!, (lease) =>
          Effect.gen(function*() {
            yield* Deferred.succeed(holding, lease.fencingToken)
            return yield* Effect.never
          }), { lease: "6 seconds" }).pipe(Effect.provide(a), Effect.either)
      )
      const token = yield* Deferred.await(holding)
      const waiter = yield* Effect.fork(
        withLock(key!, (lease) => Effect.succeed(lease.fencingToken), { wait: "1 minute" }).pipe(
          Effect.provide(b),
          Effect.retry({
            while: (error) => error._tag === "LockBackendError",
            schedule: Schedule.spaced("200 millis")
          })
        )
      )
      yield* Effect.sleep(300)

      // Freeze the master with the acquisition only it has, promote the replica, bring the old
      // master back: it becomes the new master's replica and drops its data.
      yield* signal(masterPid, "SIGSTOP")
      yield* signal(replicaPid, "SIGCONT")
      yield* call(replica.port, "CLUSTER", "FAILOVER", "TAKEOVER")
      yield* Effect.promise(async () => {
        const deadline = Date.now() + 30_000
        while (!String(await cluster.node(replica.port).call("CLUSTER", "NODES")).includes("myself,master")) {
          if (Date.now() > deadline) throw new Error("the replica did not take over")
          await new Promise((resolve) => setTimeout(resolve, 50))
        }
      })
      yield* signal(masterPid, "SIGCONT")
      yield* Effect.promise(() => cluster.settled())
      const now = yield* Effect.promise(() => cluster.masterOf(key!))
      assert.strictEqual(now.id, replica.id, "the old replica serves the slot")

      const told = yield* Fiber.join(holder)
      assert.isTrue(Either.isLeft(told), "the holder does not go on believing it holds")
      if (Either.isLeft(told)) {
        assert.strictEqual(told.left._tag, "LockLostError")
        // The new master never had the hold (deleted), or the waiter took it first (stolen).
        if (told.left._tag === "LockLostError") assert.oneOf(told.left.reason, ["deleted", "stolen"])
        console.log(`failover-loss: holder told: ${told.left.message}`)
      }
      const entered = yield* Fiber.join(waiter)
      console.log(`failover-loss: holder token ${token}, waiter token ${entered}`)
      assert.isTrue(entered > 0n, "the waiter got in")
      // The fencing counter's increment was lost with the hold: the new holder can draw the same
      // token again, which is why docs/cluster.md says fencing cannot cover this window.
      assert.isTrue(entered <= token, `the counter went back with the lost write: ${entered} after ${token}`)
    }), 120_000)
})
