/**
 * A slot migration of held locks, on a real 3-master, 3-replica cluster started for this file:
 * the slot of four locks (one hash tag) moves from its master to another with the steps
 * `redis-cli --cluster reshard` takes for each slot (`CLUSTER SETSLOT ... IMPORTING` on the
 * target, `MIGRATING` on the source, `MIGRATE` of its keys in batches, `SETSLOT ... NODE` on
 * both), slowly, so that the workload meets every state: keys all on the source, split between the
 * two (`ASK`, `TRYAGAIN`), all on the target, and the slot reassigned (`MOVED`).
 *
 * Two backends run the fenced workload of `workload.ts` on three of the locks (counters on the
 * third master); a long holder keeps the fourth through the move while a waiter on the other
 * backend, whose retry schedule is one minute, waits for it.
 *
 * What must hold: no two accepted fenced writes of one key overlap, no update is lost, every
 * `withLock` that failed failed with a typed error, the long holder keeps its lock (a migration
 * moves the hash with its TTL) or is told, the waiter is woken by the release after the move (the
 * source drops its sharded subscribers with `SUNSUBSCRIBE` when it gives the slot away; the
 * backend subscribes again on the new owner), and waiters get in after the move.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber, Layer, Option, Ref } from "effect"
import { Lock, withLock } from "../../src/index.js"
import { hashSlot } from "../../src/internal/redis/slot.js"
import type { RedisCluster } from "../support/redisCluster.js"
import { startRedisCluster } from "../support/redisCluster.js"
import { clusterAdmin, clusterBackend, skipCluster } from "./helpers.js"
import type { Section } from "./workload.js"
import {
  awaitSectionsAfter,
  forkRetryingWaiter,
  masterMap,
  namesWhere,
  overlaps,
  resourceOf,
  runWorkload,
  untold
} from "./workload.js"

/** See failover.test.ts: well under the waiter's fallbacks (one-minute retry, 60 s lease). */
const restoreBoundMillis = 15_000

describe.skipIf(skipCluster())("Redis Cluster: slot migration under load", () => {
  let cluster: RedisCluster
  beforeAll(async () => {
    cluster = await startRedisCluster()
  }, 60_000)
  afterAll(() => cluster?.stop())

  it.scopedLive(
    "no overlap of fenced writes, the locks keep working or are lost with a typed error, waiters get in",
    () =>
      Effect.gen(function*() {
        const topology = yield* Effect.promise(() => cluster.topology())
        const masterOf = masterMap(topology)
        const tag = `mig-${process.pid}`
        const keys = ["a", "b", "c"].map((k) => `{${tag}}:${k}`)
        const watched = `{${tag}}:watched`
        const slot = hashSlot(watched)
        const source = topology.find((n) => n.id === masterOf(watched))!
        const masters = topology.filter((n) => n.role === "master")
        const target = masters.find((n) => n.id !== source.id)!
        const third = masters.find((n) => n.id !== source.id && n.id !== target.id)!
        const resources = namesWhere(masterOf, "mig:res", keys.length, (m) => m === third.id).map(resourceOf)
        const resource = yield* clusterAdmin(cluster)
        const a = yield* Layer.build(clusterBackend(cluster))
        const b = yield* Layer.build(clusterBackend(cluster))

        const release = yield* Deferred.make<void>()
        const holding = yield* Deferred.make<bigint>()
        const holder = yield* Effect.fork(
          withLock(watched, (lease) =>
            Effect.gen(function*() {
              yield* Deferred.succeed(holding, lease.fencingToken)
              yield* Deferred.await(release)
              return yield* lease.isHeld
            }), { lease: "60 seconds", renew: "2 seconds" }).pipe(Effect.provide(a))
        )
        const holderToken = yield* Deferred.await(holding)
        // An attempt that meets the migrating slot may fail with LockBackendError (TRYAGAIN or
        // MOVED beyond ioredis' redirection limit): the waiter then waits again, as a caller would.
        const { failures: waiterFailures, fiber: waiter } = yield* forkRetryingWaiter(watched, b)

        const stop = yield* Deferred.make<void>()
        const recorded = yield* Ref.make<ReadonlyArray<Section>>([])
        const workload = yield* Effect.fork(
          runWorkload({
            backends: [a, b],
            keys,
            resources,
            resource,
            fibers: 2,
            stop: Deferred.await(stop),
            sections: recorded
          })
        )
        yield* Effect.sleep(1_500)
        assert.isTrue(Option.isNone(yield* Fiber.poll(waiter)), "the waiter waits while the holder holds")

        // The move, one state at a time.
        const call = (port: number, ...args: Array<string | number>) =>
          Effect.promise(() => cluster.node(port).call("CLUSTER", ...args))
        yield* call(target.port, "SETSLOT", slot, "IMPORTING", source.id)
        yield* call(source.port, "SETSLOT", slot, "MIGRATING", target.id)
        yield* Effect.sleep(1_000)
        let moved = 0
        for (;;) {
          const batch = (yield* call(source.port, "GETKEYSINSLOT", slot, 2)) as Array<string>
          if (batch.length === 0) break
          yield* Effect.promise(() =>
            cluster.node(source.port).call("MIGRATE", "127.0.0.1", target.port, "", 0, 5_000, "KEYS", ...batch)
          )
          moved += batch.length
          // Keys split between the two nodes for a while: scripts meet ASK and TRYAGAIN.
          yield* Effect.sleep(300)
        }
        assert.isAtLeast(moved, 2, "the held locks' keys were moved")
        yield* Effect.sleep(1_000)
        yield* call(target.port, "SETSLOT", slot, "NODE", target.id)
        yield* call(source.port, "SETSLOT", slot, "NODE", target.id)
        yield* call(third.port, "SETSLOT", slot, "NODE", target.id)
        yield* Effect.promise(() => cluster.settled())
        const migrated = process.hrtime.bigint()
        const now = yield* Effect.promise(() => cluster.masterOf(watched))
        assert.strictEqual(now.id, target.id, "the slot is served by the target")

        assert.isTrue(
          Option.isNone(yield* Fiber.poll(waiter)),
          "the waiter must not get the lock while its holder holds it"
        )
        const released = process.hrtime.bigint()
        yield* Deferred.succeed(release, void 0)
        const keptIt = yield* Fiber.join(holder)
        assert.isTrue(keptIt, "the holder kept its lock through the move")
        const entered = yield* Fiber.join(waiter)
        assert.isTrue(entered.at > released, "the waiter got in only after the holder let go")
        assert.isTrue(entered.token > holderToken, "the waiter's fencing token is above the holder's")
        const wakeMillis = Number(entered.at - migrated) / 1e6
        const waiterFailed = yield* Ref.get(waiterFailures)
        console.log(
          `migration: ${moved} keys moved; the waiter got in ${
            wakeMillis.toFixed(0)
          } ms after the move; its attempts failed ${waiterFailed.length} times (${
            [...new Set(waiterFailed)].join("; ")
          })`
        )
        assert.isBelow(wakeMillis, restoreBoundMillis, "woken by a notification, not its one-minute retry")

        // Waiters keep getting in afterwards: two accepted sections on every key (a lock whose
        // release failed at the switch is free again when its 5 s lease ends), then a second more.
        yield* awaitSectionsAfter(recorded, keys, migrated, 2, 20_000)
        yield* Effect.sleep(1_000)
        yield* Deferred.succeed(stop, void 0)
        const { failures, sections } = yield* Fiber.join(workload)

        const found = overlaps(sections)
        assert.strictEqual(
          found.length,
          0,
          `overlapping accepted writes: ${JSON.stringify(found, (_, v) => typeof v === "bigint" ? String(v) : v)}`
        )
        for (const [i, key] of keys.entries()) {
          const accepted = sections.filter((s) => s.key === key && s.accepted)
          const counter = yield* Effect.promise(() => resource.get(resources[i]!.counter))
          assert.strictEqual(Number(counter ?? "0"), accepted.length, `no lost update on ${key}`)
          assert.isAtLeast(
            accepted.filter((s) => s.start > migrated).length,
            2,
            `${key}: waiters get in after the move`
          )
        }
        const notTold = untold(sections)
        assert.strictEqual(
          notTold.length,
          0,
          `refused writes whose holder was not told: ${
            JSON.stringify(notTold.slice(0, 5), (_, v) => typeof v === "bigint" ? String(v) : v)
          }`
        )
        const refused = sections.filter((s) => !s.accepted).length
        console.log(
          `migration: ${sections.length} sections, ${refused} refused by the fence, failures ${
            JSON.stringify(Object.fromEntries(failures))
          }`
        )
        for (const label of failures.keys()) {
          assert.match(label, /^(LockLostError:|LockBackendError$)/, `unexpected failure ${label}`)
        }
        assert.isFalse(yield* Lock.isLocked(watched).pipe(Effect.provide(b)))
      }),
    120_000
  )
})
