/**
 * The Redis backend on a real Redis Cluster (3 masters, 3 replicas, started for this file):
 * slots computed as the server computes them, names whose keys would not share a slot refused,
 * locks on every shard with their renewals, sharded pub/sub (one subscriber connection per master
 * at most, SPUBLISH heard), Redisson's cluster-mode scripts, a user-built `Cluster` client, and
 * the options and Config forms.
 */
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { ConfigProvider, Deferred, Duration, Effect, Fiber, Layer, Option, Schedule } from "effect"
import type { Cluster } from "ioredis"
import { Cluster as IoCluster } from "ioredis"
import { randomUUID } from "node:crypto"
import type { EventEmitter } from "node:events"
import { Lock, LockBackend, withLock } from "../../src/index.js"
import { makeKeyLayout } from "../../src/internal/redis/keys.js"
import { hashSlot } from "../../src/internal/redis/slot.js"
import { guardShardedSubscribers } from "../../src/internal/redis/subscriptions.js"
import * as RedisBackend from "../../src/RedisBackend.js"
import { eventually } from "../redis/helpers.js"
import type { RedisCluster } from "../support/redisCluster.js"
import { startRedisCluster } from "../support/redisCluster.js"
import { clusterAdmin, clusterBackend, skipCluster } from "./helpers.js"

/** RedissonLock.tryLockInnerAsync (Redisson 3.x): nil = acquired, else the PTTL. */
const redissonTryLock = "if (redis.call('exists', KEYS[1]) == 0) then " +
  "redis.call('hincrby', KEYS[1], ARGV[2], 1); " +
  "redis.call('pexpire', KEYS[1], ARGV[1]); " +
  "return nil; " +
  "end; " +
  "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then " +
  "redis.call('hincrby', KEYS[1], ARGV[2], 1); " +
  "redis.call('pexpire', KEYS[1], ARGV[1]); " +
  "return nil; " +
  "end; " +
  "return redis.call('pttl', KEYS[1]);"

/**
 * RedissonLock.unlockInnerAsync as Redisson 3.2x sends it: the publish command is an argument,
 * `getSubscribeService().getPublishCommand()`, which is SPUBLISH in cluster mode on Redis 7.
 * KEYS[1] lock, KEYS[2] channel; ARGV[1] message, ARGV[2] lease, ARGV[3] lock name, ARGV[4] command.
 */
const redissonUnlock = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then " +
  "return nil;" +
  "end; " +
  "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); " +
  "if (counter > 0) then " +
  "redis.call('pexpire', KEYS[1], ARGV[2]); " +
  "return 0; " +
  "else " +
  "redis.call('del', KEYS[1]); " +
  "redis.call(ARGV[4], KEYS[2], ARGV[1]); " +
  "return 1; " +
  "end; " +
  "return nil;"

const prefixName = (kind: string, name: string) => name.includes("{") ? `${kind}:${name}` : `${kind}:{${name}}`

let seq = 0
const freshKey = (label: string) => `cluster:${label}:${process.pid}:${++seq}`

describe.skipIf(skipCluster())("Redis Cluster backend", () => {
  let cluster: RedisCluster
  beforeAll(async () => {
    cluster = await startRedisCluster()
  }, 60_000)
  afterAll(() => cluster?.stop())

  const provide = <A, E, R>(effect: Effect.Effect<A, E, R>, prefix?: string) =>
    Effect.provide(effect, clusterBackend(cluster, prefix === undefined ? {} : { prefix }))

  /** Keys whose slots are served by three different masters. */
  const keysOnEveryShard = (label: string) =>
    Effect.promise(async () => {
      const byMaster = new Map<string, string>()
      for (let i = 0; byMaster.size < 3 && i < 1000; i++) {
        const key = `${freshKey(label)}:${i}`
        const master = await cluster.masterOf(key)
        if (!byMaster.has(master.id)) byMaster.set(master.id, key)
      }
      return Array.from(byMaster.values())
    })

  it.effect("hash slots are computed as Redis computes them, empty hash tags included", () =>
    Effect.gen(function*() {
      const keys = [
        "orders:42",
        "{tenant-1}:orders",
        "a{}b{c}",
        "{}",
        "{}{x}",
        "a{b",
        "a}b{c}",
        "{a}{b}",
        "x{y}z{w}",
        "ключ:{é}",
        "emoji:\u{1F600}",
        "redisson_lock__channel:{orders:42}",
        "redisson_lock__channel:a{}b{c}"
      ]
      for (const key of keys) {
        assert.strictEqual(hashSlot(key), yield* Effect.promise(() => cluster.slotOf(key)), key)
      }
    }))

  it.effect("every key of one lock is in the lock's slot, prefix or not", () =>
    Effect.gen(function*() {
      for (const prefix of ["", "svc:", "{svc}:"]) {
        const layout = makeKeyLayout(prefix, "sharded")
        for (const key of ["orders:42", "{tenant-1}:orders:7", "x{y}z", "a}b{c}", "}{x}"]) {
          assert.isUndefined(layout.problemOf(key), key)
          const keys = layout.keysOf(key)
          const slots = yield* Effect.promise(() =>
            Promise.all([keys.lock, keys.channel, keys.token].map((k) => cluster.slotOf(k)))
          )
          assert.strictEqual(new Set(slots).size, 1, `${prefix}${key}: ${JSON.stringify(slots)}`)
        }
      }
    }))

  it.scopedLive("a name whose keys would span slots is a LockOptionsError and writes nothing", () =>
    Effect.gen(function*() {
      const admin = yield* clusterAdmin(cluster)
      for (const key of ["a{}b{c}", "{}orders", "orders{7", "a}b"]) {
        const error = yield* Effect.flip(withLock(key, Effect.void))
        assert.strictEqual(error._tag, "LockOptionsError")
        if (error._tag === "LockOptionsError") {
          assert.strictEqual(error.field, "key")
          assert.match(error.reason, /slot/)
        }
        const inspected = yield* Effect.flip(Lock.inspect(key))
        assert.strictEqual(inspected._tag, "LockOptionsError")
        assert.strictEqual(yield* Effect.promise(() => admin.exists(key)), 0)
      }
      // With a prefix the whole name counts: a tagged prefix makes any key fine.
      const tagged = yield* Effect.exit(provide(withLock("a{}b", Effect.void), "{svc}:"))
      assert.isTrue(tagged._tag === "Success")
    }).pipe(provide))

  it.scopedLive("locks on all three shards are held, renewed past their lease and released", () =>
    Effect.gen(function*() {
      const keys = yield* keysOnEveryShard("shards")
      assert.strictEqual(keys.length, 3)
      const admin = yield* clusterAdmin(cluster)
      const masters = yield* Effect.promise(() => Promise.all(keys.map((key) => cluster.masterOf(key))))
      assert.strictEqual(new Set(masters.map((m) => m.id)).size, 3)
      const held = yield* Effect.scoped(
        Effect.gen(function*() {
          const leases = yield* Effect.all(keys.map((key) => Lock.acquire(key, { lease: "1 second" })), {
            concurrency: "unbounded"
          })
          // Three leases' worth: only the watchdog's renewals (one script per slot) keep them.
          yield* Effect.sleep(2_500)
          for (const lease of leases) assert.isTrue(yield* lease.isHeld, `${lease.key} still held`)
          return yield* Effect.forEach(keys, (key) => Effect.promise(() => admin.pttl(key)))
        })
      )
      for (const pttl of held) assert.isTrue(pttl > 0 && pttl <= 1_000, `pttl ${pttl}`)
      for (const key of keys) assert.isFalse(yield* Lock.isLocked(key))
    }).pipe(provide))

  it.scopedLive("waiters on many keys share one sharded subscriber connection per master, and are woken by SPUBLISH", () =>
    Effect.gen(function*() {
      const keys = Array.from({ length: 12 }, (_, i) => freshKey(`sub:${i}`))
      const backend = yield* LockBackend
      for (const key of keys) {
        yield* backend.primitives.tryAcquire({ key, owner: "foreign:1", leaseMillis: 30_000, fencing: true })
      }
      const waiters = yield* Effect.forEach(
        keys,
        (key) =>
          Effect.fork(withLock(key, Effect.succeed(key), { retry: Schedule.spaced("1 minute"), wait: "20 seconds" }))
      )
      const admin = yield* clusterAdmin(cluster)
      const layout = makeKeyLayout("", "sharded")
      // Each channel has exactly one sharded subscriber on its master: ours.
      yield* eventually(
        Effect.promise(async () => {
          const counts = await Promise.all(keys.map(async (key) => {
            const master = await cluster.masterOf(key)
            const reply = await cluster.node(master.port).call("PUBSUB", "SHARDNUMSUB", layout.channelOf(key)) as [
              string,
              number
            ]
            return reply[1]
          }))
          return counts.every((count) => count === 1)
        }),
        10_000,
        "every channel subscribed on its master"
      )
      // One subscriber connection per master at most, however many keys.
      const topology = yield* Effect.promise(() => cluster.topology())
      let subscriberConnections = 0
      for (const node of topology) {
        const list = yield* Effect.promise(() => cluster.node(node.port).call("CLIENT", "LIST") as Promise<string>)
        const ours = list.split("\n").filter((line) => /\bssub=[1-9]/.test(line))
        assert.isAtMost(ours.length, 1, `node ${node.port}: ${ours.join("\n")}`)
        subscriberConnections += ours.length
      }
      assert.isAtMost(subscriberConnections, 3)
      assert.isAtLeast(subscriberConnections, 1)
      // The foreign holder releases through the backend's script (SPUBLISH): every waiter gets in
      // long before its one-minute retry or the 30 s lease.
      for (const key of keys) yield* backend.primitives.release(key, "foreign:1")
      const got = yield* Fiber.join(Fiber.all(waiters))
      assert.deepStrictEqual(got, keys)
      void admin
    }).pipe(provide))

  it.scopedLive("Redisson in cluster mode: its SPUBLISH wakes our waiter, and our release reaches its sharded subscription", () =>
    Effect.gen(function*() {
      const key = `{${randomUUID()}}:orders`
      const admin = yield* clusterAdmin(cluster)
      const lockName = `${randomUUID()}:1`
      const channel = prefixName("redisson_lock__channel", key)
      const tryLock = Effect.promise(() =>
        admin.eval(redissonTryLock, 1, key, 30_000, lockName) as Promise<number | null>
      )
      const unlock = Effect.promise(() =>
        admin.eval(redissonUnlock, 2, key, channel, 0, 30_000, lockName, "spublish") as Promise<number | null>
      )
      assert.isNull(yield* tryLock)
      const entered = yield* Deferred.make<void>()
      const waiter = yield* Effect.fork(
        Effect.timed(withLock(key, (lease) => Effect.as(Deferred.succeed(entered, void 0), lease.fencingToken), {
          retry: Schedule.spaced("1 minute"),
          wait: "20 seconds"
        }))
      )
      yield* Effect.sleep(300)
      assert.isTrue(Option.isNone(yield* Fiber.poll(waiter)), "excluded while Redisson holds")
      assert.strictEqual(yield* unlock, 1)
      const [waited, token] = yield* Fiber.join(waiter)
      assert.isTrue(token > 0n)
      assert.isBelow(Duration.toMillis(waited), 20_000)

      // Redisson waits on a sharded subscription to the same channel; our release reaches it.
      const messages: Array<string> = []
      admin.on("smessage", (ch: string, message: string) => {
        if (ch === channel) messages.push(message)
      })
      yield* Effect.promise(() => admin.ssubscribe(channel))
      yield* withLock(key, (lease) =>
        Effect.gen(function*() {
          const pttl = yield* tryLock
          assert.isNumber(pttl, "Redisson sees the PTTL while we hold")
          assert.deepStrictEqual(yield* Effect.promise(() => admin.hgetall(key)), { [lease.owner]: "1" })
        }))
      yield* eventually(Effect.sync(() => messages.length > 0), 5_000, "the release message")
      assert.deepStrictEqual(messages, ["0"])
      assert.isNull(yield* tryLock, "and Redisson gets the lock afterwards")
      assert.strictEqual(yield* unlock, 1)
    }).pipe(provide))

  it.scopedLive("a user-built Cluster client is used and left open", () =>
    Effect.gen(function*() {
      const client: Cluster = yield* Effect.acquireRelease(
        Effect.sync(() => new IoCluster([...cluster.nodes], { enableOfflineQueue: false, slotsRefreshInterval: 1000 })),
        (client) => Effect.sync(() => client.disconnect())
      )
      client.on("error", () => {})
      const key = freshKey("client")
      const value = yield* withLock(key, Effect.succeed("in")).pipe(
        Effect.provide(RedisBackend.layer({ client }))
      )
      assert.strictEqual(value, "in")
      assert.strictEqual(client.status, "ready")
      assert.strictEqual(yield* Effect.promise(() => client.exists(key)), 0)
    }))

  // ioredis' ShardedSubscriber.stop() removes every listener of its connection, `error` included,
  // while the socket may still deliver a reply: on ioredis 5 an unsolicited `sunsubscribe` (a
  // server dropping a lost slot's channels) then became an uncaught "Command queue state error"
  // that killed the process. Here the same reply comes on a guarded connection that has no
  // listener left: nothing is thrown.
  it.scopedLive("a sharded subscriber connection ioredis let go of does not crash the process on a late reply", () =>
    Effect.gen(function*() {
      const client: Cluster = yield* Effect.acquireRelease(
        Effect.sync(() =>
          new IoCluster([...cluster.nodes], {
            shardedSubscribers: true,
            redisOptions: { connectionName: "test-late-reply" }
          })
        ),
        (client) => Effect.sync(() => client.disconnect())
      )
      client.on("error", () => {})
      const channel = `{${randomUUID()}}:late`
      yield* Effect.promise(() => client.ssubscribe(channel))
      guardShardedSubscribers(client)
      // The subscriber serving the channel, reached as guardShardedSubscribers reaches it.
      const group = (client as unknown as { shardedSubscribers: { shardedSubscribers: Map<string, unknown> } })
        .shardedSubscribers.shardedSubscribers
      const instances = [...group.values()]
        .map((s) => (s as { getInstance: () => EventEmitter | null }).getInstance())
        .filter((i): i is EventEmitter & { stream: { write: (data: string) => void }; status: string } =>
          i !== null && (i as { status?: string }).status === "ready"
        )
      assert.strictEqual(instances.length, 1, "one connected sharded subscriber")
      const instance = instances[0]!
      // What stop() does to the listeners, then a reply nobody asked for, sent by the server.
      instance.removeAllListeners()
      assert.isFalse(instance.emit("error", new Error("dropped")), "an error with no listener is dropped")
      const command = `*2\r\n$12\r\nSUNSUBSCRIBE\r\n$${Buffer.byteLength(channel)}\r\n${channel}\r\n`
      instance.stream.write(command)
      yield* Effect.sleep(300)
      assert.strictEqual(instance.status, "ready", "the connection took the reply and is still there")
    }))

  it.effect("a cluster together with a url or a client, or without nodes, is a LockOptionsError", () =>
    Effect.gen(function*() {
      const both = yield* Effect.flip(
        Layer.build(RedisBackend.layer({ url: "redis://127.0.0.1:1", cluster: { nodes: cluster.nodes } })).pipe(
          Effect.scoped
        )
      )
      assert.strictEqual(both._tag, "LockOptionsError")
      const none = yield* Effect.flip(Layer.build(RedisBackend.layer({ cluster: { nodes: [] } })).pipe(Effect.scoped))
      assert.strictEqual(none._tag, "LockOptionsError")
    }))

  it.scopedLive("layerConfig reads the node list from REDIS_CLUSTER_NODES", () =>
    Effect.gen(function*() {
      const nodes = cluster.nodes.map((node) => `${node.host}:${node.port}`).join(", ")
      const key = freshKey("config")
      const ran = yield* withLock(key, Lock.isLocked(key)).pipe(
        Effect.provide(RedisBackend.layerConfig()),
        Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["REDIS_CLUSTER_NODES", nodes]])))
      )
      assert.isTrue(ran)
      const bad = yield* Effect.flip(
        Layer.build(RedisBackend.layerConfig()).pipe(
          Effect.scoped,
          Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["REDIS_CLUSTER_NODES", "127.0.0.1"]])))
        )
      )
      assert.strictEqual(bad._tag, "ConfigError")
      assert.match(String(bad), /host:port/)
    }))
})
